//! With the `metrics` feature, a client's attempts, waits and node errors reach the recorder
//! the application installed.

mod common;

use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use metrics_util::MetricKind;
use quorumlock::testkit::LocalQuorum;
use quorumlock::{KeepAlive, LostReason, Retry};

#[tokio::test]
async fn attempts_waits_losses_and_node_errors_are_recorded() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder of this test binary");

    let mut q = LocalQuorum::start(3).await.unwrap();
    let redlock = common::client(&q).await;
    let held = redlock.try_lock("metered").await.unwrap();
    // Taken once, then waits for the release.
    let waiter = {
        let redlock = redlock.clone();
        tokio::spawn(async move {
            redlock
                .lock_with(
                    "metered",
                    Duration::from_secs(10),
                    Retry::within(Duration::from_secs(60)),
                )
                .await
        })
    };
    common::eventually("the waiter found the lock taken", || async {
        redlock.stats().taken >= 1
    })
    .await;
    held.release().await.unwrap();
    waiter.await.unwrap().unwrap().release().await.unwrap();
    // A kept lock whose extensions fail (a majority frozen) is lost before its validity ends.
    let kept = redlock
        .lock_with("metered-kept", Duration::from_secs(1), Retry::none())
        .await
        .unwrap()
        .keep_alive(KeepAlive::new())
        .unwrap();
    q.node_mut(1).freeze().unwrap();
    q.node_mut(2).freeze().unwrap();
    let reason = kept.lost().await;
    assert!(matches!(reason, LostReason::NotExtended { .. }), "{reason}");
    q.node_mut(1).resume().unwrap();
    q.node_mut(2).resume().unwrap();
    drop(kept);

    // Two nodes down: their errors are counted, by node and kind.
    q.node_mut(1).kill().await.unwrap();
    q.node_mut(2).kill().await.unwrap();
    assert!(redlock.try_lock("metered-2").await.is_err());

    let snapshot = snapshotter.snapshot().into_vec();
    let find = |name: &str, label: (&str, &str)| {
        snapshot.iter().find_map(|(key, _, _, value)| {
            let k = key.key();
            let labelled = k
                .labels()
                .any(|l| l.key() == label.0 && l.value() == label.1);
            (k.name() == name && labelled).then_some((key.kind(), value))
        })
    };
    let counter = |name, label| match find(name, label) {
        Some((MetricKind::Counter, DebugValue::Counter(n))) => *n,
        other => panic!(
            "{name} {label:?}: {other:?} in {:?}",
            snapshot
                .iter()
                .map(|(k, _, _, _)| k.key().clone())
                .collect::<Vec<_>>()
        ),
    };
    assert!(counter("quorumlock_lock_attempts_total", ("outcome", "acquired")) >= 2);
    assert!(counter("quorumlock_lock_attempts_total", ("outcome", "taken")) >= 1);
    assert!(counter("quorumlock_node_errors_total", ("node", "2")) >= 1);
    assert!(counter("quorumlock_locks_lost_total", ("reason", "not_extended")) >= 1);
    assert!(
        snapshot.iter().any(
            |(k, _, _, v)| k.key().name() == "quorumlock_extension_failures_total"
                && matches!(v, DebugValue::Counter(n) if *n >= 1)
        ),
        "no extension failure counted"
    );
    match find("quorumlock_lock_wait_seconds", ("outcome", "acquired")) {
        Some((MetricKind::Histogram, DebugValue::Histogram(values))) => assert!(values.len() >= 2),
        other => panic!("wait histogram: {other:?}"),
    }
}
