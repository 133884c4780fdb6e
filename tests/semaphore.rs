//! The quorum semaphore (design 2.9) on real servers: grant up to N, refusal beyond, the
//! nodes' record, expiry by the nodes' clocks, extension, loss, waiting for a release,
//! fencing, bad input, and one name for one kind of thing.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{client, HANG, NEVER};
use quorumlock::testkit::{LocalNode, LocalQuorum, Reply};
use quorumlock::{ConfigError, Error, FoundKind, Retry, MAX_PERMITS};

/// The members of the sorted set `key` on `node` with their scores, in score order.
async fn claims(node: &LocalNode, key: &str) -> Vec<(String, f64)> {
    let reply = node
        .command(&["ZRANGE", key, "0", "-1", "WITHSCORES"])
        .await
        .expect("ZRANGE");
    let Reply::Array(Some(items)) = reply else {
        panic!("ZRANGE {key}: {reply:?}");
    };
    items
        .chunks(2)
        .map(|pair| {
            let member = pair[0].as_str().expect("member").to_string();
            let score = pair[1].as_str().expect("score").parse().expect("a score");
            (member, score)
        })
        .collect()
}

/// The keys on `node` but the node's own marker (`quorumlock:node`, design 2.6a).
async fn keys(node: &LocalNode) -> Vec<String> {
    let mut all = common::keys(node).await;
    all.retain(|k| k != "quorumlock:node");
    all
}

/// The node's clock in milliseconds.
async fn node_ms(node: &LocalNode) -> f64 {
    let Reply::Array(Some(t)) = node.command(&["TIME"]).await.expect("TIME") else {
        panic!("TIME");
    };
    let secs: f64 = t[0].as_str().expect("secs").parse().expect("secs");
    let micros: f64 = t[1].as_str().expect("micros").parse().expect("micros");
    secs * 1000.0 + (micros / 1000.0).floor()
}

fn patient() -> Retry {
    Retry::within(NEVER * 10)
        .delay(NEVER)
        .jitter(Duration::ZERO)
}

#[tokio::test]
async fn n_permits_are_granted_on_distinct_slots_and_the_next_is_taken() {
    let q = LocalQuorum::start(3).await.unwrap();
    let (a, b, c) = (client(&q).await, client(&q).await, client(&q).await);
    let sem = |r: &quorumlock::RedLock| r.semaphore("exports", 2).unwrap();

    let first = sem(&a).try_acquire().await.unwrap();
    let second = sem(&b).try_acquire().await.unwrap();
    assert_ne!(first.slot(), second.slot());
    assert!(first.slot() < 2 && second.slot() < 2);
    assert_eq!(first.semaphore(), "exports");
    match sem(&c).try_acquire().await {
        Err(Error::Taken {
            held_elsewhere,
            nodes,
            ..
        }) => {
            assert!(held_elsewhere >= 2, "{held_elsewhere}");
            assert_eq!(nodes, 3);
        }
        other => panic!("a third permit of two: {other:?}"),
    }
    let freed = first.slot();
    first.release().await.unwrap();
    let third = sem(&c).try_acquire().await.unwrap();
    assert_eq!(third.slot(), freed, "the only free slot");
    third.release().await.unwrap();
    second.release().await.unwrap();
}

/// The first claim on a new key is scored `+inf`: it expires with the key, whose ttl is the
/// permit's (design 2.9: no `TIME` on the uncontended path). A second claim dates it first,
/// by the node's clock and the key's ttl, so that each claim keeps its own expiry once they
/// share the key. The last release deletes the key.
#[tokio::test]
async fn the_nodes_hold_one_sorted_set_that_goes_with_the_last_permit() {
    let q = LocalQuorum::start(3).await.unwrap();
    let redlock = client(&q).await;
    let sem = redlock.semaphore("reports", 3).unwrap();
    let first = sem
        .acquire_with(Duration::from_secs(10), Retry::none())
        .await
        .unwrap();
    let claim = format!("{}:{}", first.slot(), first.token().as_str());
    common::eventually("every node recorded the claim", || async {
        let mut all = true;
        for node in q.nodes() {
            all &= claims(node, "reports").await.len() == 2;
        }
        all
    })
    .await;
    for node in q.nodes() {
        let found = claims(node, "reports").await;
        assert_eq!(found[0], ("#".to_string(), -3.0), "the record of N");
        assert_eq!(
            found[1],
            (claim.clone(), f64::INFINITY),
            "expires with the key"
        );
        let pttl = node.command(&["PTTL", "reports"]).await.unwrap().as_int();
        assert!(pttl.is_some_and(|p| p > 9_000 && p <= 10_001), "{pttl:?}");
        // Nothing else: the semaphore is one key (no fencing counter until asked).
        assert_eq!(keys(node).await, ["reports"]);
    }
    let second = sem
        .acquire_with(Duration::from_secs(30), Retry::none())
        .await
        .unwrap();
    let joined = format!("{}:{}", second.slot(), second.token().as_str());
    common::eventually("every node recorded the second claim", || async {
        let mut all = true;
        for node in q.nodes() {
            all &= claims(node, "reports").await.len() == 3;
        }
        all
    })
    .await;
    for node in q.nodes() {
        let now = node_ms(node).await;
        let found = claims(node, "reports").await;
        assert_eq!(found.len(), 3, "{found:?}");
        assert_eq!(
            (found[1].0.as_str(), found[2].0.as_str()),
            (claim.as_str(), joined.as_str())
        );
        let (left_first, left_second) = (found[1].1 - now, found[2].1 - now);
        assert!(
            left_first > 8_000.0 && left_first <= 10_000.0,
            "{left_first}"
        );
        assert!(
            left_second > 28_000.0 && left_second <= 30_000.0,
            "{left_second}"
        );
        let pttl = node.command(&["PTTL", "reports"]).await.unwrap().as_int();
        assert!(pttl.is_some_and(|p| p > 28_000 && p <= 30_001), "{pttl:?}");
    }
    first.release().await.unwrap();
    second.release().await.unwrap();
    common::eventually("the key is gone on every node", || async {
        let mut none = true;
        for node in q.nodes() {
            none &= keys(node).await.is_empty();
        }
        none
    })
    .await;
}

/// A permit left behind on a new key (its claim expires with the key), then a longer permit
/// that lengthens the key: the first claim still expires at its own time, and a waiter gets
/// its slot then, long before the key's ttl. Without the dating of the first claim, the slot
/// would stay taken for the second permit's 30 s and the waiter would give up after 10.
#[tokio::test]
async fn a_first_claim_keeps_its_own_expiry_when_a_longer_one_joins_it() {
    let q = LocalQuorum::start(3).await.unwrap();
    let (a, b) = (client(&q).await, client(&q).await);
    let sem_a = a.semaphore("joined", 2).unwrap();
    let short = sem_a
        .acquire_with(Duration::from_millis(600), Retry::none())
        .await
        .unwrap();
    let (slot, valid_until) = (short.slot(), short.valid_until());
    short.leave();
    let long = sem_a
        .acquire_with(Duration::from_secs(30), Retry::none())
        .await
        .unwrap();
    assert_ne!(long.slot(), slot);
    let waiter = b
        .semaphore("joined", 2)
        .unwrap()
        .acquire_with(
            Duration::from_secs(5),
            Retry::within(Duration::from_secs(10)),
        )
        .await
        .unwrap();
    assert_eq!(waiter.slot(), slot, "the abandoned permit's slot");
    assert!(
        Instant::now() >= valid_until,
        "granted while the abandoned permit was still valid"
    );
    waiter.release().await.unwrap();
    long.release().await.unwrap();
}

/// The census of a lone permit, whose claim expires with its key: its ttl left is the key's.
#[tokio::test]
async fn a_lone_permit_is_listed_with_the_ttl_of_its_key() {
    let q = LocalQuorum::start(3).await.unwrap();
    let redlock = client(&q).await;
    let sem = redlock.semaphore("lone", 2).unwrap();
    let ttl = Duration::from_secs(10);
    let permit = sem.acquire_with(ttl, Retry::none()).await.unwrap();
    assert!(redlock.settle(Duration::from_secs(5)).await);
    let holders = sem.holders().await.unwrap();
    assert_eq!(holders.len(), 1, "{holders:?}");
    assert_eq!((holders[0].slot, holders[0].nodes), (permit.slot(), 3));
    assert!(
        holders[0].ttl > Duration::from_secs(8) && holders[0].ttl <= ttl,
        "{holders:?}"
    );
    permit.release().await.unwrap();
}

#[tokio::test]
async fn an_abandoned_permit_is_reclaimed_by_the_nodes_clocks_and_not_before() {
    let q = LocalQuorum::start(3).await.unwrap();
    let (a, b) = (client(&q).await, client(&q).await);
    let left = a
        .semaphore("solo", 1)
        .unwrap()
        .acquire_with(Duration::from_millis(600), Retry::none())
        .await
        .unwrap();
    let valid_until = left.valid_until();
    left.leave();
    let sem = b.semaphore("solo", 1).unwrap();
    let mut refused = 0;
    let permit = loop {
        match sem.try_acquire().await {
            Ok(permit) => break permit,
            Err(Error::Taken { .. }) => refused += 1,
            Err(other) => panic!("{other}"),
        }
        assert!(refused < 10_000, "never reclaimed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        Instant::now() >= valid_until,
        "granted while the abandoned permit was still valid"
    );
    assert!(refused > 0, "the abandoned permit was never seen");
    permit.release().await.unwrap();
}

#[tokio::test]
async fn an_extension_moves_the_expiry_and_a_lost_permit_is_told() {
    let q = LocalQuorum::start(3).await.unwrap();
    let redlock = client(&q).await;
    let sem = redlock.semaphore("ext", 2).unwrap();
    let mut permit = sem
        .acquire_with(Duration::from_secs(5), Retry::none())
        .await
        .unwrap();
    let left = permit.extend_for(Duration::from_secs(40)).await.unwrap();
    assert!(left > Duration::from_secs(35), "{left:?}");
    // Extended at the quorum: the last node's extension lands in the background (read
    // before it, that node still has the 5 s claim).
    assert!(redlock.settle(Duration::from_secs(10)).await);
    let claim = format!("{}:{}", permit.slot(), permit.token().as_str());
    for node in q.nodes() {
        let now = node_ms(node).await;
        let found = claims(node, "ext").await;
        let mine = found.iter().find(|(m, _)| *m == claim);
        // The only claim on a new key expires with the key: the extension moved the key's
        // ttl.
        if let Some((_, expiry)) = mine {
            let left = if expiry.is_infinite() {
                let pttl = node.command(&["PTTL", "ext"]).await.unwrap().as_int();
                pttl.expect("a ttl") as f64
            } else {
                *expiry - now
            };
            assert!(left > 5_000.0, "{left} ms left");
        }
    }
    // Every claim removed behind the holder's back: the permit is lost.
    for node in q.nodes() {
        node.command(&["ZREM", "ext", &claim]).await.unwrap();
    }
    match permit.extend().await {
        Err(Error::NotHeld { held, nodes, .. }) => assert_eq!((held, nodes), (0, 3)),
        other => panic!("extended a lost permit: {other:?}"),
    }
    match permit.release().await {
        Err(Error::NotHeld { held, .. }) => assert_eq!(held, 0),
        other => panic!("released a lost permit: {other:?}"),
    }
}

#[tokio::test]
async fn a_waiter_is_woken_by_a_release_of_another_client() {
    let q = LocalQuorum::start(3).await.unwrap();
    let (a, b) = (client(&q).await, client(&q).await);
    for round in 0..5 {
        let held = a.semaphore("line", 1).unwrap().try_acquire().await.unwrap();
        let sem = b.semaphore("line", 1).unwrap();
        let waiting =
            tokio::spawn(async move { sem.acquire_with(Duration::from_secs(10), patient()).await });
        tokio::time::sleep(Duration::from_millis(round * 7)).await;
        held.release().await.unwrap();
        let got = tokio::time::timeout(HANG, waiting)
            .await
            .unwrap_or_else(|_| panic!("round {round}: the waiter missed the release"))
            .unwrap()
            .unwrap();
        got.release().await.unwrap();
    }
    // Within one client: its own callers wait in line and are woken by its releases.
    let sem = a.semaphore("line", 1).unwrap();
    let held = sem.try_acquire().await.unwrap();
    let queued = {
        let sem = sem.clone();
        tokio::spawn(async move { sem.acquire_with(Duration::from_secs(10), patient()).await })
    };
    tokio::time::sleep(Duration::from_millis(20)).await;
    held.release().await.unwrap();
    let got = tokio::time::timeout(HANG, queued)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    got.release().await.unwrap();
}

#[tokio::test]
async fn fencing_tokens_increase_across_the_permits_of_a_semaphore() {
    let q = LocalQuorum::start(3).await.unwrap();
    let (a, b) = (client(&q).await, client(&q).await);
    let first = a
        .semaphore("fenced", 2)
        .unwrap()
        .try_acquire()
        .await
        .unwrap();
    let second = b
        .semaphore("fenced", 2)
        .unwrap()
        .try_acquire()
        .await
        .unwrap();
    // Asked at once, both read the same counter: the tokens still differ, each naming its
    // permit's slot.
    let (f1, f2) = tokio::join!(first.fencing_token(), second.fencing_token());
    let (f1, f2) = (f1.unwrap(), f2.unwrap());
    assert_ne!(f1, f2);
    assert_eq!(f1 % u64::from(MAX_PERMITS), u64::from(first.slot()));
    assert_eq!(f2 % u64::from(MAX_PERMITS), u64::from(second.slot()));
    let f2 = f1.max(f2);
    assert_eq!(
        first.fencing_token().await.unwrap(),
        f1,
        "one token per permit"
    );
    first.release().await.unwrap();
    let third = a
        .semaphore("fenced", 2)
        .unwrap()
        .try_acquire()
        .await
        .unwrap();
    let f3 = third.fencing_token().await.unwrap();
    assert!(f3 > f2, "{f3} after {f2}");
    // A lost permit gets no token.
    let claim = format!("{}:{}", second.slot(), second.token().as_str());
    for node in q.nodes() {
        node.command(&["ZREM", "fenced", &claim]).await.unwrap();
    }
    let fresh = b
        .semaphore("fenced", 2)
        .unwrap()
        .try_acquire()
        .await
        .unwrap();
    drop(fresh);
    third.release().await.unwrap();
    second.release().await.unwrap_err();
}

#[tokio::test]
async fn bad_input_is_refused_before_anything_is_sent() {
    let q = LocalQuorum::start(3).await.unwrap();
    let redlock = client(&q).await;
    let mut before = Vec::new();
    for node in q.nodes() {
        before.push(common::calls(node, "evalsha").await + common::calls(node, "eval").await);
    }
    for permits in [0, MAX_PERMITS + 1, u32::MAX] {
        match redlock.semaphore("bad", permits) {
            Err(ConfigError::InvalidPermits { permits: p }) => assert_eq!(p, permits),
            other => panic!("{permits} permits: {other:?}"),
        }
    }
    assert!(matches!(
        redlock.semaphore("", 2),
        Err(ConfigError::EmptyResource)
    ));
    assert!(matches!(
        redlock.semaphore("quorumlock:fence:x", 2),
        Err(ConfigError::ReservedResource(_))
    ));
    let sem = redlock.semaphore("bad", MAX_PERMITS).unwrap();
    assert!(matches!(
        sem.acquire_with(Duration::ZERO, Retry::none()).await,
        Err(Error::Config(ConfigError::ZeroTtl))
    ));
    for (node, before) in q.nodes().iter().zip(before) {
        assert_eq!(keys(node).await, Vec::<String>::new());
        let after = common::calls(node, "evalsha").await + common::calls(node, "eval").await;
        assert_eq!(after, before, "a script was sent");
    }
    // The largest number of permits works.
    let permit = sem.try_acquire().await.unwrap();
    assert!(permit.slot() < MAX_PERMITS);
    permit.release().await.unwrap();
}

#[tokio::test]
async fn one_name_is_one_kind_of_thing() {
    let q = LocalQuorum::start(3).await.unwrap();
    let (a, b) = (client(&q).await, client(&q).await);

    // A lock's key: a semaphore of that name is refused, and the lock is untouched.
    let lock = a.try_lock("shared").await.unwrap();
    common::eventually("every node has the lock", || async {
        common::holders(&q, "shared").await == 3
    })
    .await;
    match b.semaphore("shared", 2).unwrap().try_acquire().await {
        Err(Error::KindMismatch { resource, found }) => {
            assert_eq!(resource, "shared");
            assert_eq!(found, FoundKind::Other);
        }
        other => panic!("a semaphore over a lock: {other:?}"),
    }
    for node in q.nodes() {
        assert_eq!(
            common::get(node, "shared").await.as_deref(),
            Some(lock.token().as_str())
        );
    }
    lock.release().await.unwrap();

    // A semaphore of 2: another number of permits is refused, and nothing changes.
    let permit = a.semaphore("pool", 2).unwrap().try_acquire().await.unwrap();
    common::eventually("every node has the claim", || async {
        let mut all = true;
        for node in q.nodes() {
            all &= claims(node, "pool").await.len() == 2;
        }
        all
    })
    .await;
    let before = claims(q.node(0), "pool").await;
    match b.semaphore("pool", 3).unwrap().try_acquire().await {
        Err(Error::KindMismatch { found, .. }) => {
            assert_eq!(found, FoundKind::Semaphore { permits: 2 });
        }
        other => panic!("3 permits over 2: {other:?}"),
    }
    for node in q.nodes() {
        let now = claims(node, "pool").await;
        assert_eq!(now.len(), 2, "{now:?}");
        assert_eq!(now[1].0, before[1].0);
    }
    // A lock asked where a semaphore is held: the typed error, nothing changed. A call that
    // would wait is told at its first refusal, not after waiting in line (NEVER).
    match b.try_lock("pool").await {
        Err(Error::KindMismatch { resource, found }) => {
            assert_eq!(resource, "pool");
            assert_eq!(found, FoundKind::Semaphore { permits: 2 });
        }
        other => panic!("a lock over a semaphore: {other:?}"),
    }
    let waited = b.lock_with("pool", Duration::from_secs(5), patient());
    match tokio::time::timeout(HANG, waited)
        .await
        .expect("waited in line")
    {
        Err(Error::KindMismatch { found, .. }) => {
            assert_eq!(found, FoundKind::Semaphore { permits: 2 })
        }
        other => panic!("a waited lock over a semaphore: {other:?}"),
    }
    for node in q.nodes() {
        let now = claims(node, "pool").await;
        assert_eq!(now.len(), 2, "{now:?}");
        assert_eq!(now[1].0, before[1].0);
    }
    // A lock held elsewhere is still `Taken`, not a kind of thing.
    let held = a.try_lock("plain").await.unwrap();
    assert!(matches!(
        b.try_lock("plain").await,
        Err(Error::Taken { .. })
    ));
    held.release().await.unwrap();
    permit.release().await.unwrap();
}

#[tokio::test]
async fn a_dropped_permit_and_a_shutdown_release_their_claims() {
    let q = LocalQuorum::start(3).await.unwrap();
    let redlock = client(&q).await;
    let sem = redlock.semaphore("dropped", 2).unwrap();
    drop(sem.try_acquire().await.unwrap());
    common::eventually("the dropped permit's claim is gone", || async {
        let mut none = true;
        for node in q.nodes() {
            none &= keys(node).await.is_empty();
        }
        none
    })
    .await;
    let _kept = sem.try_acquire().await.unwrap();
    let shutdown = redlock.shutdown().await;
    assert_eq!(shutdown.released, 1);
    for node in q.nodes() {
        assert_eq!(keys(node).await, Vec::<String>::new());
    }
}

#[tokio::test]
async fn with_permit_runs_the_work_under_a_kept_permit() {
    let q = LocalQuorum::start(3).await.unwrap();
    let (a, b) = (client(&q).await, client(&q).await);
    let sem = a.semaphore("kept", 1).unwrap();
    let other = b.semaphore("kept", 1).unwrap();
    let refused = sem
        .with_permit(|held| async move {
            assert!(held.is_held());
            // Held for longer than the ttl (10 s would be too long for a test: use the
            // refusal of another client as the evidence that it is held meanwhile).
            other.try_acquire().await.is_err()
        })
        .await
        .unwrap();
    assert!(
        refused,
        "another client got the only permit while the work ran"
    );
    b.semaphore("kept", 1)
        .unwrap()
        .try_acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

/// Many clients racing for 3 permits: never more than 3 hold one at once, by a count kept
/// beside the permits (each holder enters after its grant and leaves before its release).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_clients_never_exceed_the_permits() {
    const PERMITS: usize = 3;
    const TASKS: usize = 12;
    const ROUNDS: usize = 8;
    let q = LocalQuorum::start(5).await.unwrap();
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let granted = Arc::new(AtomicUsize::new(0));
    let start = Arc::new(tokio::sync::Barrier::new(TASKS));
    let mut clients = Vec::new();
    for _ in 0..TASKS {
        clients.push(client(&q).await);
    }
    let mut tasks = Vec::new();
    for redlock in clients {
        let (inside, most, granted) = (inside.clone(), most.clone(), granted.clone());
        let start = start.clone();
        tasks.push(tokio::spawn(async move {
            let sem = redlock.semaphore("race", PERMITS as u32).unwrap();
            let retry = Retry::within(HANG).delay(Duration::from_millis(20));
            start.wait().await;
            for _ in 0..ROUNDS {
                let permit = sem
                    .acquire_with(Duration::from_secs(10), retry)
                    .await
                    .expect("a permit");
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                granted.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(15)).await;
                assert!(permit.is_valid());
                inside.fetch_sub(1, Ordering::SeqCst);
                permit.release().await.expect("released");
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(granted.load(Ordering::SeqCst), TASKS * ROUNDS);
    let most = most.load(Ordering::SeqCst);
    assert!(most <= PERMITS, "{most} holders of {PERMITS} permits");
}

/// A caller granted a permit while another slot is still free lets the next caller of its
/// line attempt at once: here the second slot was freed by an expiry, which sends no
/// message, so the second caller would otherwise wait for a release that never comes.
#[tokio::test]
async fn the_next_in_line_attempts_at_once_while_a_slot_is_free() {
    let q = LocalQuorum::start(3).await.unwrap();
    let (a, b) = (client(&q).await, client(&q).await);
    let theirs = b.semaphore("room", 2).unwrap();
    let held = theirs.try_acquire().await.unwrap();
    let expiring = theirs
        .acquire_with(Duration::from_millis(400), Retry::none())
        .await
        .unwrap();
    let claim = format!("{}:{}", expiring.slot(), expiring.token().as_str());
    expiring.leave();
    let ours = a.semaphore("room", 2).unwrap();
    let wait = |ours: quorumlock::Semaphore| {
        tokio::spawn(async move { ours.acquire_with(Duration::from_secs(10), patient()).await })
    };
    // The first caller is refused twice (its attempt, and its first as the head of the
    // line) and waits; the second joins the line behind it without an attempt.
    let mut waiting = vec![wait(ours.clone())];
    common::eventually("the first caller waits in line", || async {
        a.stats().taken == 2
    })
    .await;
    waiting.push(wait(ours.clone()));
    common::eventually("the left permit expired on every node", || async {
        let mut expired = true;
        for node in q.nodes() {
            let now = node_ms(node).await;
            expired &= claims(node, "room")
                .await
                .iter()
                .all(|(m, score)| *m != claim || *score <= now);
        }
        expired
    })
    .await;
    assert_eq!(a.stats().attempts, 2, "the second caller made no attempt");
    held.release().await.unwrap();
    let mut slots = Vec::new();
    for task in waiting {
        let permit = tokio::time::timeout(HANG, task)
            .await
            .expect("the second caller waited for a release that never came")
            .unwrap()
            .unwrap();
        slots.push(permit.slot());
        permit.leave();
    }
    slots.sort_unstable();
    assert_eq!(slots, [0, 1]);
}

/// A permit released while a caller of the same client waits for a permit of the same
/// semaphore is handed straight to it: the slot is never free between them, and the waiter
/// makes no attempt. A caller waiting for a *lock* of that name is never handed a permit.
#[tokio::test]
async fn a_permit_is_handed_to_a_waiter_of_its_client_and_never_to_a_lock_waiter() {
    let q = LocalQuorum::start(3).await.unwrap();
    let redlock = client(&q).await;
    let sem = redlock.semaphore("handed", 1).unwrap();
    let held = sem.try_acquire().await.unwrap();
    let (slot, old) = (held.slot(), held.token().as_str().to_string());
    let waiting = {
        let sem = sem.clone();
        tokio::spawn(async move { sem.acquire_with(Duration::from_secs(10), patient()).await })
    };
    common::eventually("the waiter waits in line", || async {
        redlock.stats().taken == 2
    })
    .await;
    let attempts = redlock.stats().attempts;
    held.release().await.unwrap();
    let got = tokio::time::timeout(HANG, waiting)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(redlock.stats().handed_over, 1);
    assert_eq!(
        redlock.stats().attempts,
        attempts,
        "the waiter made no attempt"
    );
    assert_eq!(got.slot(), slot);
    // Handed over at the quorum: the last node's swap of the claims lands in the background
    // (read before it, that node still has the old claim).
    assert!(redlock.settle(Duration::from_secs(10)).await);
    let claim = format!("{slot}:{}", got.token().as_str());
    for node in q.nodes() {
        let members: Vec<String> = claims(node, "handed")
            .await
            .into_iter()
            .map(|c| c.0)
            .collect();
        assert!(!members.iter().any(|m| m.ends_with(&old)), "{members:?}");
        if members.len() == 2 {
            assert_eq!(members[1], claim);
        }
    }
    got.release().await.unwrap();

    // A lock waiter behind a permit of the same name gets a lock, never the permit. (A lock
    // refused by a semaphore is told so at once, `one_name_is_one_kind_of_thing`: here the
    // waiter joins the line behind another client's lock, whose key then goes without a
    // release message, as an expiry would, and this client takes a permit meanwhile.)
    let other = client(&q).await;
    let blocking = other.try_lock("handed").await.unwrap();
    let lock_waiter = {
        let redlock = redlock.clone();
        tokio::spawn(async move {
            redlock
                .lock_with("handed", Duration::from_secs(10), patient())
                .await
        })
    };
    // Refused twice: its first attempt, and the head's attempt after its subscription.
    common::eventually("the lock waiter waits in line", || async {
        redlock.stats().taken == 4
    })
    .await;
    blocking.leave();
    for node in q.nodes() {
        node.command(&["DEL", "handed"]).await.unwrap();
    }
    let permit = sem.try_acquire().await.unwrap();
    permit.release().await.unwrap();
    let lock = tokio::time::timeout(HANG, lock_waiter)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(
        redlock.stats().handed_over,
        1,
        "no handover to the lock waiter"
    );
    // Granted at the quorum: on the last node the permit's release and then the lock's SET
    // land in the background (read before them, the node still has the permit's sorted set,
    // which GET refuses with WRONGTYPE).
    assert!(redlock.settle(Duration::from_secs(10)).await);
    assert_eq!(common::holders(&q, "handed").await, 3);
    for node in q.nodes() {
        assert_eq!(
            common::get(node, "handed").await.as_deref(),
            Some(lock.token().as_str())
        );
    }
    lock.release().await.unwrap();
}

/// A permit's token is above every token handed out before it was *asked for*, not only
/// before the permit was acquired: here a permit handed over (its acquisition) and another
/// permit's token handed out after it, before its own ask. (A permit handed over used to
/// read the counters at the handover: a token below one handed out before it was asked.)
#[tokio::test]
async fn a_permits_token_is_above_every_token_handed_out_before_it_was_asked() {
    let q = LocalQuorum::start(3).await.unwrap();
    let redlock = client(&q).await;
    let sem = redlock.semaphore("asked", 2).unwrap();
    // This client's locks have had a token asked for: handovers read the counters.
    let warm = sem.try_acquire().await.unwrap();
    warm.fencing_token().await.unwrap();
    warm.release().await.unwrap();
    let (a, b) = (
        sem.try_acquire().await.unwrap(),
        sem.try_acquire().await.unwrap(),
    );
    let (low, high) = if a.slot() < b.slot() { (a, b) } else { (b, a) };
    let waiting = {
        let sem = sem.clone();
        tokio::spawn(async move { sem.acquire_with(Duration::from_secs(10), patient()).await })
    };
    common::eventually("the waiter waits in line", || async {
        redlock.stats().taken >= 2
    })
    .await;
    low.release().await.unwrap();
    let handed = tokio::time::timeout(HANG, waiting)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(redlock.stats().handed_over, 1);
    let before = high.fencing_token().await.unwrap();
    let token = handed.fencing_token().await.unwrap();
    assert!(token > before, "{token} after {before}");
    handed.release().await.unwrap();
    high.release().await.unwrap();
}
