//! Semaphores and read-write locks that refuse or wait when they need not (design 2.9), on
//! real servers: a permit free on a majority is granted although the first answers name
//! different slots; readers kept out only by a writer's intent are woken when the writer is
//! cancelled; one node of another kind at the key is a refusal, not a kind mismatch.
//!
//! Each test makes its case happen on every run: the semaphore tests freeze some nodes
//! (SIGSTOP) until the others have answered, as seen on those nodes; the read-write lock's
//! cancels the writer once the reader's client counted the reader's two refusals.

mod common;

use std::time::Duration;

use common::primitives::{members, write_claim};
use common::{client, HANG, NEVER};
use quorumlock::testkit::LocalQuorum;
use quorumlock::{Access, Error, RedLock, Retry};

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

/// A writer refused because a reader holds leaves an intent, which keeps out a reader of
/// another client that arrives after it: that reader waits in line for a release, with a
/// pause no test waits out. The writer is cancelled: its intent goes, and the reader, which
/// nothing else keeps out, must be woken as a release wakes it, not by its pause.
#[tokio::test]
async fn readers_kept_out_by_a_writers_intent_are_woken_when_the_writer_is_cancelled() {
    let q = LocalQuorum::start(3).await.unwrap();
    let (a, w, b) = (client(&q).await, client(&q).await, client(&q).await);
    let ttl = Duration::from_secs(10);
    let patient = Retry::within(NEVER * 10)
        .delay(NEVER)
        .jitter(Duration::ZERO);
    let reading = a.rw_lock("ledger").unwrap().try_read().await.unwrap();
    let writer = {
        let lock = w.rw_lock("ledger").unwrap();
        tokio::spawn(async move { lock.acquire(Access::Write, ttl, patient).await })
    };
    let intents = || async {
        let mut on = 0;
        for node in q.nodes() {
            on += usize::from(
                members(node, "ledger")
                    .await
                    .iter()
                    .any(|m| m.starts_with("i:")),
            );
        }
        on
    };
    common::eventually("the writer's intent is on every node", || async {
        intents().await == 3
    })
    .await;
    let reader = {
        let lock = b.rw_lock("ledger").unwrap();
        tokio::spawn(async move { lock.acquire(Access::Read, ttl, patient).await })
    };
    // Refused by the intent at its first attempt and at the one right after it subscribed
    // to the lock's release channel: it now waits for a release.
    common::eventually("the reader was refused twice", || async {
        b.stats().taken >= 2
    })
    .await;
    writer.abort();
    assert!(writer.await.unwrap_err().is_cancelled());
    let second = tokio::time::timeout(HANG, reader)
        .await
        .expect("the reader waited out its pause: the intent's removal woke nobody")
        .unwrap()
        .unwrap();
    assert_eq!(second.access(), Access::Read);
    assert_eq!(b.stats().paused, 0, "woken, not paused");
    assert!(b.stats().woken >= 1);
    assert!(w.settle(HANG).await, "every node answered");
    assert_eq!(intents().await, 0, "the intent is gone from every node");
    second.release().await.unwrap();
    reading.release().await.unwrap();
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

/// The list of holders, as an acquisition: one node of five holding another kind at the key
/// holds no permit of the semaphore, and the list is read from the others; only where more
/// nodes than a majority may do without hold another kind is it a kind mismatch. Before, one
/// such node made `holders()` fail with `KindMismatch`.
#[tokio::test]
async fn one_node_of_another_kind_does_not_hide_the_holders() {
    let q = LocalQuorum::start(5).await.unwrap();
    let redlock = client(&q).await;
    let semaphore = redlock.semaphore("pool", 2).unwrap();
    let permit = semaphore.try_acquire().await.expect("a permit");
    assert!(redlock.settle(HANG).await, "every node answered");
    // Node 0's sorted set replaced by another kind.
    q.node(0).command(&["DEL", "pool"]).await.expect("DEL");
    q.node(0)
        .command(&["SET", "pool", "a-lock-token"])
        .await
        .expect("SET");
    let holders = semaphore
        .holders()
        .await
        .expect("the holders, from nodes 1 to 4");
    assert_eq!(holders.len(), 1, "{holders:?}");
    assert_eq!(holders[0].slot, permit.slot());
    // Three nodes of five: no permit could be granted; the kind is what is there.
    for i in 1..3 {
        q.node(i).command(&["DEL", "pool"]).await.expect("DEL");
        q.node(i)
            .command(&["SET", "pool", "a-lock-token"])
            .await
            .expect("SET");
    }
    match semaphore.holders().await {
        Err(Error::KindMismatch { .. }) => {}
        outcome => panic!("three nodes of five hold a lock's value: {outcome:?}"),
    }
    drop(permit);
}
