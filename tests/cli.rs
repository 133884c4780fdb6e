//! The `quorumlock` binary against real servers: its exit codes, what the command gets
//! (environment, stdin/stdout), keeping the lock while the command runs, and stopping the
//! command before the lock's validity ends when the lock is lost.

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::cli::{
    appears, assert_bad_input, commands_that_cannot_run, finished, nowhere, outcome, quorumlock,
    without_our_variables, BadInput, BIN, UNTIL_STOP,
};
use common::primitives::{sha1_short, snapshot};
use common::{client, eventually, get};
use quorumlock::testkit::{LocalQuorum, Reply};
use quorumlock::{Error, RedLock, Retry};
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

/// Shell: sleeps in short steps, for at most a minute in all.
const BUSY: &str = "i=0; while [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done";

/// `run RESOURCE -- sh -c SCRIPT`, with extra flags before RESOURCE.
fn run_sh(q: &LocalQuorum, flags: &[&str], resource: &str, script: &str) -> Command {
    let mut c = quorumlock(&q.urls());
    c.arg("run")
        .args(flags)
        .args([resource, "--", "sh", "-c", script]);
    c
}

/// Whether another client could take `resource` right now (and gives it back at once).
async fn is_free(redlock: &RedLock, resource: &str) -> bool {
    match redlock.try_lock(resource).await {
        Ok(lock) => {
            lock.release().await.expect("release");
            true
        }
        Err(Error::Taken { .. }) => false,
        Err(e) => panic!("try_lock({resource}): {e}"),
    }
}

/// Whether the process `pid` has ended (gone, or a zombie nobody reaped yet).
fn has_ended(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

/// A process the test started indirectly, killed when the test ends if it is still there.
struct Job(String);

impl Drop for Job {
    fn drop(&mut self) {
        if let Ok(pid) = self.0.trim().parse() {
            if !has_ended(self.0.trim()) {
                let pid = nix::unistd::Pid::from_raw(pid);
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
            }
        }
    }
}

fn scratch() -> tempfile::TempDir {
    tempfile::tempdir().expect("temporary directory")
}

#[tokio::test]
async fn exits_with_the_commands_own_code_and_releases_the_lock() {
    let q = LocalQuorum::start(3).await.unwrap();
    let redlock = client(&q).await;
    for (script, code) in [("true", 0), ("exit 7", 7), ("kill -KILL $$", 137)] {
        let out = outcome(&mut run_sh(&q, &[], "own-code", script)).await;
        assert_eq!(out.code, Some(code), "{script}: {out:?}");
        assert_eq!(out.stderr, "", "{script}");
        // Released, not left to expire: the default ttl is 30 s.
        assert!(is_free(&redlock, "own-code").await, "{script}");
    }
    // --nodes overrides QUORUMLOCK_NODES.
    let mut cli = quorumlock(&nowhere());
    let urls = q.urls().join(",");
    cli.args(["run", "--nodes", &urls, "own-code", "--", "true"]);
    assert_eq!(outcome(&mut cli).await.code, Some(0));
}

#[tokio::test]
async fn gives_the_command_the_resource_and_a_growing_fencing_token() {
    let q = LocalQuorum::start(3).await.unwrap();
    let script = r#"echo "$QUORUMLOCK_RESOURCE ${QUORUMLOCK_FENCING_TOKEN-unset}""#;
    let mut tokens = Vec::new();
    for _ in 0..2 {
        let out = outcome(&mut run_sh(&q, &[], "env-res", script)).await;
        assert_eq!(out.code, Some(0), "{out:?}");
        let token = out.stdout.strip_prefix("env-res ").map(str::trim);
        let token: u64 = token.and_then(|t| t.parse().ok()).expect("a decimal token");
        tokens.push(token);
    }
    assert!(tokens[0] >= 1 && tokens[1] > tokens[0], "{tokens:?}");

    // Without fencing there is no token, not even one inherited from the environment.
    let mut cli = run_sh(&q, &[], "env-res", script);
    cli.env("QUORUMLOCK_FENCING", "false")
        .env("QUORUMLOCK_FENCING_TOKEN", "999");
    let out = outcome(&mut cli).await;
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (Some(0), "env-res unset\n")
    );
}

#[tokio::test]
async fn passes_stdin_stdout_and_stderr_through() {
    let q = LocalQuorum::start(3).await.unwrap();
    let mut cli = run_sh(&q, &[], "pipes", "cat; echo to-stderr >&2");
    let mut child = cli
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"line one\nline two\n").await.unwrap();
    drop(stdin);
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output());
    let out = out.await.expect("quorumlock exits").unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(out.stdout, b"line one\nline two\n");
    assert_eq!(out.stderr, b"to-stderr\n");
}

#[tokio::test]
async fn exits_75_when_the_resource_is_held_elsewhere_and_leaves_the_holders_keys() {
    let q = LocalQuorum::start(3).await.unwrap();
    let redlock = client(&q).await;
    let held = redlock.lock("busy").await.unwrap();
    // Granted at the quorum: the last node's SET lands in the background (a CLI attempt
    // that got there first would leave that node without the holder's key).
    assert!(redlock.settle(Duration::from_secs(10)).await);
    let dir = scratch();
    for flags in [&["-n"][..], &["--wait", "300ms"]] {
        let mut cli = run_sh(&q, flags, "busy", "touch ran");
        let out = outcome(cli.current_dir(dir.path())).await;
        assert_eq!(out.code, Some(75), "{flags:?}: {out:?}");
        assert!(out.stderr.starts_with("quorumlock: "), "{}", out.stderr);
        assert!(
            out.stderr.contains("held by another owner"),
            "{}",
            out.stderr
        );
        assert!(!dir.path().join("ran").exists(), "the command ran");
        // The failed attempts deleted only their own keys.
        for node in q.nodes() {
            assert_eq!(
                get(node, "busy").await.as_deref(),
                Some(held.token().as_str())
            );
        }
    }
    held.release().await.unwrap();
}

/// A routine conflict names a node still connecting as such, in its one line, rather than as
/// a failed node with a connection error: node 2 is frozen (its kernel completes the TCP
/// handshake; its connection is never made nor checked) while nodes 0 and 1 refuse.
#[tokio::test]
async fn a_conflict_names_a_node_still_connecting() {
    let mut q = LocalQuorum::start(3).await.unwrap();
    let redlock = client(&q).await;
    let held = redlock.lock("busy").await.unwrap();
    // Granted at the quorum: the last node's SET lands in the background (node 0 or 1
    // without it would say yes to the CLI).
    assert!(redlock.settle(Duration::from_secs(10)).await);
    q.node_mut(2).freeze().unwrap();
    let out = outcome(&mut run_sh(&q, &["-n"], "busy", "true")).await;
    q.node_mut(2).resume().unwrap();
    assert_eq!(out.code, Some(75), "{out:?}");
    assert_eq!(
        out.stderr,
        "quorumlock: `busy` is held by another owner (2 of 3 nodes refused; node 2 still \
         connecting)\n"
    );
    held.release().await.unwrap();
}

#[tokio::test]
async fn with_wait_it_takes_the_lock_once_the_holder_lets_it_expire() {
    let q = LocalQuorum::start(3).await.unwrap();
    let redlock = client(&q).await;
    // Held, never extended nor released, for 1 s.
    let held = redlock
        .lock_with("expiring", Duration::from_secs(1), Retry::none())
        .await
        .unwrap();
    let out = outcome(&mut run_sh(&q, &["--wait", "20s"], "expiring", "true")).await;
    assert_eq!(out.code, Some(0), "{out:?}");
    drop(held);
}

/// The validity check: a majority says yes only after the validity is gone. Nodes 1 and 2
/// are frozen before quorumlock starts; its one attempt sets the key on node 0 at once and
/// waits for them; they are resumed once that key has expired on node 0 (so more than the
/// ttl has passed since the attempt started), and say yes, late but within the node timeout.
#[tokio::test]
async fn exits_69_when_the_majority_answers_after_the_validity() {
    let mut q = LocalQuorum::start(3).await.unwrap();
    q.node_mut(1).freeze().unwrap();
    q.node_mut(2).freeze().unwrap();
    let dir = scratch();
    let mut cli = run_sh(&q, &[], "late-cli", "touch ran");
    cli.env("QUORUMLOCK_TTL", "2s")
        .env("QUORUMLOCK_MAX_TTL", "1m")
        .env("QUORUMLOCK_NODE_TIMEOUT", "20s")
        .env("QUORUMLOCK_RETRY_ATTEMPTS", "1")
        .current_dir(dir.path());
    let run = tokio::spawn(cli.output());

    // The attempt set the key on node 0, and it then expired there by its ttl.
    let node = q.node(0);
    eventually("the attempt set the key on node 0", || async {
        get(node, "late-cli").await.is_some()
    })
    .await;
    eventually("the key expired on node 0", || async {
        get(node, "late-cli").await.is_none()
    })
    .await;
    q.node_mut(1).resume().unwrap();
    q.node_mut(2).resume().unwrap();

    let out = finished(run).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "{stderr}");
    assert!(
        stderr
            .lines()
            .last()
            .is_some_and(|l| l.starts_with("quorumlock: validity of `late-cli` used up")),
        "{stderr}"
    );
    assert!(!dir.path().join("ran").exists(), "the command ran");
    common::no_holders(&q, "late-cli").await;
}

#[tokio::test]
async fn exits_69_when_a_majority_of_nodes_is_down() {
    let mut q = LocalQuorum::start(3).await.unwrap();
    q.node_mut(0).kill().await.unwrap();
    q.node_mut(2).kill().await.unwrap();
    let dir = scratch();
    let mut cli = run_sh(&q, &[], "majority-down", "touch ran");
    cli.env("QUORUMLOCK_CONNECT_TIMEOUT", "200ms")
        .current_dir(dir.path());
    let out = outcome(&mut cli).await;
    assert_eq!(out.code, Some(69), "{out:?}");
    // One line for a cron mail: the nodes by index and kind, each node's detail with -v.
    assert_eq!(
        out.stderr.lines().collect::<Vec<_>>(),
        [
            "quorumlock: no quorum for `majority-down`: 1 of 2 needed nodes agreed; nodes 0, 2 \
             connection error (-v: each node's detail)"
        ],
        "{}",
        out.stderr
    );
    assert!(!dir.path().join("ran").exists(), "the command ran");
    let mut verbose = run_sh(&q, &["-v"], "majority-down", "touch ran");
    verbose
        .env("QUORUMLOCK_CONNECT_TIMEOUT", "200ms")
        .current_dir(dir.path());
    let out = outcome(&mut verbose).await;
    assert_eq!(out.code, Some(69), "{out:?}");
    let last = out.stderr.lines().last().unwrap_or_default();
    for node in [0, 2] {
        assert!(last.contains(&q.node(node).url()), "{last}");
    }
    assert!(!last.contains("-v:"), "{last}");

    let mut status = quorumlock(&q.urls());
    status.args(["status", "majority-down"]);
    let out = outcome(status.env("QUORUMLOCK_CONNECT_TIMEOUT", "200ms")).await;
    assert_eq!(out.code, Some(69), "{out:?}");
    assert_eq!(
        out.stdout.matches("unreachable").count(),
        2,
        "{}",
        out.stdout
    );
}

/// A frozen node accepts connections (its kernel completes the TCP handshake) but never
/// answers the connection check. `run` starts locking as soon as a quorum is checked (it
/// used to wait for every node, up to the connect timeout), and does not wait before exiting
/// for the commands queued for that node, which never connected (they time out at the node
/// timeout, and are never sent). Both timeouts are an hour here: the outer minute of
/// `outcome` detects a hang.
#[tokio::test]
async fn run_does_not_wait_for_a_frozen_node() {
    let mut q = LocalQuorum::start(5).await.unwrap();
    q.node_mut(4).freeze().unwrap();
    let mut cli = quorumlock(&q.urls());
    cli.env("QUORUMLOCK_CONNECT_TIMEOUT", "1h").args([
        "run",
        "--wait",
        "0s",
        "one-frozen",
        "--",
        "true",
    ]);
    let out = outcome(&mut cli).await;
    assert_eq!(out.code, Some(0), "{out:?}");
    q.node_mut(4).resume().unwrap();
    common::no_holders(&q, "one-frozen").await;
}

#[tokio::test]
async fn exits_64_with_one_line_on_bad_input() {
    let down = nowhere();
    #[rustfmt::skip]
    let cases: &[BadInput] = &[
        (&["run", "--nodes", "not a url", "r", "--", "true"], &[], "invalid node URL"),
        (&["run", "--nodes", "http://127.0.0.1", "r", "--", "true"], &[], "scheme"),
        (&["run", "--nodes", "", "r", "--", "true"], &[], "no nodes"),
        (&["run", "--nodes", " , ", "r", "--", "true"], &[], "no nodes"),
        (&["run", "--nodes", "redis://a,redis://a:6379", "r", "--", "true"], &[], "same server"),
        (&["run", "--ttl", "0s", "r", "--", "true"], &[], "greater than zero"),
        (&["run", "--ttl", "soon", "r", "--", "true"], &[], "--ttl"),
        (&["run", "--wait", "forever", "r", "--", "true"], &[], "--wait"),
        (&["run", "-n", "-w", "1s", "r", "--", "true"], &[], "cannot be used with"),
        (&["run", "--conflict-exit-code", "256", "r", "--", "true"], &[], "--conflict-exit-code"),
        (&["run", "-E", "x", "r", "--", "true"], &[], "--conflict-exit-code"),
        (&["run", "--grace", "0s", "r", "--", "true"], &[], "greater than zero"),
        (&["run", "--ttl", "2s", "--grace", "500ms", "r", "--", "true"], &[], "--grace"),
        (&["run", "", "--", "true"], &[], "resource name is empty"),
        (&["run", "quorumlock:fence:r", "--", "true"], &[], "reserved"),
        (&["run", "r"], &[], "<COMMAND>"),
        (&["run", "r", "--"], &[], "<COMMAND>"),
        (&["run", "--frobnicate", "r", "--", "true"], &[], "--frobnicate"),
        (&["lock", "r"], &[], "unrecognized subcommand"),
        (&["status", ""], &[], "resource name is empty"),
        (&["status", "--nodes", "", "r"], &[], "no nodes"),
        (&["run", "r", "--", "true"], &[("QUORUMLOCK_TTL", "soon")], "QUORUMLOCK_TTL"),
        (&["run", "r", "--", "true"], &[("QUORUMLOCK_TTL", "0s")], "greater than zero"),
        (&["run", "r", "--", "true"], &[("QUORUMLOCK_LOG", "loud")], "QUORUMLOCK_LOG"),
    ];
    for case @ (args, env, _) in cases {
        let mut cli = quorumlock(&down);
        cli.env("QUORUMLOCK_CONNECT_TIMEOUT", "50ms")
            .args(*args)
            .envs(env.iter().copied());
        assert_bad_input(case, &outcome(&mut cli).await);
    }
    // No nodes anywhere.
    let out = outcome(quorumlock(&[]).args(["run", "r", "--", "true"])).await;
    assert_eq!(out.code, Some(64), "{out:?}");
    assert!(out.stderr.starts_with("quorumlock: no nodes"), "{out:?}");
    // No subcommand: the help, on stderr.
    let out = outcome(&mut quorumlock(&down)).await;
    assert_eq!(out.code, Some(64), "{out:?}");
    assert!(out.stderr.contains("Usage: quorumlock"), "{out:?}");
    // Asking for help or the version is no error.
    for (args, expected) in [
        (&["--help"][..], "Usage: quorumlock"),
        (&["help", "run"], "Exit status:"),
        (&["run", "--help"], "Exit status:"),
        (&["--version"], "quorumlock "),
    ] {
        let out = outcome(quorumlock(&down).args(args)).await;
        assert_eq!(out.code, Some(0), "{args:?}: {out:?}");
        assert!(out.stdout.contains(expected), "{args:?}: {out:?}");
    }
}

/// `run` starts once a quorum is checked, so it refuses a repeat it has seen by then: here
/// the repeat keeps the distinct servers below a quorum, so both URLs are checked first. (A
/// repeat still connecting when a quorum of others is ready is not refused, but it never
/// counts: `two_urls_of_one_server_are_refused` in tests/nodes_safeguards.rs.)
#[tokio::test]
async fn never_shows_the_password_of_a_mistyped_url() {
    let cases: [(&[&str], &str); 4] = [
        (
            &[
                "run",
                "--nodes",
                "default:S3CRET@127.0.0.1:7401",
                "r",
                "--",
                "true",
            ],
            "",
        ),
        (&["-vv", "status", "r"], "redis:/u:S3CRET@127.0.0.1:7401"),
        (&["doctor"], "redis//u:S3CRET@127.0.0.1:7401"),
        (
            &["run", "r", "--", "true"],
            "redis://127.0.0.1:1,redis:u:S3CRET@127.0.0.1:7401",
        ),
    ];
    for (args, env_nodes) in cases {
        let mut cli = quorumlock(&[]);
        if !env_nodes.is_empty() {
            cli.env("QUORUMLOCK_NODES", env_nodes);
        }
        let out = outcome(cli.args(args)).await;
        assert_eq!(out.code, Some(64), "{args:?} {env_nodes}: {out:?}");
        assert!(
            out.stderr.contains("node URL") || out.stderr.contains("scheme"),
            "{out:?}"
        );
        assert!(
            !out.stderr.contains("S3CRET") && !out.stdout.contains("S3CRET"),
            "{args:?} {env_nodes}: {out:?}"
        );
    }
}

#[tokio::test]
async fn exits_64_naming_a_variable_that_is_not_utf8() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let not_utf8 = OsStr::from_bytes(b"\xff1s");
    for var in ["QUORUMLOCK_TTL", "QUORUMLOCK_NODES", "QUORUMLOCK_LOG"] {
        for args in [
            &["run", "r", "--", "true"][..],
            &["status", "r"],
            &["doctor"],
        ] {
            let mut cli = quorumlock(&nowhere());
            let out = outcome(cli.env(var, not_utf8).args(args)).await;
            let what = format!("{var} {args:?}: {out:?}");
            assert_eq!(out.code, Some(64), "{what}");
            assert!(out.stderr.contains(var), "{what}");
            assert!(out.stderr.contains("not valid UTF-8"), "{what}");
            assert_eq!(out.stderr.lines().count(), 1, "{what}");
        }
    }
}

#[cfg(feature = "tls")]
#[tokio::test]
async fn run_status_and_doctor_take_the_tls_files_from_the_environment() {
    use common::tls::{tls_nodes, Pki};

    let pki = Pki::new();
    let nodes = tls_nodes(&pki, 3, true, None).await;
    let urls: Vec<String> = nodes.iter().map(|n| n.url("")).collect();
    let path = |p: std::path::PathBuf| p.to_string_lossy().into_owned();
    let ca = ("QUORUMLOCK_TLS_CA_FILE", path(pki.ca()));
    let client = [
        ("QUORUMLOCK_TLS_CERT_FILE", path(pki.client_cert())),
        ("QUORUMLOCK_TLS_KEY_FILE", path(pki.client_key())),
    ];
    let with_all = || {
        let mut cli = quorumlock(&urls);
        cli.envs([ca.clone()]).envs(client.clone());
        cli
    };
    let out = outcome(with_all().args(["run", "over-tls", "--", "true"])).await;
    assert_eq!(out.code, Some(0), "{out:?}");
    let out = outcome(with_all().args(["status", "over-tls"])).await;
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(out.stdout.matches(": free").count(), 4, "{}", out.stdout);
    let out = outcome(with_all().args(["doctor", "--json"])).await;
    let doc: serde_json::Value = serde_json::from_str(&out.stdout).expect("JSON");
    for node in doc["nodes"].as_array().expect("nodes") {
        assert_eq!(node["reachable"], true, "{node:#}");
    }
    // Without the client certificate, the servers refuse the handshake: said so.
    let out = outcome(quorumlock(&urls).envs([ca]).args(["doctor", "--json"])).await;
    let doc: serde_json::Value = serde_json::from_str(&out.stdout).expect("JSON");
    for node in doc["nodes"].as_array().expect("nodes") {
        assert_eq!(node["error_kind"], "tls", "{node:#}");
    }
    let out = outcome(quorumlock(&urls).args(["run", "over-tls", "--", "true"])).await;
    assert_eq!(out.code, Some(69), "{out:?}");
    assert!(out.stderr.contains("nodes 0, 1, 2 TLS error"), "{out:?}");
    // Each node's reason with -v.
    let out = outcome(quorumlock(&urls).args(["-v", "run", "over-tls", "--", "true"])).await;
    assert_eq!(out.code, Some(69), "{out:?}");
    assert!(
        out.stderr
            .contains("TLS error: the server's certificate is not signed by a trusted CA"),
        "{out:?}"
    );
}

#[tokio::test]
async fn exits_64_for_two_urls_of_one_server() {
    let q = LocalQuorum::start(1).await.unwrap();
    let again = format!("redis://localhost:{}", q.node(0).port());
    let nodes = [q.urls(), vec![again]].concat().join(",");
    let mut cli = quorumlock(&[]);
    let out = outcome(cli.args(["run", "--nodes", &nodes, "twice", "--", "true"])).await;
    assert_eq!(out.code, Some(64), "{out:?}");
    assert!(out.stderr.starts_with("quorumlock: "), "{out:?}");
    assert!(
        out.stderr.contains("is the same server as node 0"),
        "{out:?}"
    );
}

#[tokio::test]
async fn exits_127_or_126_when_the_command_cannot_run_and_releases_the_lock() {
    let q = LocalQuorum::start(3).await.unwrap();
    let redlock = client(&q).await;
    let dir = scratch();
    for (command, code, message) in commands_that_cannot_run(dir.path()) {
        let mut cli = quorumlock(&q.urls());
        let out = outcome(cli.args(["run", "cannot-run", "--", &command])).await;
        assert_eq!(out.code, Some(code), "{command}: {out:?}");
        assert!(out.stderr.starts_with("quorumlock: "), "{out:?}");
        assert!(out.stderr.contains(message), "{out:?}");
        assert!(is_free(&redlock, "cannot-run").await, "{command}");
    }
}

/// Exit 70 when the OS refuses what quorumlock needs: here the async runtime, whose event
/// queue and its waker need two file descriptors, and only one is allowed above stdin,
/// stdout and stderr (the dynamic loader needs that one to open the shared libraries).
#[tokio::test]
async fn exits_70_when_the_os_refuses_the_async_runtime() {
    let mut sh = Command::new("sh");
    without_our_variables(&mut sh)
        .args(["-c", r#"ulimit -n 4 && exec "$0" "$@""#, BIN])
        .args(["run", "--nodes", &nowhere()[0], "r", "--", "true"])
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let out = outcome(&mut sh).await;
    assert_eq!(out.code, Some(70), "{out:?}");
    assert!(
        out.stderr
            .starts_with("quorumlock: cannot start the async runtime: "),
        "{out:?}"
    );
    assert_eq!(out.stderr.lines().count(), 1, "{out:?}");
}

#[tokio::test]
async fn keeps_the_lock_while_the_command_outlives_its_ttl() {
    let q = LocalQuorum::start(3).await.unwrap();
    let redlock = client(&q).await;
    let dir = scratch();
    let script = format!("touch started; {UNTIL_STOP}");
    let mut cli = run_sh(&q, &["--ttl", "1s"], "outlives", &script);
    // Under the validity of a 1 s lock (988 ms), or the configuration is refused.
    cli.env("QUORUMLOCK_NODE_TIMEOUT", "400ms");
    let run = tokio::spawn(cli.current_dir(dir.path()).output());
    let started = appears(&dir.path().join("started")).await;
    // Three ttls: without extensions the keys would have expired twice over.
    let mut checks = 0;
    while started.elapsed() < Duration::from_secs(3) {
        assert!(
            !is_free(&redlock, "outlives").await,
            "taken after {:?}",
            started.elapsed()
        );
        checks += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    std::fs::write(dir.path().join("stop"), "").unwrap();
    let out = finished(run).await;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(checks >= 10, "{checks}");
    assert!(is_free(&redlock, "outlives").await);
}

#[tokio::test]
async fn stops_the_command_before_the_validity_ends_when_a_majority_is_frozen() {
    let mut q = LocalQuorum::start(3).await.unwrap();
    let dir = scratch();
    let ttl = Duration::from_secs(4);
    // The command notes SIGTERM and goes on: it takes SIGKILL to stop it.
    let script = format!("trap 'touch term' TERM; echo $$ > pid; touch started; {BUSY}");
    let mut cli = run_sh(&q, &["--ttl", "4s"], "frozen", &script);
    cli.current_dir(dir.path());
    // The lock cannot be acquired before this, so its validity cannot end before
    // launched + ttl - drift (extensions only push it later).
    let launched = Instant::now();
    let run = tokio::spawn(cli.output());
    appears(&dir.path().join("started")).await;
    let pid = Job(std::fs::read_to_string(dir.path().join("pid")).unwrap());
    q.node_mut(0).freeze().unwrap();
    q.node_mut(1).freeze().unwrap();
    let terminated = appears(&dir.path().join("term")).await;
    eventually("the command has ended", || async { has_ended(&pid.0) }).await;
    let killed = Instant::now();
    let out = finished(run).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(76), "{stderr}");
    // (The shell may report its `sleep` terminated first.)
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("quorumlock: lost the lock on `frozen`"),
        "{stderr}"
    );
    assert!(
        last.ends_with("sent SIGTERM, then SIGKILL after 400ms"),
        "{stderr}"
    );
    // One line for a cron mail: the frozen nodes by index in ascending order, their URLs
    // only with -v. Both frozen nodes are named, together ("nodes 0, 1 timeout", whatever
    // order they failed in) or each with its own reason when they differ (a node whose
    // timed-out connection is being replaced is "not checked yet" until it answers again).
    let (_, detail) = last
        .split_once("it could not be extended in time: ")
        .unwrap_or_else(|| panic!("{stderr}"));
    let apart = detail.find("node 0 ").zip(detail.find("node 1 "));
    assert!(
        detail.starts_with("nodes 0, 1 ") || matches!(apart, Some((0, one)) if one > 0),
        "{stderr}"
    );
    assert!(
        detail.contains("(-v: each node's detail)") && !last.contains("redis://"),
        "{stderr}"
    );
    // Safety, not speed: SIGTERM arrived, and the command was gone, before the validity
    // could have ended (each was seen later than it happened).
    let drift = ttl / 100 + Duration::from_millis(2);
    let earliest_end = launched + ttl - drift;
    for (what, seen) in [("SIGTERM", terminated), ("the end of the command", killed)] {
        assert!(
            seen < earliest_end,
            "{what} seen {:?} after the validity could have ended",
            seen - earliest_end
        );
    }
}

#[tokio::test]
async fn stops_the_commands_whole_process_group_when_the_lock_is_taken_over() {
    let q = LocalQuorum::start(3).await.unwrap();
    let dir = scratch();
    // The command exits on SIGTERM; its background job ignores it.
    let script = format!(
        "(trap '' TERM; exec sleep 120) >/dev/null 2>&1 &
        echo $! > job
        trap 'touch term; exit 143' TERM
        touch started
        {BUSY}"
    );
    // A grace long enough for a loaded machine to run the shell's trap before SIGKILL.
    let mut cli = run_sh(
        &q,
        &["--ttl", "2s", "--grace", "400ms"],
        "taken-over",
        &script,
    );
    let run = tokio::spawn(cli.current_dir(dir.path()).output());
    appears(&dir.path().join("started")).await;
    let job = Job(std::fs::read_to_string(dir.path().join("job")).unwrap());
    // Someone else's key on a majority: the next extension finds the lock gone.
    for node in &q.nodes()[..2] {
        let reply = node
            .command(&["SET", "taken-over", "intruder"])
            .await
            .unwrap();
        assert_eq!(reply, Reply::Status("OK".into()));
    }
    let out = finished(run).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(76), "{stderr}");
    assert!(stderr.contains("a majority no longer holds it"), "{stderr}");
    assert!(dir.path().join("term").exists());
    // What the command left in its group is killed once it has exited.
    eventually("the background job has ended", || async {
        has_ended(&job.0)
    })
    .await;
    // Our release left the other owner's keys alone.
    for node in &q.nodes()[..2] {
        assert_eq!(get(node, "taken-over").await.as_deref(), Some("intruder"));
    }
}

/// A holder that dies (here by SIGKILL; a crash aborts it the same way) can no longer stop
/// its command before the lock expires: its watchdog does, SIGTERM and then SIGKILL to the
/// command's whole process group, so that no rival takes the lock while the work goes on.
#[tokio::test]
async fn the_command_dies_when_quorumlock_dies() {
    for foreground in [false, true] {
        let q = LocalQuorum::start(3).await.unwrap();
        let dir = scratch();
        // The shell ignores SIGTERM (the watchdog must follow with SIGKILL); its background
        // job is in its process group.
        let script = format!(
            "(exec sleep 120) >/dev/null 2>&1 &
            echo $! > job
            echo $$ > shell
            trap '' TERM
            touch started
            {BUSY}"
        );
        let flags: &[&str] = if foreground {
            &["--foreground", "--ttl", "2s", "--grace", "200ms"]
        } else {
            &["--ttl", "2s", "--grace", "200ms"]
        };
        let mut cli = run_sh(&q, flags, "holder-dies", &script);
        let mut child = cli.current_dir(dir.path()).spawn().unwrap();
        appears(&dir.path().join("started")).await;
        let shell = Job(std::fs::read_to_string(dir.path().join("shell")).unwrap());
        let job = Job(std::fs::read_to_string(dir.path().join("job")).unwrap());
        child.start_kill().unwrap();
        child.wait().await.unwrap();
        eventually("the command has ended", || async { has_ended(&shell.0) }).await;
        if !foreground {
            eventually("its background job has ended", || async {
                has_ended(&job.0)
            })
            .await;
        }
    }
}

/// A holder that is alive but stalled (SIGSTOP here; a debugger or a starved process alike)
/// neither extends the lock nor stops its command, and its pipe to the watchdog stays open.
/// The lease it gave the watchdog runs out before the lock's validity: the watchdog stops
/// the command, so a rival that takes the lock after it expires finds the work over. Resumed,
/// quorumlock says what happened and exits as on a loss.
///
/// The lease ends 1.5 grace periods before the validity, and the keys expire after it: a
/// grace of 800 ms leaves the watchdog and the command's trap over a second to act under
/// load (with 200 ms, a full run once saw the rival first).
#[tokio::test]
async fn the_command_is_stopped_when_quorumlock_stalls() {
    let q = LocalQuorum::start(3).await.unwrap();
    let rival = client(&q).await;
    let dir = scratch();
    let script = format!("trap 'touch term; exit 0' TERM; touch started; {BUSY}");
    let mut cli = run_sh(&q, &["--ttl", "4s", "--grace", "800ms"], "stalled", &script);
    let child = cli
        .current_dir(dir.path())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    appears(&dir.path().join("started")).await;
    let pid = nix::unistd::Pid::from_raw(child.id().unwrap() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
    let patient = quorumlock::Retry::within(Duration::from_secs(60))
        .delay(Duration::from_millis(50))
        .jitter(Duration::from_millis(50));
    let mut taken = rival
        .lock_with("stalled", Duration::from_secs(10), patient)
        .await
        .expect("the rival gets the lock once it expires");
    // The order of events, not their timing: the command was stopped before the rival
    // could take the lock. If it was not, whether the watchdog stopped it later while
    // quorumlock was still stalled (it had its lease) or not (it had none) tells the cause.
    let term = dir.path().join("term");
    let stopped_first = term.exists();
    let stopped_while_stalled = stopped_first
        || tokio::time::timeout(Duration::from_secs(5), appears(&term))
            .await
            .is_ok();
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).unwrap();
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("quorumlock exits")
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stopped_first,
        "the rival took the lock while the stalled holder's command ran; the watchdog \
         stopped it {}; quorumlock said: {stderr}",
        if stopped_while_stalled {
            "later, while quorumlock was still stalled"
        } else {
            "not while quorumlock was stalled"
        }
    );
    assert_eq!(out.status.code(), Some(76), "{stderr}");
    assert!(stderr.contains("stalled"), "{stderr}");
    // Its release after resuming left the rival's lock alone.
    taken
        .extend()
        .await
        .expect("the rival still holds the lock");
    taken.release().await.unwrap();
}

#[tokio::test]
async fn relays_sigterm_to_the_command_and_releases_the_lock() {
    let q = LocalQuorum::start(3).await.unwrap();
    let redlock = client(&q).await;
    let dir = scratch();
    let script = format!("trap 'touch term; exit 5' TERM; touch started; {BUSY}");
    let mut cli = run_sh(&q, &[], "relayed", &script);
    let mut child = cli.current_dir(dir.path()).spawn().unwrap();
    appears(&dir.path().join("started")).await;
    let pid = nix::unistd::Pid::from_raw(child.id().unwrap() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = tokio::time::timeout(Duration::from_secs(60), child.wait()).await;
    let status = status.expect("quorumlock exits").unwrap();
    assert_eq!(status.code(), Some(5), "{status:?}");
    assert!(dir.path().join("term").exists());
    assert!(is_free(&redlock, "relayed").await);
}

#[tokio::test]
async fn runs_the_command_in_its_own_process_group_unless_foreground() {
    let q = LocalQuorum::start(3).await.unwrap();
    // The command prints its process group and its pid.
    let script = r#"cut -d' ' -f5 /proc/$$/stat; echo $$"#;
    let ours = nix::unistd::getpgrp().to_string();
    for (flags, own_group) in [(&[][..], true), (&["--foreground"], false)] {
        let out = outcome(&mut run_sh(&q, flags, "groups", script)).await;
        assert_eq!(out.code, Some(0), "{out:?}");
        let lines: Vec<&str> = out.stdout.lines().collect();
        let [group, pid] = lines[..] else {
            panic!("{out:?}")
        };
        let expected = if own_group { pid } else { ours.as_str() };
        assert_eq!(group, expected, "{flags:?}");
    }
}

/// `status` names the holder by its holder id, as `ls` and `release` do, never by its token;
/// and it changes no key (its client checks the nodes as `run`'s does, which writes nothing
/// on nodes that lost no data).
#[tokio::test]
async fn status_reports_free_and_held_and_changes_no_key() {
    let mut q = LocalQuorum::start(3).await.unwrap();
    let redlock = client(&q).await;
    let status = |q: &LocalQuorum| {
        let mut c = quorumlock(&q.urls());
        c.args(["status", "probe"]);
        c
    };

    let before = snapshot(&q).await;
    let out = outcome(&mut status(&q)).await;
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(out.stdout.matches(": free").count(), 4, "{}", out.stdout);
    assert_eq!(snapshot(&q).await, before, "status changed a node");

    let held = redlock.lock("probe").await.unwrap();
    // Granted at the quorum: the last node's SET lands in the background (between the two
    // snapshots, or before status reads that node, if not waited for).
    assert!(redlock.settle(Duration::from_secs(10)).await);
    let before = snapshot(&q).await;
    let out = outcome(&mut status(&q)).await;
    assert_eq!(out.code, Some(75), "{out:?}");
    let holder = format!("held by {} (", sha1_short(held.token().as_str()));
    assert_eq!(out.stdout.matches(&holder).count(), 4, "{}", out.stdout);
    assert!(
        !out.stdout.contains(&held.token().as_str()[..8]),
        "the token stays secret: {}",
        out.stdout
    );
    assert_eq!(snapshot(&q).await, before, "status changed a node");
    held.release().await.unwrap();
    // Released at the quorum: the last node's delete lands in the background.
    assert!(redlock.settle(Duration::from_secs(10)).await);

    q.node_mut(1).kill().await.unwrap();
    let out = outcome(&mut status(&q)).await;
    assert_eq!(out.code, Some(0), "{out:?}");
    let down = format!(
        "node 1 {}: unreachable: connection refused",
        q.node(1).url()
    );
    assert!(out.stdout.contains(&down), "{}", out.stdout);
}

/// flock(1)'s conventions: `-n`/`--nonblock` makes one attempt whatever the environment
/// says, `-w`/`--wait` is `--wait`, and `-E`/`--conflict-exit-code` replaces 75 when the
/// resource is held elsewhere.
#[tokio::test]
async fn nonblock_wait_and_the_conflict_exit_code_as_in_flock() {
    let q = LocalQuorum::start(3).await.unwrap();
    let redlock = client(&q).await;
    let held = redlock.lock("flock").await.unwrap();
    let dir = scratch();
    let cases: [(&[&str], i32); 5] = [
        // One attempt although the environment says to keep trying for an hour (a hang
        // would fail `outcome`).
        (&["-n"], 75),
        (&["--nonblock", "-E", "3"], 3),
        (&["--conflict-exit-code", "0", "-n"], 0),
        (&["-w", "300ms", "-E", "9"], 9),
        (&["-w", "300ms"], 75),
    ];
    for (flags, code) in cases {
        let mut cli = run_sh(&q, flags, "flock", "touch ran");
        cli.env("QUORUMLOCK_RETRY_WITHIN", "1h");
        let out = outcome(cli.current_dir(dir.path())).await;
        assert_eq!(out.code, Some(code), "{flags:?}: {out:?}");
        assert!(
            out.stderr.contains("held by another owner"),
            "{flags:?}: {out:?}"
        );
        assert!(
            !dir.path().join("ran").exists(),
            "{flags:?}: the command ran"
        );
    }
    held.release().await.unwrap();
    // Free: the command's own code, whatever the conflict code.
    let out = outcome(&mut run_sh(&q, &["-n", "-E", "3"], "flock", "exit 5")).await;
    assert_eq!(out.code, Some(5), "{out:?}");
}

/// `run` without `--ttl` or `QUORUMLOCK_TTL` locks for the library's default ttl (10 s), and
/// `doctor` quarantines for that long: the command line and the library share one default.
#[tokio::test]
async fn run_uses_the_librarys_default_ttl() {
    let q = LocalQuorum::start(3).await.unwrap();
    let dir = scratch();
    let script = format!("touch started; {UNTIL_STOP}");
    let mut cli = run_sh(&q, &[], "default-ttl", &script);
    let run = tokio::spawn(cli.current_dir(dir.path()).output());
    appears(&dir.path().join("started")).await;
    // The key is on a quorum at least (a node not yet connected may have missed it).
    let mut ttls = Vec::new();
    for node in q.nodes() {
        let pttl = node.command(&["PTTL", "default-ttl"]).await.unwrap();
        ttls.extend(pttl.as_int().filter(|ms| *ms != -2));
    }
    assert!(ttls.len() >= 2, "PTTL {ttls:?}");
    assert!(
        ttls.iter().all(|ms| *ms > 0 && *ms <= 10_000),
        "PTTL {ttls:?}"
    );
    std::fs::write(dir.path().join("stop"), "").unwrap();
    assert_eq!(finished(run).await.status.code(), Some(0));

    let help = outcome(quorumlock(&[]).args(["help", "run"])).await;
    assert!(help.stdout.contains("or 10s"), "{}", help.stdout);
    assert!(help.stdout.contains("-w, --wait"), "{}", help.stdout);
    assert!(help.stdout.contains("-n, --nonblock"), "{}", help.stdout);
}

/// `status --json`: one document with every node's state, the verdict and the exit code.
#[tokio::test]
async fn status_json_is_one_document_with_the_exit_code() {
    let mut q = LocalQuorum::start(3).await.unwrap();
    let redlock = client(&q).await;
    let json = |q: &LocalQuorum| {
        let mut c = quorumlock(&q.urls());
        c.env("QUORUMLOCK_CONNECT_TIMEOUT", "2s")
            .args(["status", "--json", "doc"]);
        c
    };
    let parse = |out: &common::cli::Outcome| -> serde_json::Value {
        assert_eq!(out.stderr, "", "{out:?}");
        let doc: serde_json::Value = serde_json::from_str(&out.stdout).expect("one JSON document");
        assert_eq!(
            doc["exit_code"].as_i64(),
            out.code.map(i64::from),
            "{doc:#}"
        );
        doc
    };

    let out = outcome(&mut json(&q)).await;
    let doc = parse(&out);
    assert_eq!(out.code, Some(0), "{doc:#}");
    assert_eq!(doc["resource"], "doc");
    assert_eq!(doc["verdict"], "free");
    assert_eq!(doc["quorum"], 2);
    assert_eq!(doc["quorum_in_s"], 0.0);
    assert_eq!(doc["holder_sha1"], serde_json::Value::Null);
    for i in 0..3 {
        assert_eq!(doc["nodes"][i]["state"], "free", "{doc:#}");
        assert_eq!(doc["nodes"][i]["node"], q.node(i).url());
    }

    let held = redlock.lock("doc").await.unwrap();
    // Granted at the quorum: the last node's SET lands in the background (node 0 or 1
    // without it would be read as free).
    assert!(redlock.settle(Duration::from_secs(10)).await);
    q.node_mut(2).kill().await.unwrap();
    let out = outcome(&mut json(&q)).await;
    let doc = parse(&out);
    assert_eq!(out.code, Some(75), "{doc:#}");
    assert_eq!(doc["verdict"], "held");
    // The holder id `ls` and `release` print, never the token.
    let id = sha1_short(held.token().as_str());
    assert_eq!(doc["holder_sha1"], id.as_str());
    assert!(!out.stdout.contains(held.token().as_str()), "{doc:#}");
    assert_eq!(doc["held_on"], 2);
    for i in 0..2 {
        let node = &doc["nodes"][i];
        assert_eq!(node["state"], "held", "{doc:#}");
        assert_eq!(node["holder_sha1"], id.as_str());
        let pttl = node["pttl_ms"].as_i64().expect("a ttl");
        assert!(pttl > 0, "{doc:#}");
    }
    assert_eq!(doc["nodes"][2]["state"], "unreachable", "{doc:#}");
    assert_eq!(doc["nodes"][2]["error"], "connection refused", "{doc:#}");
    drop(held);
}

/// A fencing token that cannot be told above every earlier one is refused, naming the nodes,
/// and the command does not start (design 2.6a): node 0 restarted (it may have lost its
/// counters, and cannot be re-seeded while node 1 is silent), node 1 frozen. The lock itself
/// is granted by nodes 0 and 2 (quarantine is off here).
#[tokio::test]
async fn exits_69_naming_the_nodes_when_no_fencing_token_can_be_told() {
    let mut q = LocalQuorum::start(3).await.unwrap();
    q.node_mut(0).restart().await.unwrap();
    q.node_mut(1).freeze().unwrap();
    let dir = scratch();
    let mut cli = run_sh(&q, &[], "fenced-run", "touch ran");
    cli.current_dir(dir.path());
    let out = outcome(&mut cli).await;
    q.node_mut(1).resume().unwrap();
    assert_eq!(out.code, Some(69), "{out:?}");
    assert!(
        out.stderr.starts_with(
            "quorumlock: could not record a fencing token: no fencing token for `fenced-run`"
        ),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("node 0 (redis://127.0.0.1:")
            && out.stderr.contains("may have lost its fencing counters"),
        "{}",
        out.stderr
    );
    assert!(!dir.path().join("ran").exists(), "the command ran");
}
