//! `quorumlock run` with the habits of flock(1), `etcdctl lock` and `consul lock`, against
//! real servers and the real binary: bare numbers of seconds, `-q`, COMMAND without `--`,
//! waiting by default, a signal while waiting, and `--hold-at-least`.

mod common;

use common::cli::{
    appears, finished, nowhere, outcome, quorumlock, scratch, Background, Outcome, UNTIL_STOP,
};
use common::primitives::snapshot;
use common::{client, eventually, get, values};
use nix::sys::signal::{kill, Signal};
use quorumlock::testkit::LocalQuorum;
use tokio::process::Command;

/// What `run -v` logs once its first attempt found the resource held and it starts waiting.
const WAITING: &str = "held elsewhere: waiting until it is free";

/// `quorumlock run FLAGS... RESOURCE sh -c SCRIPT` (no `--`), in `dir`.
fn run_sh(
    q: &LocalQuorum,
    flags: &[&str],
    resource: &str,
    script: &str,
    dir: &tempfile::TempDir,
) -> Command {
    let mut c = quorumlock(&q.urls());
    c.arg("run")
        .args(flags)
        .args([resource, "sh", "-c", script])
        .current_dir(dir.path());
    c
}

/// The key's remaining ttl on each node, in ms (-2 where it is missing).
async fn pttls(q: &LocalQuorum, key: &str) -> Vec<i64> {
    let mut ttls = Vec::new();
    for node in q.nodes() {
        let reply = node.command(&["PTTL", key]).await.expect("PTTL");
        ttls.push(reply.as_int().expect("an integer"));
    }
    ttls
}

#[track_caller]
fn assert_silent_skip(out: &Outcome, code: i32, what: &str) {
    assert_eq!(out.code, Some(code), "{what}: {out:?}");
    assert_eq!(out.stderr, "", "{what}");
    assert_eq!(out.stdout, "", "{what}");
}

/// flock's `-w 5`: on the command line a bare number is seconds, a unit still works; the
/// variables keep needing one.
#[tokio::test]
async fn duration_flags_take_bare_seconds_and_units() {
    let q = LocalQuorum::start(3).await.unwrap();
    let dir = scratch();
    // The lock's keys live as long as --ttl says: an hour, not 3.6 s (milliseconds) nor the
    // 10 s default. (Extended every half hour: never during this test.)
    for ttl in ["3600", "1h"] {
        let script = format!("touch started; {UNTIL_STOP}");
        let mut cli = run_sh(&q, &["--ttl", ttl, "-w", "5"], "bare", &script, &dir);
        cli.env("QUORUMLOCK_MAX_TTL", "2h");
        let run = tokio::spawn(cli.output());
        appears(&dir.path().join("started")).await;
        let ttls = pttls(&q, "bare").await;
        let set: Vec<i64> = ttls.iter().copied().filter(|ms| *ms != -2).collect();
        assert!(set.len() >= 2, "--ttl {ttl}: PTTL {ttls:?}");
        assert!(
            set.iter().all(|ms| *ms > 60_000 && *ms <= 3_600_000),
            "--ttl {ttl}: PTTL {ttls:?}"
        );
        std::fs::write(dir.path().join("stop"), "").unwrap();
        let out = finished(run).await;
        assert_eq!(out.status.code(), Some(0), "--ttl {ttl}: {out:?}");
        std::fs::remove_file(dir.path().join("stop")).unwrap();
        std::fs::remove_file(dir.path().join("started")).unwrap();
    }

    // A fraction of a second, and zero (one attempt), while another client holds it.
    let redlock = client(&q).await;
    let held = redlock.lock("bare").await.unwrap();
    for wait in ["0.3", "300ms", "0"] {
        let out = outcome(&mut run_sh(&q, &["-w", wait], "bare", "touch ran", &dir)).await;
        assert_eq!(out.code, Some(75), "-w {wait}: {out:?}");
        assert!(
            out.stderr.contains("held by another owner"),
            "-w {wait}: {out:?}"
        );
    }
    assert!(!dir.path().join("ran").exists(), "the command ran");
    held.release().await.unwrap();

    // Refused: a bare number in a variable, and a flag that is no number nor duration.
    let mut cli = run_sh(&q, &[], "bare", "touch ran", &dir);
    let out = outcome(cli.env("QUORUMLOCK_TTL", "30")).await;
    assert_eq!(out.code, Some(64), "{out:?}");
    assert!(out.stderr.starts_with("quorumlock: "), "{out:?}");
    assert!(out.stderr.contains("QUORUMLOCK_TTL"), "{out:?}");
    for flags in [
        &["-w", "5x"][..],
        &["--ttl", "-1"],
        &["--ttl", "0"],
        &["--grace", "1e3"],
    ] {
        let out = outcome(&mut run_sh(&q, flags, "bare", "touch ran", &dir)).await;
        assert_eq!(out.code, Some(64), "{flags:?}: {out:?}");
        assert_eq!(out.stderr.lines().count(), 1, "{flags:?}: {out:?}");
        assert!(out.stderr.starts_with("quorumlock: "), "{flags:?}: {out:?}");
    }
    assert!(!dir.path().join("ran").exists(), "the command ran");

    let help = outcome(quorumlock(&[]).args(["help", "run"])).await;
    assert!(
        help.stdout.contains("-w 5, -w 0.5, --ttl 30"),
        "{}",
        help.stdout
    );
    assert!(help.stdout.contains("variables are"), "{}", help.stdout);
}

/// `-q`: the skip (held elsewhere) prints nothing and exits as `-E` says; real errors still
/// print.
#[tokio::test]
async fn quiet_skips_silently_and_still_reports_errors() {
    let q = LocalQuorum::start(3).await.unwrap();
    let redlock = client(&q).await;
    let held = redlock.lock("nightly").await.unwrap();
    let dir = scratch();
    let cases: [(&[&str], i32); 4] = [
        (&["-n", "-q"], 75),
        (&["-n", "-q", "-E", "0"], 0),
        (&["--quiet", "--nonblock", "-E", "3"], 3),
        (&["-q", "-w", "0.2"], 75),
    ];
    for (flags, code) in cases {
        let out = outcome(&mut run_sh(&q, flags, "nightly", "touch ran", &dir)).await;
        assert_silent_skip(&out, code, &format!("{flags:?}"));
    }
    assert!(!dir.path().join("ran").exists(), "the command ran");
    // Without -q, the skip is said.
    let out = outcome(&mut run_sh(
        &q,
        &["-n", "-E", "0"],
        "nightly",
        "touch ran",
        &dir,
    ))
    .await;
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(
        out.stderr
            .starts_with("quorumlock: `nightly` is held by another owner"),
        "{out:?}"
    );
    assert_eq!(out.stderr.lines().count(), 1, "{out:?}");
    held.release().await.unwrap();

    // No node reachable: an error, printed with -q too (with -n, and by default, whose first
    // attempt reports what is not "held elsewhere" at once).
    for flags in [&["-q", "-n", "-E", "0"][..], &["-q"]] {
        let mut cli = quorumlock(&nowhere());
        cli.env("QUORUMLOCK_CONNECT_TIMEOUT", "100ms")
            .arg("run")
            .args(flags)
            .args(["nightly", "touch", "ran"])
            .current_dir(dir.path());
        let out = outcome(&mut cli).await;
        assert_eq!(out.code, Some(69), "{flags:?}: {out:?}");
        assert!(
            out.stderr
                .starts_with("quorumlock: no quorum for `nightly`"),
            "{flags:?}: {out:?}"
        );
    }
    // Bad usage too.
    let out = outcome(&mut run_sh(
        &q,
        &["-q", "--ttl", "soon"],
        "nightly",
        "true",
        &dir,
    ))
    .await;
    assert_eq!(out.code, Some(64), "{out:?}");
    assert!(out.stderr.contains("--ttl"), "{out:?}");
    assert!(!dir.path().join("ran").exists(), "the command ran");
}

/// `flock FILE CMD ARGS`: `run RESOURCE COMMAND ARGS...` without `--`; COMMAND's options are
/// its own; `--` still works; flags before RESOURCE (and between it and COMMAND) are run's.
#[tokio::test]
async fn the_command_needs_no_separator() {
    let q = LocalQuorum::start(3).await.unwrap();
    let printf = ["printf", "%s|", "-n", "--ttl", "5", "--", "-q"];
    let expected = "-n|--ttl|5|--|-q|";
    let cases: [(&[&str], &[&str]); 4] = [
        (&[], &["sep"]),
        (&[], &["sep", "--"]),
        (&["-w", "5", "--ttl", "30"], &["sep"]),
        (&[], &["sep", "-w", "5", "--"]),
    ];
    for (before, after) in cases {
        let mut cli = quorumlock(&q.urls());
        cli.arg("run").args(before).args(after).args(printf);
        let out = outcome(&mut cli).await;
        let what = format!("{before:?} {after:?}: {out:?}");
        assert_eq!(out.code, Some(0), "{what}");
        assert_eq!(out.stdout, expected, "{what}");
        assert_eq!(out.stderr, "", "{what}");
    }
    // COMMAND is required, with or without `--`.
    for args in [
        &["run", "sep"][..],
        &["run", "sep", "--"],
        &["run", "-w", "5", "sep"],
    ] {
        let out = outcome(quorumlock(&q.urls()).args(args)).await;
        assert_eq!(out.code, Some(64), "{args:?}: {out:?}");
        assert!(out.stderr.contains("<COMMAND>"), "{args:?}: {out:?}");
    }
    common::no_holders(&q, "sep").await;
}

/// The default is to wait until the lock is free, as flock does: a second `run` waits for
/// the first to finish, then runs. The order is shown by events: the first holds until a file
/// appears, which the test creates only once it has seen the second waiting and not run.
#[tokio::test]
async fn waits_by_default_until_the_holder_is_done() {
    let q = LocalQuorum::start(3).await.unwrap();
    let dir = scratch();
    let first_script = format!("touch first-started; {UNTIL_STOP}; touch first-done");
    let first = tokio::spawn(run_sh(&q, &[], "in-turn", &first_script, &dir).output());
    appears(&dir.path().join("first-started")).await;

    // It runs only after the first is done, or records that it did not.
    let second_script = "if [ -e first-done ]; then touch second-ran; else touch second-early; fi";
    let mut second = Background::spawn(&mut run_sh(&q, &["-v"], "in-turn", second_script, &dir));
    second.logs(WAITING).await;
    assert!(
        second.child.try_wait().unwrap().is_none(),
        "the second run ended"
    );
    assert!(!dir.path().join("second-ran").exists());

    std::fs::write(dir.path().join("stop"), "").unwrap();
    assert_eq!(finished(first).await.status.code(), Some(0));
    assert_eq!(second.code().await, Some(0), "{:#?}", second.seen);
    assert!(dir.path().join("second-ran").exists(), "{:#?}", second.seen);
    assert!(!dir.path().join("second-early").exists());
    common::no_holders(&q, "in-turn").await;
}

/// SIGTERM, SIGINT or SIGHUP while waiting end the wait at once with 128+N, and leave no key
/// behind: every node holds exactly what it held before the waiter started (the holder's
/// key, unchanged).
#[tokio::test]
async fn a_signal_while_waiting_ends_the_wait_and_leaves_nothing() {
    let q = LocalQuorum::start(3).await.unwrap();
    let dir = scratch();
    let script = format!("touch started; {UNTIL_STOP}");
    let first = tokio::spawn(run_sh(&q, &["--ttl", "2"], "waited", &script, &dir).output());
    appears(&dir.path().join("started")).await;
    // A node that was still connecting when the holder took the lock gets its key at the
    // next extension: from then on, the holder changes nothing that a snapshot shows.
    eventually("the holder's key is on every node", || async {
        let on = values(&q, "waited").await;
        on[0].is_some() && on.iter().all(|v| *v == on[0])
    })
    .await;
    let token = get(q.node(0), "waited").await.expect("the holder's token");
    let before = snapshot(&q).await;

    for (sig, code) in [
        (Signal::SIGTERM, 143),
        (Signal::SIGINT, 130),
        (Signal::SIGHUP, 129),
    ] {
        let mut waiter = Background::spawn(&mut run_sh(&q, &["-v"], "waited", "touch ran", &dir));
        waiter.logs(WAITING).await;
        kill(waiter.pid(), sig).unwrap();
        assert_eq!(waiter.code().await, Some(code), "{sig}: {:#?}", waiter.seen);
        assert!(!dir.path().join("ran").exists(), "{sig}: the command ran");
        // Its process is gone and its client shut down: whatever it set was released
        // before it exited.
        assert_eq!(snapshot(&q).await, before, "{sig}");
    }
    for node in q.nodes() {
        assert_eq!(get(node, "waited").await.as_deref(), Some(token.as_str()));
    }
    std::fs::write(dir.path().join("stop"), "").unwrap();
    assert_eq!(finished(first).await.status.code(), Some(0));
}

/// `--hold-at-least` (ShedLock's lockAtLeastFor): a job that ends sooner leaves the lock
/// taken until then, and the binary exits; other hosts' runs are refused meanwhile.
#[tokio::test]
async fn hold_at_least_keeps_the_lock_after_a_short_job() {
    let q = LocalQuorum::start(3).await.unwrap();
    let dir = scratch();
    for (hold, resource) in [("30s", "held-on"), ("30", "held-on-bare")] {
        let flags = ["--hold-at-least", hold];
        let out = outcome(&mut run_sh(&q, &flags, resource, "echo done", &dir)).await;
        assert_eq!(out.code, Some(0), "{hold}: {out:?}");
        assert_eq!((out.stdout.as_str(), out.stderr.as_str()), ("done\n", ""));
        // The binary has exited: its key is on a majority, with a ttl left.
        let ttls = pttls(&q, resource).await;
        let set: Vec<i64> = ttls.iter().copied().filter(|ms| *ms != -2).collect();
        assert!(set.len() >= 2, "{hold}: PTTL {ttls:?}");
        assert!(
            set.iter().all(|ms| *ms > 0 && *ms <= 30_000),
            "{hold}: PTTL {ttls:?}"
        );
        let out = outcome(&mut run_sh(&q, &["-n"], resource, "touch ran", &dir)).await;
        assert_eq!(out.code, Some(75), "{hold}: {out:?}");
        assert!(out.stderr.contains("held by another owner"), "{out:?}");
        assert!(!dir.path().join("ran").exists(), "{hold}: the command ran");
    }
    // Without it, the lock is released when the job ends.
    let out = outcome(&mut run_sh(&q, &[], "let-go", "echo done", &dir)).await;
    assert_eq!(out.code, Some(0), "{out:?}");
    common::no_holders(&q, "let-go").await;
    let out = outcome(&mut run_sh(&q, &["-n"], "let-go", "touch ran", &dir)).await;
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(dir.path().join("ran").exists());
}

/// A job that outlasts `--hold-at-least` releases the lock as usual when it ends. The
/// command starts after the lock was taken, so once it has started and the hold has passed
/// (a pause of the hold's length, the one thing waited out here), the job ends after it.
#[tokio::test]
async fn hold_at_least_releases_after_a_longer_job() {
    let q = LocalQuorum::start(3).await.unwrap();
    let dir = scratch();
    let script = format!("touch started; {UNTIL_STOP}");
    let flags = ["--hold-at-least", "0.5"];
    let run = tokio::spawn(run_sh(&q, &flags, "long-job", &script, &dir).output());
    appears(&dir.path().join("started")).await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    std::fs::write(dir.path().join("stop"), "").unwrap();
    let out = finished(run).await;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(out.stderr, b"", "{out:?}");
    common::no_holders(&q, "long-job").await;
}

#[tokio::test]
async fn hold_at_least_must_be_positive_and_within_the_longest_ttl() {
    let q = LocalQuorum::start(3).await.unwrap();
    let dir = scratch();
    for (flags, expected) in [
        (&["--hold-at-least", "0"][..], "greater than zero"),
        (&["--hold-at-least", "0s"], "greater than zero"),
        (
            &["--hold-at-least", "2m"],
            "longer than the longest ttl allowed, 1m",
        ),
        (&["--hold-at-least", "soon"], "--hold-at-least"),
    ] {
        let mut cli = run_sh(&q, flags, "hold-bad", "touch ran", &dir);
        let out = outcome(cli.env("QUORUMLOCK_MAX_TTL", "1m")).await;
        assert_eq!(out.code, Some(64), "{flags:?}: {out:?}");
        assert_eq!(out.stderr.lines().count(), 1, "{flags:?}: {out:?}");
        assert!(out.stderr.contains(expected), "{flags:?}: {out:?}");
    }
    assert!(!dir.path().join("ran").exists(), "the command ran");
    // Without QUORUMLOCK_MAX_TTL, the longest ttl is raised to the hold.
    let mut cli = run_sh(&q, &["--hold-at-least", "2m"], "hold-bad", "true", &dir);
    let out = outcome(&mut cli).await;
    assert_eq!((out.code, out.stderr.as_str()), (Some(0), ""), "{out:?}");
    let ttls = pttls(&q, "hold-bad").await;
    let set: Vec<i64> = ttls.iter().copied().filter(|ms| *ms != -2).collect();
    assert!(set.len() >= 2, "PTTL {ttls:?}");
    // Longer than the 1m the cases above were limited to.
    assert!(
        set.iter().all(|ms| *ms > 60_000 && *ms <= 120_000),
        "PTTL {ttls:?}"
    );
}
