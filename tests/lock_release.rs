//! What a release reports under load: `NotHeld` only when a majority answered that our token
//! was gone, never because nodes were slow.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{client, connected, eventually, holders, no_holders};
use quorumlock::testkit::LocalQuorum;
use quorumlock::{Error, NodeErrorKind, RedLock};

/// A lock on five nodes whose key is on every node, then: node 0 loses it (as when its
/// acquisition waited in the queue past its deadline and was never sent), nodes 3 and 4
/// freeze. Two nodes can still confirm, one answers "not ours", two fail.
async fn two_confirm_one_lost_two_frozen(q: &mut LocalQuorum, key: &str) -> quorumlock::Lock {
    let lock = client(q).await.try_lock(key).await.unwrap();
    eventually("every node holds the key", || async {
        holders(q, key).await == 5
    })
    .await;
    q.node(0).command(&["DEL", key]).await.unwrap();
    q.node_mut(3).freeze().unwrap();
    q.node_mut(4).freeze().unwrap();
    lock
}

/// The nodes that did not confirm, sorted, as (node, kind).
fn named(failures: &[quorumlock::NodeError]) -> Vec<(usize, NodeErrorKind)> {
    let mut named: Vec<_> = failures.iter().map(|f| (f.index, f.kind)).collect();
    named.sort_unstable_by_key(|(i, _)| *i);
    named
}

/// Node 0 answered that our key is not there; nodes 3 and 4 did not answer.
const UNCONFIRMED: [(usize, NodeErrorKind); 3] = [
    (0, NodeErrorKind::Refused),
    (3, NodeErrorKind::Timeout),
    (4, NodeErrorKind::Timeout),
];

#[tokio::test]
async fn a_release_that_failed_nodes_left_unconfirmed_is_no_quorum_not_a_lost_lock() {
    let mut q = LocalQuorum::start(5).await.unwrap();
    let lock = two_confirm_one_lost_two_frozen(&mut q, "doc").await;
    match lock.release().await {
        Err(Error::NoQuorum {
            needed: 3,
            agreed: 2,
            failures,
            ..
        }) => assert_eq!(named(&failures), UNCONFIRMED),
        other => panic!("release gave {other:?}"),
    }
    // The frozen nodes still get the delete when they resume.
    q.node_mut(3).resume().unwrap();
    q.node_mut(4).resume().unwrap();
    no_holders(&q, "doc").await;
}

#[tokio::test]
async fn an_extension_that_failed_nodes_left_unconfirmed_keeps_the_lock() {
    let mut q = LocalQuorum::start(5).await.unwrap();
    let mut lock = two_confirm_one_lost_two_frozen(&mut q, "doc").await;
    let before = lock.valid_until();
    match lock.extend().await {
        Err(Error::NoQuorum {
            needed: 3,
            agreed: 2,
            failures,
            ..
        }) => assert_eq!(named(&failures), UNCONFIRMED),
        other => panic!("extend gave {other:?}"),
    }
    // Nothing showed the lock lost: it keeps its validity (the same ttl, so the same
    // deadline), and the next extension on the resumed nodes succeeds.
    assert_eq!(lock.valid_until(), before);
    assert!(lock.is_valid());
    q.node_mut(3).resume().unwrap();
    q.node_mut(4).resume().unwrap();
    lock.extend().await.unwrap();
    lock.release().await.unwrap();
    no_holders(&q, "doc").await;
}

/// Many tasks of one client, each locking and releasing its own resource: nobody else ever
/// touches those keys, so a release within the validity can never find the lock gone. Under
/// this load nodes time out now and then, and the queue drops acquisitions that waited past
/// their deadline, so some nodes answer that they do not have our key: a minority, which
/// must not be reported as a lost lock.
///
/// The default configuration (100 ms node timeout, fencing), which is where it was seen;
/// quarantine is off only because the test servers keep nothing across a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_within_the_validity_is_never_reported_as_not_held() {
    const TASKS: usize = 1_000;
    const ROUNDS: usize = 20;
    let q = LocalQuorum::start(5).await.unwrap();
    let redlock = connected(RedLock::builder().nodes(q.urls()).quarantine(false)).await;

    #[derive(Default)]
    struct Counts {
        released: AtomicUsize,
        not_held: AtomicUsize,
        expired: AtomicUsize,
        unconfirmed: AtomicUsize,
        other: AtomicUsize,
        not_locked: AtomicUsize,
    }
    let counts = Arc::new(Counts::default());
    let tasks: Vec<_> = (0..TASKS)
        .map(|i| {
            let (redlock, counts) = (redlock.clone(), Arc::clone(&counts));
            tokio::spawn(async move {
                let resource = format!("own:{i}");
                let mut spurious = Vec::new();
                for _ in 0..ROUNDS {
                    let Ok(lock) = redlock.lock(&resource).await else {
                        counts.not_locked.fetch_add(1, Ordering::Relaxed);
                        continue;
                    };
                    let left = lock.validity();
                    let valid = !left.is_zero();
                    match lock.release().await {
                        Ok(_) => counts.released.fetch_add(1, Ordering::Relaxed),
                        // The validity ran out before the release began (a machine stalled
                        // for a ttl): the keys may be gone, so `NotHeld` is right; counted
                        // and reported, not asserted on.
                        Err(Error::NotHeld { .. }) if !valid => {
                            counts.expired.fetch_add(1, Ordering::Relaxed)
                        }
                        Err(error @ Error::NotHeld { .. }) => {
                            if spurious.is_empty() {
                                spurious.push(format!("{error} with {left:?} left"));
                            }
                            counts.not_held.fetch_add(1, Ordering::Relaxed)
                        }
                        // Nodes that failed to answer in time are listed.
                        Err(Error::NoQuorum { failures, .. }) if !failures.is_empty() => {
                            counts.unconfirmed.fetch_add(1, Ordering::Relaxed)
                        }
                        Err(error) => {
                            spurious.push(format!("{error}"));
                            counts.other.fetch_add(1, Ordering::Relaxed)
                        }
                    };
                }
                spurious
            })
        })
        .collect();
    let mut examples = Vec::new();
    for task in tasks {
        examples.extend(task.await.unwrap());
    }
    let count = |c: &AtomicUsize| c.load(Ordering::Relaxed);
    let report = format!(
        "{} released, {} not held, {} not held after the validity ran out, {} unconfirmed, \
         {} other release errors, {} not locked",
        count(&counts.released),
        count(&counts.not_held),
        count(&counts.expired),
        count(&counts.unconfirmed),
        count(&counts.other),
        count(&counts.not_locked),
    );
    eprintln!("{report}");
    assert_eq!(
        count(&counts.not_held),
        0,
        "{report}; e.g. {:?}",
        examples.first()
    );
    assert_eq!(
        count(&counts.other),
        0,
        "{report}; e.g. {:?}",
        examples.first()
    );
    assert!(count(&counts.released) > 0, "{report}");
    redlock.settle(Duration::from_secs(5)).await;
}
