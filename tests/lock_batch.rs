//! Coalescing: calls bound for a node that is busy are sent together, as one script call,
//! when it is free again, in order, and each gets its own answer.

mod common;

use std::time::Duration;

use futures::future::join_all;
use quorumlock::fred::prelude::*;
use quorumlock::fred::types::Message;
use quorumlock::testkit::{LocalQuorum, Reply};

use common::{builder, calls, connected, get, has_command, holders};

/// Locks taken and released at once by separate tasks of one client.
const LOCKS: usize = 24;

/// With one node frozen, every call for it queues behind the one in flight. When it
/// resumes, the queue goes out in a few script calls instead of one per call, and in order:
/// each late acquisition runs before its own release, so no key is left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_queued_for_a_busy_node_go_out_together_and_in_order() {
    let mut quorum = LocalQuorum::start(5).await.expect("quorum");
    // A node timeout long enough that the queued calls are still wanted after the resume.
    let redlock = connected(builder(&quorum).node_timeout(Duration::from_secs(20))).await;
    let before = calls(quorum.node(0), "evalsha").await;
    quorum.node_mut(0).freeze().expect("freeze");

    // Each lock is decided by the four healthy nodes; node 0's acquisition, the reading and
    // recording of its fencing token, and its release wait in its queue.
    let locks = join_all((0..LOCKS).map(|i| {
        let redlock = redlock.clone();
        tokio::spawn(async move {
            let lock = redlock.try_lock(&format!("batch:{i}")).await?;
            lock.fencing_token().await?;
            lock.release().await
        })
    }))
    .await;
    for lock in locks {
        lock.expect("task")
            .expect("lock and release without node 0");
    }

    quorum.node_mut(0).resume().expect("resume");
    assert!(
        redlock.settle(Duration::from_secs(30)).await,
        "node 0's queued calls were answered"
    );

    // Four calls per lock (acquire, read and record the fencing token, release) were queued
    // for the frozen node; it got them in a handful of script calls (its first acquisition
    // alone, then the rest as one batch or a few).
    let frozen = calls(quorum.node(0), "evalsha").await - before;
    assert!(
        frozen <= 6,
        "node 0 ran {frozen} script calls for {} queued calls",
        4 * LOCKS
    );
    // Every late acquisition ran, then its release: nothing is left on node 0.
    for i in 0..LOCKS {
        let key = format!("batch:{i}");
        assert_eq!(
            get(quorum.node(0), &key).await,
            None,
            "{key} left on node 0"
        );
        assert_eq!(holders(&quorum, &key).await, 0, "{key} left behind");
    }
    // The batched fences ran on node 0 too, after their acquisitions.
    let fenced = get(quorum.node(0), "quorumlock:fence:batch:0").await;
    assert_eq!(fenced.as_deref(), Some("1"), "node 0's fencing counter");
}

/// A call that fails inside a batch fails alone: the others in the same script call get
/// their answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_call_in_a_batch_does_not_fail_the_others() {
    let mut quorum = LocalQuorum::start(3).await.expect("quorum");
    let redlock = connected(builder(&quorum).node_timeout(Duration::from_secs(20))).await;
    // Node 0 holds a fencing counter that is not a number: the ACQUIRE script fails there
    // for that resource only. (Once one of its locks' tokens was asked for, a client's
    // acquisitions read the counters.)
    quorum
        .node(0)
        .command(&["SET", "quorumlock:fence:broken", "garbage"])
        .await
        .expect("SET");
    let asked = redlock.try_lock("asked").await.expect("lock");
    asked.fencing_token().await.expect("token");
    asked.release().await.expect("release");
    assert!(redlock.settle(Duration::from_secs(5)).await, "settled");
    let before = calls(quorum.node(0), "evalsha").await;
    quorum.node_mut(0).freeze().expect("freeze");
    let names: Vec<String> = std::iter::once("broken".to_string())
        .chain((0..8).map(|i| format!("fine:{i}")))
        .collect();
    let locks = join_all(names.iter().map(|name| {
        let (redlock, name) = (redlock.clone(), name.clone());
        tokio::spawn(async move { redlock.try_lock(&name).await })
    }))
    .await;
    let mut held = Vec::new();
    for lock in locks {
        held.push(lock.expect("task").expect("locked on nodes 1 and 2"));
    }
    quorum.node_mut(0).resume().expect("resume");
    assert!(redlock.settle(Duration::from_secs(30)).await, "settled");
    let batched = calls(quorum.node(0), "evalsha").await - before;
    assert!(batched <= 3, "node 0 ran {batched} script calls");
    // Node 0 ran the late acquisitions of the fine resources (their keys are there, with
    // their tokens), but not the broken one's.
    for lock in &held {
        let on_node_0 = get(quorum.node(0), lock.resource()).await;
        if lock.resource() == "broken" {
            assert_eq!(on_node_0, None, "the failing call set nothing");
        } else {
            assert_eq!(
                on_node_0.as_deref(),
                Some(lock.token().as_str()),
                "{} set on node 0 by its batched call",
                lock.resource()
            );
        }
    }
    for lock in held {
        lock.release().await.expect("release");
    }
}

/// A release and the next acquisition of the same key, queued together for a busy node, reach
/// it in the order they were made (a batch that reordered its calls, say to send its `SET NX`
/// calls ahead as native commands, must keep each key's order).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_keeps_a_release_before_the_next_acquisition_of_its_key() {
    let mut quorum = LocalQuorum::start(3).await.expect("quorum");
    let redlock = connected(builder(&quorum).node_timeout(Duration::from_secs(20))).await;
    quorum.node_mut(0).freeze().expect("freeze");
    // Its acquisition goes out to node 0 at once and waits there; what follows queues.
    let first = redlock.try_lock("first").await.expect("first");
    let old = redlock.try_lock("again").await.expect("again");
    let old_token = old.token().as_str().to_string();
    old.release().await.expect("release");
    let new = redlock.try_lock("again").await.expect("again, again");
    let mut others = Vec::new();
    for i in 0..4 {
        others.push(
            redlock
                .try_lock(&format!("other:{i}"))
                .await
                .expect("other"),
        );
    }
    quorum.node_mut(0).resume().expect("resume");
    assert!(redlock.settle(Duration::from_secs(30)).await, "settled");

    // Node 0 ran `again`'s release before its next acquisition, which then took the key.
    assert_ne!(new.token().as_str(), old_token);
    assert_eq!(
        get(quorum.node(0), "again").await.as_deref(),
        Some(new.token().as_str()),
        "node 0's `again`"
    );
    for lock in others.iter().chain([&first]) {
        assert_eq!(
            get(quorum.node(0), lock.resource()).await.as_deref(),
            Some(lock.token().as_str()),
            "{} on node 0",
            lock.resource()
        );
    }
}

/// A release that a busy node gets in a batch deletes the key and is announced there as a
/// release sent alone is: on the key's channel, with the SHA1 of its token, for the clients
/// that wait for it. Where the node runs `DELIFEQ` (Valkey 9), the batch deletes with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batched_release_deletes_and_is_announced() {
    let mut quorum = LocalQuorum::start(3).await.expect("quorum");
    let redlock = connected(builder(&quorum).node_timeout(Duration::from_secs(20))).await;
    let config = Config::from_url(&quorum.urls()[0]).expect("URL");
    let listener = Builder::from_config(config)
        .build_subscriber_client()
        .expect("subscriber");
    listener.init().await.expect("connected");
    listener
        .subscribe("quorumlock:released:w")
        .await
        .expect("subscribed");
    let mut messages = listener.message_rx();
    let delifeq = calls(quorum.node(0), "delifeq").await;
    quorum.node_mut(0).freeze().expect("freeze");
    // Its acquisition goes out to node 0 at once and waits there; what follows queues.
    let first = redlock.try_lock("first").await.expect("first");
    let lock = redlock.try_lock("w").await.expect("w");
    let token = lock.token().as_str().to_string();
    lock.release().await.expect("released on nodes 1 and 2");
    quorum.node_mut(0).resume().expect("resume");
    assert!(redlock.settle(Duration::from_secs(30)).await, "settled");

    assert_eq!(get(quorum.node(0), "w").await, None, "w left on node 0");
    let message: Message = tokio::time::timeout(Duration::from_secs(30), messages.recv())
        .await
        .expect("announced")
        .expect("a message");
    assert_eq!(&*message.channel, "quorumlock:released:w");
    let hash: String = message.value.convert().expect("a string");
    assert_eq!(hash, quorumlock::fred::util::sha1_hash(&token));
    assert!(messages.try_recv().is_err(), "announced once");
    let batched = u64::from(has_command(quorum.node(0), "DELIFEQ").await);
    assert_eq!(
        calls(quorum.node(0), "delifeq").await - delifeq,
        batched,
        "the batched release's DELIFEQ"
    );
    first.release().await.expect("release");
}

/// The batch script runs some calls inline rather than through the call's own script (SET NX,
/// and the release or discard of one key): each answers exactly as its script does alone, and
/// leaves the key as it does, whatever the key holds.
#[tokio::test]
async fn inline_calls_in_a_batch_answer_as_their_scripts_do() {
    let quorum = LocalQuorum::start(1).await.expect("node");
    let node = quorum.node(0);
    let (batch, scripts) = quorumlock::testkit::batch_script();
    let hash = quorumlock::fred::util::sha1_hash("ours");
    // (op, its arguments): SET NX, RELEASE, DISCARD.
    let calls: [(usize, Vec<&str>); 3] = [
        (1, vec!["ours", "60000"]),
        (6, vec!["ours", &hash]),
        (9, vec!["ours"]),
    ];
    // What the key holds before the call.
    let states: [&[&str]; 4] = [
        &[],
        &["SET", "k", "ours"],
        &["SET", "k", "theirs"],
        &["RPUSH", "k", "a list"],
    ];
    let mut compared = 0;
    // With `DELIFEQ` or without: on a server that lacks it, the batch falls back to GET and
    // DEL, and answers the same.
    let natives: [&[&str]; 2] = [&[], &["DELIFEQ"]];
    for natives in natives {
        for (op, args) in &calls {
            for state in states {
                let mut outcomes = Vec::new();
                for batched in [false, true] {
                    node.command(&["DEL", "k"]).await.expect("DEL");
                    if !state.is_empty() {
                        node.command(state).await.expect("set up");
                    }
                    let reply = if batched {
                        let header = quorumlock::testkit::batch_header(*op, 1, args.len(), natives);
                        let mut command = vec!["EVAL", &batch, "1", "k", "1"];
                        command.extend(header.iter().map(String::as_str));
                        command.extend(args.iter().copied());
                        match node.command(&command).await.expect("EVAL batch") {
                            // The call's answer, the marker and the record read back.
                            Reply::Array(Some(mut answers)) if answers.len() == 3 => {
                                match answers.remove(0) {
                                    Reply::Bulk(Some(text)) if text.starts_with(b"ERR ") => {
                                        Reply::Error(String::new())
                                    }
                                    answer => answer,
                                }
                            }
                            other => panic!("batch reply {other:?}"),
                        }
                    } else {
                        let mut command = vec!["EVAL", scripts[op - 1], "1", "k"];
                        command.extend(args.iter().copied());
                        match node.command(&command).await.expect("EVAL") {
                            Reply::Error(_) => Reply::Error(String::new()),
                            answer => answer,
                        }
                    };
                    let kind = node.command(&["TYPE", "k"]).await.expect("TYPE");
                    let held = node.command(&["GET", "k"]).await.expect("GET");
                    outcomes.push((reply, kind, held));
                }
                assert_eq!(
                    outcomes[0], outcomes[1],
                    "op {op} on {state:?}: alone, then batched (natives: {natives:?})"
                );
                compared += 1;
            }
        }
    }
    assert_eq!(compared, 24);
}

/// One call of the batch script: its key, its script's number in the batch, its arguments.
type BatchCall<'a> = (&'a str, usize, Vec<&'a str>);

/// Runs `calls` on `node` as one call of the batch script, and returns each call's answer.
/// The first `together` calls (`SET NX` calls with one ttl, none or two and more) go as the
/// group that the client sends to a node that runs `MSETEX`: `M`, their count, `key token`
/// for each, `NX PX ttl`; the others each with their header, as for a node that runs
/// `DELIFEQ` when `delifeq`.
async fn run_batch(
    node: &quorumlock::testkit::LocalNode,
    calls: &[BatchCall<'_>],
    together: usize,
    delifeq: bool,
) -> Vec<Reply> {
    let (batch, _) = quorumlock::testkit::batch_script();
    let count = calls.len().to_string();
    let natives: &[&str] = if delifeq { &["DELIFEQ"] } else { &[] };
    let headers: Vec<Vec<String>> = calls
        .iter()
        .map(|(_, op, args)| quorumlock::testkit::batch_header(*op, 1, args.len(), natives))
        .collect();
    let mut command = vec!["EVAL", &batch, &count];
    command.extend(calls.iter().map(|(key, ..)| *key));
    command.push(&count);
    let (head, rest) = calls.split_at(together);
    let n = together.to_string();
    if let Some((_, _, args)) = head.first() {
        command.extend(["M", &n]);
        for (key, _, args) in head {
            command.extend([*key, args[0]]);
        }
        command.extend(["NX", "PX", args[1]]);
    }
    for ((_, _, args), header) in rest.iter().zip(&headers[together..]) {
        command.extend(header.iter().map(String::as_str));
        command.extend(args.iter().copied());
    }
    match node.command(&command).await.expect("EVAL batch") {
        // Each call's answer, then the node's marker and quarantine record read back.
        Reply::Array(Some(mut answers)) if answers.len() == calls.len() + 2 => {
            answers.truncate(calls.len());
            answers
        }
        other => panic!("batch reply {other:?}"),
    }
}

/// What `key` holds on `node`: its type, its value if a string, and its ttl rounded up to
/// the next 10 s (`-1` without one, `-2` when missing).
async fn key_state(node: &quorumlock::testkit::LocalNode, key: &str) -> (Reply, Reply, i64) {
    let kind = node.command(&["TYPE", key]).await.expect("TYPE");
    let value = match kind {
        Reply::Status(ref t) if t == "string" => node.command(&["GET", key]).await.expect("GET"),
        _ => Reply::Bulk(None),
    };
    let ttl = match node.command(&["PTTL", key]).await.expect("PTTL") {
        Reply::Integer(ms) if ms > 0 => (ms + 9_999) / 10_000 * 10_000,
        Reply::Integer(ms) => ms,
        other => panic!("PTTL: {other:?}"),
    };
    (kind, value, ttl)
}

/// A batch to compare with its calls one by one: the commands that set its keys up, its
/// calls, and how many of them go as the group.
type Case<'a> = (Vec<Vec<&'a str>>, Vec<BatchCall<'a>>, usize);

/// For a node that runs `MSETEX` (Valkey 9.1), the client sends the `SET NX` calls of one
/// ttl on keys no other call names as a group at the head of a batch, which the batch script
/// sets with one `MSETEX ... NX PX`, all or none, and else one by one. Each batch here
/// answers, and leaves its keys, exactly as its calls made one at a time do: all free, one
/// key taken by another holder, one key of another type, and a group followed by a release
/// and a `SET NX` on keys of their own. Where the server has `MSETEX`, the free keys take one
/// `MSETEX` and no `SET`; elsewhere the group falls back to `SET NX` and answers the same.
#[tokio::test]
async fn set_nx_calls_set_together_answer_as_they_do_alone() {
    let quorum = LocalQuorum::start(1).await.expect("node");
    let node = quorum.node(0);
    let hash = quorumlock::fred::util::sha1_hash("t1");
    let set = |key, token| (key, 1, vec![token, "60000"]);
    let three = || vec![set("a", "t1"), set("b", "t2"), set("c", "t3")];
    // (what the keys hold before, the batch's calls, how many go as the group)
    let cases: Vec<Case> = vec![
        (vec![], three(), 3),
        (vec![vec!["SET", "b", "theirs"]], three(), 3),
        (vec![vec!["RPUSH", "b", "x"]], three(), 3),
        (
            vec![vec!["SET", "d", "t1"]],
            vec![
                set("a", "t1"),
                set("b", "t2"),
                ("d", 6, vec!["t1", &hash]),
                ("c", 1, vec!["t3", "20000"]),
            ],
            2,
        ),
    ];
    let msetex = has_command(node, "MSETEX").await;
    let mut compared = 0;
    for (i, (before, batch, together)) in cases.iter().enumerate() {
        let mut outcomes = Vec::new();
        for batched in [false, true] {
            node.command(&["DEL", "a", "b", "c", "d"])
                .await
                .expect("DEL");
            for command in before {
                node.command(command).await.expect("set up");
            }
            let (msetex_before, set_before) =
                (calls(node, "msetex").await, calls(node, "set").await);
            let answers = if batched {
                run_batch(node, batch, *together, true).await
            } else {
                let mut answers = Vec::new();
                for call in batch {
                    answers.extend(run_batch(node, std::slice::from_ref(call), 0, false).await);
                }
                answers
            };
            let mut states = Vec::new();
            for key in ["a", "b", "c", "d"] {
                states.push(key_state(node, key).await);
            }
            if batched && i == 0 {
                // All free: one MSETEX, no SET, where the server has it.
                let ran = (
                    calls(node, "msetex").await - msetex_before,
                    calls(node, "set").await - set_before,
                );
                assert_eq!(
                    ran,
                    if msetex { (1, 0) } else { (0, 3) },
                    "msetex: {msetex}"
                );
            }
            outcomes.push((answers, states));
        }
        assert_eq!(
            outcomes[0], outcomes[1],
            "case {i}: one by one, then batched"
        );
        compared += 1;
    }
    assert_eq!(compared, cases.len());
}

/// Acquisitions queued for a busy node go out together; where the node runs `MSETEX` (Valkey
/// 9.1, found by the connection's check), the batch sets them with one, each key to its own
/// lock's token and ttl; elsewhere with one `SET NX` each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquisitions_queued_together_take_one_msetex_where_the_node_runs_it() {
    let mut quorum = LocalQuorum::start(3).await.expect("quorum");
    let redlock = connected(builder(&quorum).node_timeout(Duration::from_secs(20))).await;
    let msetex = has_command(quorum.node(0), "MSETEX").await;
    let (msetex_before, set_before) = (
        calls(quorum.node(0), "msetex").await,
        calls(quorum.node(0), "set").await,
    );
    quorum.node_mut(0).freeze().expect("freeze");
    // The first acquisition goes out to node 0 alone and waits there; the others queue
    // behind it, and are decided by nodes 1 and 2.
    let mut locks = Vec::new();
    for i in 0..LOCKS {
        locks.push(redlock.try_lock(&format!("set:{i}")).await.expect("lock"));
    }
    quorum.node_mut(0).resume().expect("resume");
    assert!(redlock.settle(Duration::from_secs(30)).await, "settled");

    let ran = (
        calls(quorum.node(0), "msetex").await - msetex_before,
        calls(quorum.node(0), "set").await - set_before,
    );
    let expected = if msetex { (1, 1) } else { (0, LOCKS as u64) };
    assert_eq!(
        ran, expected,
        "node 0's MSETEX and SET calls (msetex: {msetex})"
    );
    for (i, lock) in locks.iter().enumerate() {
        let key = format!("set:{i}");
        assert_eq!(
            get(quorum.node(0), &key).await.as_deref(),
            Some(lock.token().as_str()),
            "{key} on node 0"
        );
        match quorum.node(0).command(&["PTTL", &key]).await.expect("PTTL") {
            Reply::Integer(ms) => assert!(ms > 0, "{key}: no ttl ({ms})"),
            other => panic!("PTTL {key}: {other:?}"),
        }
    }
    for lock in locks {
        lock.release().await.expect("release");
    }
}

/// A lone `SET NX` vote goes as its own script, which answers exactly as the batch script
/// does for that one call (its answer, the node's marker, its quarantine record) and leaves
/// the key as it does, whatever the key holds and whatever the node holds under its marker
/// and record.
#[tokio::test]
async fn a_lone_set_nx_answers_as_the_batch_of_it() {
    let quorum = LocalQuorum::start(1).await.expect("node");
    let node = quorum.node(0);
    let (batch, _) = quorumlock::testkit::batch_script();
    let alone = quorumlock::testkit::set_nx_alone_script();
    let header = quorumlock::testkit::batch_header(1, 1, 2, &[]);
    let states: [&[&str]; 4] = [
        &[],
        &["SET", "k", "ours"],
        &["SET", "k", "theirs"],
        &["RPUSH", "k", "a list"],
    ];
    let held: [&[&[&str]]; 3] = [
        &[],
        &[&["SET", "quorumlock:node", "abc:7"]],
        &[
            &["SET", "quorumlock:node", "abc:7"],
            &["SET", "quorumlock:quarantine", "abc:1000:10000"],
        ],
    ];
    let mut compared = 0;
    for state in states {
        for setup in held {
            let mut outcomes = Vec::new();
            for batched in [false, true] {
                node.command(&["FLUSHALL"]).await.expect("FLUSHALL");
                for command in setup {
                    node.command(command).await.expect("set up");
                }
                if !state.is_empty() {
                    node.command(state).await.expect("set up");
                }
                let mut command = if batched {
                    vec!["EVAL", &batch, "1", "k", "1"]
                } else {
                    vec!["EVAL", alone, "1", "k"]
                };
                if batched {
                    command.extend(header.iter().map(String::as_str));
                }
                command.extend(["ours", "60000"]);
                let reply = node.command(&command).await.expect("EVAL");
                let kind = node.command(&["TYPE", "k"]).await.expect("TYPE");
                let value = match kind {
                    Reply::Status(ref s) if s == "string" => {
                        node.command(&["GET", "k"]).await.expect("GET")
                    }
                    _ => Reply::Bulk(None),
                };
                outcomes.push((reply, kind, value));
            }
            assert!(
                matches!(&outcomes[0].0, Reply::Array(Some(a)) if a.len() == 3),
                "{:?}",
                outcomes[0]
            );
            assert_eq!(outcomes[0], outcomes[1], "{state:?} with {setup:?}");
            compared += 1;
        }
    }
    assert_eq!(compared, 12);
}
