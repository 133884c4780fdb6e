//! Workload g: acquire + release latency on quorums of different sizes, quorumlock next to
//! the floor, each size on its own fresh servers; and the acquisition's own latency (for
//! `quorumlock_token`, the lock and its fencing token) in the same cycles.

use std::time::Instant;

use quorumlock::testkit::{LocalQuorum, NodeOptions};
use serde_json::json;

use crate::floor::Floor;
use crate::impls::{ready, redlock, Clients, Impl};
use crate::stats::{fmt, Latencies};
use crate::{print_table, NODE_TIMEOUT, TTL};

/// The implementations compared; rslock waits for every node (a reference here: it has no
/// fencing tokens).
const IMPLS: [Impl; 6] = [
    Impl::Floor,
    Impl::Fenced,
    Impl::Plain,
    Impl::Rslock,
    Impl::Token,
    Impl::TokenShared,
];
/// Cycles each implementation runs in turn before the next one's turn.
const BLOCK: usize = 25;
/// Uncounted cycles of each implementation first.
const WARM_UP: usize = 50;

pub(crate) async fn nodes(s: &crate::Settings) -> serde_json::Value {
    let mut rows = Vec::new();
    let mut results = Vec::new();
    for &n in &s.nodes {
        let quorum = LocalQuorum::start_with(n, NodeOptions::volatile())
            .await
            .expect("start redis-server");
        let urls = quorum.urls();
        let (fenced, plain, token, shared) = (
            redlock(&urls, true),
            redlock(&urls, false),
            redlock(&urls, true),
            redlock(&urls, true),
        );
        ready(&fenced).await;
        ready(&plain).await;
        ready(&token).await;
        ready(&shared).await;
        let clients = Clients {
            floor: Floor::connect(&urls, NODE_TIMEOUT, TTL).await,
            fenced,
            plain,
            rslock: rslock::LockManager::new(urls.clone()),
            token,
            shared: (shared, std::sync::atomic::AtomicBool::new(false)),
        };
        let resource = |imp: Impl| format!("load:g:{n}:{}", imp.name());
        for imp in IMPLS {
            for _ in 0..WARM_UP {
                clients.cycle(imp, &resource(imp)).await;
            }
        }
        let mut all: Vec<Latencies> = IMPLS.iter().map(|_| Latencies::default()).collect();
        // The acquisition alone (for quorumlock_token: the lock and its token), the same
        // cycles.
        let mut acquired: Vec<Latencies> = IMPLS.iter().map(|_| Latencies::default()).collect();
        let started = Instant::now();
        for block in 0..s.samples.div_ceil(BLOCK) {
            let mut order: Vec<usize> = (0..IMPLS.len()).collect();
            if block % 2 == 1 {
                order.reverse();
            }
            for i in order {
                let (imp, resource) = (IMPLS[i], resource(IMPLS[i]));
                for _ in 0..BLOCK.min(s.samples - block * BLOCK) {
                    let start = Instant::now();
                    let held = match clients.acquire(imp, &resource).await {
                        Ok(held) => held,
                        Err(cleanup) => {
                            if let Some(cleanup) = cleanup {
                                clients.release(cleanup).await;
                            }
                            all[i].failed += 1;
                            continue;
                        }
                    };
                    let took = start.elapsed();
                    if clients.release(held).await {
                        all[i].push(start.elapsed());
                        acquired[i].push(took);
                    } else {
                        all[i].failed += 1;
                    }
                }
            }
        }
        eprintln!("g: {n} nodes: {:.1} s", started.elapsed().as_secs_f64());
        for ((imp, l), a) in IMPLS.iter().zip(&mut all).zip(&mut acquired) {
            l.finish();
            a.finish();
            rows.push(vec![
                n.to_string(),
                imp.name().to_string(),
                fmt(l.p(50.0), 3),
                fmt(l.p(99.0), 3),
                fmt(a.p(50.0), 3),
                format!("{} ({})", l.sorted_ms.len(), l.failed),
            ]);
            let mut entry = l.json();
            entry["acquire_p50_ms"] = json!(a.p(50.0));
            entry["impl"] = json!(imp.name());
            entry["nodes"] = json!(n);
            results.push(entry);
        }
        clients.quit().await;
        drop(clients);
        drop(quorum);
    }
    print_table(
        "g. acquire + release latency by number of nodes (one client, one cycle at a time)",
        &[
            "N",
            "impl",
            "p50 ms",
            "p99 ms",
            "acquire p50 ms",
            "samples (failed)",
        ],
        &rows,
    );
    json!({ "results": results })
}
