//! Handovers: a release by a client with a caller waiting for the same resource passes the
//! lock straight to that caller, in one round, without the key ever being deleted; a handover
//! that fails falls back to a release of both tokens; after 16 in a row, a release deletes the
//! key so that other clients' waiters get their chance.
//!
//! The tests run on Tokio's single-threaded runtime: once the client counted a waiter's
//! second refused attempt (the one after it subscribed), that waiter is in its wait, where a
//! release can claim it, before this test's task runs again.

mod common;

use std::time::Duration;

use common::{values, HANG, NEVER};
use quorumlock::testkit::LocalQuorum;
use quorumlock::{Error, Lock, RedLock, Retry};
use tokio::task::JoinHandle;

/// A caller of `redlock` that waits for `resource` (with a pause no test waits out), once it
/// is in its wait.
async fn waiter(redlock: &RedLock, resource: &str) -> JoinHandle<Result<Lock, Error>> {
    let taken = redlock.stats().taken;
    let (redlock, resource) = (redlock.clone(), resource.to_string());
    let task = {
        let redlock = redlock.clone();
        tokio::spawn(async move {
            let retry = Retry::within(NEVER * 10)
                .delay(NEVER)
                .jitter(Duration::ZERO);
            redlock
                .lock_with(&resource, Duration::from_secs(60), retry)
                .await
        })
    };
    common::eventually("the waiter waits", || {
        let redlock = redlock.clone();
        async move { redlock.stats().taken >= taken + 2 }
    })
    .await;
    task
}

async fn joined(task: JoinHandle<Result<Lock, Error>>) -> Lock {
    tokio::time::timeout(HANG, task)
        .await
        .expect("the waiter gets the lock")
        .expect("joined")
        .expect("the waiter locks")
}

#[tokio::test]
async fn a_release_hands_the_lock_to_the_waiting_caller_without_deleting_the_key() {
    let q = LocalQuorum::start(5).await.unwrap();
    let redlock = common::client(&q).await;
    let held = redlock.try_lock("handover").await.unwrap();
    let old = held.token().as_str().to_string();
    let waiting = waiter(&redlock, "handover").await;
    let (deletes, attempts) = (
        common::calls_on_all(&q, "del").await,
        redlock.stats().attempts,
    );
    let released = held.release().await.unwrap();
    assert!(released.released >= 3, "{released:?}");
    let got = joined(waiting).await;
    let stats = redlock.stats();
    assert_eq!(stats.handed_over, 1, "{stats:?}");
    assert_eq!(
        stats.attempts, attempts,
        "the waiter made no attempt of its own"
    );
    assert!(got.acquired_on() >= 3 && got.is_valid());
    // The key went from the old token to the new one on every node, never deleted.
    let new = got.token().as_str().to_string();
    assert_ne!(new, old);
    common::eventually("every node holds the new token", || async {
        values(&q, "handover")
            .await
            .iter()
            .all(|v| v.as_deref() == Some(&*new))
    })
    .await;
    assert_eq!(common::calls_on_all(&q, "del").await, deletes);
    // The new holder's lock is a lock like any other: it releases it.
    got.release().await.unwrap();
    common::no_holders(&q, "handover").await;
}

/// The fencing token of a lock handed over is above its predecessor's: the handover reads the
/// counters on the majority that took the new token, as an attempt does.
#[tokio::test]
async fn a_handed_over_lock_has_a_larger_fencing_token() {
    let q = LocalQuorum::start(3).await.unwrap();
    let redlock = common::connected(common::builder(&q).fencing(true)).await;
    let mut previous = 0;
    let mut held = redlock.try_lock("handover-fenced").await.unwrap();
    for _ in 0..5 {
        let token = held.fencing_token().await.unwrap();
        assert!(token > previous, "{token} after {previous}");
        previous = token;
        let waiting = waiter(&redlock, "handover-fenced").await;
        held.release().await.unwrap();
        held = joined(waiting).await;
    }
    assert_eq!(redlock.stats().handed_over, 5);
    let token = held.fencing_token().await.unwrap();
    assert!(token > previous, "{token} after {previous}");
    held.release().await.unwrap();
}

/// A handover that cannot get a majority (the key holds someone else's token on three of five
/// nodes: our lock was lost there) leaves no lock and no token of ours behind, old or new.
#[tokio::test]
async fn a_failed_handover_releases_both_tokens() {
    let q = LocalQuorum::start(5).await.unwrap();
    let redlock = common::client(&q).await;
    let held = redlock.try_lock("handover-lost").await.unwrap();
    let waiting = waiter(&redlock, "handover-lost").await;
    for node in &q.nodes()[..3] {
        node.command(&["SET", "handover-lost", "theirs", "PX", "60000"])
            .await
            .unwrap();
    }
    match held.release().await {
        Err(Error::NotHeld { .. }) => {}
        other => panic!("expected NotHeld, got {other:?}"),
    }
    assert_eq!(redlock.stats().handed_over, 0);
    // Neither token is left on the two nodes where ours was (the new one was set there).
    common::eventually("our tokens are gone", || async {
        let values = values(&q, "handover-lost").await;
        values[..3].iter().all(|v| v.as_deref() == Some("theirs"))
            && values[3..].iter().all(Option::is_none)
    })
    .await;
    waiting.abort();
}

/// After 16 handovers in a row, a release deletes the key (the waiters of other clients get a
/// release message and a chance), and the waiter still gets the lock, by that message.
#[tokio::test]
async fn sixteen_handovers_in_a_row_then_a_release() {
    let q = LocalQuorum::start(3).await.unwrap();
    let redlock = common::client(&q).await;
    let mut held = redlock.try_lock("handover-chain").await.unwrap();
    for turn in 1..=17u64 {
        let waiting = waiter(&redlock, "handover-chain").await;
        let deletes = common::calls_on_all(&q, "del").await;
        held.release().await.unwrap();
        held = joined(waiting).await;
        let handed = redlock.stats().handed_over;
        if turn <= 16 {
            assert_eq!(handed, turn);
            assert_eq!(common::calls_on_all(&q, "del").await, deletes);
        } else {
            assert_eq!(handed, 16, "the 17th release is not a handover");
            assert!(common::calls_on_all(&q, "del").await >= deletes + 2);
        }
    }
    // The chain starts again.
    let waiting = waiter(&redlock, "handover-chain").await;
    held.release().await.unwrap();
    joined(waiting).await.release().await.unwrap();
    assert_eq!(redlock.stats().handed_over, 17);
}

/// A release cancelled while its handover is under way (here: every node frozen, the future
/// dropped) must not leave the waiter claimed, waiting for a handover that will never end: the
/// tokens are released in the background, and the waiter gets the lock once the nodes answer.
#[tokio::test]
async fn a_release_cancelled_during_its_handover_lets_the_waiter_go_on() {
    let mut q = LocalQuorum::start(3).await.unwrap();
    let redlock = common::client(&q).await;
    let held = redlock.try_lock("handover-cancelled").await.unwrap();
    let waiting = waiter(&redlock, "handover-cancelled").await;
    for node in q.nodes_mut() {
        node.freeze().unwrap();
    }
    {
        let release = held.release();
        tokio::pin!(release);
        // One poll claims the waiter and sends the handover to the frozen nodes.
        assert!(futures::poll!(release.as_mut()).is_pending());
    }
    for node in q.nodes_mut() {
        node.resume().unwrap();
    }
    let got = joined(waiting).await;
    assert_eq!(redlock.stats().handed_over, 0);
    let token = got.token().as_str().to_string();
    common::eventually("only the waiter's token is left", || async {
        values(&q, "handover-cancelled")
            .await
            .iter()
            .all(|v| v.as_deref() == Some(&*token))
    })
    .await;
    got.release().await.unwrap();
}
