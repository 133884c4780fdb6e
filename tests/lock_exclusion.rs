//! Many concurrent holders, checked by an in-process exclusion checker that would catch two
//! holders at once (overlap), a lost update (read-sleep-write on a shared counter), and a
//! fencing token that does not grow in critical-section order. A deliberately broken client
//! (one that skips the quorum check) shows that the checker does catch violations.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use quorumlock::testkit::{LocalQuorum, NodeOptions};
use quorumlock::{Error, Lock, NodeErrorKind, RedLock, Retry};

/// The fencing token of half the holds, chosen at random (and none if it could not be
/// recorded): a holder that never asks uses no token, and must not let a later token go
/// back.
async fn some_token(lock: &Lock) -> Option<u64> {
    if rand::Rng::random_bool(&mut rand::rng(), 0.5) {
        lock.fencing_token().await.ok()
    } else {
        None
    }
}

#[derive(Default)]
struct Checker {
    holder: AtomicUsize,
    counter: AtomicU64,
    overlaps: AtomicU64,
    holds: AtomicU64,
    /// The last fencing token seen entering the critical section, and how many tokens were
    /// not greater than the one before them.
    last_token: AtomicU64,
    regressions: AtomicU64,
    /// The fault phase now (set by the test), and the critical sections completed in each.
    phase: AtomicUsize,
    holds_in: [AtomicU64; PHASES],
}

/// At most as many fault phases as this.
const PHASES: usize = 8;

impl Checker {
    async fn critical_section(&self, id: usize, token: Option<u64>) {
        if self
            .holder
            .compare_exchange(0, id, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        if let Some(token) = token {
            // As storage would: a token not above the last one accepted is refused.
            let before = self.last_token.fetch_max(token, Ordering::SeqCst);
            if token <= before {
                self.regressions.fetch_add(1, Ordering::SeqCst);
            }
        }
        let seen = self.counter.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(1)).await;
        self.counter.store(seen + 1, Ordering::SeqCst);
        self.holds.fetch_add(1, Ordering::SeqCst);
        self.holds_in[self.phase.load(Ordering::SeqCst)].fetch_add(1, Ordering::SeqCst);
        let _ = self
            .holder
            .compare_exchange(id, 0, Ordering::SeqCst, Ordering::SeqCst);
    }

    /// Whether any violation was seen.
    fn violated(&self) -> bool {
        self.overlaps.load(Ordering::SeqCst) > 0
            || self.regressions.load(Ordering::SeqCst) > 0
            || self.counter.load(Ordering::SeqCst) != self.holds.load(Ordering::SeqCst)
    }

    /// Waits until the current fault phase has seen `holds` critical sections (at most 10 s:
    /// contention that stalls fails the test).
    async fn holds_in_this_phase(&self, holds: u64) {
        let phase = self.phase.load(Ordering::SeqCst);
        common::eventually(&format!("{holds} holds in fault phase {phase}"), || async {
            self.holds_in[phase].load(Ordering::SeqCst) >= holds
        })
        .await;
    }

    /// Counts the critical sections completed from now on in the next fault phase.
    fn next_phase(&self) {
        self.phase.fetch_add(1, Ordering::SeqCst);
    }

    /// The critical sections completed in each phase so far.
    fn holds_per_phase(&self) -> Vec<u64> {
        let last = self.phase.load(Ordering::SeqCst);
        self.holds_in[..=last]
            .iter()
            .map(|h| h.load(Ordering::SeqCst))
            .collect()
    }

    fn assert_exclusive(&self) {
        let holds = self.holds.load(Ordering::SeqCst);
        assert!(
            holds > 0,
            "nobody ever held the lock: the check proved nothing"
        );
        assert_eq!(
            self.overlaps.load(Ordering::SeqCst),
            0,
            "two holders at once"
        );
        assert_eq!(self.counter.load(Ordering::SeqCst), holds, "lost updates");
        assert_eq!(
            self.regressions.load(Ordering::SeqCst),
            0,
            "fencing tokens out of order"
        );
    }
}

async fn contend(
    clients: Vec<RedLock>,
    tasks_per_client: usize,
    rounds: usize,
    checker: Arc<Checker>,
) {
    contend_while(clients, tasks_per_client, checker, move |round| {
        round < rounds
    })
    .await;
}

/// Contends until `done` is set (by the fault schedule, after its last fault).
async fn contend_until(
    clients: Vec<RedLock>,
    tasks_per_client: usize,
    checker: Arc<Checker>,
    done: Arc<AtomicBool>,
) {
    contend_while(clients, tasks_per_client, checker, move |_| {
        !done.load(Ordering::SeqCst)
    })
    .await;
}

/// Each task locks, runs the critical section and releases, round after round, while
/// `more(round)`.
async fn contend_while(
    clients: Vec<RedLock>,
    tasks_per_client: usize,
    checker: Arc<Checker>,
    more: impl Fn(usize) -> bool + Clone + Send + 'static,
) {
    let mut tasks = Vec::new();
    for (c, redlock) in clients.into_iter().enumerate() {
        for t in 0..tasks_per_client {
            let id = c * tasks_per_client + t + 1;
            let (redlock, checker, more) = (redlock.clone(), Arc::clone(&checker), more.clone());
            tasks.push(tokio::spawn(async move {
                let retry = Retry::attempts(50)
                    .delay(Duration::from_millis(1))
                    .jitter(Duration::from_millis(4));
                let mut round = 0;
                while more(round) {
                    round += 1;
                    if let Ok(lock) = redlock
                        .lock_with("shared", Duration::from_secs(2), retry)
                        .await
                    {
                        checker.critical_section(id, some_token(&lock).await).await;
                        assert!(lock.is_valid(), "the critical section outlived the lock");
                        let _ = lock.release().await;
                    }
                }
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_tasks_on_one_resource_never_overlap() {
    let q = LocalQuorum::start(5).await.unwrap();
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(common::client(&q).await);
    }
    let checker = Arc::new(Checker::default());
    contend(clients, 8, 10, Arc::clone(&checker)).await;
    checker.assert_exclusive();
}

/// The same contention and faults as below, with clients that skip the quorum check (one
/// yes vote wins): the checker must report a violation, or it proves nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_checker_catches_a_client_that_skips_the_quorum_check() {
    let mut q = LocalQuorum::start(5).await.unwrap();
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(common::connected(common::builder(&q).testkit_skip_quorum(1)).await);
    }
    let checker = Arc::new(Checker::default());
    q.node_mut(1).freeze().unwrap();
    q.node_mut(4).kill().await.unwrap();
    for _ in 0..20 {
        contend(clients.clone(), 4, 10, Arc::clone(&checker)).await;
        if checker.violated() {
            break;
        }
    }
    q.node_mut(1).resume().unwrap();
    eprintln!(
        "broken client: {} holds, {} overlaps, {} lost updates, {} token regressions",
        checker.holds.load(Ordering::SeqCst),
        checker.overlaps.load(Ordering::SeqCst),
        checker
            .holds
            .load(Ordering::SeqCst)
            .saturating_sub(checker.counter.load(Ordering::SeqCst)),
        checker.regressions.load(Ordering::SeqCst),
    );
    assert!(
        checker.holds.load(Ordering::SeqCst) > 0,
        "nobody ever held the lock"
    );
    assert!(
        checker.violated(),
        "the broken client was never caught ({} holds)",
        checker.holds.load(Ordering::SeqCst)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_tasks_never_overlap_while_a_minority_fails() {
    let mut q = LocalQuorum::start_with(5, NodeOptions::volatile())
        .await
        .unwrap();
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(common::client(&q).await);
    }
    let checker = Arc::new(Checker::default());
    let done = Arc::new(AtomicBool::new(false));
    let work = tokio::spawn(contend_until(
        clients.clone(),
        4,
        Arc::clone(&checker),
        Arc::clone(&done),
    ));
    // A minority fails in turn while the tasks contend: frozen, then killed and brought back
    // (after more than the ttl, as the delayed-restart rule requires of a node without
    // persistence). Each phase lasts its time and until the tasks completed `HOLDS` critical
    // sections in it; the tasks contend until the last phase has had its share.
    const HOLDS: u64 = 10;
    let phase = Duration::from_millis(300);
    tokio::time::sleep(phase).await;
    checker.holds_in_this_phase(HOLDS).await;
    q.node_mut(1).freeze().unwrap();
    checker.next_phase(); // 1: node 1 frozen
    tokio::time::sleep(phase).await;
    checker.holds_in_this_phase(HOLDS).await;
    q.node_mut(4).kill().await.unwrap();
    checker.next_phase(); // 2: node 1 frozen, node 4 killed
    tokio::time::sleep(phase).await;
    checker.holds_in_this_phase(HOLDS).await;
    q.node_mut(1).resume().unwrap();
    checker.next_phase(); // 3: node 4 killed
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    checker.holds_in_this_phase(HOLDS).await;
    q.node_mut(4).restart().await.unwrap();
    checker.next_phase(); // 4: node 4 back, after the last fault
    checker.holds_in_this_phase(HOLDS).await;
    done.store(true, Ordering::SeqCst);
    common::within("the contending tasks stop", work)
        .await
        .unwrap();
    checker.assert_exclusive();
    let per_phase = checker.holds_per_phase();
    eprintln!("holds per fault phase: {per_phase:?}");
    // Each fault met the work: before the first fault, node 1 frozen, nodes 1 and 4 out,
    // node 4 out, node 4 back.
    assert_eq!(per_phase.len(), 5, "{per_phase:?}");
    assert!(
        per_phase.iter().all(|&n| n >= HOLDS),
        "a fault phase without contention: {per_phase:?}"
    );
}

/// With one node frozen, contending attempts must not wait for it while they hold partial
/// keys: otherwise every attempt that split the votes holds its keys for a whole node
/// timeout and the contenders jam each other. Once a client has seen the node time out, its
/// lost attempts no longer wait for it. Counted in attempts, not time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contenders_stop_waiting_for_a_frozen_node() {
    let mut q = LocalQuorum::start(5).await.unwrap();
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(common::client(&q).await);
    }
    q.node_mut(1).freeze().unwrap();
    let checker = Arc::new(Checker::default());
    let waited = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for (c, redlock) in clients.into_iter().enumerate() {
        for t in 0..2 {
            let (redlock, checker, waited) =
                (redlock.clone(), Arc::clone(&checker), Arc::clone(&waited));
            tasks.push(tokio::spawn(async move {
                for _ in 0..250 {
                    match redlock.try_lock("frozen-contention").await {
                        Ok(lock) => {
                            let token = some_token(&lock).await;
                            checker.critical_section(c * 2 + t + 1, token).await;
                            let _ = lock.release().await;
                        }
                        Err(e) => {
                            let failures = match &e {
                                Error::Taken { failures, .. }
                                | Error::NoQuorum { failures, .. } => failures.as_slice(),
                                _ => &[],
                            };
                            if failures
                                .iter()
                                .any(|f| f.index == 1 && f.kind == NodeErrorKind::Timeout)
                            {
                                waited.fetch_add(1, Ordering::SeqCst);
                            }
                            let pause = rand::Rng::random_range(&mut rand::rng(), 200..2_000);
                            tokio::time::sleep(Duration::from_micros(pause)).await;
                        }
                    }
                }
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    checker.assert_exclusive();
    // Each client may wait for the frozen node until its first command there times out: at
    // most its two tasks' attempts in flight at that moment.
    let waited = waited.load(Ordering::SeqCst);
    assert!(
        waited <= 8,
        "{waited} lost attempts waited for the frozen node's timeout"
    );
}
