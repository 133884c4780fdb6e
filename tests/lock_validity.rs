//! The Redlock validity check itself (`ttl − elapsed − drift > 0`, design 2 and 3.2): a
//! majority that says yes only after the validity is gone is refused with
//! `Error::ValidityExpired`, for an acquisition and for an extension.
//!
//! Two nodes of three are frozen before the round and resumed only once the validity has
//! passed, which the test sees on the third node: the key it set there (after the round's
//! start) has expired by its own ttl. The frozen nodes then answer yes, late but well within
//! the node timeout. Nothing here depends on how long anything takes: the order of the events
//! is observed, not assumed.

mod common;

use std::time::Duration;

use common::{builder, calls, connected, eventually, get, no_holders, values, within};
use quorumlock::testkit::LocalQuorum;
use quorumlock::{Error, RedLock, Retry};

/// The ttl of the round that comes too late. The node that answers at once keeps its key
/// this long, which is how the test knows that the validity has passed.
const TTL: Duration = Duration::from_secs(2);

/// Far longer than the frozen nodes are kept waiting (about [`TTL`]), so that their late
/// answers still count; allowed because the longest ttl (`max_ttl`, a minute in
/// `common::builder`) outlasts it.
const NODE_TIMEOUT: Duration = Duration::from_secs(20);

async fn patient_client(quorum: &LocalQuorum) -> RedLock {
    connected(builder(quorum).node_timeout(NODE_TIMEOUT)).await
}

/// Waits until node 0 no longer holds `key` after holding `value` there: the round sent to it
/// was answered and its key then expired by its ttl, so more than the ttl has passed since
/// the round started. With `value` `None`, waits for any value first.
async fn until_expired_on_node_0(quorum: &LocalQuorum, key: &str, value: Option<&str>) {
    let node = quorum.node(0);
    eventually(&format!("node 0 holds {key}"), || async {
        match get(node, key).await {
            Some(v) => value.is_none_or(|want| v == want),
            None => false,
        }
    })
    .await;
    eventually(&format!("{key} expired on node 0"), || async {
        get(node, key).await.is_none()
    })
    .await;
}

#[tokio::test]
async fn a_majority_that_says_yes_after_the_validity_is_refused() {
    let mut q = LocalQuorum::start(3).await.expect("quorum");
    let redlock = patient_client(&q).await;
    // The acquisition of one resource is a bare SET NX; the cleanup of a failed attempt is
    // the DISCARD script, so a new EVALSHA on a node is the delete reaching it.
    let scripts_before = [
        calls(q.node(1), "evalsha").await,
        calls(q.node(2), "evalsha").await,
    ];
    q.node_mut(1).freeze().expect("freeze node 1");
    q.node_mut(2).freeze().expect("freeze node 2");

    let attempt = tokio::spawn({
        let redlock = redlock.clone();
        async move { redlock.lock_with("late", TTL, Retry::none()).await }
    });
    until_expired_on_node_0(&q, "late", None).await;
    q.node_mut(1).resume().expect("resume node 1");
    q.node_mut(2).resume().expect("resume node 2");

    let result = within("the attempt", attempt).await.expect("joined");
    match &result {
        Err(e @ Error::ValidityExpired { resource, ttl, .. }) => {
            assert_eq!(resource, "late");
            assert_eq!(*ttl, TTL);
            assert!(
                e.is_retryable(),
                "a quorum that came too late may come in time"
            );
        }
        other => panic!(
            "expected ValidityExpired, got {:?}",
            other.as_ref().map(|_| "the lock")
        ),
    }
    // The late yeses are undone (design 2.3), not left to expire: each late node gets the
    // delete, and no node holds the key.
    for (i, before) in [1, 2].into_iter().zip(scripts_before) {
        eventually(&format!("the delete reached node {i}"), || async {
            calls(q.node(i), "evalsha").await > before
        })
        .await;
    }
    no_holders(&q, "late").await;
}

#[tokio::test]
async fn try_lock_is_refused_the_same_way() {
    let mut q = LocalQuorum::start(3).await.expect("quorum");
    let redlock = connected(builder(&q).node_timeout(NODE_TIMEOUT).ttl(TTL)).await;
    q.node_mut(1).freeze().expect("freeze node 1");
    q.node_mut(2).freeze().expect("freeze node 2");

    let attempt = tokio::spawn({
        let redlock = redlock.clone();
        async move { redlock.try_lock("late-try").await }
    });
    until_expired_on_node_0(&q, "late-try", None).await;
    q.node_mut(1).resume().expect("resume node 1");
    q.node_mut(2).resume().expect("resume node 2");

    let result = within("the attempt", attempt).await.expect("joined");
    assert!(
        matches!(&result, Err(Error::ValidityExpired { resource, .. }) if resource == "late-try"),
        "expected ValidityExpired, got {:?}",
        result.as_ref().map(|_| "the lock")
    );
    no_holders(&q, "late-try").await;
}

#[tokio::test]
async fn an_extension_confirmed_after_its_validity_is_refused_and_leaves_the_keys() {
    let mut q = LocalQuorum::start(3).await.expect("quorum");
    let redlock = patient_client(&q).await;
    let mut lock = redlock
        .lock_with("late-extend", Duration::from_secs(50), Retry::none())
        .await
        .expect("lock");
    let token = lock.token().as_str().to_string();
    let before = lock.valid_until();
    q.node_mut(1).freeze().expect("freeze node 1");
    q.node_mut(2).freeze().expect("freeze node 2");

    let extension = tokio::spawn(async move {
        let result = lock.extend_for(TTL).await;
        (lock, result)
    });
    // Node 0 extends at once, to TTL: its key expires TTL after the extension started.
    until_expired_on_node_0(&q, "late-extend", Some(&token)).await;
    q.node_mut(1).resume().expect("resume node 1");
    q.node_mut(2).resume().expect("resume node 2");

    let (lock, result) = within("the extension", extension).await.expect("joined");
    match &result {
        Err(Error::ValidityExpired { resource, ttl, .. }) => {
            assert_eq!(resource, "late-extend");
            assert_eq!(*ttl, TTL);
        }
        other => panic!("expected ValidityExpired, got {other:?}"),
    }
    // Design 3.2: the keys stay as they are (nothing is deleted or restored), and the
    // validity is capped at start + ttl − drift, which has passed.
    assert_eq!(
        values(&q, "late-extend").await,
        vec![None, Some(token.clone()), Some(token.clone())]
    );
    assert!(lock.valid_until() < before, "valid_until was not capped");
    assert!(!lock.is_valid(), "the lock still claims validity");

    lock.release().await.expect("release");
    no_holders(&q, "late-extend").await;
}
