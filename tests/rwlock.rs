//! The quorum read-write lock (design 2.9) on real servers: readers share, a writer is
//! alone, writers go first, the intent goes with its writer, one name is one kind of thing,
//! fencing, and racing clients checked beside the locks.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{client, HANG, NEVER};
use quorumlock::testkit::{LocalNode, LocalQuorum, Reply};
use quorumlock::RedLock;
use quorumlock::{Access, Error, FoundKind, Retry};

fn patient() -> Retry {
    Retry::within(NEVER * 10)
        .delay(NEVER)
        .jitter(Duration::ZERO)
}

/// Waits until every node has answered each of `clients`' calls: a round returns with a
/// majority, and the rest of its calls land in the background, so a check on every node, or
/// another client's call that must meet them, comes after this.
async fn settle(clients: &[&RedLock]) {
    for redlock in clients {
        assert!(redlock.settle(HANG).await, "every node answered");
    }
}

/// The members of the sorted set `key` on `node`, in score order.
async fn members(node: &LocalNode, key: &str) -> Vec<String> {
    let reply = node
        .command(&["ZRANGE", key, "0", "-1"])
        .await
        .expect("ZRANGE");
    let Reply::Array(Some(items)) = reply else {
        panic!("ZRANGE {key}: {reply:?}");
    };
    items
        .iter()
        .map(|m| m.as_str().expect("member").to_string())
        .collect()
}

#[tokio::test]
async fn readers_share_and_a_writer_is_alone() {
    let q = LocalQuorum::start(3).await.unwrap();
    let (a, b, c) = (client(&q).await, client(&q).await, client(&q).await);
    let r1 = a.rw_lock("catalog").unwrap().try_read().await.unwrap();
    let r2 = b.rw_lock("catalog").unwrap().try_read().await.unwrap();
    assert_eq!((r1.access(), r2.access()), (Access::Read, Access::Read));
    assert!(matches!(
        c.rw_lock("catalog").unwrap().try_write().await,
        Err(Error::Taken { .. })
    ));
    r1.release().await.unwrap();
    r2.release().await.unwrap();
    // The readers gone from every node, or a node still holding one refuses the writer.
    settle(&[&a, &b]).await;
    let w = c.rw_lock("catalog").unwrap().try_write().await.unwrap();
    assert_eq!(w.access(), Access::Write);
    assert!(matches!(
        a.rw_lock("catalog").unwrap().try_read().await,
        Err(Error::Taken { .. })
    ));
    assert!(matches!(
        b.rw_lock("catalog").unwrap().try_write().await,
        Err(Error::Taken { .. })
    ));
    let claim = format!("w:{}", w.token().as_str());
    settle(&[&a, &b, &c]).await;
    for node in q.nodes() {
        assert_eq!(
            members(node, "catalog").await,
            ["#rw".to_string(), claim.clone()]
        );
    }
    w.release().await.unwrap();
    common::eventually("the key is gone with its last claim", || async {
        let mut none = true;
        for node in q.nodes() {
            none &= common::get_type(node, "catalog").await == "none";
        }
        none
    })
    .await;
}

/// A reader left behind on a new key (its claim expires with the key), then a longer reader
/// that lengthens the key and releases: the first reader still expires at its own time, and
/// a waiting writer is granted then. Without the dating of the first claim when the second
/// joined, it would live as long as the key (30 s) and the writer would give up after 10.
#[tokio::test]
async fn a_first_reader_keeps_its_own_expiry_when_a_longer_one_joins_it() {
    let q = LocalQuorum::start(3).await.unwrap();
    let (a, b) = (client(&q).await, client(&q).await);
    let lock = a.rw_lock("joined").unwrap();
    let short = lock
        .acquire(Access::Read, Duration::from_millis(600), Retry::none())
        .await
        .unwrap();
    let valid_until = short.valid_until();
    // Abandoned, as by a process that died: never released.
    std::mem::forget(short);
    let long = lock
        .acquire(Access::Read, Duration::from_secs(30), Retry::none())
        .await
        .unwrap();
    long.release().await.unwrap();
    let writer = b
        .rw_lock("joined")
        .unwrap()
        .acquire(
            Access::Write,
            Duration::from_secs(5),
            Retry::within(Duration::from_secs(10)),
        )
        .await
        .unwrap();
    assert!(
        std::time::Instant::now() >= valid_until,
        "a writer granted while the abandoned reader was still valid"
    );
    writer.release().await.unwrap();
}

#[tokio::test]
async fn a_waiting_writer_goes_before_readers_that_come_after_it() {
    let q = LocalQuorum::start(3).await.unwrap();
    let (a, b, c) = (client(&q).await, client(&q).await, client(&q).await);
    let reading = a.rw_lock("doc").unwrap().try_read().await.unwrap();
    let writer = {
        let lock = b.rw_lock("doc").unwrap();
        tokio::spawn(async move {
            lock.acquire(Access::Write, Duration::from_secs(10), patient())
                .await
        })
    };
    common::eventually("the writer's intent is on every node", || async {
        let mut all = true;
        for node in q.nodes() {
            all &= members(node, "doc")
                .await
                .iter()
                .any(|m| m.starts_with("i:"));
        }
        all
    })
    .await;
    // A reader arriving now is refused although only a reader holds.
    assert!(matches!(
        c.rw_lock("doc").unwrap().try_read().await,
        Err(Error::Taken { .. })
    ));
    reading.release().await.unwrap();
    let writing = tokio::time::timeout(HANG, writer)
        .await
        .expect("the writer missed the release")
        .unwrap()
        .unwrap();
    assert_eq!(writing.access(), Access::Write);
    // Its intent went with its grant.
    settle(&[&b]).await;
    for node in q.nodes() {
        let now = members(node, "doc").await;
        assert!(!now.iter().any(|m| m.starts_with("i:")), "{now:?}");
    }
    writing.release().await.unwrap();
    c.rw_lock("doc")
        .unwrap()
        .try_read()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

#[tokio::test]
async fn a_writer_that_gives_up_takes_its_intent_with_it() {
    let q = LocalQuorum::start(3).await.unwrap();
    let (a, b, c) = (client(&q).await, client(&q).await, client(&q).await);
    let reading = a.rw_lock("notes").unwrap().try_read().await.unwrap();
    assert!(matches!(
        b.rw_lock("notes").unwrap().try_write().await,
        Err(Error::Taken { .. })
    ));
    common::eventually("the intent is dropped on every node", || async {
        let mut none = true;
        for node in q.nodes() {
            none &= !members(node, "notes")
                .await
                .iter()
                .any(|m| m.starts_with("i:"));
        }
        none
    })
    .await;
    // Readers are welcome again at once.
    let second = c.rw_lock("notes").unwrap().try_read().await.unwrap();
    second.release().await.unwrap();
    reading.release().await.unwrap();
}

#[tokio::test]
async fn a_read_write_lock_does_not_share_a_name_with_another_kind() {
    let q = LocalQuorum::start(3).await.unwrap();
    let (a, b) = (client(&q).await, client(&q).await);
    let lock = a.try_lock("plain").await.unwrap();
    match b.rw_lock("plain").unwrap().try_read().await {
        Err(Error::KindMismatch { found, .. }) => assert_eq!(found, FoundKind::Other),
        other => panic!("a reader over a lock: {other:?}"),
    }
    lock.release().await.unwrap();

    let permit = a.semaphore("pool", 2).unwrap().try_acquire().await.unwrap();
    match b.rw_lock("pool").unwrap().try_write().await {
        Err(Error::KindMismatch { found, .. }) => {
            assert_eq!(found, FoundKind::Semaphore { permits: 2 });
        }
        other => panic!("a writer over a semaphore: {other:?}"),
    }
    permit.release().await.unwrap();

    let reading = a.rw_lock("rw").unwrap().try_read().await.unwrap();
    settle(&[&a]).await;
    match b.semaphore("rw", 2).unwrap().try_acquire().await {
        Err(Error::KindMismatch { found, .. }) => assert_eq!(found, FoundKind::ReadWriteLock),
        other => panic!("a semaphore over a read-write lock: {other:?}"),
    }
    match b.try_lock("rw").await {
        Err(Error::KindMismatch { found, .. }) => assert_eq!(found, FoundKind::ReadWriteLock),
        other => panic!("a lock over a read-write lock: {other:?}"),
    }
    settle(&[&b]).await;
    for node in q.nodes() {
        assert_eq!(members(node, "rw").await.len(), 2, "nothing changed");
    }
    reading.release().await.unwrap();
}

#[tokio::test]
async fn writers_tokens_increase_and_a_lost_side_is_told() {
    let q = LocalQuorum::start(3).await.unwrap();
    let (a, b) = (client(&q).await, client(&q).await);
    let w1 = a.rw_lock("ledger").unwrap().try_write().await.unwrap();
    let f1 = w1.fencing_token().await.unwrap();
    w1.release().await.unwrap();
    let r = b.rw_lock("ledger").unwrap().try_read().await.unwrap();
    let fr = r.fencing_token().await.unwrap();
    assert!(fr > f1, "{fr} after {f1}");
    r.release().await.unwrap();
    let mut w2 = b.rw_lock("ledger").unwrap().try_write().await.unwrap();
    let f2 = w2.fencing_token().await.unwrap();
    assert!(f2 > fr, "{f2} after {fr}");
    // The grant on every node before the claims are taken away by hand.
    settle(&[&b]).await;
    let claim = format!("w:{}", w2.token().as_str());
    for node in q.nodes() {
        node.command(&["ZREM", "ledger", &claim]).await.unwrap();
    }
    assert!(matches!(
        w2.extend().await,
        Err(Error::NotHeld { held: 0, .. })
    ));
}

/// Readers and writers racing: a writer is never inside with anyone, by counts kept beside
/// the locks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_readers_and_writers_never_overlap_a_writer() {
    const CLIENTS: usize = 8;
    const ROUNDS: usize = 6;
    let q = LocalQuorum::start(5).await.unwrap();
    let readers = Arc::new(AtomicUsize::new(0));
    let writers = Arc::new(AtomicUsize::new(0));
    let violations = Arc::new(AtomicUsize::new(0));
    let most_readers = Arc::new(AtomicUsize::new(0));
    let start = Arc::new(tokio::sync::Barrier::new(CLIENTS));
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(client(&q).await);
    }
    let mut tasks = Vec::new();
    for (i, redlock) in clients.into_iter().enumerate() {
        let (readers, writers, violations, most_readers, start) = (
            readers.clone(),
            writers.clone(),
            violations.clone(),
            most_readers.clone(),
            start.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let lock = redlock.rw_lock("race").unwrap();
            let retry = Retry::within(HANG).delay(Duration::from_millis(20));
            start.wait().await;
            for round in 0..ROUNDS {
                let access = if (i + round) % 4 == 0 {
                    Access::Write
                } else {
                    Access::Read
                };
                let held = lock
                    .acquire(access, Duration::from_secs(10), retry)
                    .await
                    .expect("a side");
                match access {
                    Access::Write => {
                        if writers.fetch_add(1, Ordering::SeqCst) != 0
                            || readers.load(Ordering::SeqCst) != 0
                        {
                            violations.fetch_add(1, Ordering::SeqCst);
                        }
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        writers.fetch_sub(1, Ordering::SeqCst);
                    }
                    Access::Read => {
                        let now = readers.fetch_add(1, Ordering::SeqCst) + 1;
                        most_readers.fetch_max(now, Ordering::SeqCst);
                        if writers.load(Ordering::SeqCst) != 0 {
                            violations.fetch_add(1, Ordering::SeqCst);
                        }
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        readers.fetch_sub(1, Ordering::SeqCst);
                    }
                }
                assert!(held.is_valid());
                held.release().await.expect("released");
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(violations.load(Ordering::SeqCst), 0);
    eprintln!(
        "most readers at once: {}",
        most_readers.load(Ordering::SeqCst)
    );
}

#[tokio::test]
async fn the_holders_are_the_readers_the_writer_and_the_writers_waiting() {
    let q = LocalQuorum::start(3).await.unwrap();
    let (a, b, c) = (client(&q).await, client(&q).await, client(&q).await);
    let rw = a.rw_lock("census").unwrap();
    assert_eq!(rw.holders().await.unwrap(), Vec::new());
    let r1 = rw.try_read().await.unwrap();
    let r2 = b.rw_lock("census").unwrap().try_read().await.unwrap();
    let writer = {
        let lock = c.rw_lock("census").unwrap();
        tokio::spawn(async move {
            lock.acquire(Access::Write, Duration::from_secs(10), patient())
                .await
        })
    };
    let sha = |t: &str| quorumlock::fred::util::sha1_hash(t);
    common::eventually("both readers and the intent on every node", || async {
        let found = rw.holders().await.unwrap();
        found.len() == 3 && found.iter().all(|h| h.nodes == 3)
    })
    .await;
    let found = rw.holders().await.unwrap();
    let mut readers: Vec<&str> = found
        .iter()
        .filter(|h| h.access == Access::Read && !h.waiting)
        .map(|h| h.token_sha1.as_str())
        .collect();
    readers.sort_unstable();
    let mut expected = [sha(r1.token().as_str()), sha(r2.token().as_str())];
    expected.sort_unstable();
    assert_eq!(
        readers,
        expected.iter().map(String::as_str).collect::<Vec<_>>()
    );
    let waiting: Vec<_> = found.iter().filter(|h| h.waiting).collect();
    assert_eq!(waiting.len(), 1);
    assert_eq!(waiting[0].access, Access::Write);
    assert!(found
        .iter()
        .all(|h| h.ttl > Duration::ZERO && h.ttl <= Duration::from_secs(10)));
    r1.release().await.unwrap();
    r2.release().await.unwrap();
    let w = tokio::time::timeout(HANG, writer)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    common::eventually("the writer alone", || async {
        let found = rw.holders().await.unwrap();
        found.len() == 1 && found[0].nodes == 3
    })
    .await;
    let found = rw.holders().await.unwrap();
    assert_eq!(
        (
            found[0].access,
            found[0].waiting,
            found[0].token_sha1.clone()
        ),
        (Access::Write, false, sha(w.token().as_str()))
    );
    // A semaphore's census of it, and its census of a semaphore, are refused.
    assert!(matches!(
        a.semaphore("census", 2).unwrap().holders().await,
        Err(Error::KindMismatch {
            found: FoundKind::ReadWriteLock,
            ..
        })
    ));
    w.release().await.unwrap();
    let permit = a.semaphore("sem", 3).unwrap().try_acquire().await.unwrap();
    assert!(matches!(
        a.rw_lock("sem").unwrap().holders().await,
        Err(Error::KindMismatch {
            found: FoundKind::Semaphore { permits: 3 },
            ..
        })
    ));
    permit.release().await.unwrap();
}

/// An uncontended writer recorded no intent, so it sends nothing to drop one; a refused one
/// does, and announces the drop as a release. (Counted in `ZRANGE` and `PUBLISH` calls: an
/// uncontended cycle runs no `ZRANGE`, since the key does not exist when it is taken, and
/// one `PUBLISH` per node, its release's; DISCARD, of an attempt's claims or of a granted
/// writer's intent, runs one `ZRANGE`, and so does an acquisition of a key that exists; the
/// drop of the intent of a writer that did not get the lock is a release of the intent, one
/// `PUBLISH` on each node that recorded it.)
#[tokio::test]
async fn only_a_writer_that_was_refused_drops_an_intent() {
    let q = LocalQuorum::start(3).await.unwrap();
    let (a, b) = (client(&q).await, client(&q).await);
    let calls = |command: &'static str| common::calls_on_all(&q, command);
    let (zrange, publish) = (calls("zrange").await, calls("publish").await);
    let w = a.rw_lock("quiet").unwrap().try_write().await.unwrap();
    w.release().await.unwrap();
    assert!(a.settle(Duration::from_secs(5)).await);
    assert_eq!(
        calls("zrange").await,
        zrange,
        "an intent was dropped that nobody recorded"
    );
    assert_eq!(calls("publish").await, publish + 3, "the release's");
    let r = a.rw_lock("quiet").unwrap().try_read().await.unwrap();
    assert!(b.rw_lock("quiet").unwrap().try_write().await.is_err());
    assert!(b.settle(Duration::from_secs(5)).await);
    // On every node: the refused attempt's read of the claims and its discard; and the
    // drop of its intent, announced.
    assert_eq!(calls("zrange").await, zrange + 6);
    assert_eq!(calls("publish").await, publish + 6);
    r.release().await.unwrap();
}
