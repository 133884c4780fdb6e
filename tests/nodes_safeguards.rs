//! Node safeguards against real servers configured each way: quarantine of restarted nodes
//! (and what happens without it), two URLs of one server, replicas, eviction policies, ACL
//! users without the commands the client needs.

mod common;

use std::time::Duration;

use quorumlock::testkit::{LocalQuorum, NodeOptions};
use quorumlock::{ConfigError, Error, NodeErrorKind, RedLock, RedLockBuilder, Retry, Severity};

const TTL: Duration = Duration::from_secs(3);

fn base(q: &LocalQuorum) -> RedLockBuilder {
    RedLock::builder()
        .nodes(q.urls())
        .retry(Retry::none())
        .node_timeout(Duration::from_millis(250))
        .ttl(TTL)
}

/// Waits until `redlock` counts every node (connected, checked, not quarantined).
async fn all_admitted(redlock: &RedLock) {
    common::eventually("every node admitted", || async {
        match redlock.try_lock("probe:admitted").await {
            Ok(lock) => {
                let clean = lock.failures().is_empty() && lock.acquired_on() == redlock.quorum();
                let _ = lock.release().await;
                clean && redlock.connected_nodes() == redlock.nodes()
            }
            Err(_) => false,
        }
    })
    .await;
}

fn kinds(e: &Error) -> Vec<(usize, NodeErrorKind)> {
    match e {
        Error::Taken { failures, .. } | Error::NoQuorum { failures, .. } => {
            failures.iter().map(|f| (f.index, f.kind)).collect()
        }
        _ => Vec::new(),
    }
}

fn sorted(mut kinds: Vec<(usize, NodeErrorKind)>) -> Vec<(usize, NodeErrorKind)> {
    kinds.sort_by_key(|(index, _)| *index);
    kinds
}

/// Young nodes are quarantined until they have been up for longer than the longest ttl,
/// then readmitted; a node restarted later is quarantined again, then readmitted again.
#[tokio::test]
async fn a_restarted_node_is_quarantined_and_then_readmitted() {
    let mut q = LocalQuorum::start_with(3, NodeOptions::volatile())
        .await
        .unwrap();
    // Servers started by someone else than the testkit carry no marker saying that they
    // started empty (design 2.6a).
    for node in q.nodes() {
        let deleted = node.command(&["DEL", "quorumlock:node"]).await.unwrap();
        assert_eq!(deleted, quorumlock::testkit::Reply::Integer(1));
    }
    let redlock = base(&q).connect().await.unwrap();
    // The servers are seconds old, and nothing says what they had: no lock until they are
    // older than 3 s.
    match redlock.try_lock("young").await {
        Err(e @ Error::NoQuorum { .. }) => assert_eq!(
            sorted(kinds(&e)),
            [0, 1, 2].map(|i| (i, NodeErrorKind::Quarantined)),
            "{e:?}"
        ),
        Err(e) => panic!("{e:?}"),
        Ok(_) => panic!("locked on nodes younger than the ttl"),
    }
    all_admitted(&redlock).await;

    q.node_mut(0).kill().await.unwrap();
    q.node_mut(0).restart().await.unwrap();
    common::eventually("node 0 reconnected and quarantined", || async {
        match redlock.try_lock("after-restart").await {
            Ok(lock) => {
                let quarantined = lock
                    .failures()
                    .iter()
                    .any(|f| f.index == 0 && f.kind == NodeErrorKind::Quarantined);
                let _ = lock.release().await;
                quarantined
            }
            Err(_) => false,
        }
    })
    .await;
    let reports = redlock.inspect(Duration::from_millis(100)).await;
    assert!(reports[0].quarantined_for.is_some(), "{:?}", reports[0]);
    assert!(reports[1].quarantined_for.is_none());
    all_admitted(&redlock).await;
}

/// The wall clock's time since the Unix epoch.
fn wall() -> Duration {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("a wall clock after 1970")
}

/// A node's `uptime_in_seconds` is the difference of two wall-clock times, each truncated
/// to the second: a server started at x.9 s and asked at x+1.2 s says 1 s, after 0.3 s. Its
/// quarantine must still last the longest ttl from its start (its kill, at the latest).
/// Counted from the figure as said, it ended up to a second early: a restarted majority
/// voted while a lock it had lost was still valid elsewhere (the local chaos suite saw the
/// double grant).
#[tokio::test]
async fn a_quarantine_lasts_the_longest_ttl_when_the_uptime_rounds_up() {
    let mut q = LocalQuorum::start_with(3, NodeOptions::volatile())
        .await
        .unwrap();
    // Restart node 0 late in a wall-clock second, so that it starts before the next one.
    let (killed, second) = loop {
        while !(850..930).contains(&wall().subsec_millis()) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let second = wall().as_secs();
        let killed = std::time::Instant::now();
        q.node_mut(0).restart().await.unwrap();
        if wall().as_secs() == second {
            break (killed, second);
        }
    };
    // A client that checks it early in the next second, when it says it is up for 1 s.
    while wall() < Duration::from_secs(second + 1) + Duration::from_millis(200) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let redlock = base(&q).connect().await.unwrap();
    let asked = std::time::Instant::now();
    let reports = redlock.inspect(Duration::from_millis(5)).await;
    assert_eq!(
        reports[0].uptime,
        Some(Duration::from_secs(1)),
        "the case under test: {:?}",
        reports[0]
    );
    let left = reports[0].quarantined_for.expect("node 0 is quarantined");
    assert!(
        asked + left >= killed + TTL,
        "quarantine over {:?} after the kill, before the {TTL:?} ttl",
        (asked + left) - killed
    );
}

/// The case the quarantine exists for. A holds a lock on nodes 0 and 1 (node 2 is busy with
/// another key); node 2's key goes away and node 0 restarts empty. A client without the
/// safeguard then gets the same lock from nodes 0 and 2 while A's is still valid; a client
/// with it does not.
#[tokio::test]
async fn quarantine_keeps_a_lock_exclusive_across_a_restart() {
    let mut q = LocalQuorum::start_with(3, NodeOptions::volatile())
        .await
        .unwrap();
    let a = common::connected(base(&q).quarantine(false)).await;
    let guarded = base(&q).connect().await.unwrap();
    all_admitted(&guarded).await;

    q.node(2)
        .command(&["SET", "ledger", "another-owner", "PX", "60000"])
        .await
        .unwrap();
    let held = a.try_lock("ledger").await.unwrap();
    // Granted at the quorum: node 2's SET NX may still be on its way, and after the DEL below
    // it would set A's key there.
    assert!(a.settle(Duration::from_secs(10)).await);
    q.node(2).command(&["DEL", "ledger"]).await.unwrap();
    q.node_mut(0).kill().await.unwrap();
    q.node_mut(0).restart().await.unwrap();

    // With the safeguard: node 0 is quarantined, so only node 2 says yes.
    common::eventually("the guarded client reconnected to node 0", || async {
        guarded.connected_nodes() == 3
    })
    .await;
    match guarded.try_lock("ledger").await {
        Err(e) => assert!(
            kinds(&e).contains(&(0, NodeErrorKind::Quarantined)),
            "{e:?}"
        ),
        Ok(_) => panic!("the guarded client took a lock that A still holds"),
    }
    assert!(
        held.is_valid(),
        "the check above came too late to prove anything"
    );

    // Without it: a second holder while A's lock is valid.
    let unguarded = common::connected(base(&q).quarantine(false)).await;
    let second = unguarded.try_lock("ledger").await;
    assert!(
        held.is_valid(),
        "the check above came too late to prove anything"
    );
    assert!(
        second.is_ok(),
        "without quarantine the restarted node grants the lock twice: {second:?}"
    );
}

/// Two URLs of one server that only the server can show: node 0 listens on 127.0.0.1 and
/// on ::1 (two addresses that can be two servers, so `build()` accepts them).
#[tokio::test]
async fn two_urls_of_one_server_are_refused() {
    let both = NodeOptions {
        extra_args: ["--bind", "127.0.0.1", "::1"].map(String::from).to_vec(),
        ..NodeOptions::default()
    };
    let q = LocalQuorum::start_with(2, both)
        .await
        .expect("redis-server on 127.0.0.1 and ::1 (is IPv6 loopback configured?)");
    let port = q.node(0).port();
    let urls = vec![
        format!("redis://127.0.0.1:{port}"),
        q.urls()[1].clone(),
        format!("redis://[::1]:{port}"),
    ];
    match RedLock::builder().nodes(urls.clone()).connect().await {
        Err(ConfigError::SameServer { first, second, .. }) => assert_eq!((first, second), (0, 2)),
        other => panic!("{other:?}"),
    }
    // A client built without waiting never counts the repeat either.
    let redlock = common::connected(
        RedLock::builder()
            .nodes(urls)
            .quarantine(false)
            .retry(Retry::none()),
    )
    .await;
    let lock = redlock.try_lock("twice").await.unwrap();
    assert_eq!(
        sorted(lock.failures().iter().map(|f| (f.index, f.kind)).collect()),
        [(2, NodeErrorKind::SameServer)],
        "{:?}",
        lock.failures()
    );
    lock.release().await.unwrap();
}

#[tokio::test]
async fn a_replica_never_counts() {
    let q = LocalQuorum::start(3).await.unwrap();
    let primary = q.node(0).port().to_string();
    q.node(2)
        .command(&["REPLICAOF", "127.0.0.1", &primary])
        .await
        .unwrap();
    let redlock = common::connected(base(&q).quarantine(false)).await;
    common::eventually("node 2 reported as a replica", || async {
        match redlock.try_lock("replicated").await {
            Ok(lock) => {
                let seen = lock
                    .failures()
                    .iter()
                    .any(|f| f.index == 2 && f.kind == NodeErrorKind::Replica);
                let _ = lock.release().await;
                seen
            }
            Err(_) => false,
        }
    })
    .await;
    let reports = redlock.inspect(Duration::from_millis(100)).await;
    assert_eq!(reports[2].role.as_deref(), Some("replica"));
    assert_eq!(reports[2].verdict(), Some(Severity::Unsafe));
    q.node(2)
        .command(&["REPLICAOF", "NO", "ONE"])
        .await
        .unwrap();
}

#[tokio::test]
async fn an_evicting_policy_is_reported() {
    let options = NodeOptions {
        extra_args: vec![
            "--maxmemory".into(),
            "100mb".into(),
            "--maxmemory-policy".into(),
            "allkeys-lru".into(),
        ],
        ..NodeOptions::default()
    };
    let q = LocalQuorum::start_with(1, options).await.unwrap();
    let reports = base(&q)
        .quarantine(false)
        .inspect(Duration::from_millis(100))
        .await
        .unwrap();
    let report = &reports[0];
    assert_eq!(report.maxmemory_policy.as_deref(), Some("allkeys-lru"));
    assert_eq!(report.verdict(), Some(Severity::Unsafe));
    assert!(
        report
            .findings
            .iter()
            .any(|f| f.severity == Severity::Unsafe && f.message.contains("allkeys-lru")),
        "{:?}",
        report.findings
    );
}

#[tokio::test]
async fn an_acl_user_without_scripts_or_info_is_reported_by_name_and_as_unknown() {
    let q = LocalQuorum::start(1).await.unwrap();
    for (user, denied) in [
        ("noscripts", &["-eval", "-evalsha"][..]),
        ("noinfo", &["-info", "-config"][..]),
    ] {
        let mut args = vec!["ACL", "SETUSER", user, "on", ">pw", "~*", "+@all"];
        args.extend_from_slice(denied);
        q.node(0).command(&args).await.unwrap();
    }
    let port = q.node(0).port();
    let inspect = |user: &'static str| async move {
        RedLock::builder()
            .node(format!("redis://{user}:pw@127.0.0.1:{port}"))
            .quarantine(false)
            .inspect(Duration::from_millis(100))
            .await
    };
    let report = inspect("noscripts").await.unwrap().remove(0);
    assert_eq!(report.refused_commands, ["EVALSHA", "EVAL"]);
    assert_eq!(report.verdict(), Some(Severity::Unsafe));

    let report = inspect("noinfo").await.unwrap().remove(0);
    assert!(report.reachable);
    assert_eq!(report.run_id, None, "unknown, not guessed");
    assert_eq!(report.maxmemory_policy, None);
    assert_eq!(report.appendfsync, None);
    assert_eq!(
        report.verdict(),
        Some(Severity::Unknown),
        "{:?}",
        report.findings
    );
}

#[tokio::test]
async fn inspecting_writes_nothing() {
    let q = LocalQuorum::start(1).await.unwrap();
    let before = common::calls(q.node(0), "set").await;
    let reports = base(&q)
        .quarantine(false)
        .inspect(Duration::from_millis(100))
        .await
        .unwrap();
    assert!(reports[0].reachable);
    // The one key is the marker the testkit wrote when it started the server.
    let info = q.node(0).command(&["DBSIZE"]).await.unwrap();
    assert_eq!(info, quorumlock::testkit::Reply::Integer(1));
    // The permission probe ran (SET ... XX on an absent lock key and fencing counter) and
    // changed nothing; twice: when the connection was checked, and for the report. The
    // report's also checks a leader identity key (one more SET ... XX).
    assert_eq!(common::calls(q.node(0), "set").await, before + 5);
    let cached = q.node(0).command(&["INFO", "memory"]).await.unwrap();
    let text = match cached {
        quorumlock::testkit::Reply::Bulk(Some(b)) => String::from_utf8(b).unwrap(),
        other => panic!("{other:?}"),
    };
    assert!(
        text.lines().any(|l| l == "number_of_cached_scripts:0"),
        "a script was cached"
    );
}

/// Creates ACL user `name` (password `pw`) with `rules` on every node of `q`, and returns
/// the nodes' URLs for that user.
async fn acl_user(q: &LocalQuorum, name: &str, rules: &[&str]) -> Vec<String> {
    let mut args = vec!["ACL", "SETUSER", name, "on", ">pw", "~*", "&*"];
    args.extend_from_slice(rules);
    for node in q.nodes() {
        let ok = node.command(&args).await.unwrap();
        assert_eq!(ok.as_str(), Some("OK"), "{args:?}");
    }
    q.nodes()
        .iter()
        .map(|n| format!("redis://{name}:pw@127.0.0.1:{}", n.port()))
        .collect()
}

/// The failures of an error, sorted by node, as (node, kind).
fn named(failures: &[quorumlock::NodeError]) -> Vec<(usize, NodeErrorKind)> {
    let mut named: Vec<_> = failures.iter().map(|f| (f.index, f.kind)).collect();
    named.sort_unstable_by_key(|(i, _)| *i);
    named
}

/// A user allowed every command the client sends itself and every command its scripts run
/// but `MGET`, with which the fencing scripts read the counters. The connection check finds
/// it (the commands it probes are those the scripts call, see `probe.rs`), so no lock is
/// granted whose fencing token could never be recorded. Before, the check passed, the lock
/// was granted, and `fencing_token()` failed with a bare `NoQuorum` of server errors.
#[tokio::test]
async fn a_command_that_only_a_script_runs_is_checked_too() {
    let q = LocalQuorum::start(3).await.unwrap();
    let allowed = [
        "-@all",
        "+set",
        "+get",
        "+del",
        "+exists",
        "+pexpire",
        "+eval",
        "+evalsha",
        "+script|load",
        "+ping",
        "+hello",
        "+auth",
        "+info",
        "+time",
        "+config|get",
        "+client|setname",
        "+client|id",
        "+select",
    ];
    let urls = acl_user(&q, "nomget", &allowed).await;
    let redlock = common::connected(common::builder_for(urls)).await;
    match redlock.try_lock("invoice:42").await {
        Err(Error::NoQuorum {
            agreed: 0,
            failures,
            ..
        }) => {
            assert_eq!(
                named(&failures),
                [
                    (0, NodeErrorKind::Auth),
                    (1, NodeErrorKind::Auth),
                    (2, NodeErrorKind::Auth)
                ],
                "{failures:?}"
            );
            for f in &failures {
                assert!(
                    f.message.contains("refuses what the client needs (MGET)"),
                    "{f}"
                );
            }
        }
        Ok(lock) => {
            let token = lock.fencing_token().await;
            panic!("locked on nodes that refuse MGET; its fencing token: {token:?}")
        }
        Err(other) => panic!("{other:?}"),
    }
}

/// A user that may `SET` but not run scripts, on nodes the client has not connected to yet:
/// the attempt fails (the nodes' checks refuse them), and no `SET NX` reaches a node before
/// its check did (it used to, and its key blocked the resource for the whole ttl). Several
/// fresh clients, since each one's first attempt races its nodes' first checks.
#[tokio::test]
async fn nothing_is_written_to_a_node_before_its_check_refuses_it() {
    let q = LocalQuorum::start(3).await.unwrap();
    let urls = acl_user(&q, "noscripts", &["+@all", "-eval", "-evalsha"]).await;
    for run in 0..4 {
        let redlock = RedLock::builder()
            .nodes(urls.clone())
            .retry(Retry::none())
            .node_timeout(Duration::from_millis(250))
            .quarantine(false)
            .build()
            .unwrap();
        let resource = format!("refused-{run}");
        let attempt = redlock.try_lock(&resource).await;
        assert!(redlock.settle(Duration::from_secs(10)).await);
        for (i, node) in q.nodes().iter().enumerate() {
            assert_eq!(
                common::get(node, &resource).await,
                None,
                "run {run}: a key on node {i}, whose check refuses the user"
            );
        }
        match attempt {
            Err(Error::NoQuorum {
                agreed: 0,
                failures,
                ..
            }) => {
                let named = named(&failures);
                let nodes: Vec<usize> = named.iter().map(|(i, _)| *i).collect();
                assert_eq!(nodes, [0, 1, 2], "run {run}: {failures:?}");
                // The round is lost at the second refusal; the third node may then still be
                // connecting or being checked.
                let refused = named
                    .iter()
                    .filter(|(_, k)| *k == NodeErrorKind::Auth)
                    .count();
                assert!(refused >= 2, "run {run}: {failures:?}");
                for (_, kind) in &named {
                    assert!(
                        matches!(
                            kind,
                            NodeErrorKind::Auth | NodeErrorKind::Unchecked | NodeErrorKind::Io
                        ),
                        "run {run}: {failures:?}"
                    );
                }
            }
            other => panic!("run {run}: {other:?}"),
        }
    }
}
