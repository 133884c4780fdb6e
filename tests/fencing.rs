//! Fencing tokens, multi-resource locks, and extensions on nodes that lost the keys.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{client, get, holders};
use quorumlock::testkit::{LocalQuorum, NodeOptions, Reply};
use quorumlock::{ConfigError, Error, KeepAlive, Retry};

const LONG: Duration = Duration::from_secs(60);

async fn counter(q: &LocalQuorum, node: usize, key: &str) -> Option<u64> {
    get(q.node(node), &format!("quorumlock:fence:{key}"))
        .await
        .map(|v| v.parse().expect("a number"))
}

/// The fencing counter of `key` on each node, in node order.
async fn counters(q: &LocalQuorum, key: &str) -> Vec<Option<u64>> {
    let mut all = Vec::new();
    for n in 0..q.len() {
        all.push(counter(q, n, key).await);
    }
    all
}

/// Tokens grow with every holder, whichever client it is: one that fenced the resource
/// last records its expected token in its acquisition, another one takes a FENCE round
/// (design 2.6). Taken one at a time, without failures, they are consecutive.
#[tokio::test]
async fn fencing_tokens_grow_with_every_acquisition_by_any_client() {
    let q = LocalQuorum::start(3).await.unwrap();
    let clients = [client(&q).await, client(&q).await, client(&q).await];
    let mut last = 0;
    // Runs of one client (its expected token is right) between changes of client (wrong).
    for (i, &c) in [0, 0, 1, 0, 2, 2, 2, 1, 0, 1, 1, 0].iter().enumerate() {
        let lock = clients[c].try_lock("fenced").await.unwrap();
        let token = lock
            .fencing_token()
            .await
            .expect("fencing is on by default");
        assert_eq!(token, last + 1, "holder {i} (client {c})");
        last = token;
        lock.release().await.unwrap();
    }
    // The last token is recorded on a majority before it is handed out (the third node's
    // write may still be on its way, or may have timed out on a loaded machine), and no node
    // has a counter above it.
    let mut recorded = 0;
    for n in 0..3 {
        let counter = counter(&q, n, "fenced").await;
        assert!(counter <= Some(last), "node {n}: {counter:?} above {last}");
        if counter == Some(last) {
            recorded += 1;
        }
    }
    assert!(recorded >= 2, "the last token is on {recorded} nodes");
}

/// A token is recorded on a majority when it is asked for, so the next holder's token is
/// larger: whether that holder reads the counters in a round of its own (a client that has
/// not asked for a token before) or in its acquisition (one that has), and whatever holders
/// that never ask do in between.
#[tokio::test]
async fn a_token_asked_for_is_below_every_later_holders_token() {
    let q = LocalQuorum::start(3).await.unwrap();
    let (asker, silent) = (client(&q).await, client(&q).await);
    let mut last = 0;
    for i in 0..6 {
        let fresh;
        let redlock = if i % 2 == 0 {
            fresh = client(&q).await;
            &fresh
        } else {
            &asker
        };
        let lock = redlock.try_lock("asked").await.unwrap();
        let token = lock.fencing_token().await.unwrap();
        assert!(token > last, "holder {i}: token {token} after {last}");
        assert_eq!(lock.fencing_token().await.unwrap(), token, "asked twice");
        last = token;
        lock.release().await.unwrap();
        for _ in 0..2 {
            let unasked = silent.try_lock("asked").await.unwrap();
            unasked.release().await.unwrap();
        }
    }
}

/// A lock whose token is never asked for costs what a lock without fencing costs: one
/// `SET NX PX` on each node (inside the batch script, which reads back the node's marker and
/// quarantine record), no counter read, and none written. Once a token of its locks
/// was asked for, a client's acquisitions read the counters and record the token it expects
/// next (the ACQUIRE script), and asking sends nothing; where another client fenced the
/// resource in between, the expected token is too small, and asking takes one round (FENCE).
#[tokio::test]
async fn a_token_costs_nothing_until_it_is_asked_for() {
    let q = LocalQuorum::start(3).await.unwrap();
    let redlock = client(&q).await;
    assert!(redlock.settle(Duration::from_secs(5)).await);
    let count = |command: &'static str| common::calls_on_all(&q, command);
    let (set, scripts, mget) = (
        count("set").await,
        count("evalsha").await,
        count("mget").await,
    );
    let lock = redlock.try_lock("unasked").await.unwrap();
    assert!(redlock.settle(Duration::from_secs(5)).await);
    assert_eq!(count("set").await - set, 3);
    assert_eq!(
        count("evalsha").await - scripts,
        3,
        "the batch script, once a node"
    );
    assert_eq!(count("mget").await - mget, 0, "no counter read");
    lock.release().await.unwrap();
    assert!(redlock.settle(Duration::from_secs(5)).await);
    for n in 0..3 {
        assert_eq!(counter(&q, n, "unasked").await, None, "node {n}");
    }

    // The first token: a round to read the counters (PEEK), a round to record it (FENCE).
    let lock = redlock.try_lock("asked").await.unwrap();
    assert!(redlock.settle(Duration::from_secs(5)).await);
    let scripts = count("evalsha").await;
    let first = lock.fencing_token().await.unwrap();
    assert_eq!(first, 1);
    assert!(redlock.settle(Duration::from_secs(5)).await);
    assert_eq!(count("evalsha").await - scripts, 6);
    lock.release().await.unwrap();
    assert!(redlock.settle(Duration::from_secs(5)).await);

    // From then on, the acquisition records the next token (ACQUIRE), on every node here;
    // asking sends nothing.
    let scripts = count("evalsha").await;
    let lock = redlock.try_lock("asked").await.unwrap();
    assert!(redlock.settle(Duration::from_secs(5)).await);
    assert_eq!(count("evalsha").await - scripts, 3);
    assert_eq!(counters(&q, "asked").await, [Some(2); 3]);
    assert_eq!(lock.fencing_token().await.unwrap(), 2);
    assert!(redlock.settle(Duration::from_secs(5)).await);
    assert_eq!(count("evalsha").await - scripts, 3);
    lock.release().await.unwrap();

    // Another client's token in between: the expected token (3) is not above the counters
    // any more, the acquisition records nothing, and asking takes a FENCE round.
    let other = client(&q).await;
    let lock = other.try_lock("asked").await.unwrap();
    assert_eq!(lock.fencing_token().await.unwrap(), 3);
    lock.release().await.unwrap();
    assert!(other.settle(Duration::from_secs(5)).await);
    let scripts = count("evalsha").await;
    let lock = redlock.try_lock("asked").await.unwrap();
    assert!(redlock.settle(Duration::from_secs(5)).await);
    assert_eq!(count("evalsha").await - scripts, 3);
    assert_eq!(counters(&q, "asked").await, [Some(3); 3]);
    assert_eq!(lock.fencing_token().await.unwrap(), 4);
    assert!(redlock.settle(Duration::from_secs(5)).await);
    assert_eq!(count("evalsha").await - scripts, 6);
    lock.release().await.unwrap();
}

/// An acquisition records the token it expects only where a majority of the nodes that
/// granted it had their counters below it. Here node 0 has a counter far above (as a token
/// recorded on that node alone leaves it: never handed out) and refuses the lock (another
/// owner's key): nodes 1 and 2 grant it and record the expected token, which is handed out
/// without a round of its own. Then with two nodes above it, any majority that grants the
/// lock has a node above it: the acquisition records nothing that counts, and the token
/// asked for is one more than the largest counter of the majority that recorded it.
#[tokio::test]
async fn an_acquisition_records_its_expected_token_only_on_a_majority() {
    let q = LocalQuorum::start(3).await.unwrap();
    let redlock = client(&q).await;
    let lock = redlock.try_lock("expected").await.unwrap();
    assert_eq!(lock.fencing_token().await.unwrap(), 1);
    lock.release().await.unwrap();

    let command = |node: usize, args: &'static [&'static str]| {
        let q = &q;
        async move {
            q.node(node).command(args).await.unwrap();
        }
    };
    command(0, &["SET", "quorumlock:fence:expected", "100"]).await;
    command(0, &["SET", "expected", "another-owner", "PX", "60000"]).await;
    assert!(redlock.settle(Duration::from_secs(5)).await);
    let scripts = common::calls_on_all(&q, "evalsha").await;
    let lock = redlock.try_lock("expected").await.unwrap();
    assert_eq!(lock.acquired_on(), 2);
    assert_eq!(lock.fencing_token().await.unwrap(), 2);
    assert!(redlock.settle(Duration::from_secs(5)).await);
    assert_eq!(common::calls_on_all(&q, "evalsha").await - scripts, 3);
    assert_eq!(
        counters(&q, "expected").await,
        [Some(100), Some(2), Some(2)]
    );
    lock.release().await.unwrap();
    command(0, &["DEL", "expected"]).await;

    command(1, &["SET", "quorumlock:fence:expected", "200"]).await;
    assert!(redlock.settle(Duration::from_secs(5)).await);
    let scripts = common::calls_on_all(&q, "evalsha").await;
    let lock = redlock.try_lock("expected").await.unwrap();
    let token = lock.fencing_token().await.unwrap();
    assert!(redlock.settle(Duration::from_secs(5)).await);
    assert_eq!(common::calls_on_all(&q, "evalsha").await - scripts, 6);
    // Decided by whichever two nodes answered first: the largest counter among them, plus one.
    assert!(token == 101 || token == 201, "token {token}");
    assert_eq!(counter(&q, 1, "expected").await, Some(token.max(200)));
    lock.release().await.unwrap();
}

/// A token is handed out only while the lock is valid: asked for after the validity ended,
/// it is refused and nothing is sent, even if it was handed out before.
#[tokio::test]
async fn a_token_asked_for_after_the_validity_ended_is_refused() {
    let q = LocalQuorum::start(3).await.unwrap();
    let redlock = client(&q).await;
    let ttl = Duration::from_millis(300);
    let late = redlock.lock_with("late", ttl, Retry::none()).await.unwrap();
    tokio::time::sleep_until(late.valid_until().into()).await;
    match late.fencing_token().await {
        Err(Error::Expired { resource, .. }) => assert_eq!(resource, "late"),
        other => panic!("{other:?}"),
    }
    for n in 0..3 {
        assert_eq!(counter(&q, n, "late").await, None, "node {n}");
    }
    let early = redlock
        .lock_with("early", ttl, Retry::none())
        .await
        .unwrap();
    early.fencing_token().await.unwrap();
    tokio::time::sleep_until(early.valid_until().into()).await;
    assert!(matches!(
        early.fencing_token().await,
        Err(Error::Expired { .. })
    ));
}

/// The round that records the token counts against the lock's validity, as the
/// acquisition's round does: a token recorded only after the validity ended is refused.
#[tokio::test]
async fn a_token_recorded_after_the_validity_ended_is_refused() {
    let mut q = LocalQuorum::start(3).await.unwrap();
    // A large drift allowance: the keys outlive the client's validity by a second, so the
    // nodes still hold them when they answer.
    let builder = common::builder(&q)
        .drift_factor(0.5)
        .node_timeout(Duration::from_secs(10));
    let redlock = common::connected(builder).await;
    let lock = redlock
        .lock_with("slow", Duration::from_secs(2), Retry::none())
        .await
        .unwrap();
    assert!(redlock.settle(Duration::from_secs(5)).await);
    q.node_mut(0).freeze().unwrap();
    q.node_mut(1).freeze().unwrap();
    let valid_until = lock.valid_until();
    let (token, ()) = tokio::join!(lock.fencing_token(), async {
        // The rounds wait for the frozen majority until the validity has ended.
        tokio::time::sleep_until(valid_until.into()).await;
        q.node_mut(0).resume().unwrap();
        q.node_mut(1).resume().unwrap();
    });
    match token {
        Err(Error::Expired { .. }) => {}
        other => panic!("{other:?}"),
    }
    // The nodes did record it (they still held the keys): the next token is larger anyway.
    let recorded = {
        let mut n = 0;
        for node in 0..3 {
            n += usize::from(counter(&q, node, "slow").await.is_some());
        }
        n
    };
    assert!(recorded >= 2, "recorded on {recorded} nodes");
}

/// FENCE records a token only where our token still holds the lock keys: a holder whose keys
/// were lost and taken over gets no token, even while its own clock says the lock is valid.
#[tokio::test]
async fn a_holder_whose_keys_were_taken_over_gets_no_token() {
    let q = LocalQuorum::start(3).await.unwrap();
    let (a, b) = (client(&q).await, client(&q).await);
    let lock_a = a.lock_with("stolen", LONG, Retry::none()).await.unwrap();
    assert!(a.settle(Duration::from_secs(5)).await);
    // As if the nodes had lost the keys (evicted, or a node clock that jumped).
    for node in q.nodes() {
        assert_eq!(
            node.command(&["DEL", "stolen"]).await.unwrap(),
            Reply::Integer(1)
        );
    }
    let lock_b = b.lock_with("stolen", LONG, Retry::none()).await.unwrap();
    let token_b = lock_b.fencing_token().await.unwrap();
    assert!(lock_a.is_valid());
    match lock_a.fencing_token().await {
        Err(Error::NotHeld { held: 0, .. }) => {}
        other => panic!("{other:?}"),
    }
    lock_b.release().await.unwrap();
    let next = b.try_lock("stolen").await.unwrap();
    assert!(next.fencing_token().await.unwrap() > token_b);
    next.release().await.unwrap();
}

/// A kept lock and its handles share one token, recorded by whichever asks first; once the
/// lock is released, the handles refuse to hand it out.
#[tokio::test]
async fn a_kept_lock_and_its_handles_share_one_token() {
    let q = LocalQuorum::start(3).await.unwrap();
    let redlock = client(&q).await;
    let kept = redlock
        .lock("kept")
        .await
        .unwrap()
        .keep_alive(KeepAlive::new())
        .unwrap();
    let handle = kept.handle();
    let token = handle.fencing_token().await.unwrap();
    assert_eq!(kept.fencing_token().await.unwrap(), token);
    assert_eq!(kept.handle().fencing_token().await.unwrap(), token);
    let mut recorded = 0;
    for n in 0..3 {
        recorded += usize::from(counter(&q, n, "kept").await == Some(token));
    }
    assert!(recorded >= 2, "recorded on {recorded} nodes");
    kept.release().await.unwrap();
    match handle.fencing_token().await {
        Err(Error::Lost { resource, .. }) => assert_eq!(resource, "kept"),
        other => panic!("{other:?}"),
    }
    let next = redlock.try_lock("kept").await.unwrap();
    assert!(next.fencing_token().await.unwrap() > token);
    next.release().await.unwrap();
}

/// Any two majorities share a node, so a minority that loses its counters cannot make a
/// token go back.
#[tokio::test]
async fn tokens_keep_growing_when_a_minority_loses_its_counters() {
    let q = LocalQuorum::start(3).await.unwrap();
    let redlock = client(&q).await;
    let mut last = 0;
    for round in 0..6 {
        let lock = redlock.try_lock("amnesia").await.unwrap();
        let token = lock.fencing_token().await.unwrap();
        assert!(token > last, "round {round}: token {token} after {last}");
        last = token;
        lock.release().await.unwrap();
        // Only a minority may be without its data at any time: wait until the node flushed
        // last round is re-seeded (it has a marker again), which this round's traffic set off.
        common::eventually("every node has a marker", || async {
            for n in 0..3 {
                if common::get(q.node(n), "quorumlock:node").await.is_none() {
                    return false;
                }
            }
            true
        })
        .await;
        // The nodes that carry the token: its counter, or the floor of the marker a node
        // was re-seeded with. A won FENCE round raised the counter on a majority; the third
        // node may lack it for good (not yet re-seeded when the FENCE reached it, and
        // surveyed for its floor before the FENCE landed elsewhere).
        let mut carriers = Vec::new();
        for n in 0..3 {
            let floor = common::get(q.node(n), "quorumlock:node")
                .await
                .and_then(|m| m.split(':').nth(1)?.parse::<u64>().ok());
            if counter(&q, n, "amnesia").await.max(floor) >= Some(last) {
                carriers.push(n);
            }
        }
        assert!(
            carriers.len() >= 2,
            "round {round}: token {last} on {carriers:?}"
        );
        // Flush a node that carries it, in turn, so that the flush really removes it.
        let victim = (0..3)
            .map(|k| (round + k) % 3)
            .find(|n| carriers.contains(n))
            .unwrap();
        let flushed = q.node(victim).command(&["FLUSHALL"]).await.unwrap();
        assert_eq!(flushed, Reply::Status("OK".into()));
    }
}

#[tokio::test]
async fn without_fencing_there_is_no_token_and_no_counter() {
    let q = LocalQuorum::start(3).await.unwrap();
    let redlock = common::connected(common::builder(&q).fencing(false)).await;
    let lock = redlock.try_lock("unfenced").await.unwrap();
    assert!(
        matches!(
            lock.fencing_token().await,
            Err(Error::Config(ConfigError::FencingOff))
        ),
        "a lock without fencing has no token"
    );
    assert!(holders(&q, "unfenced").await >= 2);
    for n in 0..3 {
        assert_eq!(counter(&q, n, "unfenced").await, None);
    }
    lock.release().await.unwrap();
}

#[tokio::test]
async fn a_multi_resource_token_exceeds_the_tokens_of_each_resource() {
    let q = LocalQuorum::start(3).await.unwrap();
    let redlock = client(&q).await;
    let mut a_token = 0;
    for _ in 0..3 {
        let lock = redlock.try_lock("a").await.unwrap();
        a_token = lock.fencing_token().await.unwrap();
        lock.release().await.unwrap();
    }
    let b = redlock.try_lock("b").await.unwrap();
    let b_token = b.fencing_token().await.unwrap();
    b.release().await.unwrap();

    let both = redlock.lock_all(&["b", "a"]).await.unwrap();
    assert_eq!(both.resources(), ["b", "a"]);
    assert_eq!(both.resource(), "b,a");
    let token = both.fencing_token().await.unwrap();
    assert!(
        token > a_token && token > b_token,
        "{token} vs {a_token}, {b_token}"
    );
    both.release().await.unwrap();
    let b_again = redlock.try_lock("b").await.unwrap();
    assert!(b_again.fencing_token().await.unwrap() > token);
    b_again.release().await.unwrap();
}

#[tokio::test]
async fn a_multi_resource_lock_is_all_or_nothing() {
    let q = LocalQuorum::start(3).await.unwrap();
    let (a, b) = (client(&q).await, client(&q).await);
    let held = a.lock_with("m2", LONG, Retry::none()).await.unwrap();
    match b
        .lock_all_with(&["m1", "m2", "m3"], LONG, Retry::none())
        .await
    {
        Err(Error::Taken { .. }) => {}
        other => panic!("{other:?}"),
    }
    // Nothing of the failed attempt is left on any node (the nodes that had not answered
    // when it was decided are released in the background), and the held key is untouched.
    for key in ["m1", "m3"] {
        common::no_holders(&q, key).await;
    }
    let token = held.token().as_str().to_string();
    assert!(
        {
            let mut ours = 0;
            for n in q.nodes() {
                if get(n, "m2").await.as_deref() == Some(token.as_str()) {
                    ours += 1;
                }
            }
            ours
        } >= 2
    );
    held.release().await.unwrap();
    let all = b
        .lock_all_with(&["m1", "m2", "m3"], LONG, Retry::none())
        .await
        .unwrap();
    for key in ["m1", "m2", "m3"] {
        assert!(holders(&q, key).await >= 2, "{key}");
    }
    all.release().await.unwrap();
    common::eventually("all three released", || async {
        holders(&q, "m1").await + holders(&q, "m2").await + holders(&q, "m3").await == 0
    })
    .await;
}

/// Two clients lock overlapping sets in opposite orders, many times: every call completes
/// (no deadlock), and no two holders of overlapping sets are ever inside at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_sets_in_opposite_orders_neither_deadlock_nor_overlap() {
    let q = LocalQuorum::start(3).await.unwrap();
    let inside = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for set in [["x", "y", "z"], ["z", "y", "x"], ["y", "z", "w"]] {
        let redlock = client(&q).await;
        let (inside, done) = (Arc::clone(&inside), Arc::clone(&done));
        tasks.push(tokio::spawn(async move {
            let retry = Retry::within(Duration::from_secs(20))
                .delay(Duration::from_millis(1))
                .jitter(Duration::from_millis(5));
            for _ in 0..15 {
                let lock = redlock
                    .lock_all_with(&set, Duration::from_secs(5), retry)
                    .await
                    .expect("no deadlock: every call gets the lock in time");
                assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                tokio::time::sleep(Duration::from_millis(1)).await;
                inside.store(false, Ordering::SeqCst);
                done.fetch_add(1, Ordering::SeqCst);
                lock.release().await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(done.load(Ordering::SeqCst), 45);
}

/// A node restarted without persistence has lost our key: the extension does not count it,
/// and puts the key (and its fencing counter) back there for the next one.
#[tokio::test]
async fn an_extension_restores_the_key_on_a_node_that_restarted_empty() {
    let mut q = LocalQuorum::start_with(3, NodeOptions::volatile())
        .await
        .unwrap();
    let redlock = client(&q).await;
    let mut lock = redlock
        .lock_with("restored", LONG, Retry::none())
        .await
        .unwrap();
    let token = lock.token().as_str().to_string();
    let fence = lock.fencing_token().await.unwrap();
    q.node_mut(0).kill().await.unwrap();
    q.node_mut(0).restart().await.unwrap();
    assert_eq!(get(q.node(0), "restored").await, None);
    // The first extension after the restart may find node 0 still reconnecting; one that
    // reaches it restores the key there (in the background).
    let mut restored = false;
    for _ in 0..200 {
        lock.extend().await.unwrap();
        if get(q.node(0), "restored").await.is_some() {
            restored = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(restored, "the key was never restored on node 0");
    assert_eq!(get(q.node(0), "restored").await, Some(token));
    assert_eq!(counter(&q, 0, "restored").await, Some(fence));
    lock.release().await.unwrap();
}

/// Restoring never revives a lost lock: when a majority lost the keys, the extension fails
/// and sets nothing anywhere.
#[tokio::test]
async fn an_extension_does_not_revive_a_lock_lost_on_a_majority() {
    let q = LocalQuorum::start(3).await.unwrap();
    let redlock = client(&q).await;
    let mut lock = redlock
        .lock_with("gone", LONG, Retry::none())
        .await
        .unwrap();
    common::eventually("all three nodes hold the key", || async {
        holders(&q, "gone").await == 3
    })
    .await;
    for n in 0..2 {
        assert_eq!(
            q.node(n).command(&["DEL", "gone"]).await.unwrap(),
            Reply::Integer(1)
        );
    }
    match lock.extend().await {
        Err(Error::NotHeld { held, .. }) => assert!(held <= 1),
        other => panic!("{other:?}"),
    }
    assert!(!lock.is_valid());
    // A later command on the same connections runs after anything the extension sent.
    lock.release().await.ok();
    for n in 0..2 {
        assert_eq!(get(q.node(n), "gone").await, None, "node {n}");
    }
}

/// An extension sends nothing more to nodes that kept the keys: no restore goes to the nodes
/// that had not answered when it was decided, since they answer "kept" too.
#[tokio::test]
async fn an_extension_restores_nothing_where_the_keys_are() {
    let q = LocalQuorum::start(5).await.unwrap();
    let redlock = client(&q).await;
    let mut lock = redlock
        .lock_with("kept", LONG, Retry::none())
        .await
        .unwrap();
    assert!(redlock.settle(Duration::from_secs(5)).await);
    // Commands run by the scripts are counted too: EXTEND runs PEXPIRE on each key, RESTORE
    // runs SET.
    let count = |command: &'static str| common::calls_on_all(&q, command);
    let (pexpire, set) = (count("pexpire").await, count("set").await);
    const EXTENSIONS: u64 = 10;
    for _ in 0..EXTENSIONS {
        lock.extend().await.unwrap();
    }
    assert!(redlock.settle(Duration::from_secs(5)).await);
    // Every node extended the key every time, and nothing was restored anywhere (before,
    // each extension also sent a restore to the two nodes that had not answered when it
    // was decided).
    assert_eq!(count("pexpire").await - pexpire, EXTENSIONS * 5);
    assert_eq!(count("set").await - set, 0);
    lock.release().await.unwrap();
}

/// A node that answers "missing" only after the extension was decided (it was frozen) is
/// restored once the extension stands.
#[tokio::test]
async fn a_late_node_that_lost_the_keys_is_restored() {
    let mut q = LocalQuorum::start(3).await.unwrap();
    let redlock =
        common::connected(common::builder(&q).node_timeout(Duration::from_secs(20))).await;
    let mut lock = redlock
        .lock_with("late", LONG, Retry::none())
        .await
        .unwrap();
    let token = lock.token().as_str().to_string();
    assert!(redlock.settle(Duration::from_secs(5)).await);
    assert_eq!(
        q.node(0).command(&["DEL", "late"]).await.unwrap(),
        Reply::Integer(1)
    );
    q.node_mut(0).freeze().unwrap();
    // Decided by nodes 1 and 2; node 0's answer comes after it resumes.
    lock.extend().await.unwrap();
    q.node_mut(0).resume().unwrap();
    assert!(redlock.settle(Duration::from_secs(30)).await);
    assert_eq!(get(q.node(0), "late").await, Some(token));
    lock.release().await.unwrap();
}

/// A node that answers "missing" to an extension only after the lock was released is not
/// restored: the release came first, and a key set after it would hold the resource for a
/// whole ttl in nobody's name, one vote fewer for every other client.
#[tokio::test]
async fn a_late_node_that_lost_the_keys_is_not_restored_after_the_release() {
    let mut q = LocalQuorum::start(3).await.unwrap();
    let redlock =
        common::connected(common::builder(&q).node_timeout(Duration::from_secs(20))).await;
    let mut lock = redlock
        .lock_with("released", LONG, Retry::none())
        .await
        .unwrap();
    assert!(redlock.settle(Duration::from_secs(5)).await);
    assert_eq!(
        q.node(0).command(&["DEL", "released"]).await.unwrap(),
        Reply::Integer(1)
    );
    q.node_mut(0).freeze().unwrap();
    // Both decided by nodes 1 and 2; node 0 runs the extension, then the release, once it
    // resumes, and answers "missing" to the extension after the lock was released.
    lock.extend().await.unwrap();
    lock.release().await.unwrap();
    q.node_mut(0).resume().unwrap();
    assert!(redlock.settle(Duration::from_secs(30)).await);
    for n in 0..3 {
        assert_eq!(get(q.node(n), "released").await, None, "node {n}");
    }
}

/// Nodes that missed an extension (they were frozen) are suspects; when other nodes then
/// answer "missing", the extension still waits for the suspects' answers instead of
/// presuming them failed, and keeps the lock they hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extension_waits_for_suspect_nodes_that_hold_the_keys() {
    let mut q = LocalQuorum::start(5).await.unwrap();
    let redlock = client(&q).await;
    let mut lock = redlock
        .lock_with("suspects", LONG, Retry::none())
        .await
        .unwrap();
    assert!(redlock.settle(Duration::from_secs(5)).await);
    // Nodes 0 and 1 miss an extension: they time out, and become suspects.
    q.node_mut(0).freeze().unwrap();
    q.node_mut(1).freeze().unwrap();
    lock.extend().await.unwrap();
    assert!(redlock.settle(Duration::from_secs(5)).await);
    q.node_mut(0).resume().unwrap();
    q.node_mut(1).resume().unwrap();
    // Nodes 3 and 4 lose the key: only nodes 0, 1 and 2 hold it now, a majority.
    for n in [3, 4] {
        assert_eq!(
            q.node(n).command(&["DEL", "suspects"]).await.unwrap(),
            Reply::Integer(1)
        );
    }
    for _ in 0..20 {
        lock.extend().await.expect("held on nodes 0, 1 and 2");
    }
    lock.release().await.unwrap();
}
