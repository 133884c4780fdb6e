//! A clean end: `RedLock::shutdown` releases every lock the client holds, waits for the
//! nodes, and refuses later lock calls.

mod common;

use std::time::Duration;

use common::{client, holders, within};
use quorumlock::testkit::LocalQuorum;
use quorumlock::{Error, KeepAlive, Retry};

/// Long enough that only a release can free the keys while a test runs.
const TTL: Duration = Duration::from_secs(60);

#[tokio::test]
async fn shutdown_releases_every_lock_held_and_refuses_later_calls() {
    let q = LocalQuorum::start(3).await.unwrap();
    let redlock = client(&q).await;
    let held = redlock.lock_with("held", TTL, Retry::none()).await.unwrap();
    let several = redlock
        .lock_all_with(&["one", "two"], TTL, Retry::none())
        .await
        .unwrap();
    let kept = redlock
        .lock_with("kept", TTL, Retry::none())
        .await
        .unwrap()
        .keep_alive(KeepAlive::new())
        .unwrap();
    let handle = kept.handle();
    let keys = ["held", "one", "two", "kept"];
    // A grant is decided on a majority; the calls still in flight then reach the last node.
    assert!(redlock.settle(Duration::from_secs(5)).await);
    for key in keys {
        assert_eq!(holders(&q, key).await, 3, "{key} before");
    }

    let shutdown = redlock.shutdown().await;
    assert_eq!(shutdown.released, 3);
    assert!(shutdown.settled);
    // Right after: no waiting for the ttl, nor for a background release.
    for key in keys {
        assert_eq!(holders(&q, key).await, 0, "{key} after the shutdown");
    }

    // Later lock calls get the typed error, and send nothing.
    assert!(matches!(
        redlock.try_lock("later").await,
        Err(Error::ShutDown)
    ));
    assert!(matches!(redlock.lock("held").await, Err(Error::ShutDown)));
    assert!(matches!(
        redlock.clone().lock_all(&["one", "two"]).await,
        Err(Error::ShutDown)
    ));
    assert_eq!(holders(&q, "later").await, 0);

    // The locks it released say so.
    assert!(!held.is_valid());
    assert_eq!(held.validity(), Duration::ZERO);
    assert!(matches!(held.fencing_token().await, Err(Error::ShutDown)));
    assert!(matches!(held.release().await, Err(Error::ShutDown)));
    within("the kept lock's end", handle.lost()).await;
    assert!(!handle.is_held());
    assert!(matches!(kept.release().await, Err(Error::ShutDown)));
    drop(several);
    // A second shutdown has nothing left to release.
    let again = redlock.shutdown().await;
    assert_eq!(again.released, 0);
    assert!(again.settled);
}

#[tokio::test]
async fn a_caller_waiting_for_a_release_fails_at_the_shutdown() {
    let q = LocalQuorum::start(3).await.unwrap();
    let (a, b) = (client(&q).await, client(&q).await);
    let others = b.lock_with("busy", TTL, Retry::none()).await.unwrap();
    assert!(b.settle(Duration::from_secs(5)).await);
    let waiting = tokio::spawn({
        let a = a.clone();
        async move {
            a.lock_with("busy", TTL, Retry::within(Duration::from_secs(600)))
                .await
        }
    });
    common::eventually("the caller waits in line", || async {
        a.stats().taken >= 1
    })
    .await;
    let shutdown = a.shutdown().await;
    assert_eq!(shutdown.released, 0);
    let outcome = within("the waiting call's end", waiting).await.unwrap();
    assert!(matches!(outcome, Err(Error::ShutDown)), "{outcome:?}");
    // The other client's lock is untouched.
    assert_eq!(holders(&q, "busy").await, 3);
    others.release().await.unwrap();
}

#[tokio::test]
async fn work_under_a_kept_lock_is_cancelled_by_the_shutdown() {
    let q = LocalQuorum::start(3).await.unwrap();
    let redlock = client(&q).await;
    let (started, running) = tokio::sync::oneshot::channel();
    let work = tokio::spawn({
        let redlock = redlock.clone();
        async move {
            redlock
                .with_lock("scoped", |_held| async move {
                    started.send(()).unwrap();
                    std::future::pending::<()>().await
                })
                .await
        }
    });
    running.await.unwrap();
    // A grant is decided on a majority; the calls still in flight then reach the last node.
    assert!(redlock.settle(Duration::from_secs(5)).await);
    assert_eq!(holders(&q, "scoped").await, 3);
    let shutdown = redlock.shutdown().await;
    assert_eq!(shutdown.released, 1);
    assert_eq!(holders(&q, "scoped").await, 0);
    let outcome = within("the work's cancellation", work).await.unwrap();
    assert!(matches!(outcome, Err(Error::ShutDown)), "{outcome:?}");
}
