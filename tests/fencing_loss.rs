//! Fencing tokens across nodes that lose data (design 2.6a): a token is greater than every
//! token handed out before for its resource, whatever the nodes' persistence, across real
//! restarts; where that cannot be told, `fencing_token()` refuses with
//! `Error::FencingUnavailable`, naming the nodes, and only until the nodes are back.
//!
//! Each scenario runs on 3 and on 5 nodes, with a client whose quarantine is on (the
//! default) and short: 1 s.

mod common;

use std::time::Duration;

use quorumlock::testkit::{LocalQuorum, NodeOptions, Reply};
use quorumlock::{Error, NodeErrorKind, RedLock, Retry};

const TTL: Duration = Duration::from_secs(1);

/// A client with quarantine on, its longest ttl `TTL`, and a few seconds of retries.
async fn client(q: &LocalQuorum) -> RedLock {
    let redlock = RedLock::builder()
        .nodes(q.urls())
        .ttl(TTL)
        .max_ttl(TTL)
        .node_timeout(Duration::from_millis(250))
        .retry(
            Retry::within(Duration::from_secs(8))
                .delay(Duration::from_millis(50))
                .jitter(Duration::from_millis(50)),
        )
        .build()
        .expect("valid configuration");
    redlock.wait_for_nodes(Duration::from_secs(5)).await;
    redlock
}

/// Locks `resource` (waiting out quarantines), asks its token, releases.
async fn token(redlock: &RedLock, resource: &str) -> Result<u64, Error> {
    let lock = redlock
        .lock(resource)
        .await
        .expect("the lock itself is granted");
    let token = lock.fencing_token().await;
    let _ = lock.release().await;
    token
}

/// Asks for tokens until one is handed out (the nodes are re-seeded in the background once
/// their quarantine ends); every refusal on the way must be `FencingUnavailable`.
async fn next_token(redlock: &RedLock, resource: &str) -> u64 {
    for _ in 0..200 {
        match token(redlock, resource).await {
            Ok(token) => return token,
            Err(Error::FencingUnavailable { .. }) => {}
            Err(e) => panic!("a refusal other than FencingUnavailable: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no token within 10 s");
}

/// The fencing counter of `resource` on node `n`.
async fn counter(q: &LocalQuorum, n: usize, resource: &str) -> Option<u64> {
    let key = format!("quorumlock:fence:{resource}");
    common::get(q.node(n), &key)
        .await
        .map(|v| v.parse().expect("a number"))
}

/// (a) A minority of the nodes that recorded a token restarts empty while the nodes that
/// missed it come back: the majority a later holder reaches may share only the empty node
/// with the one that recorded. Before data-loss detection, the next token repeated.
async fn a_node_that_restarts_empty_never_lets_a_token_repeat(n: usize) {
    let mut q = LocalQuorum::start_with(n, NodeOptions::volatile())
        .await
        .expect("servers");
    let quorum = n / 2 + 1;
    let minority = n - quorum; // nodes down while A records: quorum..n
    let redlock = client(&q).await;
    for i in quorum..n {
        q.node_mut(i).kill().await.expect("kill");
    }
    let first = token(&redlock, "invoice:42").await.expect("A's token");
    for i in 0..quorum {
        assert_eq!(counter(&q, i, "invoice:42").await, Some(first), "node {i}");
    }
    // A minority of the recording nodes restarts empty, the others come back empty, and the
    // rest of the recording nodes (one, at least) becomes unreachable.
    let lost = minority;
    for i in 0..lost {
        q.node_mut(i).restart().await.expect("restart empty");
    }
    for i in quorum..n {
        q.node_mut(i).restart().await.expect("back, empty");
    }
    let keeper = lost; // the recording nodes from here on are frozen
    for i in keeper..quorum {
        q.node_mut(i).freeze().expect("freeze");
    }
    // The lock works (quarantine ends after 1 s), and the token is above A's, or refused.
    match token(&redlock, "invoice:42").await {
        Ok(second) => assert!(second > first, "token {second} after {first}"),
        Err(Error::FencingUnavailable {
            failures, needed, ..
        }) => {
            assert_eq!(needed, quorum);
            // Nodes that lost data are named as such.
            assert!(
                failures.iter().any(|f| f.kind == NodeErrorKind::LostData),
                "{failures:?}"
            );
        }
        Err(e) => panic!("unexpected: {e}"),
    }
    // Once the frozen nodes are back, tokens are handed out again, above A's.
    for i in keeper..quorum {
        q.node_mut(i).resume().expect("resume");
    }
    let second = next_token(&redlock, "invoice:42").await;
    assert!(second > first, "token {second} after {first}");
}

#[tokio::test]
async fn a_node_that_restarts_empty_never_lets_a_token_repeat_3() {
    a_node_that_restarts_empty_never_lets_a_token_repeat(3).await;
}

#[tokio::test]
async fn a_node_that_restarts_empty_never_lets_a_token_repeat_5() {
    a_node_that_restarts_empty_never_lets_a_token_repeat(5).await;
}

/// (b) A rolling restart of volatile nodes, one at a time, each back before the next goes,
/// and no fencing traffic meanwhile: every counter is gone, yet the next token is above the
/// last one. Checked with the client that ran throughout and with a client started after.
async fn a_rolling_restart_of_volatile_nodes_never_lets_a_token_repeat(n: usize) {
    let mut q = LocalQuorum::start_with(n, NodeOptions::volatile())
        .await
        .expect("servers");
    let redlock = client(&q).await;
    let before = token(&redlock, "rolling").await.expect("token before");
    for i in 0..n {
        q.node_mut(i).restart().await.expect("restart");
        assert_eq!(
            counter(&q, i, "rolling").await,
            None,
            "node {i} came back empty"
        );
    }
    let after = next_token(&redlock, "rolling").await;
    assert!(after > before, "token {after} after {before}");
    // A client that did not see the restarts.
    for i in 0..n {
        q.node_mut(i).restart().await.expect("restart");
    }
    let newcomer = client(&q).await;
    let last = next_token(&newcomer, "rolling").await;
    assert!(last > after, "token {last} after {after}");
}

#[tokio::test]
async fn a_rolling_restart_of_volatile_nodes_never_lets_a_token_repeat_3() {
    a_rolling_restart_of_volatile_nodes_never_lets_a_token_repeat(3).await;
}

#[tokio::test]
async fn a_rolling_restart_of_volatile_nodes_never_lets_a_token_repeat_5() {
    a_rolling_restart_of_volatile_nodes_never_lets_a_token_repeat(5).await;
}

/// (c) Nodes that ran without persisting every write are restarted, one at a time, with
/// `appendonly yes` and `appendfsync always`: they load only their (new, empty) AOF and come
/// back empty, now persisting every write. Their persistence says nothing of what they lost;
/// the marker does.
async fn switching_persistence_on_by_a_restart_never_lets_a_token_repeat(n: usize) {
    let mut q = LocalQuorum::start_with(n, NodeOptions::volatile())
        .await
        .expect("servers");
    let redlock = client(&q).await;
    let before = token(&redlock, "invoice:42").await.expect("token before");
    for i in 0..n {
        q.node_mut(i)
            .restart_with(NodeOptions::persistent())
            .await
            .expect("restart persistent");
        let appendfsync = q.node(i).command(&["CONFIG", "GET", "appendfsync"]).await;
        assert!(
            matches!(&appendfsync, Ok(Reply::Array(Some(v))) if v.get(1).and_then(Reply::as_str) == Some("always")),
            "node {i}: {appendfsync:?}"
        );
    }
    let after = next_token(&redlock, "invoice:42").await;
    assert!(after > before, "token {after} after {before}");
}

#[tokio::test]
async fn switching_persistence_on_by_a_restart_never_lets_a_token_repeat_3() {
    switching_persistence_on_by_a_restart_never_lets_a_token_repeat(3).await;
}

#[tokio::test]
async fn switching_persistence_on_by_a_restart_never_lets_a_token_repeat_5() {
    switching_persistence_on_by_a_restart_never_lets_a_token_repeat(5).await;
}

/// A node that comes back empty is quarantined whatever its persistence: before data-loss
/// detection, nodes restarted empty with `appendfsync always` counted at once, and a lock
/// held on a bare majority was granted a second time.
#[tokio::test]
async fn a_node_back_empty_is_quarantined_even_if_it_persists_every_write() {
    let mut q = LocalQuorum::start_with(3, NodeOptions::volatile())
        .await
        .expect("servers");
    let redlock = client(&q).await;
    q.node_mut(2).kill().await.expect("kill");
    let lock = redlock.try_lock("doc:1").await.expect("first holder");
    assert_eq!(lock.acquired_on(), 2);
    for i in [0, 2] {
        q.node_mut(i)
            .restart_with(NodeOptions::persistent())
            .await
            .expect("restart");
    }
    // Nodes 0 and 2 are empty and persist every write now: a second holder would need them.
    let other = RedLock::builder()
        .nodes(q.urls())
        .ttl(TTL)
        .max_ttl(Duration::from_secs(30))
        .node_timeout(Duration::from_millis(250))
        .retry(Retry::none())
        .build()
        .expect("valid configuration");
    other.wait_for_nodes(Duration::from_secs(5)).await;
    match other.try_lock("doc:1").await {
        Err(Error::NoQuorum { failures, .. }) => {
            let mut kinds: Vec<_> = failures.iter().map(|f| (f.index, f.kind)).collect();
            kinds.sort_unstable_by_key(|(i, _)| *i);
            assert_eq!(
                kinds,
                [
                    (0, NodeErrorKind::Quarantined),
                    (2, NodeErrorKind::Quarantined)
                ],
                "{failures:?}"
            );
        }
        other => panic!("a second holder, or another refusal: {other:?}"),
    }
    drop(lock);
}
