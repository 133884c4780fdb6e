//! What holding many kept locks costs the client, and what it sends the nodes.
//!
//! ```sh
//! cargo bench --bench held                      # 1k, 10k and 100k kept locks
//! QUORUMLOCK_HELD_COUNTS=1000 cargo bench --bench held   # a smoke run
//! cargo bench --bench held -- 1000 10000        # or the counts as arguments
//! ```
//!
//! For each count, on five local `redis-server` masters started by the bench (the `testkit`
//! fixture): acquire that many locks (fencing on, the crate's defaults otherwise) with at
//! most 256 acquisitions in flight, keep each alive (`KeepAlive::new()`), hold them for a
//! few extension periods, then release them. It reports the client's live heap bytes per
//! kept lock (a counting global allocator: after acquiring minus before, over the count), its
//! resident memory per lock, its CPU while holding, the extensions per lock, any lock lost,
//! and per node and extension period the script calls the node ran (`INFO commandstats`)
//! and the reads it processed (`total_reads_processed`: about one per round trip). A table
//! goes to stdout and JSON to `${CARGO_TARGET_DIR:-target}/held/results.json`.
//! docs/benchmarks-held.md explains the figures.
//!
//! Settings (environment): `QUORUMLOCK_HELD_COUNTS` (default `1000,10000,100000`),
//! `QUORUMLOCK_HELD_TTL` (default `10s`: an extension every ~5 s), `QUORUMLOCK_HELD_PERIODS`
//! (default 3), `QUORUMLOCK_HELD_IN_FLIGHT` (default 256), `QUORUMLOCK_HELD_NODE_TIMEOUT`
//! (default `100ms`, the crate's; raise it on a loaded machine), `QUORUMLOCK_BENCH_RUNTIME`
//! (`multi`, the default, two workers; or `current`).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::{Duration, Instant};

use futures::stream::{self, StreamExt};
use quorumlock::testkit::{LocalNode, LocalQuorum, NodeOptions, Reply};
use quorumlock::{KeepAlive, KeptLock, LostReason, RedLock, Retry};

/// Counts the bytes the process has allocated and not freed.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is forwarded to `System` unchanged; the counter is only arithmetic.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_add(
                new_size as isize - layout.size() as isize,
                Ordering::Relaxed,
            );
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const NODES: usize = 5;

struct Settings {
    counts: Vec<usize>,
    ttl: Duration,
    node_timeout: Duration,
    periods: u32,
    in_flight: usize,
}

impl Settings {
    fn from_env() -> Settings {
        // `cargo bench` passes `--bench`; anything numeric is a count.
        let args: Vec<usize> = std::env::args()
            .skip(1)
            .filter_map(|a| a.parse().ok())
            .collect();
        let counts = if !args.is_empty() {
            args
        } else {
            std::env::var("QUORUMLOCK_HELD_COUNTS")
                .ok()
                .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect())
                .unwrap_or_else(|| vec![1_000, 10_000, 100_000])
        };
        let duration = |name: &str, default: Duration| {
            std::env::var(name)
                .ok()
                .map(|v| {
                    humantime::parse_duration(&v).unwrap_or_else(|_| panic!("{name}: a duration"))
                })
                .unwrap_or(default)
        };
        let ttl = duration("QUORUMLOCK_HELD_TTL", Duration::from_secs(10));
        let node_timeout = duration("QUORUMLOCK_HELD_NODE_TIMEOUT", Duration::from_millis(100));
        let number = |name: &str, default: usize| {
            std::env::var(name)
                .ok()
                .map(|v| v.parse().unwrap_or_else(|_| panic!("{name}: a number")))
                .unwrap_or(default)
        };
        Settings {
            counts,
            ttl,
            node_timeout,
            periods: number("QUORUMLOCK_HELD_PERIODS", 3) as u32,
            in_flight: number("QUORUMLOCK_HELD_IN_FLIGHT", 256),
        }
    }
}

/// One count's figures.
struct Row {
    locks: usize,
    acquire_secs: f64,
    acquire_failed: usize,
    /// Live heap bytes per kept lock, at the low while holding: what the locks themselves hold.
    heap_bytes_per_lock: f64,
    /// ... and at the high: with the extensions in flight.
    heap_peak_bytes_per_lock: f64,
    rss_bytes_per_lock: f64,
    hold_secs: f64,
    client_cpu_ms_per_sec: f64,
    servers_cpu_ms_per_sec: f64,
    extensions_per_lock: f64,
    min_extensions: u64,
    lost: usize,
    /// Per node: script calls (EVALSHA + EVAL) and reads processed, per extension period.
    scripts_per_period: Vec<f64>,
    reads_per_period: Vec<f64>,
}

fn main() {
    let settings = Settings::from_env();
    let runtime = match std::env::var("QUORUMLOCK_BENCH_RUNTIME").as_deref() {
        Ok("current") => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        _ => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build(),
    }
    .expect("a Tokio runtime");
    let rows = runtime.block_on(async {
        let quorum = LocalQuorum::start_with(NODES, NodeOptions::volatile())
            .await
            .expect("start redis-server");
        let mut rows = Vec::new();
        for &locks in &settings.counts {
            let row = measure(&quorum, &settings, locks).await;
            print_row(&row);
            rows.push(row);
            for node in quorum.nodes() {
                node.command(&["FLUSHALL"]).await.expect("FLUSHALL");
            }
        }
        rows
    });
    print_table(&settings, &rows);
    write_json(&settings, &rows);
}

async fn measure(quorum: &LocalQuorum, settings: &Settings, locks: usize) -> Row {
    eprintln!(
        "held: {locks} locks, ttl {:?}, node timeout {:?}",
        settings.ttl, settings.node_timeout
    );
    let redlock = RedLock::builder()
        .nodes(quorum.urls())
        .ttl(settings.ttl)
        .node_timeout(settings.node_timeout)
        // A failed attempt (a node timeout on a loaded machine) is retried.
        .retry(Retry::attempts(10))
        // The servers have just started and do not fsync every write: quarantined, their
        // votes would not count for a whole ttl.
        .quarantine(false)
        .build()
        .expect("configuration");
    ready(&redlock).await;

    // Acquire: `in_flight` at a time. The Vec that holds the kept locks is counted too.
    let live_before = live_bytes();
    let rss_before = rss_bytes();
    let started = Instant::now();
    let mut kept: Vec<KeptLock> = Vec::with_capacity(locks);
    let mut failed = 0;
    let mut acquisitions = stream::iter(0..locks)
        .map(|i| {
            let redlock = redlock.clone();
            async move {
                let lock = redlock.lock(&format!("held:{i}")).await?;
                lock.keep_alive(KeepAlive::new())
            }
        })
        .buffer_unordered(settings.in_flight);
    while let Some(result) = acquisitions.next().await {
        match result {
            Ok(lock) => kept.push(lock),
            Err(e) => {
                failed += 1;
                if failed <= 3 {
                    eprintln!("held: an acquisition failed: {e}");
                }
            }
        }
    }
    drop(acquisitions);
    let acquire_secs = started.elapsed().as_secs_f64();
    assert!(
        failed * 100 <= locks,
        "{failed} of {locks} acquisitions failed"
    );
    // Let the background work of the acquisitions end before memory is read.
    redlock.settle(Duration::from_secs(5)).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let held = kept.len().max(1) as f64;
    let rss_bytes_per_lock = (rss_bytes() - rss_before) as f64 / held;
    eprintln!(
        "held: {} kept in {acquire_secs:.1} s; {:.0} heap bytes per lock after acquiring",
        kept.len(),
        (live_bytes() - live_before) as f64 / held
    );

    // Hold for a few extension periods.
    let handles: Vec<_> = kept.iter().map(KeptLock::handle).collect();
    let extensions_before: Vec<u64> = handles.iter().map(|h| h.extensions()).collect();
    let stats_before = node_stats(quorum).await;
    let (client_before, servers_before) = (client_cpu_ns(), servers_cpu_ns(quorum));
    let hold_started = Instant::now();
    // The period: the validity left falls from ttl − drift to half the ttl. Memory is
    // sampled meanwhile: its low is what the kept locks hold, its high adds the extensions
    // in flight.
    let period = settings.ttl / 2;
    let hold_until = hold_started + period * settings.periods;
    let (mut low, mut high) = (isize::MAX, isize::MIN);
    while Instant::now() < hold_until {
        let live = live_bytes();
        (low, high) = (low.min(live), high.max(live));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let heap_bytes_per_lock = (low - live_before) as f64 / held;
    let heap_peak_bytes_per_lock = (high - live_before) as f64 / held;
    let hold_secs = hold_started.elapsed().as_secs_f64();
    let client_cpu_ms_per_sec = (client_cpu_ns() - client_before) as f64 / 1e6 / hold_secs;
    let servers_cpu_ms_per_sec = (servers_cpu_ns(quorum) - servers_before) as f64 / 1e6 / hold_secs;
    let stats_after = node_stats(quorum).await;
    let done: Vec<u64> = handles
        .iter()
        .zip(&extensions_before)
        .map(|(h, before)| h.extensions() - before)
        .collect();
    let extensions_per_lock = done.iter().sum::<u64>() as f64 / held;
    let min_extensions = done.iter().copied().min().unwrap_or(0);
    let lost = handles.iter().filter(|h| !h.is_held()).count();
    if let Some(reason) = handles.iter().find_map(|h| h.lost_reason()) {
        // No answer in time, a failed extension, or taken over.
        let (mut silent, mut failed, mut other) = (0, 0, 0);
        for reason in handles.iter().filter_map(|h| h.lost_reason()) {
            match reason {
                LostReason::NotExtended {
                    last_error: None, ..
                } => silent += 1,
                LostReason::NotExtended { .. } => failed += 1,
                _ => other += 1,
            }
        }
        eprintln!(
            "held: {lost} locks lost ({silent} with no answer in time, {failed} after failed \
             extensions, {other} otherwise), for example: {reason}"
        );
    }
    // Per extension period: the commands over the window, divided by the extensions each
    // lock had in it (each lock is extended once per period).
    let periods_seen = extensions_per_lock.max(f64::MIN_POSITIVE);
    let per_period = |pick: fn(&NodeStats) -> u64| -> Vec<f64> {
        stats_before
            .iter()
            .zip(&stats_after)
            .map(|(b, a)| (pick(a) - pick(b)) as f64 / periods_seen)
            .collect()
    };
    let scripts_per_period = per_period(|s| s.scripts);
    let reads_per_period = per_period(|s| s.reads);
    drop(handles);

    // Release them all, `in_flight` at a time.
    stream::iter(kept)
        .for_each_concurrent(settings.in_flight, |lock| async move {
            let _ = lock.release().await;
        })
        .await;
    redlock.settle(Duration::from_secs(5)).await;

    Row {
        locks,
        acquire_secs,
        acquire_failed: failed,
        heap_bytes_per_lock,
        heap_peak_bytes_per_lock,
        rss_bytes_per_lock,
        hold_secs,
        client_cpu_ms_per_sec,
        servers_cpu_ms_per_sec,
        extensions_per_lock,
        min_extensions,
        lost,
        scripts_per_period,
        reads_per_period,
    }
}

/// Waits until every node is connected and checked and a lock is granted by all of them.
async fn ready(redlock: &RedLock) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if redlock.wait_for_nodes(Duration::from_secs(1)).await == NODES {
            if let Ok(lock) = redlock.try_lock("held:ready").await {
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

fn live_bytes() -> isize {
    LIVE.load(Ordering::Relaxed)
}

/// Resident set size (Linux; 0 elsewhere).
fn rss_bytes() -> isize {
    let pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<isize>().ok())
        .unwrap_or(0);
    pages * 4096
}

/// CPU time used so far by the threads under `tasks` (a `/proc/<pid>/task` directory), ns.
fn cpu_ns(tasks: &str) -> u64 {
    let Ok(threads) = std::fs::read_dir(tasks) else {
        return 0;
    };
    threads
        .filter_map(|thread| {
            let stat = std::fs::read_to_string(thread.ok()?.path().join("schedstat")).ok()?;
            stat.split_whitespace().next()?.parse::<u64>().ok()
        })
        .sum()
}

fn client_cpu_ns() -> u64 {
    cpu_ns("/proc/self/task")
}

fn servers_cpu_ns(quorum: &LocalQuorum) -> u64 {
    quorum
        .nodes()
        .iter()
        .filter_map(LocalNode::pid)
        .map(|pid| cpu_ns(&format!("/proc/{pid}/task")))
        .sum()
}

struct NodeStats {
    /// EVALSHA + EVAL calls.
    scripts: u64,
    /// Read events processed: one per batch of commands that arrived together.
    reads: u64,
}

async fn node_stats(quorum: &LocalQuorum) -> Vec<NodeStats> {
    let mut all = Vec::new();
    for node in quorum.nodes() {
        let info = match node.command(&["INFO", "all"]).await {
            Ok(Reply::Bulk(Some(bytes))) => String::from_utf8_lossy(&bytes).into_owned(),
            other => panic!("INFO: {other:?}"),
        };
        let calls = |name: &str| -> u64 {
            info.lines()
                .find_map(|l| l.strip_prefix(&format!("cmdstat_{name}:calls=")))
                .and_then(|rest| rest.split(',').next()?.parse().ok())
                .unwrap_or(0)
        };
        let reads = info
            .lines()
            .find_map(|l| l.strip_prefix("total_reads_processed:"))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0);
        all.push(NodeStats {
            scripts: calls("evalsha") + calls("eval"),
            reads,
        });
    }
    all
}

fn print_row(row: &Row) {
    eprintln!(
        "held: {} locks: {:.0} heap B/lock, {:.1} ms CPU/s, {:.2} extensions/lock, {} lost, \
         scripts/node/period {:?}, reads/node/period {:?}",
        row.locks,
        row.heap_bytes_per_lock,
        row.client_cpu_ms_per_sec,
        row.extensions_per_lock,
        row.lost,
        rounded(&row.scripts_per_period),
        rounded(&row.reads_per_period),
    );
}

fn rounded(v: &[f64]) -> Vec<u64> {
    v.iter().map(|x| x.round() as u64).collect()
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

fn print_table(settings: &Settings, rows: &[Row]) {
    println!(
        "\nkept locks on {NODES} nodes, ttl {} (an extension every ~{}), {} periods held",
        humantime::format_duration(settings.ttl),
        humantime::format_duration(settings.ttl / 2),
        settings.periods
    );
    println!(
        "| locks | acquire s | heap B/lock | peak heap B/lock | RSS B/lock | client CPU ms/s | servers CPU ms/s | \
         extensions/lock (min) | lost | scripts/node/period | reads/node/period |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        println!(
            "| {} | {:.1} | {:.0} | {:.0} | {:.0} | {:.1} | {:.1} | {:.2} ({}) | {} | {:.0} | {:.0} |",
            r.locks,
            r.acquire_secs,
            r.heap_bytes_per_lock,
            r.heap_peak_bytes_per_lock,
            r.rss_bytes_per_lock,
            r.client_cpu_ms_per_sec,
            r.servers_cpu_ms_per_sec,
            r.extensions_per_lock,
            r.min_extensions,
            r.lost,
            mean(&r.scripts_per_period),
            mean(&r.reads_per_period),
        );
    }
}

fn write_json(settings: &Settings, rows: &[Row]) {
    let target = std::env::var_os("CARGO_TARGET_DIR").unwrap_or_else(|| "target".into());
    let dir = std::path::Path::new(&target).join("held");
    let rows: Vec<serde_json::Value> = rows
        .iter()
        .map(|r| {
            serde_json::json!({
                "locks": r.locks,
                "acquire_secs": r.acquire_secs,
                "acquire_failed": r.acquire_failed,
                "heap_bytes_per_lock": r.heap_bytes_per_lock,
                "heap_peak_bytes_per_lock": r.heap_peak_bytes_per_lock,
                "rss_bytes_per_lock": r.rss_bytes_per_lock,
                "hold_secs": r.hold_secs,
                "client_cpu_ms_per_sec": r.client_cpu_ms_per_sec,
                "servers_cpu_ms_per_sec": r.servers_cpu_ms_per_sec,
                "extensions_per_lock": r.extensions_per_lock,
                "min_extensions_per_lock": r.min_extensions,
                "lost": r.lost,
                "scripts_per_node_per_period": r.scripts_per_period,
                "reads_per_node_per_period": r.reads_per_period,
            })
        })
        .collect();
    let json = serde_json::json!({
        "nodes": NODES,
        "ttl_ms": settings.ttl.as_millis() as u64,
        "node_timeout_ms": settings.node_timeout.as_millis() as u64,
        "periods": settings.periods,
        "in_flight": settings.in_flight,
        "keep_alive": "KeepAlive::new()",
        "rows": rows,
    });
    let written = std::fs::create_dir_all(&dir).and_then(|()| {
        std::fs::write(
            dir.join("results.json"),
            serde_json::to_string_pretty(&json).unwrap_or_default() + "\n",
        )
    });
    match written {
        Ok(()) => println!("\nwritten: {}", dir.join("results.json").display()),
        Err(e) => eprintln!("held: could not write {}: {e}", dir.display()),
    }
}
