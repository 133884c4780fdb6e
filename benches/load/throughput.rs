//! Workloads b (throughput on independent resources) and c (contention on one resource).
//! Both run the implementations in turns: every round runs each for the same time, in
//! alternating order, so that a change in the machine's load hits all of them alike.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quorumlock::testkit::{LocalNode, LocalQuorum, Reply};
use quorumlock::Retry;
use serde_json::json;

use crate::impls::{Clients, Held, Impl};
use crate::stats::{fmt, jain, median, process_cpu_ns};
use crate::{print_table, TTL};

/// Attempts per call in workload c, for quorumlock and rslock alike; a call that runs out
/// is counted as given up, and the task calls again.
const CONTENTION_ATTEMPTS: u32 = 10;

/// Round `round`'s order: forwards in even rounds, backwards in odd ones.
fn order(impls: &[Impl], round: usize) -> Vec<Impl> {
    let mut order = impls.to_vec();
    if round % 2 == 1 {
        order.reverse();
    }
    order
}

/// The measured part of a window: it starts after a short ramp, in which the tasks start
/// and their first cycles are not counted.
fn window(secs: f64) -> (Instant, Instant) {
    let ramp = Duration::from_secs_f64((secs / 5.0).min(0.2));
    let from = Instant::now() + ramp;
    (from, from + Duration::from_secs_f64(secs))
}

/// What one implementation did in one window of workload b.
struct Window {
    cycles: u64,
    failed: u64,
    secs: f64,
    cpu_ns: u64,
    /// CPU time the nodes' servers used in the window, all together (`INFO cpu`).
    server_cpu_us: f64,
}

impl Window {
    fn rate(&self) -> f64 {
        self.cycles as f64 / self.secs
    }

    fn cpu_us_per_cycle(&self) -> f64 {
        self.cpu_ns as f64 / 1e3 / (self.cycles + self.failed).max(1) as f64
    }

    fn server_us_per_cycle(&self) -> f64 {
        self.server_cpu_us / (self.cycles + self.failed).max(1) as f64
    }
}

/// The CPU time, in µs, that the servers of `quorum` have used since they started, all
/// together: `used_cpu_sys` + `used_cpu_user` of `INFO cpu` (getrusage, µs resolution). The
/// `INFO` calls themselves cost a few µs per node, once per window.
async fn server_cpu_us(quorum: &LocalQuorum) -> f64 {
    let mut total = 0.0;
    for node in quorum.nodes() {
        let info = match node.command(&["INFO", "cpu"]).await {
            Ok(Reply::Bulk(Some(v))) => String::from_utf8_lossy(&v).into_owned(),
            other => panic!("INFO cpu: {other:?}"),
        };
        for field in ["used_cpu_sys:", "used_cpu_user:"] {
            let secs: f64 = info
                .lines()
                .find_map(|l| l.strip_prefix(field))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or_else(|| panic!("INFO cpu without {field}"));
            total += secs * 1e6;
        }
    }
    total
}

/// `tasks` tasks, each running acquire + release cycles on its own resource.
async fn run_window(
    clients: &Arc<Clients>,
    quorum: &LocalQuorum,
    imp: Impl,
    tasks: usize,
    secs: f64,
) -> Window {
    let (from, until) = window(secs);
    let handles: Vec<_> = (0..tasks)
        .map(|task| {
            let clients = Arc::clone(clients);
            tokio::spawn(async move {
                let resource = format!("load:b:{}:{task}", imp.name());
                let (mut ok, mut failed) = (0u64, 0u64);
                loop {
                    let good = clients.cycle(imp, &resource).await;
                    let now = Instant::now();
                    if now >= until {
                        return (ok, failed);
                    }
                    if now >= from {
                        ok += u64::from(good);
                        failed += u64::from(!good);
                    }
                }
            })
        })
        .collect();
    tokio::time::sleep_until(from.into()).await;
    let (cpu, server) = (process_cpu_ns(), server_cpu_us(quorum).await);
    tokio::time::sleep_until(until.into()).await;
    let (cpu_ns, server_cpu_us) = (process_cpu_ns() - cpu, server_cpu_us(quorum).await - server);
    let (mut cycles, mut failed) = (0, 0);
    for handle in handles {
        let (ok, bad) = handle.await.expect("task");
        cycles += ok;
        failed += bad;
    }
    // Let the background commands of the last cycles land.
    tokio::time::sleep(Duration::from_millis(50)).await;
    Window {
        cycles,
        failed,
        secs,
        cpu_ns,
        server_cpu_us,
    }
}

/// Workload b: cycles/s and client CPU per cycle, for each number of tasks.
pub(crate) async fn throughput(
    clients: &Arc<Clients>,
    quorum: &LocalQuorum,
    s: &crate::Settings,
) -> serde_json::Value {
    let mut results = Vec::new();
    let mut rows = Vec::new();
    for &tasks in &s.tasks {
        let mut windows: Vec<Vec<Window>> = s.impls.iter().map(|_| Vec::new()).collect();
        for round in 0..s.rounds {
            for imp in order(&s.impls, round) {
                let i = s.impls.iter().position(|&x| x == imp).unwrap_or(0);
                let w = run_window(clients, quorum, imp, tasks, s.secs).await;
                eprintln!(
                    "b: {tasks} tasks, round {round}: {}: {:.0} cycles/s, {:.0} µs CPU/cycle, {:.0} µs server CPU/cycle, {} failed",
                    imp.name(),
                    w.rate(),
                    w.cpu_us_per_cycle(),
                    w.server_us_per_cycle(),
                    w.failed
                );
                windows[i].push(w);
            }
        }
        for (imp, windows) in s.impls.iter().zip(&windows) {
            let rates: Vec<f64> = windows.iter().map(Window::rate).collect();
            let cpus: Vec<f64> = windows.iter().map(Window::cpu_us_per_cycle).collect();
            let servers: Vec<f64> = windows.iter().map(Window::server_us_per_cycle).collect();
            let failed: u64 = windows.iter().map(|w| w.failed).sum();
            let cycles: u64 = windows.iter().map(|w| w.cycles).sum();
            let (rate, cpu, server) = (median(&rates), median(&cpus), median(&servers));
            rows.push(vec![
                tasks.to_string(),
                imp.name().to_string(),
                fmt(rate, 0),
                fmt(cpu, 1),
                fmt(server, 1),
                format!("{failed}/{}", cycles + failed),
            ]);
            results.push(json!({
                "impl": imp.name(),
                "tasks": tasks,
                "cycles_per_s": rate,
                "cpu_us_per_cycle": cpu,
                "server_cpu_us_per_cycle": server,
                "failed": failed,
                "cycles": cycles,
                "rounds": windows.iter().map(|w| json!({
                    "cycles_per_s": w.rate(),
                    "cpu_us_per_cycle": w.cpu_us_per_cycle(),
                    "server_cpu_us_per_cycle": w.server_us_per_cycle(),
                    "cycles": w.cycles,
                    "failed": w.failed,
                })).collect::<Vec<_>>(),
            }));
        }
    }
    print_table(
        &format!(
            "b. throughput: T tasks, each on its own resource (medians of {} rounds × {} s)",
            s.rounds, s.secs
        ),
        &[
            "T",
            "impl",
            "cycles/s",
            "client CPU µs/cycle",
            "server CPU µs/cycle",
            "failed",
        ],
        &rows,
    );
    json!({ "secs": s.secs, "rounds": s.rounds, "results": results })
}

/// One call that acquires `resource`, retrying while it is taken: `CONTENTION_ATTEMPTS`
/// attempts, a pause uniform in 0..jitter between them.
async fn acquire_contended(
    clients: &Clients,
    rslock: &rslock::LockManager,
    imp: Impl,
    resource: &str,
    jitter: Duration,
) -> Option<Held> {
    let retry = Retry::attempts(CONTENTION_ATTEMPTS)
        .delay(Duration::ZERO)
        .jitter(jitter);
    let redlock = match imp {
        Impl::Fenced => &clients.fenced,
        Impl::Plain => &clients.plain,
        Impl::Rslock => return rslock.lock(resource, TTL).await.ok().map(Held::Rslock),
        Impl::Floor | Impl::Token | Impl::TokenShared => return None, // not in workload c
    };
    let lock = redlock.lock_with(resource, TTL, retry).await.ok()?;
    Some(Held::Quorumlock(lock))
}

/// What one implementation did in one window of workload c.
struct Contended {
    /// Acquisitions made in the measured window, per task.
    per_task: Vec<u64>,
    /// Calls that ran out of attempts.
    gave_up: u64,
    /// Acquisitions while another task of the bench held the lock (never expected).
    overlaps: u64,
    secs: f64,
    /// Acquisitions in the whole run, window or not.
    acquired: u64,
    /// Median time from a holder's release call to the next grant, ms.
    gap_p50_ms: f64,
    /// Mean time a holder kept the lock (the hold's sleep as it really lasted), ms.
    held_ms: f64,
    /// Lock attempts in the whole run.
    attempts: u64,
    /// Acquisitions handed over by a release (quorumlock), in the whole run.
    handed: u64,
}

impl Contended {
    /// Attempts that did not get the lock, per acquisition.
    fn wasted(&self) -> f64 {
        // Acquisitions handed over made no attempt of their own.
        let by_attempt = self.acquired.saturating_sub(self.handed);
        self.attempts.saturating_sub(by_attempt) as f64 / self.acquired.max(1) as f64
    }
}

/// Locks handed over by a release so far (quorumlock's count; rslock has none).
fn handed_over(clients: &Clients, imp: Impl) -> u64 {
    match imp {
        Impl::Fenced => clients.fenced.stats().handed_over,
        Impl::Plain => clients.plain.stats().handed_over,
        Impl::Token => clients.token.stats().handed_over,
        Impl::TokenShared => {
            clients.token.stats().handed_over + clients.shared.0.stats().handed_over
        }
        Impl::Rslock | Impl::Floor => 0,
    }
}

/// Lock attempts so far: quorumlock's own count, or for rslock, the `SET` commands `node`
/// has run (rslock sends one to each node per attempt).
async fn attempts(clients: &Clients, node: &LocalNode, imp: Impl) -> u64 {
    match imp {
        Impl::Fenced => clients.fenced.stats().attempts,
        Impl::Plain => clients.plain.stats().attempts,
        Impl::Token => clients.token.stats().attempts,
        Impl::TokenShared => clients.token.stats().attempts + clients.shared.0.stats().attempts,
        Impl::Rslock | Impl::Floor => {
            let info = match node.command(&["INFO", "commandstats"]).await {
                Ok(Reply::Bulk(Some(v))) => String::from_utf8_lossy(&v).into_owned(),
                _ => return 0,
            };
            info.lines()
                .find_map(|l| l.strip_prefix("cmdstat_set:calls="))
                .and_then(|rest| rest.split(',').next())
                .and_then(|n| n.parse().ok())
                .unwrap_or(0)
        }
    }
}

async fn run_contended(
    clients: &Arc<Clients>,
    imp: Impl,
    round: usize,
    s: &crate::Settings,
    contenders: usize,
) -> Contended {
    // A fresh resource per round: no round starts with a key left by the one before.
    let resource: Arc<str> = format!("load:c:{}:{contenders}:{round}", imp.name()).into();
    let mut rslock = clients.rslock.clone();
    rslock.set_retry(CONTENTION_ATTEMPTS, s.jitter);
    let holders = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicU64::new(0));
    // When the last holder began to release, and the gaps from there to the next grant.
    let handoff: Arc<std::sync::Mutex<(Option<Instant>, Vec<Duration>)>> = Arc::default();
    // The holds measured in the window, in ns: a `sleep(hold)` lasts longer than `hold` (the
    // runtime's timer ticks every millisecond), and that bounds the handoffs a second.
    let (held_ns, holds) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let (from, until) = window(s.secs);
    let (hold, jitter) = (s.hold, s.jitter);
    let handles: Vec<_> = (0..contenders)
        .map(|_| {
            let (clients, rslock, resource) =
                (Arc::clone(clients), rslock.clone(), Arc::clone(&resource));
            let (holders, overlaps) = (Arc::clone(&holders), Arc::clone(&overlaps));
            let handoff = Arc::clone(&handoff);
            let (held_ns, holds) = (Arc::clone(&held_ns), Arc::clone(&holds));
            tokio::spawn(async move {
                let (mut acquired, mut gave_up, mut all) = (0u64, 0u64, 0u64);
                while Instant::now() < until {
                    let Some(held) =
                        acquire_contended(&clients, &rslock, imp, &resource, jitter).await
                    else {
                        gave_up += 1;
                        continue;
                    };
                    let at = Instant::now();
                    if holders.fetch_add(1, Ordering::SeqCst) != 0 {
                        overlaps.fetch_add(1, Ordering::Relaxed);
                    }
                    if let Ok(mut h) = handoff.lock() {
                        if let Some(released) = h.0.take() {
                            if at >= from && at < until {
                                h.1.push(at.saturating_duration_since(released));
                            }
                        }
                    }
                    if hold.is_zero() {
                        tokio::task::yield_now().await;
                    } else {
                        tokio::time::sleep(hold).await;
                    }
                    if at >= from && at < until {
                        held_ns.fetch_add(at.elapsed().as_nanos() as u64, Ordering::Relaxed);
                        holds.fetch_add(1, Ordering::Relaxed);
                    }
                    holders.fetch_sub(1, Ordering::SeqCst);
                    if let Ok(mut h) = handoff.lock() {
                        h.0 = Some(Instant::now());
                    }
                    clients.release(held).await;
                    acquired += u64::from(at >= from && at < until);
                    all += 1;
                }
                (acquired, gave_up, all)
            })
        })
        .collect();
    let mut per_task = Vec::with_capacity(handles.len());
    let mut gave_up = 0;
    let mut acquired_all = 0;
    for handle in handles {
        let (acquired, given_up, all) = handle.await.expect("task");
        per_task.push(acquired);
        gave_up += given_up;
        acquired_all += all;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut gaps = handoff.lock().map(|h| h.1.clone()).unwrap_or_default();
    gaps.sort();
    let gap_p50_ms = gaps
        .get(gaps.len() / 2)
        .map_or(f64::NAN, |d| d.as_secs_f64() * 1e3);
    let holds = holds.load(Ordering::Relaxed);
    Contended {
        gap_p50_ms,
        held_ms: held_ns.load(Ordering::Relaxed) as f64 / 1e6 / holds.max(1) as f64,
        per_task,
        gave_up,
        overlaps: overlaps.load(Ordering::Relaxed),
        secs: s.secs,
        acquired: acquired_all,
        attempts: 0,
        handed: 0,
    }
}

/// Workload c: handoffs/s and fairness on one resource.
pub(crate) async fn contention(
    clients: &Arc<Clients>,
    node: &LocalNode,
    s: &crate::Settings,
) -> serde_json::Value {
    const IMPLS: [Impl; 3] = [Impl::Fenced, Impl::Plain, Impl::Rslock];
    let mut windows: Vec<Vec<Contended>> = IMPLS.iter().map(|_| Vec::new()).collect();
    for round in 0..s.rounds {
        for imp in order(&IMPLS, round) {
            let i = IMPLS.iter().position(|&x| x == imp).unwrap_or(0);
            let (before, handed) = (
                attempts(clients, node, imp).await,
                handed_over(clients, imp),
            );
            let mut w = run_contended(clients, imp, round, s, s.contenders).await;
            w.attempts = attempts(clients, node, imp).await - before;
            w.handed = handed_over(clients, imp) - handed;
            let total: u64 = w.per_task.iter().sum();
            eprintln!(
                "c: round {round}: {}: {:.0} handoffs/s, Jain {:.3}, {} gave up, {} overlaps, \
                 {:.2} wasted attempts per acquisition, release to next grant p50 {:.3} ms, \
                 held {:.3} ms, {} of {} handed over",
                imp.name(),
                total as f64 / w.secs,
                jain(&w.per_task),
                w.gave_up,
                w.overlaps,
                w.wasted(),
                w.gap_p50_ms,
                w.held_ms,
                w.handed,
                w.acquired
            );
            windows[i].push(w);
        }
    }
    let mut rows = Vec::new();
    let mut results = Vec::new();
    for (imp, windows) in IMPLS.iter().zip(&windows) {
        let rates: Vec<f64> = windows
            .iter()
            .map(|w| w.per_task.iter().sum::<u64>() as f64 / w.secs)
            .collect();
        // Per-task acquisitions over all rounds together.
        let mut per_task = vec![0u64; s.contenders];
        for w in windows {
            for (sum, n) in per_task.iter_mut().zip(&w.per_task) {
                *sum += n;
            }
        }
        let (min, max) = (
            per_task.iter().min().copied(),
            per_task.iter().max().copied(),
        );
        let gave_up: u64 = windows.iter().map(|w| w.gave_up).sum();
        let overlaps: u64 = windows.iter().map(|w| w.overlaps).sum();
        let wasted: Vec<f64> = windows.iter().map(Contended::wasted).collect();
        let wasted = median(&wasted);
        let gaps: Vec<f64> = windows.iter().map(|w| w.gap_p50_ms).collect();
        let gap = median(&gaps);
        let helds: Vec<f64> = windows.iter().map(|w| w.held_ms).collect();
        let held = median(&helds);
        let rate = median(&rates);
        rows.push(vec![
            imp.name().to_string(),
            fmt(rate, 0),
            min.map_or("–".into(), |m| m.to_string()),
            max.map_or("–".into(), |m| m.to_string()),
            format!("{:.3}", jain(&per_task)),
            gave_up.to_string(),
            overlaps.to_string(),
            fmt(wasted, 2),
            fmt(gap, 3),
            fmt(held, 3),
        ]);
        results.push(json!({
            "impl": imp.name(),
            "handoffs_per_s": rate,
            "held_ms_mean": held,
            "per_task": per_task,
            "min": min,
            "max": max,
            "jain": jain(&per_task),
            "gave_up": gave_up,
            "overlaps": overlaps,
            "wasted_attempts_per_acquisition": wasted,
            "release_to_grant_p50_ms": gap,
            "rounds": windows.iter().map(|w| json!({
                "wasted_attempts_per_acquisition": w.wasted(),
                "release_to_grant_p50_ms": w.gap_p50_ms,
                "held_ms_mean": w.held_ms,
                "handed_over": w.handed,
                "acquired": w.acquired,
                "handoffs_per_s": w.per_task.iter().sum::<u64>() as f64 / w.secs,
                "per_task": w.per_task,
                "jain": jain(&w.per_task),
                "gave_up": w.gave_up,
            })).collect::<Vec<_>>(),
        }));
    }
    print_table(
        &format!(
            "c. contention: {} tasks on one resource, holding {} ms, {} attempts per call \
             {} ms apart at most (median of {} rounds × {} s; per-task counts over all rounds)",
            s.contenders,
            s.hold.as_millis(),
            CONTENTION_ATTEMPTS,
            s.jitter.as_millis(),
            s.rounds,
            s.secs
        ),
        &[
            "impl",
            "handoffs/s",
            "min/task",
            "max/task",
            "Jain",
            "gave up",
            "overlaps",
            "wasted attempts/acq.",
            "release→grant p50 ms",
            "held ms (mean)",
        ],
        &rows,
    );
    json!({
        "secs": s.secs,
        "rounds": s.rounds,
        "contenders": s.contenders,
        "hold_ms": s.hold.as_secs_f64() * 1e3,
        "jitter_ms": s.jitter.as_secs_f64() * 1e3,
        "attempts_per_call": CONTENTION_ATTEMPTS,
        "results": results,
    })
}

/// Workload w: the contention curve, handoffs/s and wasted attempts for 1 to 64 tasks on one
/// resource (one window per implementation and task count, in alternating order).
pub(crate) async fn contention_curve(
    clients: &Arc<Clients>,
    node: &LocalNode,
    s: &crate::Settings,
) -> serde_json::Value {
    const IMPLS: [Impl; 3] = [Impl::Fenced, Impl::Plain, Impl::Rslock];
    let mut results = Vec::new();
    let mut rows = Vec::new();
    for (i, &tasks) in s.curve.iter().enumerate() {
        for imp in order(&IMPLS, i) {
            let (before, handed) = (
                attempts(clients, node, imp).await,
                handed_over(clients, imp),
            );
            let mut w = run_contended(clients, imp, 1000 + i, s, tasks).await;
            w.attempts = attempts(clients, node, imp).await - before;
            w.handed = handed_over(clients, imp) - handed;
            let rate = w.per_task.iter().sum::<u64>() as f64 / w.secs;
            eprintln!(
                "w: {tasks} tasks: {}: {rate:.0} handoffs/s, {:.2} wasted attempts per \
                 acquisition, release to next grant p50 {:.3} ms, Jain {:.3}",
                imp.name(),
                w.wasted(),
                w.gap_p50_ms,
                jain(&w.per_task)
            );
            rows.push(vec![
                tasks.to_string(),
                imp.name().to_string(),
                fmt(Some(rate), 0),
                fmt(Some(w.wasted()), 2),
                fmt(Some(w.gap_p50_ms), 3),
                format!("{:.3}", jain(&w.per_task)),
                fmt(Some(w.held_ms), 3),
            ]);
            results.push(json!({
                "tasks": tasks,
                "impl": imp.name(),
                "handoffs_per_s": rate,
                "wasted_attempts_per_acquisition": w.wasted(),
                "release_to_grant_p50_ms": w.gap_p50_ms,
                "held_ms_mean": w.held_ms,
                "jain": jain(&w.per_task),
                "gave_up": w.gave_up,
                "overlaps": w.overlaps,
            }));
        }
    }
    print_table(
        &format!(
            "w. contention curve: tasks on one resource, holding {} ms, {} attempts per call {} ms \
             apart at most ({} s per point)",
            s.hold.as_millis(),
            CONTENTION_ATTEMPTS,
            s.jitter.as_millis(),
            s.secs
        ),
        &[
            "tasks",
            "impl",
            "handoffs/s",
            "wasted attempts/acq.",
            "release→grant p50 ms",
            "Jain",
            "held ms (mean)",
        ],
        &rows,
    );
    json!({ "secs": s.secs, "hold_ms": s.hold.as_secs_f64() * 1e3, "results": results })
}
