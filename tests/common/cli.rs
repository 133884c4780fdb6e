//! Running the `quorumlock` binary, for the tests of its subcommands (tests/cli*.rs):
//! one-shot runs, runs in the background read line by line, and snapshots of the nodes.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::sys::signal::{SigHandler, Signal};
use nix::unistd::Pid;
use quorumlock::ENV_VARS;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

use super::within;

/// The binary cargo built for these tests.
pub const BIN: &str = env!("CARGO_BIN_EXE_quorumlock");

/// Variables the binary reads or sets besides [`ENV_VARS`].
const OTHER_VARS: [&str; 5] = [
    "QUORUMLOCK_LOG",
    "QUORUMLOCK_RESOURCE",
    "QUORUMLOCK_FENCING_TOKEN",
    "QUORUMLOCK_TERM",
    "QUORUMLOCK_SLOT",
];

/// The binary with no `QUORUMLOCK_*` variable from the test's environment but
/// `QUORUMLOCK_NODES=urls` (unless `urls` is empty), stdin from /dev/null, killed if the test
/// drops it.
pub fn binary(urls: &[String]) -> Command {
    let mut c = Command::new(BIN);
    without_our_variables(&mut c);
    if !urls.is_empty() {
        c.env("QUORUMLOCK_NODES", urls.join(","));
    }
    c.stdin(Stdio::null()).kill_on_drop(true);
    // The binary keeps the signals it was started with ignored ignored, as flock(1) does (a
    // run under nohup is not ended by a hangup): the tests that send it signals need it
    // started with their default disposition, whatever the test harness inherited (a CI run
    // under `nohup` ignores SIGHUP, and a waiter sent SIGHUP then waited on).
    // SAFETY: only sigaction(2), async-signal-safe, between fork and exec.
    unsafe {
        c.pre_exec(|| {
            for sig in [
                Signal::SIGHUP,
                Signal::SIGINT,
                Signal::SIGTERM,
                Signal::SIGQUIT,
            ] {
                nix::sys::signal::signal(sig, SigHandler::SigDfl).map_err(std::io::Error::from)?;
            }
            Ok(())
        });
    }
    c
}

/// Removes from `c`'s environment every `QUORUMLOCK_*` variable the binary reads or sets, so
/// that none leaks in from the test's environment.
pub fn without_our_variables(c: &mut Command) -> &mut Command {
    for var in ENV_VARS.into_iter().chain(OTHER_VARS) {
        c.env_remove(var);
    }
    c
}

/// Shell: waits for a file `stop` to appear, for at most a minute (so that nothing outlives a
/// failing test for long).
pub const UNTIL_STOP: &str =
    "i=0; while [ ! -e stop ] && [ $i -lt 3000 ]; do sleep 0.02; i=$((i+1)); done";

/// [`binary`] with no quarantine and a generous node timeout (a test may set its own). Some
/// test servers keep nothing across a restart: the library would quarantine them
/// (tests/nodes_safeguards.rs covers that). And the default servers write every command to disk
/// before answering: on a machine busy with other writes, the library's 100 ms would turn a
/// healthy node into a failed one now and then.
pub fn quorumlock(urls: &[String]) -> Command {
    let mut c = binary(urls);
    c.env("QUORUMLOCK_QUARANTINE", "false")
        .env("QUORUMLOCK_NODE_TIMEOUT", "1s");
    c
}

/// Waits (polling, at most 10 s) until `path` exists, and returns when it was seen.
pub async fn appears(path: &Path) -> Instant {
    super::eventually(&format!("{} exists", path.display()), || async {
        path.exists()
    })
    .await;
    Instant::now()
}

/// Waits for a `quorumlock` started with `tokio::spawn(command.output())`, for at most a
/// minute.
pub async fn finished(
    run: tokio::task::JoinHandle<std::io::Result<std::process::Output>>,
) -> std::process::Output {
    match tokio::time::timeout(Duration::from_secs(60), run).await {
        Ok(joined) => joined.expect("joined").expect("quorumlock ran"),
        Err(_) => panic!("quorumlock did not exit within a minute"),
    }
}

/// How a run of the binary ended, with its output as text.
#[derive(Debug)]
pub struct Outcome {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `cmd` to its end (killed after a minute: a hang fails the test).
pub async fn outcome(cmd: &mut Command) -> Outcome {
    let out = tokio::time::timeout(Duration::from_secs(60), cmd.output())
        .await
        .expect("quorumlock exits within a minute")
        .expect("quorumlock runs");
    Outcome {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A node URL nothing listens on (port 1), for runs that must fail before reaching a node.
pub fn nowhere() -> Vec<String> {
    vec!["redis://127.0.0.1:1".to_string()]
}

/// A case of bad input: arguments, environment, and a part of the expected message.
pub type BadInput<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);

/// Checks that the run of `case` (arguments and environment) ended as a usage or configuration
/// error: exit code 64 and one line on stderr, `quorumlock: ...`, containing the case's part.
#[track_caller]
pub fn assert_bad_input(case: &BadInput<'_>, out: &Outcome) {
    let (args, env, expected) = case;
    let what = format!("{args:?} {env:?}: {out:?}");
    assert_eq!(out.code, Some(64), "{what}");
    assert!(out.stderr.starts_with("quorumlock: "), "{what}");
    assert_eq!(out.stderr.lines().count(), 1, "{what}");
    assert!(out.stderr.contains(expected), "{what}");
}

/// Commands that cannot run, with the exit code the shell convention gives them (127: not
/// found, 126: not executable) and a fragment of the message: `run` and `elect` report them
/// alike. The non-executable script is written into `dir`.
pub fn commands_that_cannot_run(dir: &Path) -> Vec<(String, i32, &'static str)> {
    let not_executable = dir.join("script.sh");
    std::fs::write(&not_executable, "#!/bin/sh\ntrue\n").expect("write the script");
    vec![
        (
            "/nonexistent/command".into(),
            127,
            "/nonexistent/command: command not found",
        ),
        (
            "no-such-command-for-quorumlock".into(),
            127,
            "command not found",
        ),
        (
            not_executable.to_str().expect("a UTF-8 path").into(),
            126,
            "cannot execute",
        ),
    ]
}

/// A scratch directory for a test's files.
pub fn scratch() -> tempfile::TempDir {
    tempfile::tempdir().expect("temporary directory")
}

#[derive(Debug)]
/// A `quorumlock` running in the background whose stderr is read line by line as it comes.
pub struct Background {
    pub child: Child,
    lines: mpsc::UnboundedReceiver<String>,
    pub seen: Vec<String>,
}

impl Background {
    pub fn spawn(command: &mut Command) -> Background {
        let mut child = command
            .stderr(Stdio::piped())
            .spawn()
            .expect("quorumlock starts");
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, lines) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut reader = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Background {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits until a line of stderr contains `needle`; fails if stderr ends first.
    pub async fn logs(&mut self, needle: &str) {
        let found = within(&format!("a line with {needle:?}"), async {
            while let Some(line) = self.lines.recv().await {
                let found = line.contains(needle);
                self.seen.push(line);
                if found {
                    return true;
                }
            }
            false
        })
        .await;
        assert!(found, "stderr ended without {needle:?}: {:#?}", self.seen);
    }

    pub fn pid(&self) -> Pid {
        Pid::from_raw(self.child.id().expect("running") as i32)
    }

    /// Its exit code, once it has exited (a hang fails the test).
    pub async fn code(&mut self) -> Option<i32> {
        let status = within("quorumlock exits", self.child.wait()).await;
        status.expect("wait for quorumlock").code()
    }
}
