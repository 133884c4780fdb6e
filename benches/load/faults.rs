//! Workloads d and e: one, then two of five nodes frozen, acquisition latency next to the
//! healthy figures; and the quorum they share with workload f (majority.rs).

use std::time::{Duration, Instant};

use quorumlock::testkit::{LocalQuorum, NodeOptions};
use serde_json::json;

use crate::frozen::{freeze, release, resume};
use crate::impls::{ready, Clients, Impl};
use crate::stats::{fmt, Latencies};
use crate::{print_table, NODES, NODE_TIMEOUT};

/// Samples each implementation takes in turn before the next one's turn.
const BLOCK: usize = 20;
/// Uncounted cycles of each implementation before a state is measured.
const WARM_UP: usize = 10;
/// The longest an acquisition may take in d and e: rslock waits for its 500 ms response
/// timeout on every frozen node; a capped call counts as failed.
const ACQUIRE_CAP: Duration = Duration::from_secs(2);

/// Acquisition latency of every implementation with `frozen` nodes frozen, sampled in
/// turns; each sample locks a fresh resource (a capped call may leave its keys behind).
async fn latencies(clients: &Clients, frozen: usize, s: &crate::Settings) -> Vec<Latencies> {
    let target = |imp: Impl| match imp {
        Impl::Rslock if frozen > 0 => s.rslock_samples,
        _ => s.samples,
    };
    for imp in Impl::ALL {
        if imp != Impl::Rslock || frozen == 0 {
            for _ in 0..WARM_UP {
                clients
                    .cycle(imp, &format!("load:warm:{}", imp.name()))
                    .await;
            }
        }
    }
    let mut all: Vec<Latencies> = Impl::ALL.iter().map(|_| Latencies::default()).collect();
    let mut background = Vec::new();
    let mut block = 0;
    loop {
        let mut more = false;
        let mut order = Impl::ALL.to_vec();
        if block % 2 == 1 {
            order.reverse();
        }
        for imp in order {
            let i = Impl::ALL.iter().position(|&x| x == imp).unwrap_or(0);
            let done = all[i].sorted_ms.len() + all[i].failed as usize;
            for n in done..target(imp).min(done + BLOCK) {
                let resource = format!("load:frozen{frozen}:{}:{n}", imp.name());
                let start = Instant::now();
                match tokio::time::timeout(ACQUIRE_CAP, clients.acquire(imp, &resource)).await {
                    Ok(Ok(held)) => {
                        all[i].push(start.elapsed());
                        release(clients, held, frozen, &mut background).await;
                    }
                    Ok(Err(cleanup)) => {
                        all[i].failed += 1;
                        if let Some(held) = cleanup {
                            release(clients, held, frozen, &mut background).await;
                        }
                    }
                    Err(_) => all[i].failed += 1,
                }
            }
            more |= all[i].sorted_ms.len() + (all[i].failed as usize) < target(imp);
        }
        block += 1;
        if !more {
            break;
        }
    }
    for handle in background {
        let _ = handle.await;
    }
    for l in &mut all {
        l.finish();
    }
    all
}

/// Workloads d and e (their healthy figures always), then f, on one quorum of five.
pub(crate) async fn faults(
    s: &crate::Settings,
) -> (Option<serde_json::Value>, Option<serde_json::Value>) {
    let mut quorum = LocalQuorum::start_with(NODES, NodeOptions::volatile())
        .await
        .expect("start redis-server");
    let clients = Clients::connect(&quorum.urls()).await;
    let mut frozen_json = None;
    if s.runs_any("de") {
        let mut states = vec![0];
        states.extend(s.runs('d').then_some(1));
        states.extend(s.runs('e').then_some(2));
        let mut by_state = Vec::new();
        for &frozen in &states {
            freeze(&mut quorum, frozen);
            let started = Instant::now();
            let l = latencies(&clients, frozen, s).await;
            eprintln!(
                "d/e: {frozen} of {NODES} frozen: {:.1} s",
                started.elapsed().as_secs_f64()
            );
            by_state.push((frozen, l));
        }
        resume(&mut quorum);
        ready(&clients.fenced).await;
        ready(&clients.plain).await;
        frozen_json = Some(frozen_report(&by_state));
    }
    let majority = if s.runs('f') {
        Some(crate::majority::majority_frozen(&mut quorum, &clients, s).await)
    } else {
        None
    };
    clients.quit().await;
    drop(quorum);
    (frozen_json, majority)
}

fn frozen_report(by_state: &[(usize, Vec<Latencies>)]) -> serde_json::Value {
    let mut header = vec!["impl".to_string()];
    for (frozen, _) in by_state {
        let state = match frozen {
            0 => "healthy".to_string(),
            n => format!("{n} frozen"),
        };
        header.push(format!("{state} p50 ms"));
        header.push(format!("{state} p99 ms"));
    }
    header.push("samples (failed)".into());
    let mut rows = Vec::new();
    let mut results = Vec::new();
    for (i, imp) in Impl::ALL.iter().enumerate() {
        let mut row = vec![imp.name().to_string()];
        let mut counts = Vec::new();
        for (frozen, all) in by_state {
            let l = &all[i];
            row.push(fmt(l.p(50.0), 3));
            row.push(fmt(l.p(99.0), 3));
            counts.push(format!("{} ({})", l.sorted_ms.len(), l.failed));
            let mut entry = l.json();
            entry["impl"] = json!(imp.name());
            entry["frozen"] = json!(frozen);
            results.push(entry);
        }
        row.push(counts.join(" / "));
        rows.push(row);
    }
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    print_table(
        &format!(
            "d, e. uncontended acquisition latency, healthy and with nodes frozen (SIGSTOP) \
             (node timeout {} ms; calls capped at {} s, a capped call counts as failed)",
            NODE_TIMEOUT.as_millis(),
            ACQUIRE_CAP.as_secs()
        ),
        &header,
        &rows,
    );
    json!({ "nodes": NODES, "cap_ms": ACQUIRE_CAP.as_millis() as u64, "results": results })
}
