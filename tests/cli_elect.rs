//! `quorumlock elect` and `quorumlock leader` against real servers: the command runs only
//! while its instance leads, with the term in its environment; a second candidate runs its
//! command once the first has ended; a lost leadership stops the command and campaigns
//! again (or exits with `--once`); `leader` names the leader, or says there is none.

mod common;

use std::path::Path;

use common::cli::{appears, commands_that_cannot_run, finished, outcome, quorumlock, UNTIL_STOP};
use common::eventually;
use quorumlock::testkit::LocalQuorum;
use tokio::process::Command;

/// `elect FLAGS NAME -- sh -c SCRIPT` in `dir`.
fn elect_sh(q: &LocalQuorum, dir: &Path, flags: &[&str], name: &str, script: &str) -> Command {
    let mut c = quorumlock(&q.urls());
    c.arg("elect")
        .args(flags)
        .args([name, "--", "sh", "-c", script])
        .current_dir(dir);
    c
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

#[tokio::test]
async fn the_command_gets_the_term_and_leader_names_its_instance() {
    let q = LocalQuorum::start(3).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let script = format!(
        "echo $QUORUMLOCK_TERM > term; echo $QUORUMLOCK_FENCING_TOKEN > fence; \
         touch started; {UNTIL_STOP}; exit 7"
    );
    let run = tokio::spawn(
        elect_sh(&q, dir.path(), &["--identity", "node-a"], "sched", &script).output(),
    );
    appears(&dir.path().join("started")).await;
    let term: u64 = read(&dir.path().join("term")).trim().parse().unwrap();
    assert_eq!(read(&dir.path().join("fence")).trim(), term.to_string());
    // The lock and the identity are written at the quorum: the last node's writes land in
    // the background, and the candidate settles only when it exits.
    eventually("the lock and the identity on every node", || async {
        let mut all = true;
        for key in ["sched", "quorumlock:leader:sched"] {
            let on = common::values(&q, key).await;
            all &= on[0].is_some() && on.iter().all(|v| *v == on[0]);
        }
        all
    })
    .await;

    let out = outcome(quorumlock(&q.urls()).args(["leader", "sched"])).await;
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(
        out.stdout.trim(),
        format!("node-a term {term} (3 of 3 nodes)")
    );
    let out = outcome(quorumlock(&q.urls()).args(["leader", "--json", "sched"])).await;
    let doc: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(doc["leader"]["identity"], "node-a");
    assert_eq!(doc["leader"]["term"], term);
    assert_eq!(doc["verdict"], "leader");
    assert_eq!(doc["exit_code"], 0);

    std::fs::write(dir.path().join("stop"), "").unwrap();
    let out = finished(run).await;
    assert_eq!(out.status.code(), Some(7), "{out:?}");
    let out = outcome(quorumlock(&q.urls()).args(["leader", "sched"])).await;
    assert_eq!(
        (out.code, out.stdout.trim()),
        (Some(1), "no leader"),
        "{out:?}"
    );
    let out = outcome(quorumlock(&q.urls()).args(["leader", "--json", "sched"])).await;
    let doc: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(
        (doc["verdict"].as_str(), doc["exit_code"].as_u64()),
        (Some("none"), Some(1))
    );
}

#[tokio::test]
async fn a_second_candidate_runs_its_command_only_after_the_first_ends() {
    let q = LocalQuorum::start(3).await.unwrap();
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let script = format!("echo $QUORUMLOCK_TERM > term; touch started; {UNTIL_STOP}; touch ended");
    let first = tokio::spawn(elect_sh(&q, a.path(), &[], "one", &script).output());
    appears(&a.path().join("started")).await;
    // The second logs its attempts (debug) to a file, so that its refusal can be awaited.
    let log = b.path().join("log");
    let second = elect_sh(&q, b.path(), &[], "one", &script)
        .env("QUORUMLOCK_LOG", "debug")
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let second = tokio::spawn(second.wait_with_output());
    // While the first leads, the second campaigns: once it has been refused, its command
    // has not started.
    eventually("the second candidate was refused", || async {
        read(&log).contains("lock attempt failed")
    })
    .await;
    assert!(!b.path().join("started").exists(), "two commands at once");
    std::fs::write(a.path().join("stop"), "").unwrap();
    appears(&b.path().join("started")).await;
    assert!(
        a.path().join("ended").exists(),
        "the second started before the first ended"
    );
    let terms: Vec<u64> = [&a, &b]
        .iter()
        .map(|d| read(&d.path().join("term")).trim().parse().unwrap())
        .collect();
    assert!(terms[1] > terms[0], "{terms:?}");
    assert_eq!(finished(first).await.status.code(), Some(0));
    std::fs::write(b.path().join("stop"), "").unwrap();
    assert_eq!(finished(second).await.status.code(), Some(0));
}

#[tokio::test]
async fn a_lost_leadership_stops_the_command_and_campaigns_again() {
    let mut q = LocalQuorum::start(3).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    // Each term appends its number; SIGTERM ends the command.
    let script =
        format!("echo $QUORUMLOCK_TERM >> terms; trap 'touch stopped; exit 0' TERM; {UNTIL_STOP}");
    let run = tokio::spawn(elect_sh(&q, dir.path(), &["--ttl", "2s"], "again", &script).output());
    let terms = dir.path().join("terms");
    eventually("the first term", || async {
        read(&terms).lines().count() == 1
    })
    .await;
    q.node_mut(0).freeze().unwrap();
    q.node_mut(1).freeze().unwrap();
    // The leadership cannot be kept: the command is stopped, and once the nodes answer
    // again this instance leads once more, in a later term.
    appears(&dir.path().join("stopped")).await;
    q.node_mut(0).resume().unwrap();
    q.node_mut(1).resume().unwrap();
    eventually("the second term", || async {
        read(&terms).lines().count() == 2
    })
    .await;
    let seen: Vec<u64> = read(&terms).lines().map(|l| l.parse().unwrap()).collect();
    assert!(seen[1] > seen[0], "{seen:?}");
    std::fs::write(dir.path().join("stop"), "").unwrap();
    let out = finished(run).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("campaigning again"), "{stderr}");
}

#[tokio::test]
async fn with_once_a_lost_leadership_exits_76() {
    let mut q = LocalQuorum::start(3).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let script = format!("touch started; trap 'exit 0' TERM; {UNTIL_STOP}");
    let flags = ["--ttl", "2s", "--once"];
    let run = tokio::spawn(elect_sh(&q, dir.path(), &flags, "once", &script).output());
    appears(&dir.path().join("started")).await;
    q.node_mut(0).freeze().unwrap();
    q.node_mut(1).freeze().unwrap();
    let out = finished(run).await;
    q.node_mut(0).resume().unwrap();
    q.node_mut(1).resume().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(76), "{stderr}");
    assert!(stderr.contains("lost the lock on `once`"), "{stderr}");
}

#[tokio::test]
async fn leader_exits_69_without_a_quorum_and_64_on_bad_input() {
    let mut q = LocalQuorum::start(3).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = outcome(quorumlock(&q.urls()).args(["leader", ""])).await;
    assert_eq!(out.code, Some(64), "{out:?}");
    let out = outcome(&mut elect_sh(&q, dir.path(), &[], "", "true")).await;
    assert_eq!(out.code, Some(64), "{out:?}");
    let out =
        outcome(elect_sh(&q, dir.path(), &[], "n", "true").env("QUORUMLOCK_FENCING", "false"))
            .await;
    assert_eq!(out.code, Some(64), "{out:?}");
    assert!(out.stderr.contains("fencing"), "{out:?}");
    let out = outcome(&mut elect_sh(
        &q,
        dir.path(),
        &["--identity", ""],
        "n",
        "true",
    ))
    .await;
    assert_eq!(out.code, Some(64), "{out:?}");
    for node in q.nodes() {
        assert_eq!(
            common::keys(node).await,
            ["quorumlock:node"],
            "only the testkit's marker"
        );
    }
    q.node_mut(0).kill().await.unwrap();
    q.node_mut(1).kill().await.unwrap();
    let out = outcome(
        quorumlock(&q.urls())
            .args(["leader", "sched"])
            .env("QUORUMLOCK_CONNECT_TIMEOUT", "200ms"),
    )
    .await;
    assert_eq!(out.code, Some(69), "{out:?}");
}

#[tokio::test]
async fn exits_127_or_126_when_the_command_cannot_run_and_resigns() {
    let q = LocalQuorum::start(3).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    for (command, code, message) in commands_that_cannot_run(dir.path()) {
        let mut cli = quorumlock(&q.urls());
        let out = outcome(cli.args(["elect", "cannot-run", "--", &command])).await;
        assert_eq!(out.code, Some(code), "{command}: {out:?}");
        assert!(out.stderr.starts_with("quorumlock: "), "{out:?}");
        assert!(out.stderr.contains(message), "{out:?}");
        let out = outcome(quorumlock(&q.urls()).args(["leader", "cannot-run"])).await;
        assert_eq!(
            (out.code, out.stdout.trim()),
            (Some(1), "no leader"),
            "{command}: {out:?}"
        );
    }
}
