//! Semaphores and read-write locks that refuse or wait when they need not (design 2.9), on
//! real servers: a permit free on a majority is granted although the first answers name
//! different slots; one node of another kind at the key is a refusal, not a kind mismatch.
//!
//! Each test orders the nodes' answers by freezing some nodes (SIGSTOP) until the others
//! have answered, as seen on those nodes, so that the case it tests happens on every run.

mod common;

use std::time::Duration;

use common::primitives::{members, write_claim};
use common::{client, HANG};
use quorumlock::testkit::LocalQuorum;
use quorumlock::{Error, RedLock};

/// A client whose nodes may stay frozen for a while without failing a round: the rounds in
/// these tests wait for frozen nodes, which answer once resumed.
async fn waiting_client(q: &LocalQuorum) -> RedLock {
    common::connected(
        common::builder(q)
            .node_timeout(Duration::from_secs(20))
            .ttl(Duration::from_secs(50)),
    )
    .await
}

/// Right after a release that some nodes applied and others not yet, the nodes of one round
/// record different slots. Here slot 0 is still claimed on nodes 0 and 1 only (a claim that
/// no longer holds a majority) and slot 1 on nodes 2, 3 and 4: nodes 0 and 1 record slot 1,
/// nodes 2, 3 and 4 slot 0, a majority. Nodes 3 and 4 answer last (frozen until the others
/// recorded the claim): the first three answers, slots 1, 1 and 0, are a majority of yes on
/// no one slot, but the two nodes still to answer make slot 0 a majority. Such a round used
/// to end there, `Taken`.
#[tokio::test]
async fn a_permit_free_on_a_majority_is_granted_when_the_first_answers_name_other_slots() {
    let mut q = LocalQuorum::start(5).await.unwrap();
    let redlock = waiting_client(&q).await;
    for i in 0..2 {
        write_claim(q.node(i), "pool", 2, "0:gone-holder", 60_000).await;
    }
    for i in 2..5 {
        write_claim(q.node(i), "pool", 2, "1:holder", 60_000).await;
    }
    q.node_mut(3).freeze().unwrap();
    q.node_mut(4).freeze().unwrap();
    let semaphore = redlock.semaphore("pool", 2).unwrap();
    let attempt = tokio::spawn(async move { semaphore.try_acquire().await });
    common::eventually(
        "nodes 0, 1 and 2 recorded the claim, or the attempt ended",
        || async {
            let mut recorded = 0;
            for i in 0..3 {
                recorded += usize::from(members(q.node(i), "pool").await.len() == 3);
            }
            recorded == 3 || attempt.is_finished()
        },
    )
    .await;
    q.node_mut(3).resume().unwrap();
    q.node_mut(4).resume().unwrap();
    let outcome = tokio::time::timeout(HANG, attempt)
        .await
        .expect("the attempt ended")
        .unwrap();
    let permit = match outcome {
        Ok(permit) => permit,
        Err(e) => panic!("slot 0 is free on nodes 2, 3 and 4, a majority: {e:?}"),
    };
    assert_eq!(permit.slot(), 0, "the slot recorded by a majority");
    assert_eq!(permit.acquired_on(), 3);
    permit.release().await.unwrap();
}

/// One node of five holds a lock's value at a semaphore's key. Its answer comes first (the
/// others are frozen until it answered): it is a refusal like a node whose slots are all
/// taken, and the four others grant the permit. It used to fail the call with
/// `KindMismatch`, which is not retried and says "on a majority of the nodes". With the
/// permit held, the next call is refused as `Taken` (retried), not as a kind mismatch.
#[tokio::test]
async fn one_node_of_another_kind_is_a_refusal_not_a_kind_mismatch() {
    let mut q = LocalQuorum::start(5).await.unwrap();
    let (redlock, other) = (waiting_client(&q).await, client(&q).await);
    let set = q.node(0).command(&["SET", "jobs", "a-lock-token"]).await;
    assert!(set.is_ok(), "{set:?}");
    let before = common::calls(q.node(0), "type").await;
    for i in 1..5 {
        q.node_mut(i).freeze().unwrap();
    }
    let semaphore = redlock.semaphore("jobs", 1).unwrap();
    let attempt = tokio::spawn(async move { semaphore.acquire().await });
    common::eventually("node 0 answered, or the call ended", || async {
        common::calls(q.node(0), "type").await > before || attempt.is_finished()
    })
    .await;
    for i in 1..5 {
        q.node_mut(i).resume().unwrap();
    }
    let outcome = tokio::time::timeout(HANG, attempt)
        .await
        .expect("the call ended")
        .unwrap();
    let permit = match outcome {
        Ok(permit) => permit,
        Err(e) => panic!("four nodes of five are free: {e:?}"),
    };
    assert!(permit.acquired_on() >= 3);
    assert!(
        permit.failures().iter().any(|f| f.index == 0),
        "node 0 named: {:?}",
        permit.failures()
    );
    assert!(redlock.settle(HANG).await, "every node answered");
    assert_eq!(
        common::get(q.node(0), "jobs").await.as_deref(),
        Some("a-lock-token"),
        "node 0 unchanged"
    );
    match other.semaphore("jobs", 1).unwrap().try_acquire().await {
        Err(Error::Taken { .. }) => {}
        outcome => panic!("the only permit is held: {outcome:?}"),
    }
    permit.release().await.unwrap();
}
