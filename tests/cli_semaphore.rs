//! `quorumlock run --permits N` (a distributed `sem`), and `status` and `ls` of a semaphore,
//! against real servers and the real binary: N commands at once and the next one waiting or
//! skipping, the slot in COMMAND's environment, the holders listed with their ttl, the JSON
//! documents, and bad input refused with nothing changed on any node.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use common::cli::{appears, outcome, quorumlock, scratch, Background, Outcome};
use common::primitives::snapshot;
use common::primitives::{census, members, settled_permit, settled_side, sha1_short, slot_claims};
use common::{client, eventually, keys, HANG};
use quorumlock::testkit::LocalQuorum;
use quorumlock::{Access, RedLock, Retry, RwGuard};
use serde_json::json;
use tokio::process::Command;

/// What `run -v` logs once its first attempt found every permit held and it starts waiting.
const WAITING: &str = "held elsewhere: waiting until it is free";

/// Shell: writes the environment quorumlock gives COMMAND into `env.NAME`, then waits for a
/// file `stop.NAME` (at most a minute).
fn holder(name: &str) -> String {
    format!(
        "echo \"$QUORUMLOCK_SLOT $QUORUMLOCK_RESOURCE $QUORUMLOCK_FENCING_TOKEN\" > env.{name}.tmp; \
         mv env.{name}.tmp env.{name}; \
         i=0; while [ ! -e stop.{name} ] && [ $i -lt 3000 ]; do sleep 0.02; i=$((i+1)); done"
    )
}

/// `quorumlock run FLAGS... RESOURCE sh -c SCRIPT`, in `dir`.
fn run_sh(q: &LocalQuorum, flags: &[&str], resource: &str, script: &str, dir: &Path) -> Command {
    let mut c = quorumlock(&q.urls());
    c.arg("run")
        .args(flags)
        .args([resource, "sh", "-c", script])
        .current_dir(dir);
    c
}

/// The environment a holder wrote: slot, resource and fencing token.
fn env_of(dir: &Path, name: &str) -> (u32, String, u64) {
    let text = std::fs::read_to_string(dir.join(format!("env.{name}"))).expect("env file");
    let parts: Vec<&str> = text.split_whitespace().collect();
    assert_eq!(parts.len(), 3, "{text:?}");
    (
        parts[0].parse().expect("a slot"),
        parts[1].to_string(),
        parts[2].parse().expect("a fencing token"),
    )
}

#[track_caller]
fn json(out: &Outcome) -> serde_json::Value {
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"))
}

#[tokio::test]
async fn two_permits_let_two_commands_run_and_the_third_skip_or_wait() {
    let q = LocalQuorum::start(3).await.unwrap();
    let dir = scratch();
    let d = dir.path();
    // One after the other, so that every node records the same slots: two attempts at
    // once may be granted on a majority that leaves one node without the claim (design 2.9).
    let mut a = Background::spawn(&mut run_sh(
        &q,
        &["--permits", "2"],
        "jobs",
        &holder("a"),
        d,
    ));
    appears(&d.join("env.a")).await;
    // a's permit is granted at the quorum and its process settles only when it exits: the
    // last node's claim lands in the background, and b must find it there.
    eventually("a's claim on every node", || async {
        let mut all = true;
        for i in 0..q.len() {
            all &= slot_claims(&q, i, "jobs").await.len() == 1;
        }
        all
    })
    .await;
    let mut b = Background::spawn(&mut run_sh(
        &q,
        &["--permits", "2"],
        "jobs",
        &holder("b"),
        d,
    ));
    appears(&d.join("env.b")).await;

    // Each got a slot of its own, and a fencing token of the semaphore that names its slot
    // (so that two permits held at once never share one).
    let (slot_a, resource_a, fence_a) = env_of(d, "a");
    let (slot_b, resource_b, fence_b) = env_of(d, "b");
    let slots: BTreeSet<u32> = [slot_a, slot_b].into();
    assert_eq!(slots, [0, 1].into());
    assert_eq!((resource_a.as_str(), resource_b.as_str()), ("jobs", "jobs"));
    assert!(fence_a >= 1 && fence_b >= 1);
    assert_eq!(fence_a % 1024, u64::from(slot_a));
    assert_eq!(fence_b % 1024, u64::from(slot_b));
    assert_ne!(fence_a, fence_b);

    // A third skips: -n fails as a lock held elsewhere does; -q -E 0 silently.
    let out = outcome(&mut run_sh(
        &q,
        &["-n", "--permits", "2"],
        "jobs",
        "touch ran.c",
        d,
    ))
    .await;
    assert_eq!(out.code, Some(75), "{out:?}");
    assert!(
        out.stderr.contains("`jobs` is held by another owner"),
        "{out:?}"
    );
    let flags = ["-n", "-q", "-E", "0", "--permits", "2"];
    let out = outcome(&mut run_sh(&q, &flags, "jobs", "touch ran.c", d)).await;
    assert_eq!(
        (out.code, out.stdout.as_str(), out.stderr.as_str()),
        (Some(0), "", "")
    );
    assert!(!d.join("ran.c").exists(), "a third command ran");

    // status: both holders, by slot, with their ttl left; all permits held (75).
    // (A grant waits for a majority: the third node's answer may still be on its way.)
    eventually("both claims on every node", || async {
        let first = slot_claims(&q, 0, "jobs").await;
        first.len() == 2
            && slot_claims(&q, 1, "jobs").await == first
            && slot_claims(&q, 2, "jobs").await == first
    })
    .await;
    let held = slot_claims(&q, 0, "jobs").await;
    let out = outcome(quorumlock(&q.urls()).args(["status", "jobs"])).await;
    assert_eq!(out.code, Some(75), "{out:?}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 6, "{out:?}");
    for (i, line) in lines[..3].iter().enumerate() {
        let prefix = format!(
            "node {i} {}: semaphore of 2 permits (expires in ",
            q.urls()[i]
        );
        assert!(line.starts_with(&prefix), "{out:?}");
    }
    for ((slot, sha1), line) in held.iter().zip(&lines[3..5]) {
        let prefix = format!(
            "slot {slot}: held by {} on 3 of 3 nodes (expires in ",
            &sha1[..12]
        );
        assert!(line.starts_with(&prefix), "{out:?}");
    }
    assert_eq!(
        lines[5],
        "`jobs`: semaphore of 2 permits, all held (key on 3 of 3 nodes, quorum 2)"
    );

    let out = outcome(quorumlock(&q.urls()).args(["status", "--json", "jobs"])).await;
    assert_eq!(out.code, Some(75), "{out:?}");
    let doc = json(&out);
    assert_eq!(doc["resource"], "jobs");
    assert_eq!(doc["kind"], "semaphore");
    assert_eq!(doc["permits"], 2);
    assert_eq!(doc["verdict"], "full");
    assert_eq!(doc["exit_code"], 75);
    assert_eq!(doc["holder_sha1"], serde_json::Value::Null);
    assert_eq!(doc["quorum_in_s"], 0.0);
    assert_eq!(doc["error"], serde_json::Value::Null);
    assert_eq!(
        (doc["quorum"].as_u64(), doc["held_on"].as_u64()),
        (Some(2), Some(3))
    );
    for node in doc["nodes"].as_array().expect("nodes") {
        assert_eq!(node["state"], "semaphore", "{doc}");
        assert_eq!(node["permits"], 2, "{doc}");
        assert!(node["pttl_ms"].as_i64().is_some_and(|ms| ms > 0), "{doc}");
    }
    let holders = doc["holders"].as_array().expect("holders");
    let listed: BTreeSet<(u32, String)> = holders
        .iter()
        .map(|h| {
            let slot = h["slot"].as_u64().expect("slot") as u32;
            (slot, h["sha1"].as_str().expect("sha1").to_string())
        })
        .collect();
    // The holder id `ls` names it by too.
    let ids: BTreeSet<(u32, String)> = held
        .iter()
        .map(|(slot, sha1)| (*slot, sha1[..12].to_string()))
        .collect();
    assert_eq!(listed, ids, "{doc}");
    for h in holders {
        assert_eq!(h["nodes"], 3, "{doc}");
        assert_eq!(h["held"], true, "{doc}");
        let ttl = h["ttl_ms"].as_u64().expect("ttl_ms");
        assert!(ttl > 0 && ttl <= 10_000, "the library's 10 s ttl: {doc}");
    }

    // ls: the semaphore as such.
    let out = outcome(quorumlock(&q.urls()).arg("ls")).await;
    assert_eq!(out.code, Some(0), "{out:?}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    let fence = fence_a.max(fence_b);
    assert_eq!(
        lines,
        [
            format!("jobs  semaphore of 2 permits  held 2  fencing {fence}  on 3 of 3 nodes"),
            "0 locks, 1 semaphore on the 3 of 3 nodes that answered (quorum 2)".to_string(),
        ],
        "{out:?}"
    );
    let out = outcome(quorumlock(&q.urls()).args(["ls", "--json"])).await;
    let doc = json(&out);
    assert_eq!(doc["locks"], serde_json::json!([]), "{doc}");
    let semaphore = &doc["semaphores"][0];
    assert_eq!(semaphore["kind"], "semaphore", "{doc}");
    assert_eq!(semaphore["permits"], 2, "{doc}");
    assert_eq!(semaphore["held"], 2, "{doc}");
    assert_eq!(semaphore["nodes"], serde_json::json!([0, 1, 2]), "{doc}");
    assert!(!out
        .stdout
        .contains(&held.iter().next().expect("a claim").1[12..]));

    // A third that waits gets a's slot when a ends.
    let mut c = Background::spawn(&mut run_sh(
        &q,
        &["-v", "--permits", "2"],
        "jobs",
        &holder("c"),
        d,
    ));
    c.logs(WAITING).await;
    assert!(
        !d.join("env.c").exists(),
        "c ran while both permits were held"
    );
    std::fs::write(d.join("stop.a"), "").unwrap();
    assert_eq!(a.code().await, Some(0));
    appears(&d.join("env.c")).await;
    let (slot_c, _, fence_c) = env_of(d, "c");
    assert_eq!(slot_c, slot_a, "the only free slot");
    assert!(fence_c > fence_a.max(fence_b), "fencing tokens grow");
    std::fs::write(d.join("stop.b"), "").unwrap();
    std::fs::write(d.join("stop.c"), "").unwrap();
    assert_eq!(b.code().await, Some(0));
    assert_eq!(c.code().await, Some(0));
    // Released: the key goes with its last claim (the fencing counter stays).
    eventually("the semaphore's key is gone on every node", || async {
        let mut gone = true;
        for node in q.nodes() {
            gone &= !keys(node).await.contains(&"jobs".to_string());
        }
        gone
    })
    .await;
    let out = outcome(quorumlock(&q.urls()).args(["status", "jobs"])).await;
    assert_eq!(out.code, Some(0), "free: {out:?}");
}

#[tokio::test]
async fn bad_permits_and_a_resource_of_another_kind_are_refused_and_change_nothing() {
    let q = LocalQuorum::start(3).await.unwrap();
    let dir = scratch();
    let d = dir.path();
    let redlock = client(&q).await;
    let lock = redlock.lock("report").await.unwrap();
    let permit = settled_permit(&redlock, "exports", 2, Duration::from_secs(10)).await;
    let before = snapshot(&q).await;

    for (flags, resource, expected) in [
        (
            &["--permits", "0"][..],
            "fresh",
            "a semaphore needs 1 to 1024 permits, not 0",
        ),
        (
            &["-n", "--permits", "1025"],
            "fresh",
            "a semaphore needs 1 to 1024 permits, not 1025",
        ),
        (
            &["--permits", "two"],
            "fresh",
            "invalid value 'two' for '--permits <N>'",
        ),
        (&["--permits", "-1"], "fresh", "unexpected argument '-1'"),
        // A lock's name as a semaphore: refused at once, without -n too.
        (
            &["--permits", "2"],
            "report",
            "`report` is already in use as a lock (or a value of another kind)",
        ),
        // Another number of permits.
        (
            &["-n", "--permits", "3"],
            "exports",
            "`exports` is already in use as a semaphore of 2 permits",
        ),
    ] {
        let out = outcome(&mut run_sh(&q, flags, resource, "touch ran", d)).await;
        let what = format!("{flags:?} {resource}: {out:?}");
        assert_eq!(out.code, Some(64), "{what}");
        assert!(out.stderr.starts_with("quorumlock: "), "{what}");
        assert_eq!(out.stderr.lines().count(), 1, "{what}");
        assert!(out.stderr.contains(expected), "{what}");
        assert!(!d.join("ran").exists(), "{what}: the command ran");
        assert_eq!(snapshot(&q).await, before, "{what}: a node changed");
    }

    // `status` of the lock is still a lock's.
    let out = outcome(quorumlock(&q.urls()).args(["status", "--json", "report"])).await;
    let doc = json(&out);
    assert_eq!(
        (doc["kind"].as_str(), doc["verdict"].as_str()),
        (Some("lock"), Some("held"))
    );
    assert_eq!(doc["holder_sha1"], sha1_short(lock.token().as_str()));
    assert_eq!(doc["holders"], serde_json::Value::Null);
    // A semaphore with a permit free: available (0).
    let out = outcome(quorumlock(&q.urls()).args(["status", "exports"])).await;
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(
        out.stdout.ends_with(
            "`exports`: semaphore of 2 permits, 1 held (key on 3 of 3 nodes, quorum 2)\n"
        ),
        "{out:?}"
    );
    assert!(
        out.stdout.contains(&format!(
            "slot {}: held by {} on 3 of 3 nodes",
            permit.slot(),
            sha1_short(permit.token().as_str())
        )),
        "{out:?}"
    );
    lock.release().await.unwrap();
    permit.release().await.unwrap();
}

/// `--hold-at-least` with a permit: a COMMAND that ends at once leaves its permit on the
/// nodes until D after it was taken, as it leaves a lock; `release --force` refuses a
/// semaphore.
#[tokio::test]
async fn hold_at_least_leaves_the_permit_to_expire_and_release_force_refuses_it() {
    let q = LocalQuorum::start(3).await.unwrap();
    let dir = scratch();
    let flags = ["--permits", "2", "--hold-at-least", "8"];
    let out = outcome(&mut run_sh(&q, &flags, "nightly", "touch ran", dir.path())).await;
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(dir.path().join("ran").exists());

    let holders = census(&q, "nightly", 2).await;
    assert_eq!(holders.len(), 1, "the permit stays: {holders:?}");
    let ttl = holders[0].ttl.as_secs_f64();
    assert!(
        ttl > 4.0 && ttl <= 8.0,
        "until 8 s after it was taken: {holders:?}"
    );

    let before = snapshot(&q).await;
    let out = outcome(quorumlock(&q.urls()).args(["release", "--force", "nightly"])).await;
    assert_eq!(out.code, Some(64), "{out:?}");
    assert!(
        out.stderr
            .contains("`nightly` is a semaphore of 2 permits: release --force breaks a lock only"),
        "{out:?}"
    );
    assert_eq!(snapshot(&q).await, before, "nothing deleted");
}

/// A signal while waiting for a permit ends the wait at once with 128+N, and every node holds
/// exactly what it held before: the attempt in flight left no claim.
#[tokio::test]
async fn a_signal_while_waiting_for_a_permit_ends_the_wait_and_leaves_nothing() {
    let q = LocalQuorum::start(3).await.unwrap();
    let dir = scratch();
    let redlock = client(&q).await;
    let permit = settled_permit(&redlock, "waited", 1, Duration::from_secs(30)).await;
    let before = snapshot(&q).await;
    for (sig, code) in [
        (nix::sys::signal::Signal::SIGTERM, 143),
        (nix::sys::signal::Signal::SIGINT, 130),
    ] {
        let flags = ["-v", "--permits", "1"];
        let mut waiter =
            Background::spawn(&mut run_sh(&q, &flags, "waited", "touch ran", dir.path()));
        waiter.logs(WAITING).await;
        nix::sys::signal::kill(waiter.pid(), sig).unwrap();
        assert_eq!(waiter.code().await, Some(code), "{sig}: {:#?}", waiter.seen);
        assert!(!dir.path().join("ran").exists(), "{sig}: the command ran");
        assert_eq!(snapshot(&q).await, before, "{sig}");
    }
    permit.release().await.unwrap();
}

/// `run --shared` and `--exclusive`: a read-write lock's sides. Shared commands run beside
/// a shared holder and are refused beside an exclusive one; an exclusive command is refused
/// beside either; a lock's name is refused (64) and nothing changes.
#[tokio::test]
async fn shared_and_exclusive_take_the_sides_of_a_read_write_lock() {
    let q = LocalQuorum::start(3).await.unwrap();
    let dir = scratch();
    let d = dir.path();
    let redlock = client(&q).await;
    let rw = redlock.rw_lock("catalog").unwrap();

    let reading = rw.try_read().await.unwrap();
    let out = outcome(&mut run_sh(
        &q,
        &["-n", "--shared"],
        "catalog",
        "touch shared",
        d,
    ))
    .await;
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(d.join("shared").exists(), "a reader beside a reader");
    let out = outcome(&mut run_sh(
        &q,
        &["-n", "--exclusive"],
        "catalog",
        "touch w1",
        d,
    ))
    .await;
    assert_eq!(out.code, Some(75), "{out:?}");
    assert!(!d.join("w1").exists(), "a writer beside a reader");
    reading.release().await.unwrap();

    let writing = rw.try_write().await.unwrap();
    for flag in ["--shared", "--exclusive"] {
        let out = outcome(&mut run_sh(&q, &["-n", flag], "catalog", "touch w2", d)).await;
        assert_eq!(out.code, Some(75), "{flag}: {out:?}");
        assert!(!d.join("w2").exists(), "{flag} beside a writer");
    }
    writing.release().await.unwrap();
    let out = outcome(&mut run_sh(
        &q,
        &["-n", "--exclusive"],
        "catalog",
        "touch w3",
        d,
    ))
    .await;
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(d.join("w3").exists());

    let lock = redlock.lock("plain").await.unwrap();
    assert!(redlock.settle(Duration::from_secs(5)).await);
    let before = snapshot(&q).await;
    let out = outcome(&mut run_sh(&q, &["--shared"], "plain", "touch w4", d)).await;
    assert_eq!(out.code, Some(64), "{out:?}");
    assert!(
        out.stderr.contains("`plain` is already in use as a lock"),
        "{out:?}"
    );
    assert_eq!(snapshot(&q).await, before, "a node changed");
    let out = outcome(&mut run_sh(
        &q,
        &["--shared", "--exclusive"],
        "x",
        "true",
        d,
    ))
    .await;
    assert_eq!(out.code, Some(64), "{out:?}");
    lock.release().await.unwrap();
}

/// The ttl of the read-write lock's sides the tests take.
const SIDE_TTL: Duration = Duration::from_secs(10);

/// Three nodes, a client, and two readers of `shelf` that every node records.
async fn two_readers_of_shelf() -> (LocalQuorum, RedLock, RwGuard, RwGuard) {
    let q = LocalQuorum::start(3).await.unwrap();
    let redlock = client(&q).await;
    let r1 = settled_side(&redlock, "shelf", Access::Read, SIDE_TTL).await;
    let r2 = settled_side(&redlock, "shelf", Access::Read, SIDE_TTL).await;
    (q, redlock, r1, r2)
}

/// `status` of a read-write lock lists its readers, writer and writers waiting (75 while a
/// writer holds it); `release --force` refuses it.
#[tokio::test]
async fn status_lists_a_read_write_locks_sides_and_release_force_refuses_it() {
    let (q, redlock, r1, r2) = two_readers_of_shelf().await;
    let out = outcome(quorumlock(&q.urls()).args(["status", "shelf"])).await;
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(
        out.stdout
            .ends_with("`shelf`: read-write lock, 2 readers (key on 3 of 3 nodes, quorum 2)\n"),
        "{out:?}"
    );
    for token in [r1.token(), r2.token()] {
        let sha1 = sha1_short(token.as_str());
        assert!(
            out.stdout
                .contains(&format!("reader {sha1} on 3 of 3 nodes")),
            "{out:?}"
        );
    }
    r1.release().await.unwrap();
    r2.release().await.unwrap();
    let w = settled_side(&redlock, "shelf", Access::Write, SIDE_TTL).await;
    let out = outcome(quorumlock(&q.urls()).args(["status", "--json", "shelf"])).await;
    assert_eq!(out.code, Some(75), "{out:?}");
    let doc = json(&out);
    assert_eq!(
        (doc["kind"].as_str(), doc["verdict"].as_str()),
        (Some("rwlock"), Some("written"))
    );
    let holders = doc["holders"].as_array().expect("holders");
    assert_eq!(holders.len(), 1, "{doc:#}");
    assert_eq!(holders[0]["access"], "write");
    assert_eq!(holders[0]["waiting"], false);
    assert_eq!(holders[0]["held"], true);
    assert_eq!(holders[0]["sha1"], sha1_short(w.token().as_str()));
    let out = outcome(quorumlock(&q.urls()).args(["release", "--force", "shelf"])).await;
    assert_eq!(out.code, Some(64), "{out:?}");
    assert!(out.stderr.contains("is a read-write lock"), "{out:?}");
    w.release().await.unwrap();
}

/// `ls --json`, which must exit 0, parsed.
async fn ls_json(q: &LocalQuorum) -> serde_json::Value {
    let out = outcome(quorumlock(&q.urls()).args(["ls", "--json"])).await;
    assert_eq!(out.code, Some(0), "{out:?}");
    json(&out)
}

/// The holders of a listed semaphore or read-write lock without their ttl, and their ttls,
/// each checked to be left and at most `most`.
#[track_caller]
fn holders_and_ttls(
    listed: &serde_json::Value,
    most: Duration,
) -> (Vec<serde_json::Value>, Vec<u64>) {
    let holders = listed["holders"].as_array().expect("holders");
    let ttls: Vec<u64> = holders
        .iter()
        .map(|h| h["ttl_ms"].as_u64().expect("a ttl"))
        .collect();
    for ms in &ttls {
        let left = *ms > 0 && u128::from(*ms) <= most.as_millis();
        assert!(left, "a ttl left of at most {most:?}: {listed:#}");
    }
    let without_ttl = holders
        .iter()
        .map(|h| {
            let mut h = h.clone();
            h.as_object_mut().expect("a holder").remove("ttl_ms");
            h
        })
        .collect();
    (without_ttl, ttls)
}

/// `ls` lists a read-write lock with its readers, then with its writer, then with a writer
/// waiting behind it: a line each, and in the JSON document each holder's side, SHA1, nodes
/// and ttl left; it changes nothing.
#[tokio::test]
async fn ls_lists_a_read_write_locks_readers_writer_and_writers_waiting() {
    let (q, redlock, r1, r2) = two_readers_of_shelf().await;
    let before = snapshot(&q).await;

    let out = outcome(quorumlock(&q.urls()).arg("ls")).await;
    assert_eq!(out.code, Some(0), "{out:?}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(
        lines,
        [
            "shelf  read-write lock  readers 2  writers 0  waiting 0  fencing -  on 3 of 3 nodes",
            "0 locks, 1 read-write lock on the 3 of 3 nodes that answered (quorum 2)",
        ],
        "{out:?}"
    );
    let doc = ls_json(&q).await;
    assert_eq!(
        (&doc["locks"], &doc["semaphores"]),
        (&json!([]), &json!([]))
    );
    let rwlocks = doc["rwlocks"].as_array().expect("rwlocks");
    assert_eq!(rwlocks.len(), 1, "{doc:#}");
    let shelf = &rwlocks[0];
    let counts = ["resource", "key", "kind", "readers", "writers", "waiting"].map(|f| &shelf[f]);
    assert_eq!(
        counts,
        [
            &json!("shelf"),
            &json!("shelf"),
            &json!("rwlock"),
            &json!(2),
            &json!(0),
            &json!(0)
        ],
        "{doc:#}"
    );
    assert_eq!(shelf["fencing_token"], serde_json::Value::Null, "{doc:#}");
    assert_eq!(shelf["nodes"], json!([0, 1, 2]), "{doc:#}");
    let reader = |token: &quorumlock::Token| {
        let sha1 = sha1_short(token.as_str());
        json!({"access": "read", "waiting": false, "sha1": sha1, "nodes": [0, 1, 2]})
    };
    let mut expected = vec![reader(r1.token()), reader(r2.token())];
    expected.sort_by_key(|h| h["sha1"].as_str().map(str::to_string));
    assert_eq!(holders_and_ttls(shelf, SIDE_TTL).0, expected, "{doc:#}");
    assert!(
        !out.stdout.contains(r1.token().as_str()),
        "the token stays secret"
    );
    assert_eq!(snapshot(&q).await, before, "ls writes nothing");

    // With a writer: exactly one, and no reader.
    r1.release().await.unwrap();
    r2.release().await.unwrap();
    let w = settled_side(&redlock, "shelf", Access::Write, SIDE_TTL).await;
    let out = outcome(quorumlock(&q.urls()).arg("ls")).await;
    assert_eq!(
        out.stdout.lines().next(),
        Some("shelf  read-write lock  readers 0  writers 1  waiting 0  fencing -  on 3 of 3 nodes"),
        "{out:?}"
    );
    let writer = json!({
        "access": "write", "waiting": false, "sha1": sha1_short(w.token().as_str()),
        "nodes": [0, 1, 2],
    });
    let doc = ls_json(&q).await;
    let shelf = &doc["rwlocks"][0];
    assert_eq!(
        (&shelf["readers"], &shelf["writers"]),
        (&json!(0), &json!(1)),
        "{doc:#}"
    );
    assert_eq!(
        holders_and_ttls(shelf, SIDE_TTL).0,
        std::slice::from_ref(&writer),
        "{doc:#}"
    );

    // Another client's writer waits behind it: its intent (`i:waiter`) on every node.
    let other = client(&q).await;
    let waiting = tokio::spawn(async move {
        let rw = other.rw_lock("shelf").expect("a valid read-write lock");
        let granted = rw
            .acquire(Access::Write, SIDE_TTL, Retry::within(HANG))
            .await;
        (granted, other)
    });
    let intent = |members: Vec<String>| members.into_iter().find(|m| m.starts_with("i:"));
    eventually("the waiting writer's intent on every node", || async {
        let mut on = 0;
        for node in q.nodes() {
            on += usize::from(intent(members(node, "shelf").await).is_some());
        }
        on == 3
    })
    .await;
    let member = intent(members(q.node(0), "shelf").await).expect("an intent");
    let doc = ls_json(&q).await;
    let shelf = &doc["rwlocks"][0];
    let counts = ["readers", "writers", "waiting"].map(|f| &shelf[f]);
    assert_eq!(counts, [&json!(0), &json!(1), &json!(1)], "{doc:#}");
    let waiter = json!({
        "access": "write", "waiting": true, "sha1": sha1_short(&member[2..]),
        "nodes": [0, 1, 2],
    });
    assert_eq!(
        holders_and_ttls(shelf, SIDE_TTL).0,
        [writer, waiter],
        "{doc:#}"
    );
    let out = outcome(quorumlock(&q.urls()).arg("ls")).await;
    assert_eq!(
        out.stdout.lines().next(),
        Some("shelf  read-write lock  readers 0  writers 1  waiting 1  fencing -  on 3 of 3 nodes"),
        "{out:?}"
    );

    w.release().await.unwrap();
    let (granted, other) = waiting.await.expect("the waiting writer");
    granted
        .expect("the waiting writer gets the lock")
        .release()
        .await
        .unwrap();
    drop(other);
}

/// A claim recorded on a key that did not exist may be scored `+inf`: it expires with its
/// key, and `ls` gives it the key's ttl left, for a semaphore and for a read-write lock.
#[tokio::test]
async fn ls_gives_a_claim_scored_inf_the_ttl_of_its_key() {
    let q = LocalQuorum::start(3).await.unwrap();
    for node in q.nodes() {
        for (key, record, member) in [("sem", "-2", "1:token"), ("rw", "-1", "w:token")] {
            let first = if key == "sem" { "#" } else { "#rw" };
            let added = node
                .command(&["ZADD", key, record, first, "+inf", member])
                .await
                .expect("ZADD");
            assert_eq!(added.as_int(), Some(2), "ZADD {key}");
            let expire = node.command(&["PEXPIRE", key, "30000"]).await;
            assert_eq!(expire.expect("PEXPIRE").as_int(), Some(1), "PEXPIRE {key}");
        }
    }
    let doc = ls_json(&q).await;
    // Each node's ttl read after `ls` is at most what `ls` read there.
    let mut after = Vec::new();
    for node in q.nodes() {
        for key in ["sem", "rw"] {
            let pttl = node.command(&["PTTL", key]).await.expect("PTTL");
            after.push(pttl.as_int().expect("a ttl") as u64);
        }
    }
    let least = after.iter().copied().min().expect("six ttls");
    for (list, counts) in [("semaphores", ("held", 1)), ("rwlocks", ("writers", 1))] {
        let listed = doc[list].as_array().expect("a list");
        assert_eq!(listed.len(), 1, "{doc:#}");
        assert_eq!(listed[0][counts.0], counts.1, "{doc:#}");
        let (holders, ttls) = holders_and_ttls(&listed[0], Duration::from_secs(30));
        assert_eq!(holders.len(), 1, "{doc:#}");
        assert_eq!(holders[0]["sha1"], sha1_short("token"), "{doc:#}");
        assert_eq!(holders[0]["nodes"], json!([0, 1, 2]), "{doc:#}");
        assert_eq!(ttls.len(), 1);
        assert!(ttls[0] >= least, "{after:?}: {doc:#}");
    }
}
