//! Auto-extension: a kept lock outlives its ttl, its loss is signalled before its validity
//! ends, work under it is cancelled when it is lost, and stopping it leaks nothing.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{client, holders, within};
use futures::FutureExt;
use quorumlock::testkit::LocalQuorum;
use quorumlock::{ConfigError, Error, KeepAlive, LostReason, Retry};

const SECOND: Duration = Duration::from_secs(1);

#[tokio::test]
async fn a_kept_lock_outlives_its_ttl_and_excludes_others() {
    let q = LocalQuorum::start(3).await.unwrap();
    let (a, b) = (client(&q).await, client(&q).await);
    let kept = a
        .lock_with("kept", SECOND, Retry::none())
        .await
        .unwrap()
        .keep_alive(KeepAlive::new())
        .unwrap();
    let handle = kept.handle();
    let first_deadline = handle.valid_until();
    // Three extensions of a 1 s lock: it has outlived its first validity.
    common::eventually("three extensions", || async { handle.extensions() >= 3 }).await;
    assert!(handle.valid_until() > first_deadline);
    assert!(
        Instant::now() > first_deadline,
        "three extensions take over a ttl"
    );
    assert!(kept.is_held());
    assert!(matches!(b.try_lock("kept").await, Err(Error::Taken { .. })));
    assert_eq!(handle.lost_reason(), None);
    kept.release().await.unwrap();
    common::no_holders(&q, "kept").await;
}

/// Settings the check accepts keep working after the first extension: extending with 80%
/// of the ttl left and a margin of 60% (the loss signalled with 60% left). The second
/// extension was once due at half the ttl left, after the loss instant, so the lock was
/// reported lost after one extension on a healthy quorum.
#[tokio::test]
async fn an_early_extension_with_a_wide_margin_keeps_extending() {
    let q = LocalQuorum::start(3).await.unwrap();
    let redlock = client(&q).await;
    let kept = redlock
        .lock_with("wide", SECOND, Retry::none())
        .await
        .unwrap()
        .keep_alive(
            KeepAlive::new()
                .extend_when_left(0.8)
                .margin(Duration::from_millis(600)),
        )
        .unwrap();
    let handle = kept.handle();
    common::eventually("four extensions", || async {
        handle.extensions() >= 4 || handle.lost_reason().is_some()
    })
    .await;
    assert_eq!(handle.lost_reason(), None);
    assert!(handle.extensions() >= 4);
    assert!(kept.is_held());
    kept.release().await.unwrap();
    common::no_holders(&q, "wide").await;
}

#[tokio::test]
async fn loss_is_signalled_before_the_validity_ends_when_a_majority_freezes() {
    let mut q = LocalQuorum::start(3).await.unwrap();
    let redlock = client(&q).await;
    let kept = redlock
        .lock_with("frozen-out", Duration::from_secs(2), Retry::none())
        .await
        .unwrap()
        .keep_alive(KeepAlive::new().margin(Duration::from_millis(300)))
        .unwrap();
    q.node_mut(0).freeze().unwrap();
    q.node_mut(1).freeze().unwrap();
    // No extension can succeed from here on, so the validity can only shrink.
    let deadline = kept.valid_until();
    let reason = within("the loss signal", kept.lost()).await;
    let signalled = Instant::now();
    assert!(
        signalled < deadline,
        "signalled {:?} after the validity ended",
        signalled - deadline
    );
    assert!(
        matches!(reason, LostReason::NotExtended { .. }),
        "{reason:?}"
    );
    assert!(!kept.is_held());
    assert_eq!(kept.validity(), Duration::ZERO);
    q.node_mut(0).resume().unwrap();
    q.node_mut(1).resume().unwrap();
    match kept.release().await {
        Err(Error::Lost { reason: r, .. }) => assert_eq!(r, reason),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn loss_is_signalled_when_another_owner_took_the_keys() {
    let q = LocalQuorum::start(3).await.unwrap();
    let redlock = client(&q).await;
    let kept = redlock
        .lock_with("stolen", SECOND, Retry::none())
        .await
        .unwrap()
        .keep_alive(KeepAlive::new())
        .unwrap();
    for node in q.nodes() {
        node.command(&["SET", "stolen", "someone-else"])
            .await
            .unwrap();
    }
    let reason = within("the loss signal", kept.lost()).await;
    assert!(
        matches!(reason, LostReason::NotHeld { held: 0, nodes: 3 }),
        "{reason:?}"
    );
    drop(kept);
    // Dropping released our keys only where they were ours: the other owner's stay.
    for node in q.nodes() {
        assert_eq!(
            common::get(node, "stolen").await.as_deref(),
            Some("someone-else")
        );
    }
}

#[tokio::test]
async fn run_cancels_the_work_when_the_lock_is_lost_and_releases_after() {
    let mut q = LocalQuorum::start(3).await.unwrap();
    let redlock = client(&q).await;
    let kept = redlock
        .lock_with("work", Duration::from_secs(2), Retry::none())
        .await
        .unwrap()
        .keep_alive(KeepAlive::new().margin(Duration::from_millis(300)))
        .unwrap();
    let deadline = kept.valid_until();
    let cancelled = Arc::new(AtomicBool::new(false));
    struct OnDrop(Arc<AtomicBool>);
    impl Drop for OnDrop {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let guard = OnDrop(Arc::clone(&cancelled));
    q.node_mut(0).freeze().unwrap();
    q.node_mut(1).freeze().unwrap();
    let outcome = within(
        "the work's cancellation",
        kept.run(|_held| async move {
            let _guard = guard;
            std::future::pending::<()>().await
        }),
    )
    .await;
    let returned = Instant::now();
    assert!(cancelled.load(Ordering::SeqCst), "the work was not dropped");
    assert!(returned < deadline, "cancelled after the validity ended");
    match outcome {
        Err(Error::Lost { resource, reason }) => {
            assert_eq!(resource, "work");
            assert!(matches!(reason, LostReason::NotExtended { .. }));
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn with_lock_runs_the_work_under_the_lock_and_releases_it() {
    let q = LocalQuorum::start(3).await.unwrap();
    let (a, b) = (client(&q).await, client(&q).await);
    let out = a
        .with_lock("scoped", |held| {
            let b = b.clone();
            async move {
                assert!(held.is_held());
                assert!(
                    held.fencing_token()
                        .await
                        .expect("fencing is on by default")
                        >= 1
                );
                matches!(b.try_lock("scoped").await, Err(Error::Taken { .. }))
            }
        })
        .await
        .unwrap();
    assert!(out, "another client got the lock while the work ran");
    // Released when the work ended (the ttl is 10 s: expiry cannot be what frees it).
    common::no_holders(&q, "scoped").await;
}

#[tokio::test]
async fn the_hold_limit_ends_the_lock_on_time() {
    let q = LocalQuorum::start(3).await.unwrap();
    let redlock = client(&q).await;
    let limit = Duration::from_millis(2_500);
    let acquired = Instant::now();
    let kept = redlock
        .lock_with("limited", SECOND, Retry::none())
        .await
        .unwrap()
        .keep_alive(KeepAlive::new().max_hold(limit))
        .unwrap();
    let handle = kept.handle();
    let reason = within("the hold limit", kept.lost()).await;
    assert_eq!(reason, LostReason::HoldLimit { limit });
    assert!(handle.extensions() >= 1, "it was extended before the limit");
    // Never held beyond the limit: the last extension was cut short.
    assert!(handle.valid_until() <= acquired + limit + SECOND / 100);
    drop(kept);
    common::no_holders(&q, "limited").await;
}

#[tokio::test]
async fn dropping_a_kept_lock_stops_its_task_and_releases_it() {
    let q = LocalQuorum::start(3).await.unwrap();
    let redlock = client(&q).await;
    let kept = redlock
        .lock_with("dropped", Duration::from_secs(60), Retry::none())
        .await
        .unwrap()
        .keep_alive(KeepAlive::new())
        .unwrap();
    let handle = kept.handle();
    drop(kept);
    // The keeper's end closes the status channel, which ends `lost()`.
    let reason = within("the keeper's end", handle.lost()).await;
    assert!(matches!(reason, LostReason::NotExtended { .. }));
    // With a 60 s ttl only the release can free it this soon.
    common::no_holders(&q, "dropped").await;
}

#[tokio::test]
async fn keep_alive_settings_that_cannot_work_are_refused() {
    let q = LocalQuorum::start(1).await.unwrap();
    let redlock = client(&q).await;
    let bad = [
        KeepAlive::new().extend_when_left(0.0),
        KeepAlive::new().extend_when_left(1.0),
        KeepAlive::new().extend_when_left(f64::NAN),
        KeepAlive::new().margin(Duration::ZERO),
        KeepAlive::new().margin(Duration::from_secs(5)),
        KeepAlive::new().max_hold(Duration::ZERO),
        KeepAlive::new().retry_delay(Duration::ZERO),
    ];
    for keep in bad {
        let lock = redlock
            .lock_with("settings", Duration::from_secs(10), Retry::none())
            .await
            .unwrap();
        match lock.keep_alive(keep) {
            Err(Error::Config(ConfigError::InvalidKeepAlive(_))) => {}
            other => panic!("{keep:?}: {other:?}"),
        }
        // The refused lock was released (dropped) in the background.
        common::no_holders(&q, "settings").await;
    }
    assert_eq!(holders(&q, "settings").await, 0);
}

/// A current-thread runtime, as `#[tokio::main(flavor = "current_thread")]` makes.
fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

/// The keeper of a current-thread runtime cannot run while the runtime's one thread blocks.
/// Here it blocks for twice the ttl, and until another client (on a thread of its own) has
/// taken the lock: the two holders overlap. The very next call on the kept lock, before the
/// keeper has had a chance to run, must report the loss, and nothing may report the lock as
/// held from then on.
#[test]
fn a_kept_lock_whose_runtime_thread_blocked_reports_the_loss_at_the_next_call() {
    current_thread().block_on(async {
        let q = LocalQuorum::start(3).await.unwrap();
        let a = client(&q).await;
        let ttl = SECOND;
        let kept = a
            .lock_with("blocked", ttl, Retry::none())
            .await
            .unwrap()
            .keep_alive(KeepAlive::new())
            .unwrap();
        let handle = kept.handle();
        let (taken, taken_rx) = std::sync::mpsc::channel();
        let (done, done_rx) = std::sync::mpsc::channel::<()>();
        let b = common::builder(&q);
        let other = std::thread::spawn(move || {
            current_thread().block_on(async move {
                let b = common::connected(b).await;
                let retry = Retry::within(Duration::from_secs(30));
                let lock = b.lock_with("blocked", Duration::from_secs(30), retry).await;
                taken.send(lock.is_ok()).unwrap();
                done_rx.recv().unwrap();
                lock.unwrap().release().await.unwrap();
            })
        });
        // The blocking work: the keeper cannot run, and the keys expire on the nodes.
        std::thread::sleep(2 * ttl);
        // Still blocking, until the other client holds the lock.
        assert!(taken_rx.recv().unwrap(), "the other client took the lock");

        // Nothing has run on this thread since it resumed: the keeper is still overdue.
        let reason = kept.lost().now_or_never();
        let Some(reason @ LostReason::KeeperLate { .. }) = reason else {
            panic!("lost() right after the thread resumed: {reason:?}");
        };
        assert_eq!(handle.extensions(), 0, "the keeper never ran");
        assert_eq!(handle.lost_reason().as_ref(), Some(&reason));
        assert!(!kept.is_held());
        assert!(!handle.is_held());
        assert_eq!(kept.validity(), Duration::ZERO);
        assert!(handle.valid_until() <= Instant::now());
        match kept.fencing_token().await {
            Err(Error::Lost { reason: r, .. }) => assert_eq!(r, reason),
            other => panic!("the fencing token of a lost lock: {other:?}"),
        }
        // The release waits for the keeper, which runs at last: it does not extend the lock.
        match kept.release().await {
            Err(Error::Lost { reason: r, .. }) => assert_eq!(r, reason),
            other => panic!("{other:?}"),
        }
        assert_eq!(handle.extensions(), 0);
        assert_eq!(handle.lost_reason().as_ref(), Some(&reason));
        assert!(!handle.is_held());
        done.send(()).unwrap();
        other.join().unwrap();
    });
}

/// `KeptLock::run` whose work blocks the runtime's one thread past the lock's validity: the
/// work ends after the lock was lost (and could have been taken by another client), so the
/// call reports the loss rather than the work's output.
#[test]
fn run_reports_the_loss_when_its_work_blocked_past_the_validity() {
    current_thread().block_on(async {
        let q = LocalQuorum::start(3).await.unwrap();
        let redlock = client(&q).await;
        let ttl = SECOND;
        let outcome = redlock
            .lock_with("blocking-work", ttl, Retry::none())
            .await
            .unwrap()
            .keep_alive(KeepAlive::new())
            .unwrap()
            .run(|_held| async move {
                std::thread::sleep(2 * ttl);
                "done"
            })
            .await;
        match outcome {
            Err(Error::Lost {
                resource,
                reason: LostReason::KeeperLate { .. },
            }) => assert_eq!(resource, "blocking-work"),
            other => panic!("{other:?}"),
        }
    });
}

/// A kept lock handed back by its keeper is still held; extended one last time and left, it
/// stays on the nodes for that long, through the client's shutdown, and then expires.
#[tokio::test]
async fn a_lock_handed_back_and_left_stays_until_its_ttl() {
    let q = LocalQuorum::start(3).await.unwrap();
    let redlock = common::client(&q).await;
    let kept = redlock
        .lock("hourly")
        .await
        .unwrap()
        .keep_alive(KeepAlive::new())
        .unwrap();
    let token = kept.handle().token().clone();
    let mut lock = kept.into_lock().await.expect("handed back");
    assert_eq!(lock.token(), &token);
    assert!(lock.is_valid());
    lock.extend_for(Duration::from_secs(40))
        .await
        .expect("extended");
    lock.leave();
    let shutdown = redlock.shutdown().await;
    assert!(shutdown.settled);
    assert_eq!(common::holders(&q, "hourly").await, 3);
    let pttl = q.node(0).command(&["PTTL", "hourly"]).await.unwrap();
    assert!(
        matches!(pttl, quorumlock::testkit::Reply::Integer(ms) if ms > 30_000 && ms <= 40_000),
        "{pttl:?}"
    );
    let other = common::client(&q).await;
    assert!(matches!(
        other.try_lock("hourly").await,
        Err(quorumlock::Error::Taken { .. })
    ));
}
