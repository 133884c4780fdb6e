//! Quorumlock under load, next to the raw fred floor and the `rslock` crate, in one run on
//! local `redis-server` masters that the bench starts itself (the `testkit` fixture; set
//! `QUORUMLOCK_REDIS_SERVER` if the binary is not on `PATH`).
//!
//! ```sh
//! cargo bench --bench load                    # everything, 4 to 5 minutes once built
//! cargo bench --bench load -- b c             # only some workloads
//! cargo bench --bench load -- --smoke         # every workload, short: under a minute
//! QUORUMLOCK_LOAD_SECS=1 cargo bench --bench load -- b
//! scripts/bench-load-plot                     # charts in docs/img/ and a Markdown table
//! ```
//!
//! The workloads, each comparing the implementations in the same run:
//!
//! - **b**, throughput: T tasks (1, 4, 16, 64), each locking its own resource in a loop
//!   (acquire + release), for a fixed time; cycles/s and the bench process's CPU per cycle.
//!   The implementations take turns in short rounds, in alternating order.
//! - **c**, contention: 16 tasks on one resource, each holding it ~1 ms, retrying when it is
//!   taken; handoffs/s and fairness (per-task acquisitions: min, max, Jain's index).
//! - **d**, **e**: one, then two of five nodes frozen (SIGSTOP): uncontended acquisition
//!   latency p50/p99, next to the healthy figures of the same run.
//! - **f**: three of five frozen: time until a call returns its error; then calls that
//!   straddle the nodes' resumption, and whether any lock comes back already expired.
//! - **g**: 1, 3, 5 and 7 nodes: acquire + release latency p50/p99, and the acquisition's
//!   own p50, with the fencing token asked for by one client and by two taking turns.
//! - **i**: allocations and bytes allocated per acquire + release cycle (a counting global
//!   allocator in this binary).
//!
//! Everything runs on a multi-thread Tokio runtime with two workers. A table per workload
//! goes to stdout, progress to stderr, and all figures to
//! `${CARGO_TARGET_DIR:-target}/load/results.json`. docs/benchmarks-load.md explains the
//! workloads, the knobs and how to read the results.

mod alloc;
mod allocs;
mod faults;
#[path = "../common/floor.rs"]
mod floor;
mod frozen;
mod impls;
mod majority;
mod scaling;
mod settings;
mod stats;
mod throughput;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use quorumlock::testkit::{LocalQuorum, NodeOptions};

use impls::Clients;
use settings::Settings;

#[global_allocator]
static ALLOCATOR: alloc::Counting = alloc::Counting;

/// The lock's ttl everywhere but in workload f's resumption check (the crate's default).
const TTL: Duration = Duration::from_secs(10);
/// The per-node timeout of quorumlock and of the floor: the crate's default.
const NODE_TIMEOUT: Duration = Duration::from_millis(100);
/// Nodes of the quorum in every workload but g.
const NODES: usize = 5;

fn main() {
    let settings = Settings::from_env_and_args();
    eprintln!("load: {}", settings.describe());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let started = Instant::now();
    let mut results = serde_json::Map::new();
    results.insert("meta".into(), settings.json());
    rt.block_on(async {
        if settings.runs_any("bciw") {
            let quorum = LocalQuorum::start_with(NODES, NodeOptions::volatile())
                .await
                .expect("start redis-server");
            let clients = Arc::new(Clients::connect(&quorum.urls()).await);
            if settings.runs('b') {
                let b = throughput::throughput(&clients, &quorum, &settings).await;
                results.insert("throughput".into(), b);
            }
            if settings.runs('c') {
                let c = throughput::contention(&clients, quorum.node(0), &settings).await;
                results.insert("contention".into(), c);
            }
            if settings.runs('w') {
                let w = throughput::contention_curve(&clients, quorum.node(0), &settings).await;
                results.insert("contention_curve".into(), w);
            }
            if settings.runs('i') {
                let i = allocs::allocations(&clients, &settings).await;
                results.insert("allocations".into(), i);
            }
            clients.quit().await;
            drop(quorum); // inside the runtime: its process driver reaps the servers
        }
        if settings.runs_any("def") {
            let (frozen, majority) = faults::faults(&settings).await;
            if let Some(frozen) = frozen {
                results.insert("frozen".into(), frozen);
            }
            if let Some(majority) = majority {
                results.insert("majority_frozen".into(), majority);
            }
        }
        if settings.runs('g') {
            results.insert("nodes".into(), scaling::nodes(&settings).await);
        }
    });
    let took = started.elapsed().as_secs_f64();
    results.insert("took_s".into(), serde_json::json!(took));
    let path = results_path();
    let json =
        serde_json::to_string_pretty(&serde_json::Value::Object(results)).expect("results as JSON");
    let written = path
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| std::fs::write(&path, json + "\n"));
    match written {
        Ok(()) => eprintln!("load: done in {took:.0} s; results in {}", path.display()),
        Err(e) => eprintln!("load: could not write {}: {e}", path.display()),
    }
}

/// `${CARGO_TARGET_DIR:-target}/load/results.json`, or `QUORUMLOCK_LOAD_OUT` if set.
fn results_path() -> PathBuf {
    if let Some(out) = std::env::var_os("QUORUMLOCK_LOAD_OUT") {
        return PathBuf::from(out);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            // CARGO_TARGET_TMPDIR is <target>/tmp.
            let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
            tmp.parent().map_or(tmp.clone(), PathBuf::from)
        });
    target.join("load").join("results.json")
}

/// Prints a table with aligned columns to stdout, under a title.
pub(crate) fn print_table(title: &str, header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(i, (cell, &w))| {
                let pad = w.saturating_sub(cell.chars().count());
                if i == 0 || matches!(header[i], "impl" | "call") {
                    format!("{cell}{}", " ".repeat(pad))
                } else {
                    format!("{}{cell}", " ".repeat(pad))
                }
            })
            .collect();
        println!("| {} |", padded.join(" | "));
    };
    println!("\n{title}\n");
    line(header.to_vec());
    let rule: Vec<String> = widths.iter().map(|&w| "-".repeat(w)).collect();
    println!("|-{}-|", rule.join("-|-"));
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
}
