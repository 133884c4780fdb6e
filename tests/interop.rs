//! Interoperation with another Redlock client, redlock-py (PyPI `redlock-py`): both use the
//! resource name as the key, so each excludes the other, and neither deletes the other's key.
//!
//! Needs `python3` with `venv` and PyPI: the first run creates a virtual environment in the
//! target directory (`target/tmp/interop-venv`, or `$QUORUMLOCK_INTEROP_VENV`) and installs
//! redlock-py and redis into it; later runs reuse it. tests/interop/redlock_py.py drives
//! redlock-py.
//!
//! Every test is `#[ignore]`d, so that a plain `cargo test` lists them as ignored instead of
//! passing without checking anything where PyPI cannot be reached; run them with
//! `cargo test --all-features --test interop -- --ignored` (CI does, `.ci/run`). Run so, a
//! test fails when redlock-py cannot be had (offline, no python3-venv).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command as StdCommand;
use std::sync::OnceLock;
use std::time::Duration;

use common::cli::quorumlock;
use common::{client, eventually, no_holders, values};
use quorumlock::testkit::LocalQuorum;
use quorumlock::{Error, Retry};
use tokio::process::Command;

const HELPER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/interop/redlock_py.py");
const PACKAGES: [&str; 2] = ["redlock-py==1.0.8", "redis>=4,<8"];

/// The reason every test here is `#[ignore]`d.
const NEEDS_PYPI: &str = "needs redlock-py from PyPI; run with --ignored (CI does)";

/// The virtual environment's python, with redlock-py and redis installed, installing them the
/// first time; the test fails, saying why, when they cannot be had (offline, no venv module).
fn python() -> &'static Path {
    static PYTHON: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let python = PYTHON.get_or_init(|| {
        let venv = match std::env::var_os("QUORUMLOCK_INTEROP_VENV") {
            Some(dir) => PathBuf::from(dir),
            None => Path::new(env!("CARGO_TARGET_TMPDIR")).join("interop-venv"),
        };
        let python = venv.join("bin").join("python");
        if imports(&python) {
            return Ok(python);
        }
        run(
            StdCommand::new("python3")
                .args(["-m", "venv", "--clear"])
                .arg(&venv),
            "create a virtual environment with `python3 -m venv` (on Debian/Ubuntu: \
             `apt-get install python3-venv`)",
        )?;
        run(
            StdCommand::new(&python)
                .args([
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "--disable-pip-version-check",
                    "--retries",
                    "2",
                ])
                .args(PACKAGES),
            &format!("install {} from PyPI with pip", PACKAGES.join(" and ")),
        )?;
        // Installed but not importable is a problem of ours, not an unreachable PyPI.
        assert!(
            imports(&python),
            "redlock-py and redis were installed into {} but cannot be imported",
            venv.display()
        );
        Ok(python)
    });
    match python {
        Ok(python) => python,
        Err(why) => panic!("{why}; {NEEDS_PYPI}"),
    }
}

fn imports(python: &Path) -> bool {
    StdCommand::new(python)
        .args(["-c", "import redlock, redis"])
        .output()
        .is_ok_and(|out| out.status.success())
}

/// Runs `command`; on failure, why, with the last line it printed.
fn run(command: &mut StdCommand, what: &str) -> Result<(), String> {
    match command.output() {
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => {
            let text = [out.stderr, out.stdout].concat();
            let text = String::from_utf8_lossy(&text);
            let last = text.lines().rev().find(|l| !l.trim().is_empty());
            Err(format!(
                "could not {what}: {:?} failed with {} ({})",
                command,
                out.status,
                last.unwrap_or("no output").trim()
            ))
        }
        Err(e) => Err(format!("could not {what}: {command:?}: {e}")),
    }
}

/// Runs the helper: `op PORTS args...`; returns its exit code and stdout.
async fn redlock_py(q: &LocalQuorum, op: &str, args: &[&str]) -> (Option<i32>, String) {
    let ports: Vec<String> = q.nodes().iter().map(|n| n.port().to_string()).collect();
    let mut python = Command::new(python());
    python
        .arg(HELPER)
        .arg(op)
        .arg(ports.join(","))
        .args(args)
        .kill_on_drop(true);
    let out = finished(python.output()).await;
    assert!(
        out.stderr.is_empty(),
        "redlock-py {op} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.code(), stdout)
}

/// The output of a process, which must end within a minute.
async fn finished(
    output: impl std::future::Future<Output = std::io::Result<std::process::Output>>,
) -> std::process::Output {
    tokio::time::timeout(Duration::from_secs(60), output)
        .await
        .expect("exits within a minute")
        .expect("runs")
}

/// redlock-py's lock: its value, or `None` if it was refused.
async fn py_lock(q: &LocalQuorum, resource: &str) -> Option<String> {
    match redlock_py(q, "lock", &[resource, "10000"]).await {
        (Some(0), value) => Some(value),
        (Some(3), refused) if refused == "refused" => None,
        other => panic!("redlock-py lock: {other:?}"),
    }
}

/// redlock-py's unlock, with a lock object carrying `value`.
async fn py_unlock(q: &LocalQuorum, resource: &str, value: &str) {
    let outcome = redlock_py(q, "unlock", &[resource, value]).await;
    assert_eq!(outcome.0, Some(0), "redlock-py unlock: {outcome:?}");
}

/// `quorumlock run -n RESOURCE -- sh -c SCRIPT` in `dir` (one attempt).
fn quorumlock_run(q: &LocalQuorum, resource: &str, script: &str, dir: &Path) -> Command {
    let mut c = quorumlock(&q.urls());
    c.args(["run", "-n", resource, "--", "sh", "-c", script])
        .current_dir(dir);
    c
}

#[tokio::test]
#[ignore = "needs redlock-py from PyPI; run with --ignored (CI does)"]
async fn redlock_py_cannot_lock_while_our_cli_holds_the_resource() {
    python();
    let q = LocalQuorum::start(3).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    // Waits for `stop`, for at most a minute.
    let script = "i=0; touch started; while [ ! -e stop ] && [ $i -lt 3000 ]; do sleep 0.02; i=$((i+1)); done";
    let run = tokio::spawn(quorumlock_run(&q, "shared", script, dir.path()).output());
    let started = dir.path().join("started");
    eventually("the command started", || async { started.exists() }).await;

    assert_eq!(py_lock(&q, "shared").await, None);
    // Our token on every node, as the key named after the resource. (Granted at the quorum:
    // the last node's SET lands in the background, and the CLI settles only when it exits.)
    eventually("our token on every node", || async {
        let ours = values(&q, "shared").await;
        ours[0].is_some() && ours.iter().all(|v| *v == ours[0])
    })
    .await;

    std::fs::write(dir.path().join("stop"), "").unwrap();
    let out = finished(async { run.await.expect("joined") }).await;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    // Released: redlock-py takes the same key now.
    let theirs = py_lock(&q, "shared").await.expect("free after our release");
    assert_eq!(values(&q, "shared").await, vec![Some(theirs.clone()); 3]);
    py_unlock(&q, "shared", &theirs).await;
    assert_eq!(values(&q, "shared").await, vec![None; 3]);
}

#[tokio::test]
#[ignore = "needs redlock-py from PyPI; run with --ignored (CI does)"]
async fn our_cli_exits_75_while_redlock_py_holds_the_resource() {
    python();
    let q = LocalQuorum::start(3).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let theirs = py_lock(&q, "shared").await.expect("free");

    let out = finished(quorumlock_run(&q, "shared", "touch ran", dir.path()).output()).await;
    assert_eq!(out.status.code(), Some(75), "{out:?}");
    assert!(!dir.path().join("ran").exists(), "the command ran");
    // Our failed attempt's compare-and-delete left redlock-py's key alone.
    assert_eq!(values(&q, "shared").await, vec![Some(theirs.clone()); 3]);

    py_unlock(&q, "shared", &theirs).await;
    let out = finished(quorumlock_run(&q, "shared", "touch ran", dir.path()).output()).await;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(dir.path().join("ran").exists());
}

#[tokio::test]
#[ignore = "needs redlock-py from PyPI; run with --ignored (CI does)"]
async fn redlock_py_cannot_unlock_our_lock_with_a_stale_or_forged_value() {
    python();
    let q = LocalQuorum::start(3).await.unwrap();
    let redlock = client(&q).await;
    let stale = py_lock(&q, "shared").await.expect("free");
    py_unlock(&q, "shared", &stale).await;

    let ours = redlock.lock("shared").await.unwrap();
    // Granted at the quorum: the last node's SET lands in the background.
    assert!(redlock.settle(Duration::from_secs(10)).await);
    py_unlock(&q, "shared", &stale).await;
    py_unlock(&q, "shared", "forged-value").await;
    let token = Some(ours.token().as_str().to_string());
    assert_eq!(values(&q, "shared").await, vec![token; 3]);
    assert_eq!(py_lock(&q, "shared").await, None, "still ours");
    ours.release().await.unwrap();
}

#[tokio::test]
#[ignore = "needs redlock-py from PyPI; run with --ignored (CI does)"]
async fn our_stale_lock_does_not_delete_redlock_pys_key() {
    python();
    let q = LocalQuorum::start(3).await.unwrap();
    let redlock = client(&q).await;
    let stale = redlock
        .lock_with("shared", Duration::from_millis(300), Retry::none())
        .await
        .unwrap();
    no_holders(&q, "shared").await; // expired
    let theirs = py_lock(&q, "shared").await.expect("free once expired");

    assert!(
        matches!(stale.release().await, Err(Error::NotHeld { held: 0, .. })),
        "released someone else's lock"
    );
    assert_eq!(values(&q, "shared").await, vec![Some(theirs.clone()); 3]);
    // And our next lock is refused while theirs lasts.
    assert!(matches!(
        redlock.try_lock("shared").await,
        Err(Error::Taken { .. })
    ));
    assert_eq!(values(&q, "shared").await, vec![Some(theirs.clone()); 3]);
    py_unlock(&q, "shared", &theirs).await;
    assert_eq!(values(&q, "shared").await, vec![None; 3]);
}
