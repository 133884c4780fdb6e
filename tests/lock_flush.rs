//! A `FLUSHALL` under clients that are already connected (design 2.6a). A flush breaks no
//! connection, so no new check sees it: every command that carries votes reads back, in the
//! same atomic step, the node's marker and quarantine record, and its votes count only if
//! the node still holds what its check found. Before that, a client connected before the
//! flush counted the flushed nodes' votes at once and was granted a lock that another client
//! held (the model checker found it: docs/verification.md).
//!
//! Three nodes, pre-marked by the testkit; quarantine on, longest ttl `TTL`.

mod common;

use std::time::Duration;

use common::get;
use quorumlock::testkit::LocalQuorum;
use quorumlock::{Error, NodeErrorKind, RedLock, Retry};

const TTL: Duration = Duration::from_secs(1);

/// A connected client with quarantine on and `retry`.
async fn client(q: &LocalQuorum, retry: Retry) -> RedLock {
    let redlock = RedLock::builder()
        .nodes(q.urls())
        .ttl(TTL)
        .max_ttl(TTL)
        .node_timeout(Duration::from_millis(250))
        .retry(retry)
        .build()
        .expect("valid configuration");
    redlock.wait_for_nodes(Duration::from_secs(5)).await;
    // Pre-marked nodes: every node counts from the start.
    assert_eq!(redlock.quarantine_left(), Some(Duration::ZERO));
    redlock
}

/// The nodes an attempt's error names as failed, with their kinds, sorted.
fn failed(error: &Error) -> Vec<(usize, NodeErrorKind)> {
    let failures = match error {
        Error::NoQuorum { failures, .. } | Error::Taken { failures, .. } => failures,
        other => panic!("not a refusal of the quorum: {other}"),
    };
    let mut failed: Vec<_> = failures.iter().map(|f| (f.index, f.kind)).collect();
    failed.sort_by_key(|(index, _)| *index);
    failed
}

/// Flushes nodes 0 and 1 (a majority of three).
async fn flush_majority(q: &LocalQuorum) {
    for node in &q.nodes()[..2] {
        node.command(&["FLUSHALL"]).await.expect("FLUSHALL");
    }
}

/// Waits, five seconds at most, until the flushed nodes keep a quarantine record: written by
/// the check that the refused votes started.
async fn until_recorded(q: &LocalQuorum) {
    for _ in 0..250 {
        let mut recorded = 0;
        for node in &q.nodes()[..2] {
            recorded += usize::from(get(node, "quorumlock:quarantine").await.is_some());
        }
        if recorded == 2 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the flushed nodes keep no quarantine record");
}

/// Asserts that the attempt was refused for the flushed nodes: it failed on one of nodes 0
/// and 1 at least (the round may be decided without the other's answer), quarantined or
/// being checked again, and on no other node.
fn refused_by_the_flushed_nodes(error: &Error) {
    let failed = failed(error);
    assert!(!failed.is_empty(), "{error}");
    for (index, kind) in failed {
        assert!(index < 2, "{error}");
        assert!(
            matches!(kind, NodeErrorKind::Quarantined | NodeErrorKind::Unchecked),
            "{error}"
        );
    }
}

#[tokio::test]
async fn a_client_connected_before_a_flush_is_not_granted_a_lock_held_elsewhere() {
    let q = LocalQuorum::start(3).await.expect("nodes");
    let (a, b) = (
        client(&q, Retry::none()).await,
        client(&q, Retry::none()).await,
    );
    let held = a.try_lock("job").await.expect("a's lock");
    flush_majority(&q).await;
    // Before: b counted nodes 0 and 1 at once and held "job" beside a.
    let Err(refused) = b.try_lock("job").await else {
        panic!("b is granted the lock a holds");
    };
    refused_by_the_flushed_nodes(&refused);
    until_recorded(&q).await;
    // The holder itself sees the flush at its next vote too.
    let Err(again) = a.try_lock("job").await else {
        panic!("a is granted its own lock twice");
    };
    refused_by_the_flushed_nodes(&again);
    drop(held);
}

#[tokio::test]
async fn a_client_connected_before_a_flush_gets_the_lock_once_the_quarantine_is_over() {
    let q = LocalQuorum::start(3).await.expect("nodes");
    let a = client(&q, Retry::none()).await;
    let b = client(
        &q,
        Retry::within(Duration::from_secs(10))
            .delay(Duration::from_millis(50))
            .jitter(Duration::from_millis(50)),
    )
    .await;
    a.try_lock("job")
        .await
        .expect("a's lock")
        .release()
        .await
        .expect("release");
    flush_majority(&q).await;
    // A majority of three takes a flushed node: they count again for b once their
    // quarantine, kept on them, is over.
    let lock = b.lock("job").await.expect("b's lock after the quarantine");
    lock.release().await.expect("release");
}

#[tokio::test]
async fn a_permit_is_not_granted_past_the_limit_after_a_flush() {
    let q = LocalQuorum::start(3).await.expect("nodes");
    let (a, b) = (
        client(&q, Retry::none()).await,
        client(&q, Retry::none()).await,
    );
    let (sa, sb) = (
        a.semaphore("pool", 1).expect("semaphore"),
        b.semaphore("pool", 1).expect("semaphore"),
    );
    let permit = sa.try_acquire().await.expect("a's permit");
    flush_majority(&q).await;
    let Err(refused) = sb.try_acquire().await else {
        panic!("b is granted a second permit of one");
    };
    refused_by_the_flushed_nodes(&refused);
    until_recorded(&q).await;
    drop(permit);
}

#[tokio::test]
async fn a_writer_is_not_granted_beside_a_reader_after_a_flush() {
    let q = LocalQuorum::start(3).await.expect("nodes");
    let (a, b) = (
        client(&q, Retry::none()).await,
        client(&q, Retry::none()).await,
    );
    let reader = a
        .rw_lock("doc")
        .expect("rw lock")
        .try_read()
        .await
        .expect("a reads");
    flush_majority(&q).await;
    let Err(refused) = b.rw_lock("doc").expect("rw lock").try_write().await else {
        panic!("b writes while a reads");
    };
    refused_by_the_flushed_nodes(&refused);
    until_recorded(&q).await;
    drop(reader);
}

/// The node's clock, in milliseconds (`TIME`).
async fn node_ms(node: &quorumlock::testkit::LocalNode) -> u64 {
    let reply = node.command(&["TIME"]).await.expect("TIME");
    let quorumlock::testkit::Reply::Array(Some(parts)) = reply else {
        panic!("TIME: {reply:?}");
    };
    let part = |i: usize| -> u64 {
        parts[i]
            .as_str()
            .expect("a number")
            .parse()
            .expect("a number")
    };
    part(0) * 1_000 + part(1) / 1_000
}

/// A node flushed again after the check that found it without a marker, before its
/// quarantine ended: the re-seed due at that end must not write a marker over the new loss
/// (that would cancel the quarantine of the flush, which took keys still valid elsewhere).
/// The node is checked again instead, and re-seeded only after the flush's own quarantine.
/// Before, the re-seed wrote its marker and the node kept no record of the flush at all.
#[tokio::test]
async fn a_node_flushed_again_before_its_re_seed_is_quarantined_from_the_second_flush() {
    let q = LocalQuorum::start(3).await.expect("nodes");
    let node = q.node(0);
    node.command(&["FLUSHALL"]).await.expect("FLUSHALL");
    let c = client(&q, Retry::none()).await;
    let first = get(node, "quorumlock:quarantine")
        .await
        .expect("the check records the first loss");
    assert_eq!(
        get(node, "quorumlock:node").await,
        None,
        "not re-seeded yet"
    );
    let flushed_at = node_ms(node).await;
    node.command(&["FLUSHALL"]).await.expect("FLUSHALL");
    // The re-seed writes a marker at last: after the second flush's own quarantine.
    for _ in 0..500 {
        if get(node, "quorumlock:node").await.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        get(node, "quorumlock:node").await.is_some(),
        "node 0 was never re-seeded"
    );
    let record = get(node, "quorumlock:quarantine")
        .await
        .expect("the second flush's quarantine is recorded");
    assert_ne!(record, first);
    let start: u64 = record
        .split(':')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("RUN_ID:START_MS:WAIT_MS");
    assert!(
        start >= flushed_at,
        "the record {record} starts before the flush at {flushed_at}"
    );
    drop(c);
}
