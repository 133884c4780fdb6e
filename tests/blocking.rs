//! The blocking client (`quorumlock::blocking`): a runtime thread of its own keeps locks
//! alive while the caller's thread blocks; its semaphores and read-write locks.

mod common;

use std::sync::mpsc;
use std::time::Duration;

use quorumlock::testkit::LocalQuorum;
use quorumlock::{blocking, Access, ConfigError, Error, KeepAlive, RedLockBuilder};

/// The lock's ttl in these tests.
const TTL: Duration = Duration::from_secs(1);

/// A runtime for the test's own async work (starting servers, reading keys); the blocking
/// client is never used inside it.
fn test_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime")
}

fn builder(quorum: &LocalQuorum) -> RedLockBuilder {
    common::builder(quorum).ttl(TTL)
}

/// How many nodes hold `key`.
fn holders(rt: &tokio::runtime::Runtime, quorum: &LocalQuorum, key: &str) -> usize {
    rt.block_on(common::holders(quorum, key))
}

/// Three nodes, two blocking clients, and the first one's kept lock on `job`.
struct Contest {
    rt: tokio::runtime::Runtime,
    quorum: LocalQuorum,
    holder: blocking::RedLock,
    other: blocking::RedLock,
    kept: blocking::KeptLock,
}

fn contest() -> Contest {
    let rt = test_runtime();
    let quorum = rt.block_on(LocalQuorum::start(3)).expect("quorum");
    let holder = blocking::RedLock::connect(&builder(&quorum)).expect("holder");
    let other = blocking::RedLock::connect(&builder(&quorum)).expect("other");
    let kept = holder
        .lock("job")
        .expect("lock")
        .keep_alive(KeepAlive::new())
        .expect("kept");
    // Granted at the quorum: the last node's SET lands in the background.
    assert_eq!(holder.settle(Duration::from_secs(10)), Ok(true));
    Contest {
        rt,
        quorum,
        holder,
        other,
        kept,
    }
}

/// The holder's thread does blocking work for twice the ttl; the client's own thread keeps
/// the lock meanwhile, and a second client is refused every time it tries.
#[test]
fn a_kept_lock_outlasts_blocking_work_of_twice_its_ttl() {
    let Contest {
        rt,
        quorum,
        holder,
        other,
        kept,
    } = contest();

    let tries = std::thread::spawn(move || {
        (0..4)
            .map(|_| {
                std::thread::sleep(TTL / 2);
                other.try_lock("job").map(|lock| lock.token().clone())
            })
            .collect::<Vec<_>>()
    });
    // The work: the holder's thread does nothing else for twice the ttl.
    std::thread::sleep(TTL * 2);
    let tries = tries.join().expect("the other client's thread");

    assert_eq!(tries.len(), 4);
    for (i, attempt) in tries.iter().enumerate() {
        assert!(
            matches!(attempt, Err(Error::Taken { .. })),
            "attempt {i}: {attempt:?}"
        );
    }
    assert!(kept.is_held(), "{:?}", kept.lost_reason());
    assert!(kept.extensions() > 0, "extended while the caller blocked");
    assert_eq!(holders(&rt, &quorum, "job"), 3);
    // Decided at the quorum; the third node's delete finishes in the background.
    let released = kept.release().expect("released");
    assert_eq!(released.released, 2);
    assert_eq!(holder.settle(Duration::from_secs(10)), Ok(true));
    assert_eq!(holders(&rt, &quorum, "job"), 0);
}

/// A lock lost while the holder's thread blocks is reported by its next call.
#[test]
fn a_loss_while_blocked_is_reported_at_the_next_call() {
    let Contest {
        rt,
        quorum,
        holder: _holder,
        other,
        kept,
    } = contest();
    let handle = kept.handle();
    // Every node loses the key (a fault the algorithm does not survive).
    rt.block_on(async {
        for node in quorum.nodes() {
            node.command(&["DEL", "job"]).await.expect("DEL");
        }
    });
    let (done, blocked) = mpsc::channel();
    let thief = std::thread::spawn(move || {
        // Another client takes the lock.
        let lock = other
            .lock_with("job", TTL * 10, quorumlock::Retry::within(TTL * 5))
            .expect("taken by the other client");
        // Granted at the quorum: its last node's SET lands in the background.
        assert_eq!(other.settle(Duration::from_secs(10)), Ok(true));
        // The holder's keeper notices, while the holder's thread is still blocked.
        let reason = test_runtime().block_on(handle.lost());
        done.send(()).expect("the holder waits");
        (lock, reason)
    });
    // The holder's thread blocks until the loss was signalled.
    blocked.recv().expect("the thief's signal");
    let (lock, reason) = thief.join().expect("the thief's thread");

    assert!(!kept.is_held());
    assert_eq!(kept.lost_reason(), Some(reason));
    assert_eq!(kept.validity(), Duration::ZERO);
    assert!(matches!(kept.fencing_token(), Err(Error::Lost { .. })));
    assert!(matches!(kept.release(), Err(Error::Lost { .. })));
    // The other client's lock was not touched.
    assert_eq!(holders(&rt, &quorum, "job"), 3);
    lock.release().expect("release");
}

/// Blocking calls from the threads of another Tokio runtime work: from a `spawn_blocking`
/// closure (where sync code of an async service runs), and from inside `block_on` (which
/// they block, as any blocking call would). None of them panics, though the runtime's own
/// `block_on` cannot nest.
#[test]
fn calls_from_the_threads_of_another_runtime_work() {
    let rt = test_runtime();
    let quorum = rt.block_on(LocalQuorum::start(3)).expect("quorum");
    let b = builder(&quorum);
    let redlock = rt
        .block_on(async move {
            tokio::task::spawn_blocking(move || blocking::RedLock::connect(&b))
                .await
                .expect("the closure ran")
        })
        .expect("built inside spawn_blocking");
    let r = redlock.clone();
    let held = rt
        .block_on(async move {
            tokio::task::spawn_blocking(move || {
                let lock = r.lock("job")?;
                let token = lock.fencing_token()?;
                lock.release()?;
                Ok::<_, Error>(token)
            })
            .await
            .expect("the closure ran")
        })
        .expect("locked inside spawn_blocking");
    assert_eq!(held, 1);
    let r = redlock.clone();
    let lock = rt
        .block_on(async move { r.lock("job") })
        .expect("lock inside block_on");
    // Granted at the quorum: the last node's SET lands in the background.
    assert_eq!(redlock.settle(Duration::from_secs(10)), Ok(true));
    assert_eq!(holders(&rt, &quorum, "job"), 3);
    // Dropped unreleased on a plain thread: released by the client's own thread.
    drop(lock);
    assert_eq!(redlock.settle(Duration::from_secs(10)), Ok(true));
    assert_eq!(holders(&rt, &quorum, "job"), 0);
}

/// The async API's lock, dropped on a thread without a runtime, is released on the runtime
/// its client was built in.
#[test]
fn an_async_lock_dropped_outside_any_runtime_is_released() {
    let rt = test_runtime();
    let quorum = rt.block_on(LocalQuorum::start(3)).expect("quorum");
    let b = builder(&quorum);
    let redlock = rt
        .block_on(async move { b.connect().await })
        .expect("client");
    let r = redlock.clone();
    let lock = rt
        .block_on(async move { r.lock("job").await })
        .expect("lock");
    // Granted at the quorum: the last node's SET lands in the background.
    let r = redlock.clone();
    assert!(rt.block_on(async move { r.settle(Duration::from_secs(10)).await }));
    assert_eq!(holders(&rt, &quorum, "job"), 3);
    // No runtime is current on this thread.
    drop(lock);
    let r = redlock.clone();
    let settled = rt.block_on(async move { r.settle(Duration::from_secs(10)).await });
    assert!(settled);
    assert_eq!(holders(&rt, &quorum, "job"), 0);
}

/// `with_lock` runs blocking work under a kept lock and releases it after.
#[test]
fn with_lock_runs_the_work_and_releases() {
    let rt = test_runtime();
    let quorum = rt.block_on(LocalQuorum::start(3)).expect("quorum");
    let redlock = blocking::RedLock::connect(&builder(&quorum)).expect("client");
    let holders_meanwhile = redlock
        .with_lock("job", |kept| {
            assert!(kept.is_held());
            let token = kept.fencing_token().expect("token");
            // Granted at the quorum: the last node's SET lands in the background.
            assert_eq!(redlock.settle(Duration::from_secs(10)), Ok(true));
            (token, holders(&rt, &quorum, "job"))
        })
        .expect("ran");
    assert_eq!(holders_meanwhile, (1, 3));
    // Released at the quorum; the last node's delete finishes in the background.
    assert_eq!(redlock.settle(Duration::from_secs(10)), Ok(true));
    assert_eq!(holders(&rt, &quorum, "job"), 0);
}

/// An election with blocking calls: a second candidate blocks until the first resigns, then
/// leads with a greater term.
#[test]
fn a_blocked_candidate_leads_when_the_leader_resigns() {
    let rt = test_runtime();
    let quorum = rt.block_on(LocalQuorum::start(3)).expect("quorum");
    let first = blocking::RedLock::connect(&builder(&quorum)).expect("first");
    let second = blocking::RedLock::connect(&builder(&quorum)).expect("second");
    let leading = first.campaign("scheduler").expect("leads");
    let term = leading.term();
    let seen = first.leader("scheduler").expect("a quorum answers");
    assert_eq!(seen.map(|l| l.term), Some(term));

    let candidate = std::thread::spawn(move || second.campaign("scheduler").map(|l| l.term()));
    assert!(leading.is_leader());
    assert_eq!(leading.wait_lost(Duration::ZERO), Ok(None));
    leading.resign().expect("resigned");
    let next = candidate
        .join()
        .expect("the candidate's thread")
        .expect("leads after the resignation");
    assert!(next > term, "term {next} after {term}");
}

/// The type of `key` on every node of `quorum`, in order (`none` where it does not exist).
fn types(rt: &tokio::runtime::Runtime, quorum: &LocalQuorum, key: &str) -> Vec<String> {
    rt.block_on(async {
        let mut types = Vec::new();
        for node in quorum.nodes() {
            types.push(common::get_type(node, key).await);
        }
        types
    })
}

/// A blocking semaphore of two permits grants two, refuses a third at one attempt, and
/// grants it on the freed slot once a permit is released.
#[test]
fn a_semaphore_of_two_refuses_a_third_permit_until_one_is_released() {
    let rt = test_runtime();
    let quorum = rt.block_on(LocalQuorum::start(3)).expect("quorum");
    let a = blocking::RedLock::connect(&builder(&quorum)).expect("a");
    let b = blocking::RedLock::connect(&builder(&quorum)).expect("b");
    let sem_a = a.semaphore("exports", 2).expect("a semaphore");
    let sem_b = b.semaphore("exports", 2).expect("a semaphore");
    assert_eq!((sem_a.name(), sem_a.permits()), ("exports", 2));

    let first = sem_a.try_acquire().expect("the first permit");
    let second = sem_b.try_acquire().expect("the second permit");
    assert_eq!(first.semaphore(), "exports");
    assert_ne!(first.slot(), second.slot());
    assert!(first.slot() < 2 && second.slot() < 2);
    assert!(first.is_valid() && second.is_valid());
    match sem_b.try_acquire() {
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
    first.release().expect("released");
    let third = sem_b.try_acquire().expect("the freed permit");
    assert_eq!(third.slot(), freed, "the only free slot");
    third.release().expect("released");
    second.release().expect("released");
    assert_eq!(a.settle(Duration::from_secs(10)), Ok(true));
    assert_eq!(b.settle(Duration::from_secs(10)), Ok(true));
    assert_eq!(types(&rt, &quorum, "exports"), ["none", "none", "none"]);
}

/// A permit's fencing token is asked once (the same on a second call), exceeds every token
/// handed out before, and names its slot.
#[test]
fn a_permits_fencing_tokens_increase() {
    let rt = test_runtime();
    let quorum = rt.block_on(LocalQuorum::start(3)).expect("quorum");
    let redlock = blocking::RedLock::connect(&builder(&quorum)).expect("client");
    let sem = redlock.semaphore("exports", 2).expect("a semaphore");
    let per_slot = u64::from(quorumlock::MAX_PERMITS);

    let first = sem.try_acquire().expect("a permit");
    let one = first.fencing_token().expect("a token");
    assert_eq!(first.fencing_token().expect("the same token"), one);
    assert_eq!(one % per_slot, u64::from(first.slot()));
    // Held at once with the first: a greater token, never the same.
    let second = sem.try_acquire().expect("a second permit");
    let two = second.fencing_token().expect("a token");
    assert!(two > one, "{two} after {one}");
    assert_eq!(two % per_slot, u64::from(second.slot()));
    first.release().expect("released");
    second.release().expect("released");
    // After both were released.
    let third = sem.try_acquire().expect("a third permit");
    let three = third.fencing_token().expect("a token");
    assert!(three > two, "{three} after {two}");
    assert_eq!(three % per_slot, u64::from(third.slot()));
    third.release().expect("released");
}

/// `with_permit` runs blocking work under a kept permit, returns its value, and releases the
/// permit: the semaphore's key is on every node while the work runs and gone after.
#[test]
fn with_permit_returns_the_works_value_and_releases() {
    let rt = test_runtime();
    let quorum = rt.block_on(LocalQuorum::start(3)).expect("quorum");
    let redlock = blocking::RedLock::connect(&builder(&quorum)).expect("client");
    let sem = redlock.semaphore("exports", 2).expect("a semaphore");
    let (value, meanwhile, holders) = sem
        .with_permit(|kept| {
            assert!(kept.is_held());
            assert_eq!(kept.resource(), "exports");
            // Granted at the quorum: the last node's claim lands in the background.
            assert_eq!(redlock.settle(Duration::from_secs(10)), Ok(true));
            let holders = sem.holders().expect("holders");
            let sha1 = quorumlock::fred::util::sha1_hash(kept.token().as_str());
            let mine = holders.iter().filter(|h| h.token_sha1 == sha1).count();
            (42, types(&rt, &quorum, "exports"), (holders.len(), mine))
        })
        .expect("ran");
    assert_eq!(value, 42);
    assert_eq!(meanwhile, ["zset", "zset", "zset"]);
    assert_eq!(holders, (1, 1));
    // Released at the quorum; the last node's release finishes in the background.
    assert_eq!(redlock.settle(Duration::from_secs(10)), Ok(true));
    assert_eq!(types(&rt, &quorum, "exports"), ["none", "none", "none"]);
    assert_eq!(sem.holders().expect("holders"), Vec::new());
}

/// A permit dropped unreleased on a plain thread is released by the client's own thread, as
/// a lock is; one kept alive is a blocking `KeptLock` on the semaphore.
#[test]
fn a_dropped_permit_is_released_and_a_kept_one_is_held() {
    let rt = test_runtime();
    let quorum = rt.block_on(LocalQuorum::start(3)).expect("quorum");
    let redlock = blocking::RedLock::connect(&builder(&quorum)).expect("client");
    let sem = redlock.semaphore("exports", 1).expect("a semaphore");
    drop(sem.try_acquire().expect("a permit"));
    assert_eq!(redlock.settle(Duration::from_secs(10)), Ok(true));
    assert_eq!(types(&rt, &quorum, "exports"), ["none", "none", "none"]);

    let kept = sem
        .try_acquire()
        .expect("the permit again")
        .keep_alive(KeepAlive::new())
        .expect("kept");
    assert_eq!(kept.resource(), "exports");
    assert!(kept.is_held());
    assert!(matches!(sem.try_acquire(), Err(Error::Taken { .. })));
    kept.release().expect("released");
    assert_eq!(redlock.settle(Duration::from_secs(10)), Ok(true));
    assert_eq!(types(&rt, &quorum, "exports"), ["none", "none", "none"]);
}

/// A blocking read-write lock: two readers at once; a writer is refused while either holds,
/// and granted once both have released.
#[test]
fn readers_share_a_blocking_rwlock_and_a_writer_waits_for_both() {
    let rt = test_runtime();
    let quorum = rt.block_on(LocalQuorum::start(3)).expect("quorum");
    let a = blocking::RedLock::connect(&builder(&quorum)).expect("a");
    let b = blocking::RedLock::connect(&builder(&quorum)).expect("b");
    let c = blocking::RedLock::connect(&builder(&quorum)).expect("c");
    let writer = c.rw_lock("catalog").expect("a read-write lock");
    assert_eq!(writer.name(), "catalog");

    let one = a
        .rw_lock("catalog")
        .expect("rw")
        .try_read()
        .expect("a reader");
    let two = b
        .rw_lock("catalog")
        .expect("rw")
        .try_read()
        .expect("a second reader");
    assert_eq!((one.access(), two.access()), (Access::Read, Access::Read));
    assert_eq!(one.resource(), "catalog");
    assert!(one.is_valid() && two.is_valid(), "both held at once");
    let readers = writer.holders().expect("holders");
    assert_eq!(readers.len(), 2, "{readers:?}");
    assert!(readers
        .iter()
        .all(|h| h.access == Access::Read && !h.waiting));

    assert!(matches!(writer.try_write(), Err(Error::Taken { .. })));
    one.release().expect("released");
    assert!(matches!(writer.try_write(), Err(Error::Taken { .. })));
    two.release().expect("released");
    // Released at the quorum: each reader's last delete lands in the background, and the
    // two majorities that have them may share only one node.
    for client in [&a, &b] {
        assert_eq!(client.settle(Duration::from_secs(10)), Ok(true));
    }
    let writing = writer.try_write().expect("the writer, alone");
    assert_eq!(writing.access(), Access::Write);
    assert!(matches!(
        a.rw_lock("catalog").expect("rw").try_read(),
        Err(Error::Taken { .. })
    ));
    writing.release().expect("released");
    for client in [&a, &b, &c] {
        assert_eq!(client.settle(Duration::from_secs(10)), Ok(true));
    }
    assert_eq!(types(&rt, &quorum, "catalog"), ["none", "none", "none"]);
}

/// Bad input is refused with the typed error before anything is sent.
#[test]
fn bad_input_gives_the_typed_error() {
    let rt = test_runtime();
    let quorum = rt.block_on(LocalQuorum::start(3)).expect("quorum");
    let redlock = blocking::RedLock::connect(&builder(&quorum)).expect("client");
    for permits in [0, quorumlock::MAX_PERMITS + 1] {
        match redlock.semaphore("exports", permits) {
            Err(ConfigError::InvalidPermits { permits: p }) => assert_eq!(p, permits),
            other => panic!("{permits} permits: {other:?}"),
        }
    }
    assert!(matches!(
        redlock.semaphore("", 2),
        Err(ConfigError::EmptyResource)
    ));
    assert!(matches!(
        redlock.rw_lock(""),
        Err(ConfigError::EmptyResource)
    ));
    let sem = redlock.semaphore("exports", 2).expect("a semaphore");
    assert!(matches!(
        sem.acquire_with(Duration::ZERO, quorumlock::Retry::none()),
        Err(Error::Config(ConfigError::ZeroTtl))
    ));
    let rw = redlock.rw_lock("catalog").expect("a read-write lock");
    assert!(matches!(
        rw.acquire(Access::Write, Duration::ZERO, quorumlock::Retry::none()),
        Err(Error::Config(ConfigError::ZeroTtl))
    ));
    assert_eq!(types(&rt, &quorum, "exports"), ["none", "none", "none"]);
    assert_eq!(types(&rt, &quorum, "catalog"), ["none", "none", "none"]);
}

/// Every blocking handle can be shared with and sent to other threads.
#[test]
fn the_blocking_handles_are_send_and_sync() {
    fn send_and_sync<T: Send + Sync>() {}
    send_and_sync::<blocking::RedLock>();
    send_and_sync::<blocking::Lock>();
    send_and_sync::<blocking::KeptLock>();
    send_and_sync::<blocking::Leadership>();
    send_and_sync::<blocking::Semaphore>();
    send_and_sync::<blocking::Permit>();
    send_and_sync::<blocking::RwLock>();
    send_and_sync::<blocking::RwGuard>();
}
