//! What one uncontended lock cycle (acquire + release) costs on a local five-node quorum,
//! measured next to the raw round-trip floor on the same fred clients and next to the
//! `rslock` crate, in one run, so that results can be read as ratios to the floor.
//!
//! ```sh
//! cargo bench --bench lock                                  # criterion, about 2.5 minutes
//! cargo bench --bench lock -- --save-baseline criterion-fwd # keep a run's results apart
//! QUORUMLOCK_BENCH_ORDER=reverse cargo bench --bench lock -- --save-baseline criterion-rev
//! QUORUMLOCK_BENCH_INTERLEAVE=600 cargo bench --bench lock -- --save-baseline interleaved1
//! scripts/bench-report criterion-fwd criterion-rev interleaved1  # table + chart
//! ```
//!
//! The bench starts five `redis-server` processes itself (the `testkit` fixture; set
//! `QUORUMLOCK_REDIS_SERVER` if it is not on `PATH`). One client, one cycle at a time, on a
//! current-thread Tokio runtime (`QUORUMLOCK_BENCH_RUNTIME=multi` for a two-worker one).
//! docs/benchmarks.md explains every function, the two modes and the results.

#[path = "../common/floor.rs"]
mod floor;
mod interleaved;
mod results;

use std::cell::Cell;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use fred::prelude::Key;
use quorumlock::testkit::{LocalQuorum, NodeOptions, Reply};
use quorumlock::{Access, KeepAlive, Lock, RedLock, Retry};
use tokio::runtime::Runtime;

use floor::Floor;
use results::{baseline, check_failures, client_cpu, cpu_ns, save, Costs};

const NODES: usize = 5;
/// The lock's ttl everywhere (the crate's default).
const TTL: Duration = Duration::from_secs(10);
/// The per-command timeout of the floor's clients: the crate's default node timeout.
const NODE_TIMEOUT: Duration = Duration::from_millis(100);
/// Cycles run before anything is measured.
const WARM_UP_CYCLES: u64 = 200;
/// Cycles over which commands and CPU time per cycle are counted (before measuring).
const COUNTED_CYCLES: u64 = 2_000;

/// The functions of the group, in the order they run by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Function {
    FloorQuorum,
    FloorAll,
    SingleNode,
    QuorumlockPlain,
    QuorumlockFenced,
    QuorumlockFencedToken,
    QuorumlockExtend,
    QuorumlockKeptAcquire,
    QuorumlockPermit,
    QuorumlockRead,
    QuorumlockWrite,
    Rslock,
}

impl Function {
    const ALL: [Function; 12] = [
        Function::FloorQuorum,
        Function::FloorAll,
        Function::SingleNode,
        Function::QuorumlockPlain,
        Function::QuorumlockFenced,
        Function::QuorumlockFencedToken,
        Function::QuorumlockExtend,
        Function::QuorumlockKeptAcquire,
        Function::QuorumlockPermit,
        Function::QuorumlockRead,
        Function::QuorumlockWrite,
        Function::Rslock,
    ];

    fn name(self) -> &'static str {
        match self {
            Function::FloorQuorum => "floor_quorum",
            Function::FloorAll => "floor_all",
            Function::SingleNode => "single_node",
            Function::QuorumlockPlain => "quorumlock_plain",
            Function::QuorumlockFenced => "quorumlock_fenced",
            Function::QuorumlockFencedToken => "quorumlock_fenced_token",
            Function::QuorumlockExtend => "quorumlock_extend",
            Function::QuorumlockKeptAcquire => "quorumlock_kept_acquire",
            Function::QuorumlockPermit => "quorumlock_permit",
            Function::QuorumlockRead => "quorumlock_read",
            Function::QuorumlockWrite => "quorumlock_write",
            Function::Rslock => "rslock",
        }
    }
}

/// What one function locks: its own resource, so that no two functions share a key.
struct Target {
    function: Function,
    resource: String,
    key: Key,
}

impl Target {
    fn new(function: Function) -> Target {
        let resource = format!("bench:{}", function.name());
        let key = Key::from(resource.as_str());
        Target {
            function,
            resource,
            key,
        }
    }
}

async fn quorumlock_cycle(redlock: &RedLock, resource: &str) -> bool {
    match redlock.try_lock(resource).await {
        Ok(lock) => lock.release().await.is_ok(),
        Err(_) => false,
    }
}

async fn token_cycle(redlock: &RedLock, resource: &str) -> bool {
    match redlock.try_lock(resource).await {
        Ok(lock) => lock.fencing_token().await.is_ok() && lock.release().await.is_ok(),
        Err(_) => false,
    }
}

async fn kept_cycle(redlock: &RedLock, resource: &str) -> bool {
    let Ok(lock) = redlock.try_lock(resource).await else {
        return false;
    };
    match lock.keep_alive(KeepAlive::new()) {
        Ok(kept) => kept.release().await.is_ok(),
        Err(_) => false,
    }
}

/// A permit of a semaphore of 4 permits, all free: acquire + release, as a lock cycle.
async fn permit_cycle(redlock: &RedLock, resource: &str) -> bool {
    let Ok(semaphore) = redlock.semaphore(resource, 4) else {
        return false;
    };
    match semaphore.try_acquire().await {
        Ok(permit) => permit.release().await.is_ok(),
        Err(_) => false,
    }
}

/// A side of a read-write lock nobody else holds: acquire + release, as a lock cycle.
async fn side_cycle(redlock: &RedLock, resource: &str, access: Access) -> bool {
    let Ok(rw) = redlock.rw_lock(resource) else {
        return false;
    };
    match rw.acquire(access, TTL, Retry::none()).await {
        Ok(side) => side.release().await.is_ok(),
        Err(_) => false,
    }
}

async fn rslock_cycle(manager: &rslock::LockManager, resource: &str) -> bool {
    match manager.lock(resource, TTL).await {
        Ok(lock) => {
            manager.unlock(&lock).await;
            true
        }
        Err(_) => false,
    }
}

/// Waits until every node is connected and checked, and a lock is granted with no node
/// failing.
async fn ready(redlock: &RedLock) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if redlock.wait_for_nodes(Duration::from_secs(1)).await == NODES {
            if let Ok(lock) = redlock.try_lock("bench:ready").await {
                let all = lock.failures().is_empty();
                if lock.release().await.is_ok() && all {
                    return;
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "the nodes are not ready after 10 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Everything the functions run against.
struct Fixture {
    floor: Floor,
    plain: RedLock,
    fenced: RedLock,
    /// A client of its own for `quorumlock_fenced_token`: once a client's locks have had
    /// their token asked for, its acquisitions read the fencing counters too.
    fenced_token: RedLock,
    rslock: rslock::LockManager,
    /// The lock extended by `quorumlock_extend`.
    held: tokio::sync::Mutex<Option<Lock>>,
    quorum: LocalQuorum,
}

impl Fixture {
    async fn start() -> Fixture {
        let quorum = LocalQuorum::start_with(NODES, NodeOptions::volatile())
            .await
            .expect("start redis-server");
        let urls = quorum.urls();
        let build = |fencing: bool| {
            RedLock::builder()
                .nodes(urls.clone())
                .ttl(TTL)
                .fencing(fencing)
                // The servers have just started and do not fsync every write: quarantined,
                // their votes would not count for a whole ttl. Quarantine decides whether a
                // node counts, not what a cycle costs.
                .quarantine(false)
                .build()
                .expect("configuration")
        };
        let (plain, fenced, fenced_token) = (build(false), build(true), build(true));
        for redlock in [&plain, &fenced, &fenced_token] {
            ready(redlock).await;
        }
        let floor = Floor::connect(&urls, NODE_TIMEOUT, TTL).await;
        let rslock = rslock::LockManager::new(urls);
        Fixture {
            floor,
            plain,
            fenced,
            fenced_token,
            rslock,
            held: tokio::sync::Mutex::new(None),
            quorum,
        }
    }

    /// One cycle of the target's function; false if it failed (it is then counted, not
    /// retried).
    async fn cycle(&self, target: &Target, held: &mut Option<Lock>) -> bool {
        let (resource, key) = (target.resource.as_str(), &target.key);
        match target.function {
            Function::FloorQuorum => self.floor.cycle_quorum(key).await,
            Function::FloorAll => self.floor.cycle_all(key).await,
            Function::SingleNode => self.floor.cycle_single(key).await,
            Function::QuorumlockPlain => quorumlock_cycle(&self.plain, resource).await,
            Function::QuorumlockFenced => quorumlock_cycle(&self.fenced, resource).await,
            Function::QuorumlockFencedToken => token_cycle(&self.fenced_token, resource).await,
            Function::QuorumlockKeptAcquire => kept_cycle(&self.fenced, resource).await,
            Function::QuorumlockPermit => permit_cycle(&self.fenced, resource).await,
            Function::QuorumlockRead => side_cycle(&self.fenced, resource, Access::Read).await,
            Function::QuorumlockWrite => side_cycle(&self.fenced, resource, Access::Write).await,
            Function::QuorumlockExtend => match held {
                Some(lock) => lock.extend().await.is_ok(),
                None => false,
            },
            Function::Rslock => rslock_cycle(&self.rslock, resource).await,
        }
    }

    /// Commands executed by all nodes together, by command name (from INFO commandstats).
    async fn commands(&self) -> Vec<(String, u64)> {
        let mut total: Vec<(String, u64)> = Vec::new();
        for node in self.quorum.nodes() {
            let info = match node.command(&["INFO", "commandstats"]).await {
                Ok(Reply::Bulk(Some(bytes))) => String::from_utf8_lossy(&bytes).into_owned(),
                other => panic!("INFO commandstats: {other:?}"),
            };
            for line in info.lines() {
                let Some((name, rest)) = line
                    .strip_prefix("cmdstat_")
                    .and_then(|l| l.split_once(":calls="))
                else {
                    continue;
                };
                let calls: u64 = rest
                    .split(',')
                    .next()
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
                match total.iter_mut().find(|(n, _)| n == name) {
                    Some((_, sum)) => *sum += calls,
                    None => total.push((name.to_string(), calls)),
                }
            }
        }
        total
    }

    /// Runs warm-up cycles of the target's function (connections made, scripts cached; at
    /// most 1% may fail), then counts what one cycle costs besides time: the commands the
    /// nodes ran, and the CPU time of the client and of the servers.
    async fn warm_up(&self, target: &Target) -> Costs {
        let name = target.function.name();
        let mut held = self.held.lock().await;
        if target.function == Function::QuorumlockExtend && held.is_none() {
            let lock = self.fenced.lock(&target.resource).await;
            *held = Some(lock.expect("lock for quorumlock_extend"));
        }
        let mut failed = 0;
        for _ in 0..WARM_UP_CYCLES {
            failed += u64::from(!self.cycle(target, &mut held).await);
        }
        // Let the background commands of the last cycle land before counting.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let before = self.commands().await;
        let (client, servers) = (client_cpu(), self.servers_cpu());
        for _ in 0..COUNTED_CYCLES {
            failed += u64::from(!self.cycle(target, &mut held).await);
        }
        // A node timeout on a loaded machine fails a cycle now and then; more means the
        // function does not work.
        let cycles = WARM_UP_CYCLES + COUNTED_CYCLES;
        assert!(
            failed * 100 <= cycles,
            "{name}: {failed} of {cycles} warm-up cycles failed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        let per_cycle = |ns: u64| ns as f64 / 1e3 / COUNTED_CYCLES as f64;
        let client = per_cycle(client_cpu() - client);
        let servers = per_cycle(self.servers_cpu() - servers);
        let after = self.commands().await;
        let commands: Vec<(String, f64)> = after
            .into_iter()
            .filter(|(command, _)| command != "info")
            .filter_map(|(command, calls)| {
                let was = before
                    .iter()
                    .find(|(c, _)| *c == command)
                    .map_or(0, |(_, n)| *n);
                let each = (calls - was) as f64 / COUNTED_CYCLES as f64;
                (each > 0.0).then_some((command, each))
            })
            .collect();
        let costs = Costs {
            client_cpu_us: client,
            servers_cpu_us: servers,
            commands,
        };
        eprintln!("{name}: per cycle: {}", costs.describe());
        costs
    }

    /// CPU time used so far by every thread of every server process, in ns.
    fn servers_cpu(&self) -> u64 {
        let pids = self.quorum.nodes().iter().filter_map(|node| node.pid());
        pids.map(|pid| cpu_ns(&format!("/proc/{pid}/task"))).sum()
    }

    /// Releases the extended lock, closes every client, then stops the servers.
    fn stop(self, rt: &Runtime) {
        let Fixture {
            floor,
            plain,
            fenced,
            fenced_token,
            rslock,
            held,
            quorum,
        } = self;
        rt.block_on(async {
            if let Some(lock) = held.into_inner() {
                let _ = lock.release().await;
            }
            floor.quit().await;
        });
        drop((floor, plain, fenced, fenced_token, rslock));
        // The servers are reaped by the runtime's process driver.
        let _inside = rt.enter();
        drop(quorum);
    }
}

fn runtime() -> Runtime {
    let multi = std::env::var("QUORUMLOCK_BENCH_RUNTIME").is_ok_and(|v| v == "multi");
    let mut builder = if multi {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(2);
        b
    } else {
        tokio::runtime::Builder::new_current_thread()
    };
    builder.enable_all().build().expect("tokio runtime")
}

fn acquire_release(c: &mut Criterion) {
    let rt = runtime();
    let fixture = rt.block_on(Fixture::start());
    let mut order = Function::ALL.to_vec();
    if std::env::var("QUORUMLOCK_BENCH_ORDER").is_ok_and(|v| v == "reverse") {
        order.reverse();
    }
    if let Ok(rounds) = std::env::var("QUORUMLOCK_BENCH_INTERLEAVE") {
        let rounds = rounds.parse().unwrap_or(interleaved::DEFAULT_ROUNDS);
        interleaved::interleaved(&rt, &fixture, rounds);
        fixture.stop(&rt);
        return;
    }

    let mut group = c.benchmark_group("acquire_release");
    for function in order {
        let target = Target::new(function);
        let costs = rt.block_on(fixture.warm_up(&target));
        let (failed, cycles) = (Cell::new(0u64), Cell::new(0u64));
        let (fixture, target, failed, cycles) = (&fixture, &target, &failed, &cycles);
        group.bench_function(function.name(), |b| {
            b.to_async(&rt).iter_custom(|iters| async move {
                let mut held = fixture.held.lock().await;
                let start = Instant::now();
                for _ in 0..iters {
                    if !std::hint::black_box(fixture.cycle(target, &mut held).await) {
                        failed.set(failed.get() + 1);
                    }
                }
                let elapsed = start.elapsed();
                cycles.set(cycles.get() + iters);
                elapsed
            });
        });
        check_failures(function, failed.get(), cycles.get());
        save(function, &baseline("new"), "costs.json", &costs.to_json());
    }
    group.finish();
    fixture.stop(&rt);
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(3))
        .measurement_time(Duration::from_secs(12))
        .sample_size(60);
    targets = acquire_release
}
criterion_main!(benches);
