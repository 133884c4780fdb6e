//! The live demo: eight workers in four independent clients contending for one resource on a
//! quorum of Redis masters, and an exclusion check at the end. The workers wait in line for
//! the resource (woken by its release, never polling), write to a ledger that refuses any
//! write whose fencing token is not greater than the last one it took, and a ninth lock, kept
//! alive in the background, is held through every fault.
//!
//! By default it starts a local quorum of five `redis-server` processes and freezes and kills
//! some of them while the workers run:
//!
//! ```sh
//! cargo run --release --example demo      # needs redis-server, see scripts/ensure-redis
//! ```
//!
//! With `QUORUMLOCK_NODES` set (comma-separated URLs, as for `RedLockBuilder::from_env`) it uses
//! those nodes instead, the five masters of docker-compose.yml for instance, and injects no
//! faults: it does not own those servers. The other `QUORUMLOCK_*` variables apply too, except
//! the ttl (2 s) and the retry policy (waiting until the end of the run), which are the
//! demo's own.
//!
//! ```sh
//! QUORUMLOCK_NODES=redis://127.0.0.1:7001,redis://127.0.0.1:7002,redis://127.0.0.1:7003,redis://127.0.0.1:7004,redis://127.0.0.1:7005 \
//!     cargo run --release --example demo
//! ```
//!
//! Exits 1 if the exclusion check fails, 2 if the nodes cannot be started or reached.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use quorumlock::testkit::{LocalQuorum, NodeOptions};
use quorumlock::{Error, KeepAlive, RedLock, RedLockBuilder, Retry};

/// The variable that names existing nodes (read by `RedLockBuilder::from_env`).
const NODES_VAR: &str = "QUORUMLOCK_NODES";
const RESOURCE: &str = "demo:ledger";
/// The resource of the lock kept alive through the whole run.
const KEPT: &str = "demo:report";
const TTL: Duration = Duration::from_secs(2);
const RUN_FOR: Duration = Duration::from_secs(10);
const CLIENTS: usize = 4;
const WORKERS_PER_CLIENT: usize = 2;

/// Shared state the workers update inside their critical sections. It lives in this
/// process, outside the quorum, so the check cannot be fooled by the lock itself.
#[derive(Default)]
struct Ledger {
    holder: AtomicUsize, // 0 = nobody, else worker id + 1
    balance: AtomicU64,  // read-sleep-write: a lost update shows up as a short count
    overlaps: AtomicU64, // times a worker found someone else inside
    acquired: AtomicU64,
    gave_up: AtomicU64, // waits that the end of the run cut short
    failed: AtomicU64,  // attempts that failed for other reasons (no quorum, ...)
    /// The fenced storage: the largest fencing token it took a write with. A write with a
    /// token not greater than this one is refused, as storage that checks tokens does.
    last_token: AtomicU64,
    accepted: AtomicU64,
    refused: AtomicU64,   // writes refused for an old token
    untokened: AtomicU64, // holders that got no token in time, and so wrote nothing
    latencies_us: Mutex<Vec<u64>>,
}

impl Ledger {
    fn sorted_latencies(&self) -> Vec<u64> {
        let mut l = self
            .latencies_us
            .lock()
            .map(|l| l.clone())
            .unwrap_or_default();
        l.sort_unstable();
        l
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Existing nodes from QUORUMLOCK_NODES, or a local quorum this demo owns (and breaks).
    let (mut quorum, builder) = if std::env::var_os(NODES_VAR).is_some() {
        println!("quorumlock demo: using the nodes in {NODES_VAR} ...");
        match RedLockBuilder::from_env() {
            Ok(builder) => (None, builder),
            Err(e) => fail(&e),
        }
    } else {
        println!("quorumlock demo: starting 5 local redis-server masters ...");
        match LocalQuorum::start_with(5, NodeOptions::volatile()).await {
            Ok(q) => {
                let builder = RedLock::builder().nodes(q.urls());
                (Some(q), builder)
            }
            Err(e) => {
                eprintln!("cannot start the local quorum: {e}");
                std::process::exit(2);
            }
        }
    };
    let builder = builder.ttl(TTL);
    let config = match builder.validate() {
        Ok(config) => config,
        Err(e) => fail(&e),
    };
    for (i, url) in config.nodes().iter().enumerate() {
        println!("  node {i}: {url}");
    }
    let nodes = config.nodes().len();
    if quorum.is_some() {
        println!(
            "{} clients x {} workers contend for `{RESOURCE}` for {}s; faults: node 1 frozen 2.5-5s, node 4 killed at 5.5s and restarted at 8s",
            CLIENTS,
            WORKERS_PER_CLIENT,
            RUN_FOR.as_secs()
        );

        // The servers keep nothing across a restart, so the clients quarantine every node
        // until it has been up for longer than the longest ttl (2 s): the delayed-restart rule.
        println!(
            "waiting until the nodes are older than the 2s max ttl (quarantine of young nodes) ..."
        );
        tokio::time::sleep(Duration::from_millis(2_100)).await;
    } else {
        println!(
            "{} clients x {} workers contend for `{RESOURCE}` for {}s; faults: none (the demo freezes and kills only servers it started itself)",
            CLIENTS,
            WORKERS_PER_CLIENT,
            RUN_FOR.as_secs()
        );
    }

    let ledger = Arc::new(Ledger::default());
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        // One RedLock per client, as separate services on separate hosts would have.
        clients.push(builder.connect().await?);
    }
    let reachable = clients[0].connected_nodes();
    if reachable < clients[0].quorum() {
        eprintln!(
            "only {reachable} of {nodes} nodes answer, fewer than the quorum of {}",
            clients[0].quorum()
        );
        std::process::exit(2);
    }
    // A long job under a lock kept alive in the background: it must live through every
    // fault below.
    let kept = match clients[0].lock(KEPT).await {
        Ok(lock) => lock.keep_alive(KeepAlive::new())?,
        Err(e) => fail(&e),
    };
    let start = Instant::now();
    let mut workers = Vec::new();
    for (c, redlock) in clients.iter().enumerate() {
        for w in 0..WORKERS_PER_CLIENT {
            let id = c * WORKERS_PER_CLIENT + w + 1;
            workers.push(tokio::spawn(worker(
                id,
                redlock.clone(),
                Arc::clone(&ledger),
                start,
            )));
        }
    }

    let faults = if quorum.is_some() {
        vec![
            (Duration::from_millis(2_500), "freeze node 1"),
            (Duration::from_millis(5_000), "resume node 1"),
            (Duration::from_millis(5_500), "kill node 4"),
            (Duration::from_millis(8_000), "restart node 4"),
        ]
    } else {
        Vec::new()
    };
    let mut faults = faults.into_iter().peekable();
    let tty = std::io::stdout().is_terminal();
    let external_status = format!("{nodes} nodes from {NODES_VAR}");
    let mut status = if quorum.is_some() {
        "all 5 nodes up"
    } else {
        external_status.as_str()
    };
    let mut ticks = 0u32;
    while start.elapsed() < RUN_FOR {
        tokio::time::sleep(Duration::from_millis(250)).await;
        ticks += 1;
        while let Some((at, what)) = faults.peek().copied() {
            // Faults are scheduled only for a local quorum.
            let Some(quorum) = quorum.as_mut() else {
                break;
            };
            if start.elapsed() < at {
                break;
            }
            faults.next();
            let result = match what {
                "freeze node 1" => quorum.node_mut(1).freeze().map(|_| "node 1 frozen"),
                "resume node 1" => quorum.node_mut(1).resume().map(|_| "all 5 nodes up"),
                "kill node 4" => quorum.node_mut(4).kill().await.map(|_| "node 4 down"),
                _ => quorum
                    .node_mut(4)
                    .restart()
                    .await
                    .map(|_| "node 4 restarted empty: quarantined for 2s"),
            };
            status = result?;
            if !tty {
                println!("  t={:>4.1}s  {what}", start.elapsed().as_secs_f64());
            }
        }
        let line = progress(&ledger, start, status);
        if tty {
            print!("\r{line:<110}");
            std::io::stdout().flush()?;
        } else if ticks % 4 == 0 {
            println!("{line}");
        }
    }
    for w in workers {
        w.await?;
    }
    let kept_through = kept.is_held();
    let kept_extensions = kept.handle().extensions();
    let kept_lost = kept.handle().lost_reason();
    let _ = kept.release().await;
    let stats = clients.iter().map(RedLock::stats).fold((0, 0, 0), |t, s| {
        (t.0 + s.attempts, t.1 + s.woken, t.2 + s.handed_over)
    });
    // The end of the process: whatever a client still holds is released on every node now,
    // rather than left to expire.
    for redlock in &clients {
        redlock.shutdown().await;
    }
    if tty {
        println!();
    }
    let ok = summary(&ledger, stats);
    println!(
        "  kept lock         `{KEPT}` {} for the whole run, {kept_extensions} extensions{}",
        if kept_through { "held" } else { "LOST" },
        kept_lost.map(|r| format!(": {r}")).unwrap_or_default()
    );
    let ok = ok && kept_through;
    drop(quorum);
    if !ok {
        std::process::exit(1);
    }
    Ok(())
}

/// A configuration error (from the environment): one line, exit 2.
fn fail(e: &dyn std::fmt::Display) -> ! {
    eprintln!("quorumlock demo: {e}");
    std::process::exit(2);
}

async fn worker(id: usize, redlock: RedLock, ledger: Arc<Ledger>, start: Instant) {
    while start.elapsed() < RUN_FOR {
        let t = Instant::now();
        // Wait in line until the end of the run: the release of the holder wakes the next
        // waiter (or hands the lock straight to it within one client); nobody polls.
        let left = RUN_FOR
            .saturating_sub(start.elapsed())
            .max(Duration::from_millis(1));
        match redlock.lock_with(RESOURCE, TTL, Retry::within(left)).await {
            Ok(lock) => {
                let took = t.elapsed();
                ledger.acquired.fetch_add(1, Ordering::Relaxed);
                if let Ok(mut l) = ledger.latencies_us.lock() {
                    l.push(took.as_micros() as u64);
                }
                // The token goes with the writes to storage: asked for (and recorded on a
                // majority) before the first one. A holder without a token writes nothing.
                let token = lock.fencing_token().await.ok();
                if ledger
                    .holder
                    .compare_exchange(0, id, Ordering::SeqCst, Ordering::SeqCst)
                    .is_err()
                {
                    ledger.overlaps.fetch_add(1, Ordering::SeqCst);
                }
                let balance = ledger.balance.load(Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(1)).await;
                ledger.balance.store(balance + 1, Ordering::SeqCst);
                match token {
                    // The fenced write: refused unless its token is the greatest yet.
                    Some(token) if ledger.last_token.fetch_max(token, Ordering::SeqCst) < token => {
                        ledger.accepted.fetch_add(1, Ordering::SeqCst);
                    }
                    Some(_) => {
                        ledger.refused.fetch_add(1, Ordering::SeqCst);
                    }
                    None => {
                        ledger.untokened.fetch_add(1, Ordering::SeqCst);
                    }
                }
                let _ = ledger
                    .holder
                    .compare_exchange(id, 0, Ordering::SeqCst, Ordering::SeqCst);
                if lock.is_valid() {
                    let _ = lock.release().await;
                } else {
                    ledger.overlaps.fetch_add(1, Ordering::SeqCst); // overran its validity
                }
            }
            Err(Error::Taken { .. }) => {
                // It waited until the end of the run.
                ledger.gave_up.fetch_add(1, Ordering::Relaxed);
                break;
            }
            Err(_) => {
                ledger.failed.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    }
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i] as f64 / 1000.0
}

fn progress(ledger: &Ledger, start: Instant, status: &str) -> String {
    let l = ledger.sorted_latencies();
    format!(
        "  t={:>4.1}s  acquisitions {:>6}  failed {:>4}  wait p50 {:.2} ms  fenced writes {:>6}  [{status}]",
        start.elapsed().as_secs_f64(),
        ledger.acquired.load(Ordering::Relaxed),
        ledger.failed.load(Ordering::Relaxed),
        percentile(&l, 0.5),
        ledger.accepted.load(Ordering::Relaxed),
    )
}

fn summary(ledger: &Ledger, (attempts, woken, handed_over): (u64, u64, u64)) -> bool {
    let l = ledger.sorted_latencies();
    let acquired = ledger.acquired.load(Ordering::SeqCst);
    let balance = ledger.balance.load(Ordering::SeqCst);
    let overlaps = ledger.overlaps.load(Ordering::SeqCst);
    let refused = ledger.refused.load(Ordering::SeqCst);
    let ok = overlaps == 0 && balance == acquired && refused == 0;
    println!("\nsummary");
    println!("  acquisitions      {acquired}");
    println!(
        "  attempts          {:.2} per acquisition ({attempts} attempts; {handed_over} locks handed straight to a waiter without one, {woken} waits ended by a release; {} workers still waiting at the end)",
        attempts as f64 / acquired.max(1) as f64,
        ledger.gave_up.load(Ordering::SeqCst)
    );
    println!(
        "  other failures    {} (no quorum or validity used up)",
        ledger.failed.load(Ordering::SeqCst)
    );
    println!(
        "  wait for the lock p50 {:.2} ms   p99 {:.2} ms   max {:.2} ms",
        percentile(&l, 0.5),
        percentile(&l, 0.99),
        percentile(&l, 1.0)
    );
    println!(
        "  fenced storage    {} writes taken, {refused} refused for an old token, {} holders without a token (wrote nothing), last token {}",
        ledger.accepted.load(Ordering::SeqCst),
        ledger.untokened.load(Ordering::SeqCst),
        ledger.last_token.load(Ordering::SeqCst)
    );
    println!(
        "  exclusion check   {}: {overlaps} overlapping holders, ledger {balance} after {acquired} read-sleep-write updates",
        if ok { "PASSED" } else { "FAILED" }
    );
    ok
}
