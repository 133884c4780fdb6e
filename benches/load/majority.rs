//! Workload f: three of five nodes frozen. How long each call takes to return its error;
//! then calls in flight while the nodes resume, and whether any returns an expired lock.

use std::time::{Duration, Instant};

use quorumlock::testkit::LocalQuorum;
use quorumlock::Retry;
use serde_json::json;

use crate::frozen::{freeze, release, resume};
use crate::impls::{Clients, Held, Impl};
use crate::stats::{fmt, Latencies};
use crate::{print_table, NODES, NODE_TIMEOUT, TTL};

/// The longest a call may take in f (rslock with three attempts takes about 3.2 s).
const ERROR_CAP: Duration = Duration::from_secs(10);
/// f: the ttl of the calls that straddle the resumption: short, so that an expired lock
/// would be possible at all.
const STRADDLE_TTL: Duration = Duration::from_secs(1);
/// f: calls per implementation that straddle the resumption.
const STRADDLE_CALLS: usize = 4;
/// f: how long the majority stays frozen after those calls start.
const STRADDLE_FROZEN: Duration = Duration::from_secs(1);

/// The calls timed in workload f, each to the error it should return.
#[derive(Debug, Clone, Copy)]
enum Call {
    Floor,
    TryLock(Impl),
    /// `RedLock::lock`: the default retry, three attempts.
    Lock,
    /// rslock's `lock` with this many attempts (3 is its default).
    Rslock(u32),
}

impl Call {
    fn label(self) -> String {
        match self {
            Call::Floor => "floor_quorum acquire".into(),
            Call::TryLock(imp) => format!("{} try_lock", imp.name()),
            Call::Lock => "quorumlock_fenced lock (default retry: 3 attempts)".into(),
            Call::Rslock(1) => "rslock lock, 1 attempt".into(),
            Call::Rslock(n) => format!("rslock lock, {n} attempts (its default)"),
        }
    }

    /// Makes the call; an error as text. The caller releases what comes back.
    async fn call(self, clients: &Clients, resource: &str) -> Result<Held, (String, Option<Held>)> {
        match self {
            Call::Floor => match clients.floor.acquire(resource).await {
                (true, lock) => Ok(Held::Floor(lock)),
                (false, lock) => Err(("no majority".into(), Some(Held::Floor(lock)))),
            },
            Call::TryLock(imp) => {
                let redlock = if imp == Impl::Plain {
                    &clients.plain
                } else {
                    &clients.fenced
                };
                redlock
                    .try_lock(resource)
                    .await
                    .map(Held::Quorumlock)
                    .map_err(|e| (e.to_string(), None))
            }
            Call::Lock => clients
                .fenced
                .lock(resource)
                .await
                .map(Held::Quorumlock)
                .map_err(|e| (e.to_string(), None)),
            Call::Rslock(attempts) => {
                let mut manager = clients.rslock.clone();
                manager.set_retry(attempts, Duration::from_millis(200));
                manager
                    .lock(resource, TTL)
                    .await
                    .map(Held::Rslock)
                    .map_err(|e| (e.to_string(), None))
            }
        }
    }
}

/// Workload f: with three of five nodes frozen, the time each call takes to return its
/// error; then calls in flight while the nodes resume.
pub(crate) async fn majority_frozen(
    quorum: &mut LocalQuorum,
    clients: &Clients,
    s: &crate::Settings,
) -> serde_json::Value {
    let frozen = NODES / 2 + 1;
    freeze(quorum, frozen);
    let calls = [
        (Call::Floor, s.error_samples),
        (Call::TryLock(Impl::Fenced), s.error_samples),
        (Call::TryLock(Impl::Plain), s.error_samples),
        (Call::Lock, s.error_samples.div_ceil(2)),
        (Call::Rslock(1), s.rslock_samples),
        (Call::Rslock(3), s.rslock_samples.div_ceil(2)),
    ];
    let two_timeouts = 2.0 * NODE_TIMEOUT.as_secs_f64() * 1e3;
    let mut background = Vec::new();
    let mut rows = Vec::new();
    let mut errors_json = Vec::new();
    for (call, samples) in calls {
        let mut took = Latencies::default();
        let (mut granted, mut capped, mut error) = (0u64, 0u64, String::new());
        for n in 0..samples {
            let resource = format!("load:f:{}:{n}", call.label().replace(' ', "_"));
            let start = Instant::now();
            match tokio::time::timeout(ERROR_CAP, call.call(clients, &resource)).await {
                Ok(Ok(held)) => {
                    granted += 1;
                    release(clients, held, frozen, &mut background).await;
                }
                Ok(Err((e, cleanup))) => {
                    took.push(start.elapsed());
                    error = e;
                    if let Some(held) = cleanup {
                        release(clients, held, frozen, &mut background).await;
                    }
                }
                Err(_) => capped += 1,
            }
        }
        took.finish();
        eprintln!(
            "f: {}: {} errors, max {} ms",
            call.label(),
            took.sorted_ms.len(),
            fmt(took.sorted_ms.last().copied(), 1)
        );
        let target = match call {
            Call::TryLock(_) => took.sorted_ms.last().map_or("–".into(), |&max| {
                if max <= two_timeouts {
                    "yes".into()
                } else {
                    "no".to_string()
                }
            }),
            _ => "".into(),
        };
        rows.push(vec![
            call.label(),
            took.sorted_ms.len().to_string(),
            fmt(took.p(50.0), 1),
            fmt(took.sorted_ms.last().copied(), 1),
            format!("{granted} / {capped}"),
            target,
        ]);
        let mut entry = took.json();
        entry["call"] = json!(call.label());
        entry["granted"] = json!(granted);
        entry["capped"] = json!(capped);
        entry["error"] = json!(error);
        errors_json.push(entry);
    }
    print_table(
        &format!(
            "f. {frozen} of {NODES} nodes frozen: time until the call returns its error \
             (quorumlock node timeout {} ms; target: within 2 × = {two_timeouts:.0} ms)",
            NODE_TIMEOUT.as_millis()
        ),
        &[
            "call",
            "errors",
            "p50 ms",
            "max ms",
            "granted / capped",
            "max ≤ 2× node timeout",
        ],
        &rows,
    );
    for handle in background {
        let _ = handle.await;
    }
    let straddle = straddle(quorum, clients).await;
    json!({
        "frozen": frozen,
        "nodes": NODES,
        "node_timeout_ms": NODE_TIMEOUT.as_millis() as u64,
        "errors": errors_json,
        "after_resume": straddle,
    })
}

/// What one call that straddled the resumption returned.
struct Straddled {
    /// The validity left when the call returned a lock (rslock: its `validity_time`).
    validity_ms: f64,
    /// Whether the lock was still valid when returned (rslock: `validity_time > 0`).
    valid: bool,
    /// When the call returned, after the nodes resumed (negative: before).
    after_resume_ms: f64,
}

/// Calls that keep trying for a few seconds start while the majority is frozen; the nodes
/// resume a second later; every lock those calls return must still be valid.
async fn straddle(quorum: &mut LocalQuorum, clients: &Clients) -> serde_json::Value {
    const IMPLS: [Impl; 3] = [Impl::Fenced, Impl::Plain, Impl::Rslock];
    let retry = Retry::within(Duration::from_secs(5))
        .delay(Duration::from_millis(20))
        .jitter(Duration::from_millis(20));
    let mut rslock = clients.rslock.clone();
    rslock.set_retry(20, Duration::from_millis(100));
    let mut tasks = Vec::new();
    for imp in IMPLS {
        for n in 0..STRADDLE_CALLS {
            let resource = format!("load:f:straddle:{}:{n}", imp.name());
            let redlock = if imp == Impl::Plain {
                clients.plain.clone()
            } else {
                clients.fenced.clone()
            };
            let rslock = rslock.clone();
            tasks.push((
                imp,
                tokio::spawn(async move {
                    if imp == Impl::Rslock {
                        let lock = rslock.lock(resource.as_str(), STRADDLE_TTL).await.ok()?;
                        let at = Instant::now();
                        let validity = lock.validity_time as f64;
                        rslock.unlock(&lock).await;
                        Some((validity, validity > 0.0, at))
                    } else {
                        let lock = redlock
                            .lock_with(&resource, STRADDLE_TTL, retry)
                            .await
                            .ok()?;
                        let at = Instant::now();
                        let (validity, valid) = (lock.validity(), lock.is_valid());
                        let _ = lock.release().await;
                        Some((validity.as_secs_f64() * 1e3, valid, at))
                    }
                }),
            ));
        }
    }
    tokio::time::sleep(STRADDLE_FROZEN).await;
    resume(quorum);
    let resumed = Instant::now();
    let mut by_impl: Vec<Vec<Option<Straddled>>> = IMPLS.iter().map(|_| Vec::new()).collect();
    for (imp, task) in tasks {
        let i = IMPLS.iter().position(|&x| x == imp).unwrap_or(0);
        let outcome = task
            .await
            .ok()
            .flatten()
            .map(|(validity_ms, valid, at)| Straddled {
                validity_ms,
                valid,
                after_resume_ms: if at >= resumed {
                    (at - resumed).as_secs_f64() * 1e3
                } else {
                    -((resumed - at).as_secs_f64() * 1e3)
                },
            });
        by_impl[i].push(outcome);
    }
    let mut rows = Vec::new();
    let mut results = Vec::new();
    for (imp, outcomes) in IMPLS.iter().zip(&by_impl) {
        let locks: Vec<&Straddled> = outcomes.iter().flatten().collect();
        let min_validity = locks.iter().map(|l| l.validity_ms).min_by(f64::total_cmp);
        let last = locks
            .iter()
            .map(|l| l.after_resume_ms)
            .max_by(f64::total_cmp);
        let all_valid = locks.iter().all(|l| l.valid && l.validity_ms > 0.0);
        rows.push(vec![
            imp.name().to_string(),
            outcomes.len().to_string(),
            locks.len().to_string(),
            (outcomes.len() - locks.len()).to_string(),
            fmt(min_validity, 1),
            fmt(last, 1),
            if all_valid { "yes".into() } else { "NO".into() },
        ]);
        results.push(json!({
            "impl": imp.name(),
            "calls": outcomes.len(),
            "locks": locks.len(),
            "min_validity_ms": min_validity,
            "last_return_after_resume_ms": last,
            "all_valid": all_valid,
        }));
    }
    print_table(
        &format!(
            "f. calls in flight while the majority resumes ({STRADDLE_CALLS} per impl, ttl {} ms, \
             started {} s before the resumption, retrying for up to 5 s): none may return an \
             expired lock",
            STRADDLE_TTL.as_millis(),
            STRADDLE_FROZEN.as_secs()
        ),
        &[
            "impl",
            "calls",
            "locks",
            "errors",
            "min validity ms",
            "last return after resume ms",
            "all valid",
        ],
        &rows,
    );
    json!({ "ttl_ms": STRADDLE_TTL.as_millis() as u64, "results": results })
}
