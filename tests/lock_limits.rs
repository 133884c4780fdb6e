//! Durations at their limit: `Duration::MAX` wherever the API takes a `Duration` is a typed
//! error, or a wait that ends when the awaited event comes, never a panic.

mod common;

use std::time::Duration;

use common::{client, within};
use quorumlock::testkit::LocalQuorum;
use quorumlock::{ConfigError, Error, KeepAlive, LostReason, RedLock, Retry};

const FOREVER: Duration = Duration::MAX;

#[tokio::test]
async fn settle_for_ever_returns_when_nothing_is_left() {
    let redlock = RedLock::builder()
        .node("redis://127.0.0.1:1")
        .build()
        .unwrap();
    assert!(within("settle", redlock.settle(FOREVER)).await);
}

#[test]
fn timeouts_longer_than_a_year_are_refused() {
    let node = RedLock::builder()
        .node("redis://127.0.0.1:1")
        .node_timeout(FOREVER)
        .validate();
    assert!(
        matches!(node, Err(ConfigError::TimeoutTooLarge { what, .. }) if what == "node timeout"),
        "{node:?}"
    );
    let connect = RedLock::builder()
        .node("redis://127.0.0.1:1")
        .connect_timeout(FOREVER)
        .validate();
    assert!(
        matches!(connect, Err(ConfigError::TimeoutTooLarge { .. })),
        "{connect:?}"
    );
}

#[tokio::test]
async fn the_longest_durations_are_errors_or_waits_when_locking() {
    let q = LocalQuorum::start(3).await.unwrap();
    let redlock = client(&q).await;
    assert_eq!(
        within("the nodes", redlock.wait_for_nodes(FOREVER)).await,
        3
    );

    let ttl = redlock.lock_with("r", FOREVER, Retry::none()).await;
    assert!(
        matches!(ttl, Err(Error::Config(ConfigError::TtlTooLarge { ttl })) if ttl == FOREVER),
        "{ttl:?}"
    );

    let patient = Retry::within(FOREVER).delay(FOREVER).jitter(FOREVER);
    let mut lock = within(
        "the lock",
        redlock.lock_with("r", Duration::from_secs(10), patient),
    )
    .await
    .unwrap();
    // Held: a second attempt would start after the pause, which does not fit in the deadline.
    let again = within(
        "the refusal",
        redlock.lock_with("r", Duration::from_secs(10), patient),
    )
    .await;
    assert!(matches!(again, Err(Error::Taken { .. })), "{again:?}");

    let extended = lock.extend_for(FOREVER).await;
    assert!(
        matches!(extended, Err(Error::Config(ConfigError::TtlTooLarge { ttl })) if ttl == FOREVER),
        "{extended:?}"
    );
    lock.release().await.unwrap();
}

#[tokio::test]
async fn a_kept_lock_that_would_retry_after_forever_is_lost_in_time() {
    let mut q = LocalQuorum::start(3).await.unwrap();
    let redlock = client(&q).await;
    let keep = KeepAlive::new().retry_delay(FOREVER).max_hold(FOREVER);
    let kept = redlock
        .lock_with("kept", Duration::from_secs(2), Retry::none())
        .await
        .unwrap()
        .keep_alive(keep)
        .unwrap();
    q.node_mut(0).freeze().unwrap();
    q.node_mut(1).freeze().unwrap();
    // The first extension fails; the next one would be due after the loss instant.
    match within("the loss signal", kept.lost()).await {
        LostReason::NotExtended {
            last_error: Some(e),
            failures,
        } => {
            assert!(e.contains("no quorum"), "{e}");
            let mut failed: Vec<usize> = failures.iter().map(|f| f.index).collect();
            failed.sort_unstable();
            assert_eq!(failed, [0, 1], "{failures:?}");
        }
        other => panic!("{other:?}"),
    }
    q.node_mut(0).resume().unwrap();
    q.node_mut(1).resume().unwrap();
}
