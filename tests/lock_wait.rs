//! Waiting for a lock: a waiter is woken by the holder's release (a message from the nodes,
//! or within one client directly), with the retry pause as the fallback for what sends no
//! message (an expiry, another Redlock client). The pauses here are far longer than the hang
//! detector, so a waiter that missed a wake-up fails the test instead of passing late.

mod common;

use std::time::Duration;

use common::{HANG, NEVER};
use quorumlock::testkit::LocalQuorum;
use quorumlock::{RedLock, Retry};
use rand::Rng;

fn patient() -> Retry {
    Retry::within(NEVER * 10)
        .delay(NEVER)
        .jitter(Duration::ZERO)
}

async fn handoffs(holder: &RedLock, waiter: &RedLock, resource: &str, rounds: usize) {
    for round in 0..rounds {
        let held = holder.try_lock(resource).await.expect("the holder locks");
        let waiter = waiter.clone();
        let resource_owned = resource.to_string();
        let waiting = tokio::spawn(async move {
            waiter
                .lock_with(&resource_owned, Duration::from_secs(10), patient())
                .await
        });
        // Release at a random moment: before, during or after the waiter's subscription.
        let micros = rand::rng().random_range(0..3_000);
        tokio::time::sleep(Duration::from_micros(micros)).await;
        held.release().await.expect("the holder releases");
        let got = tokio::time::timeout(HANG, waiting)
            .await
            .unwrap_or_else(|_| panic!("round {round}: the waiter missed the release"))
            .expect("joined")
            .expect("the waiter locks");
        got.release().await.expect("the waiter releases");
    }
}

/// Two clients (as two processes would be): the release reaches the waiter as a message
/// from the nodes, whenever it comes relative to the waiter's subscription.
#[tokio::test]
async fn a_release_by_another_client_wakes_the_waiter() {
    let q = LocalQuorum::start(3).await.unwrap();
    let holder = common::client(&q).await;
    let waiter = common::client(&q).await;
    handoffs(&holder, &waiter, "wake-remote", 30).await;
}

/// One client: the release wakes its own waiter at once.
#[tokio::test]
async fn a_release_by_the_same_client_wakes_the_waiter() {
    let q = LocalQuorum::start(3).await.unwrap();
    let redlock = common::client(&q).await;
    handoffs(&redlock, &redlock, "wake-local", 30).await;
}

/// A lock that expires sends no message: the waiter gets it after its pause.
#[tokio::test]
async fn an_expired_lock_is_taken_after_the_pause() {
    let q = LocalQuorum::start(3).await.unwrap();
    let waiter = common::client(&q).await;
    // Another Redlock client's lock, which will expire rather than be released.
    for node in q.nodes() {
        let set = node
            .command(&["SET", "wake-expiry", "theirs", "PX", "300"])
            .await
            .unwrap();
        assert_eq!(set.as_str(), Some("OK"));
    }
    let retry = Retry::within(HANG)
        .delay(Duration::from_millis(50))
        .jitter(Duration::from_millis(50));
    let lock = tokio::time::timeout(
        HANG,
        waiter.lock_with("wake-expiry", Duration::from_secs(10), retry),
    )
    .await
    .expect("no hang")
    .expect("locked once the other lock expired");
    lock.release().await.unwrap();
}

/// A user that may not publish still releases (the announcement is best effort), and the
/// waiter then falls back on its pause.
#[tokio::test]
async fn a_user_that_may_not_publish_still_releases() {
    let q = LocalQuorum::start(3).await.unwrap();
    for node in q.nodes() {
        let ok = node
            .command(&[
                "ACL",
                "SETUSER",
                "mute",
                "on",
                ">mute-pw",
                "~*",
                "resetchannels",
                "+@all",
            ])
            .await
            .unwrap();
        assert_eq!(ok.as_str(), Some("OK"));
    }
    let urls: Vec<String> = q
        .nodes()
        .iter()
        .map(|n| format!("redis://mute:mute-pw@{}", n.addr()))
        .collect();
    let mute = common::connected(common::builder_for(urls)).await;
    let lock = mute.try_lock("wake-mute").await.expect("locks");
    let released = lock.release().await.expect("releases without PUBLISH");
    assert!(released.released >= 2, "{released:?}");
    common::eventually("no node holds the key", || async {
        common::holders(&q, "wake-mute").await == 0
    })
    .await;
}

/// Callers of one client that wait for a resource queue up: each release wakes the first
/// in line only, and a caller that arrives while others wait joins the line instead of
/// attempting. Almost every attempt gets the lock, and most turns are handovers, which take no
/// attempt at all.
#[tokio::test]
async fn waiters_of_one_client_take_turns_without_wasting_attempts() {
    const TASKS: u64 = 8;
    const ROUNDS: u64 = 10;
    let q = LocalQuorum::start(3).await.unwrap();
    let redlock = common::client(&q).await;
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let redlock = redlock.clone();
            tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    let lock = redlock
                        .lock_with("wake-turns", Duration::from_secs(10), patient())
                        .await
                        .expect("locks");
                    tokio::task::yield_now().await;
                    lock.release().await.expect("releases");
                }
            })
        })
        .collect();
    for task in tasks {
        tokio::time::timeout(HANG, task)
            .await
            .expect("a waiter missed its turn")
            .expect("joined");
    }
    let stats = redlock.stats();
    assert_eq!(
        stats.acquired + stats.handed_over,
        TASKS * ROUNDS,
        "{stats:?}"
    );
    assert!(stats.handed_over > 0, "{stats:?}");
    // A caller attempts without waiting only when nobody is in line: at the start, at the
    // end, and when the line happens to be empty between two turns.
    let wasted = stats.attempts - stats.acquired;
    assert!(wasted <= 2 * TASKS, "{stats:?}");
    assert_eq!(stats.paused, 0, "{stats:?}");
}

/// While a holder keeps the key on a bare majority, every failed attempt sets it on the other
/// nodes and deletes it again. Those deletes free nothing a waiter waits for, so they must not
/// wake anyone: announced, they woke every waiter, the attempting one included, and the
/// waiters then attempted without pause until the holder let go.
#[tokio::test]
async fn failed_attempts_do_not_wake_other_waiters() {
    let q = LocalQuorum::start(3).await.unwrap();
    let holder = common::client(&q).await;
    let waiter = common::client(&q).await;
    let other = common::client(&q).await;
    let held = holder
        .try_lock("wake-storm")
        .await
        .expect("the holder locks");
    // Granted at the quorum: the last node's SET lands in the background (after the DEL
    // below, it would leave the key on all three nodes).
    assert!(holder.settle(HANG).await, "every node answered");
    // Held on two nodes of three: each attempt now gets the third.
    let free = &q.nodes()[2];
    free.command(&["DEL", "wake-storm"]).await.expect("DEL");
    assert_eq!(common::holders(&q, "wake-storm").await, 2);

    let waiting = {
        let waiter = waiter.clone();
        tokio::spawn(async move {
            waiter
                .lock_with("wake-storm", Duration::from_secs(10), patient())
                .await
        })
    };
    // Its first attempt, then the one right after its subscription; then it waits.
    common::eventually("the waiter waits", || async {
        waiter.stats().attempts >= 2
    })
    .await;
    for _ in 0..20 {
        let error = other.try_lock("wake-storm").await.expect_err("taken");
        assert!(matches!(error, quorumlock::Error::Taken { .. }), "{error}");
    }
    held.release().await.expect("the holder releases");
    let got = tokio::time::timeout(HANG, waiting)
        .await
        .expect("the waiter missed the release")
        .expect("joined")
        .expect("the waiter locks");
    got.release().await.expect("the waiter releases");
    let stats = waiter.stats();
    // Two attempts before waiting, one after the release (and one more, at most, if the
    // first message of the release came before the others had deleted).
    assert!(stats.attempts <= 4, "{stats:?}");
}
