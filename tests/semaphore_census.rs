//! `Semaphore::holders`, the census of a semaphore's holders, on real servers: every permit
//! with its slot, the SHA1 of its token, its nodes and its ttl by the nodes' clocks; claims
//! on a minority; the ttl a majority still records; nothing changed on any node (expired
//! claims skipped, not dropped); the wrong kind of key; too few nodes.

mod common;

use std::time::Duration;

use common::client;
use common::primitives::{census, settled_permit, sha1, snapshot, write_claim};
use quorumlock::testkit::{LocalQuorum, Reply};
use quorumlock::{Error, FoundKind};

#[tokio::test]
async fn every_permit_is_listed_with_its_slot_hash_nodes_and_ttl() {
    let q = LocalQuorum::start(3).await.unwrap();
    let (a, b) = (client(&q).await, client(&q).await);
    let ttl = Duration::from_secs(10);
    // Every node has the first claim before the second is asked for, so that every node
    // records the same slots.
    let first = settled_permit(&a, "exports", 3, ttl).await;
    let second = settled_permit(&b, "exports", 3, ttl).await;
    let before = snapshot(&q).await;

    let holders = census(&q, "exports", 3).await;
    let mut expected = vec![
        (first.slot(), sha1(first.token().as_str())),
        (second.slot(), sha1(second.token().as_str())),
    ];
    expected.sort();
    let seen: Vec<(u32, String)> = holders
        .iter()
        .map(|h| (h.slot, h.token_sha1.clone()))
        .collect();
    assert_eq!(seen, expected, "by slot, hashed");
    for h in &holders {
        assert_eq!(h.nodes, 3, "{h:?}");
        assert_eq!(h.token_sha1.len(), 40);
        assert!(
            h.ttl > Duration::from_secs(8) && h.ttl <= ttl,
            "the ttl left by the nodes' clocks: {h:?}"
        );
    }
    let text = format!("{holders:?}");
    assert!(
        !text.contains(first.token().as_str()),
        "the token stays secret"
    );
    assert_eq!(snapshot(&q).await, before, "read-only");

    first.release().await.unwrap();
    assert!(a.settle(Duration::from_secs(5)).await);
    let holders = census(&q, "exports", 3).await;
    assert_eq!(holders.len(), 1, "{holders:?}");
    assert_eq!(holders[0].slot, second.slot());
    second.release().await.unwrap();
    assert!(b.settle(Duration::from_secs(5)).await);
    assert_eq!(census(&q, "exports", 3).await, []);
    // No key at all: no holder either.
    assert_eq!(census(&q, "unused", 2).await, []);
}

/// The ttl is how long a majority still records the claim: with 3 nodes the second longest
/// of the ttls, not the shortest, nor the median of the nodes that record it, nor the
/// longest; zero on a minority. Expired claims are not listed, and stay on the nodes.
#[tokio::test]
async fn the_ttl_is_what_a_majority_still_records_and_expired_claims_stay() {
    let q = LocalQuorum::start(3).await.unwrap();
    // On all three, with 30, 20 and 10 s left: 20 s.
    for (node, s) in q.nodes().iter().zip([30, 20, 10]) {
        write_claim(node, "jobs", 4, "1:everywhere", s * 1000).await;
    }
    // On two, with 40 and 10 s left: 10 s (their median would be 25 s).
    for (node, s) in q.nodes().iter().zip([40, 10]) {
        write_claim(node, "jobs", 4, "2:two-nodes", s * 1000).await;
    }
    // On one: listed, with no ttl.
    write_claim(q.node(2), "jobs", 4, "3:one-node", 50_000).await;
    // Expired everywhere.
    for node in q.nodes() {
        write_claim(node, "jobs", 4, "0:expired", -1000).await;
    }
    let before = snapshot(&q).await;

    let holders = census(&q, "jobs", 4).await;
    let seen: Vec<(u32, String, usize)> = holders
        .iter()
        .map(|h| (h.slot, h.token_sha1.clone(), h.nodes))
        .collect();
    assert_eq!(
        seen,
        [
            (1, sha1("everywhere"), 3),
            (2, sha1("two-nodes"), 2),
            (3, sha1("one-node"), 1),
        ]
    );
    let secs = |h: usize| holders[h].ttl.as_secs_f64();
    assert!(secs(0) > 18.0 && secs(0) <= 20.0, "{holders:?}");
    assert!(secs(1) > 8.0 && secs(1) <= 10.0, "{holders:?}");
    assert_eq!(holders[2].ttl, Duration::ZERO, "{holders:?}");
    // Nothing dropped: the expired claim is still on every node.
    assert_eq!(snapshot(&q).await, before);
    for node in q.nodes() {
        let score = node
            .command(&["ZSCORE", "jobs", "0:expired"])
            .await
            .unwrap();
        assert!(matches!(score, Reply::Bulk(Some(_))), "{score:?}");
    }
}

#[tokio::test]
async fn another_kind_of_key_is_a_kind_mismatch_and_too_few_nodes_no_quorum() {
    let mut q = LocalQuorum::start(3).await.unwrap();
    let redlock = client(&q).await;
    let lock = redlock.lock("report").await.unwrap();
    match redlock.semaphore("report", 2).unwrap().holders().await {
        Err(Error::KindMismatch { resource, found }) => {
            assert_eq!(resource, "report");
            assert_eq!(found, FoundKind::Other);
        }
        other => panic!("a lock's key read as a semaphore: {other:?}"),
    }
    lock.release().await.unwrap();

    let permit = settled_permit(&redlock, "exports", 2, Duration::from_secs(10)).await;
    match redlock.semaphore("exports", 3).unwrap().holders().await {
        Err(Error::KindMismatch { found, .. }) => {
            assert_eq!(found, FoundKind::Semaphore { permits: 2 });
        }
        other => panic!("a semaphore of 2 read as one of 3: {other:?}"),
    }

    // One node down: a majority still answers.
    q.node_mut(0).kill().await.unwrap();
    let sem = redlock.semaphore("exports", 2).unwrap();
    let holders = sem.holders().await.unwrap();
    assert_eq!(holders.len(), 1, "{holders:?}");
    assert_eq!(holders[0].nodes, 2);
    // Two down: too few to tell.
    q.node_mut(1).kill().await.unwrap();
    match sem.holders().await {
        Err(Error::NoQuorum { needed, agreed, .. }) => assert_eq!((needed, agreed), (2, 1)),
        other => panic!("one node of three: {other:?}"),
    }
    permit.leave();
}
