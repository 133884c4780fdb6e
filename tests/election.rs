//! Leader election: one leader at a time among several candidates, terms that only grow,
//! resignation hands over at once, a dead leader is followed once its lock expires, and
//! observers see who leads.

mod common;

use std::time::Duration;

use common::{builder, client, connected, within};
use futures::StreamExt;
use quorumlock::testkit::LocalQuorum;
use quorumlock::{Candidacy, ConfigError, Error, KeepAlive, Leader};

fn named(identity: &str) -> Candidacy {
    Candidacy::new().identity(identity)
}

#[tokio::test]
async fn one_candidate_leads_and_the_others_wait_until_it_resigns() {
    let q = LocalQuorum::start(3).await.unwrap();
    let (a, b, c) = (client(&q).await, client(&q).await, client(&q).await);
    let first = within("a leader", a.campaign_with("sched", named("a")))
        .await
        .unwrap();
    assert!(first.is_leader());
    assert_eq!(first.identity(), "a");
    assert_eq!(first.name(), "sched");
    // The campaign returns at a majority: the last node's record may still be on its way.
    assert!(a.settle(Duration::from_secs(5)).await);
    let seen = c.leader("sched").await.unwrap().expect("a leader");
    assert_eq!((seen.identity.as_str(), seen.term), ("a", first.term()));
    assert_eq!(seen.nodes, 3);

    // b campaigns while a leads: it does not win until a resigns.
    let waiting = tokio::spawn({
        let b = b.clone();
        async move { b.campaign_with("sched", named("b")).await }
    });
    // Once b has been refused, it waits in line for a's release.
    common::eventually("b was refused", || async { b.stats().taken >= 1 }).await;
    assert!(!waiting.is_finished(), "b won while a led");
    let first_term = first.term();
    first.resign().await.unwrap();
    let second = within("b's leadership", waiting).await.unwrap().unwrap();
    assert!(
        second.term() > first_term,
        "{} after {first_term}",
        second.term()
    );
    let seen = c.leader("sched").await.unwrap().expect("a leader");
    assert_eq!((seen.identity.as_str(), seen.term), ("b", second.term()));
    second.resign().await.unwrap();
    assert_eq!(c.leader("sched").await.unwrap(), None);
}

#[tokio::test]
async fn a_dead_leader_is_followed_with_a_higher_term_once_its_lock_expires() {
    let q = LocalQuorum::start(3).await.unwrap();
    let ttl = Duration::from_secs(1);
    let urls = q.urls();
    // The leader's process dies: its runtime stops with the lock held, so that nothing is
    // released and nothing is extended any more.
    let term = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let term = runtime.block_on(async move {
            let a = connected(common::builder_for(&urls).ttl(ttl)).await;
            let first = a.campaign_with("dies", named("a")).await.unwrap();
            let term = first.term();
            std::mem::forget(first);
            term
        });
        runtime.shutdown_background();
        term
    })
    .join()
    .unwrap();
    let b = connected(builder(&q).ttl(ttl)).await;
    let next = within("a new leader", b.campaign_with("dies", named("b")))
        .await
        .unwrap();
    assert!(next.term() > term);
    let seen = b.leader("dies").await.unwrap().expect("a leader");
    assert_eq!(seen.identity, "b");
}

#[tokio::test]
async fn leadership_is_lost_before_its_validity_ends_when_a_majority_freezes() {
    let mut q = LocalQuorum::start(3).await.unwrap();
    let a = connected(builder(&q).ttl(Duration::from_secs(2))).await;
    let candidacy = named("a").keep(KeepAlive::new().margin(Duration::from_millis(300)));
    let leading = a.campaign_with("frozen", candidacy).await.unwrap();
    q.node_mut(0).freeze().unwrap();
    q.node_mut(1).freeze().unwrap();
    let deadline = leading.valid_until();
    within("the loss signal", leading.lost()).await;
    assert!(std::time::Instant::now() < deadline);
    assert!(!leading.is_leader());
    q.node_mut(0).resume().unwrap();
    q.node_mut(1).resume().unwrap();
    let term = leading.term();
    assert!(
        leading.resign().await.is_err(),
        "resigning a lost leadership"
    );
    let b = client(&q).await;
    let next = within("the next leader", b.campaign_with("frozen", named("b")))
        .await
        .unwrap();
    assert!(next.term() > term);
}

#[tokio::test]
async fn concurrent_candidates_take_turns_with_growing_terms() {
    let q = LocalQuorum::start(3).await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..4 {
        // A generous node timeout: twelve turns of four clients on a loaded machine.
        let redlock = connected(builder(&q).node_timeout(Duration::from_secs(1))).await;
        tasks.push(tokio::spawn(async move {
            let mut terms = Vec::new();
            for _ in 0..3 {
                let leading = redlock
                    .campaign_with("turns", named(&format!("c{i}")))
                    .await
                    .unwrap();
                let term = leading.term();
                // While leading, a majority names this candidate.
                let seen = redlock.leader("turns").await.unwrap().expect("a leader");
                assert_eq!(seen.term, term);
                assert_eq!(seen.identity, format!("c{i}"));
                tokio::task::yield_now().await;
                leading.resign().await.unwrap();
                terms.push(term);
            }
            terms
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(within("every turn", t).await.unwrap());
    }
    all.sort_unstable();
    let before = all.len();
    all.dedup();
    assert_eq!(all.len(), before, "two leaders shared a term: {all:?}");
}

#[tokio::test]
async fn observers_see_each_new_leader_and_no_leader() {
    let q = LocalQuorum::start(3).await.unwrap();
    let (a, observer) = (client(&q).await, client(&q).await);
    let changes = observer.observe("watched", Duration::from_millis(20));
    futures::pin_mut!(changes);
    assert_eq!(changes.next().await.unwrap().unwrap(), None);
    let first = a.campaign_with("watched", named("a1")).await.unwrap();
    let seen: Option<Leader> = within("the first leader", changes.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        seen.map(|l| (l.identity, l.term)),
        Some(("a1".into(), first.term()))
    );
    first.resign().await.unwrap();
    assert_eq!(
        within("no leader", changes.next()).await.unwrap().unwrap(),
        None
    );
    let second = a.campaign_with("watched", named("a2")).await.unwrap();
    let seen = within("the second leader", changes.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        seen.map(|l| (l.identity, l.term)),
        Some(("a2".into(), second.term()))
    );
}

#[tokio::test]
async fn the_identity_outlives_the_ttl_while_the_leader_holds() {
    let q = LocalQuorum::start(3).await.unwrap();
    let a = connected(builder(&q).ttl(Duration::from_secs(1))).await;
    let leading = a.campaign_with("long", named("a")).await.unwrap();
    let handle = leading.handle();
    common::eventually("three extensions", || async { handle.extensions() >= 3 }).await;
    let seen = a.leader("long").await.unwrap().expect("still named");
    assert_eq!((seen.identity.as_str(), seen.term), ("a", leading.term()));
}

#[tokio::test]
async fn a_leader_is_unknown_without_a_quorum() {
    let mut q = LocalQuorum::start(3).await.unwrap();
    let a = client(&q).await;
    let _leading = a.campaign_with("dark", named("a")).await.unwrap();
    q.node_mut(0).kill().await.unwrap();
    q.node_mut(1).kill().await.unwrap();
    assert!(matches!(
        a.leader("dark").await,
        Err(Error::NoQuorum { .. })
    ));
}

#[tokio::test]
async fn bad_campaigns_are_refused_and_write_nothing() {
    let q = LocalQuorum::start(3).await.unwrap();
    let off = connected(builder(&q).fencing(false)).await;
    assert!(matches!(
        off.campaign("x").await,
        Err(Error::Config(ConfigError::FencingOff))
    ));
    let a = client(&q).await;
    assert!(matches!(
        a.campaign_with("x", named("")).await,
        Err(Error::Config(ConfigError::InvalidIdentity(_)))
    ));
    assert!(matches!(
        a.campaign("").await,
        Err(Error::Config(ConfigError::EmptyResource))
    ));
    assert!(matches!(
        a.campaign("quorumlock:leader:x").await,
        Err(Error::Config(ConfigError::ReservedResource(_)))
    ));
    assert!(matches!(
        a.leader("").await,
        Err(Error::Config(ConfigError::EmptyResource))
    ));
    for node in q.nodes() {
        assert_eq!(
            common::keys(node).await,
            ["quorumlock:node"],
            "only the testkit's marker"
        );
    }
}

#[tokio::test]
async fn an_identity_left_behind_does_not_name_the_holder_of_another_token() {
    let q = LocalQuorum::start(3).await.unwrap();
    let a = client(&q).await;
    let leading = a.campaign_with("left", named("a")).await.unwrap();
    leading.resign().await.unwrap();
    // The identity record is left to expire; the lock is now held by someone who did not
    // campaign.
    let lock = a.lock("left").await.unwrap();
    // The campaign wrote the record on a majority of the nodes that granted its lock (not
    // necessarily node 0: a round ends with its majority).
    let mut left_behind = 0;
    for node in q.nodes() {
        if common::get(node, "quorumlock:leader:left").await.is_some() {
            left_behind += 1;
        }
    }
    assert!(
        left_behind >= 2,
        "the record is on {left_behind} of 3 nodes"
    );
    assert_eq!(a.leader("left").await.unwrap(), None);
    lock.release().await.unwrap();
}
