//! Workload g: acquire + release latency on quorums of different sizes, quorumlock next to
//! the floor, each size on its own fresh servers.

use std::time::Instant;

use quorumlock::testkit::{LocalQuorum, NodeOptions};
use serde_json::json;

use crate::floor::Floor;
use crate::impls::{ready, redlock, Clients, Impl};
use crate::stats::{fmt, Latencies};
use crate::{print_table, NODE_TIMEOUT, TTL};

/// The implementations compared (rslock is left out: it waits for every node).
const IMPLS: [Impl; 3] = [Impl::Floor, Impl::Fenced, Impl::Plain];
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
        let (fenced, plain) = (redlock(&urls, true), redlock(&urls, false));
        ready(&fenced).await;
        ready(&plain).await;
        let clients = Clients {
            floor: Floor::connect(&urls, NODE_TIMEOUT, TTL).await,
            fenced,
            plain,
            rslock: rslock::LockManager::new(urls.clone()),
        };
        let resource = |imp: Impl| format!("load:g:{n}:{}", imp.name());
        for imp in IMPLS {
            for _ in 0..WARM_UP {
                clients.cycle(imp, &resource(imp)).await;
            }
        }
        let mut all: Vec<Latencies> = IMPLS.iter().map(|_| Latencies::default()).collect();
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
                    if clients.cycle(imp, &resource).await {
                        all[i].push(start.elapsed());
                    } else {
                        all[i].failed += 1;
                    }
                }
            }
        }
        eprintln!("g: {n} nodes: {:.1} s", started.elapsed().as_secs_f64());
        for (imp, l) in IMPLS.iter().zip(&mut all) {
            l.finish();
            rows.push(vec![
                n.to_string(),
                imp.name().to_string(),
                fmt(l.p(50.0), 3),
                fmt(l.p(99.0), 3),
                format!("{} ({})", l.sorted_ms.len(), l.failed),
            ]);
            let mut entry = l.json();
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
        &["N", "impl", "p50 ms", "p99 ms", "samples (failed)"],
        &rows,
    );
    json!({ "results": results })
}
