//! The blocking client (`quorumlock::blocking`): a runtime thread of its own keeps locks
//! alive while the caller's thread blocks.

mod common;

use std::sync::mpsc;
use std::time::Duration;

use quorumlock::testkit::LocalQuorum;
use quorumlock::{blocking, Error, KeepAlive, RedLockBuilder};

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
            (token, holders(&rt, &quorum, "job"))
        })
        .expect("ran");
    assert_eq!(holders_meanwhile, (1, 3));
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
