//! Contention on a semaphore: 16 tasks taking and releasing permits of a semaphore of 4 on a
//! local five-node quorum, to count the attempts wasted per permit granted (issue 23: at
//! most 0.5), next to the same 16 tasks on a lock, in one run.
//!
//! ```sh
//! cargo bench --bench permits                 # about 30 seconds
//! QUORUMLOCK_PERMITS_ROUNDS=5 cargo bench --bench permits
//! ```
//!
//! Each task loops: take a permit (waiting for a release as `acquire` does), hold it for
//! 2 ms of sleep, release it. The client's own stats give the attempts and the grants (by
//! an attempt, or by a handover from a caller of the same client); a wasted attempt is one
//! that did not get a permit. Two shapes: one client shared by the 16
//! tasks (its callers wait in one line), and four clients of four tasks each (four lines,
//! woken by the nodes' release messages). The lock rows run the same loop on a lock (one
//! holder at a time) for comparison. docs/benchmarks.md reports the results.

use std::time::{Duration, Instant};

use quorumlock::testkit::{LocalQuorum, NodeOptions};
use quorumlock::{RedLock, Retry};

const NODES: usize = 5;
const TASKS: usize = 16;
const PERMITS: u32 = 4;
const HOLD: Duration = Duration::from_millis(2);
const CYCLES_PER_TASK: usize = 50;

#[derive(Debug, Clone, Copy)]
enum Kind {
    Semaphore,
    Lock,
}

async fn client(urls: &[String]) -> RedLock {
    let redlock = RedLock::builder()
        .nodes(urls.to_vec())
        .quarantine(false)
        .retry(Retry::within(Duration::from_secs(60)))
        .build()
        .expect("configuration");
    redlock.wait_for_nodes(Duration::from_secs(10)).await;
    redlock
}

/// Runs the loop on `clients` clients sharing the 16 tasks; returns (grants, attempts,
/// attempts that got nothing, seconds). A grant is an attempt's or a handover's (within a
/// client, a release hands the permit or lock to the next caller in line: no attempt).
async fn run(urls: &[String], kind: Kind, clients: usize, resource: &str) -> (u64, u64, u64, f64) {
    let mut redlocks = Vec::new();
    for _ in 0..clients {
        redlocks.push(client(urls).await);
    }
    let before: Vec<_> = redlocks.iter().map(RedLock::stats).collect();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let redlock = redlocks[t % clients].clone();
        let resource = resource.to_string();
        tasks.push(tokio::spawn(async move {
            for _ in 0..CYCLES_PER_TASK {
                match kind {
                    Kind::Semaphore => {
                        let semaphore = redlock.semaphore(&resource, PERMITS).expect("valid");
                        let permit = semaphore.acquire().await.expect("a permit");
                        tokio::time::sleep(HOLD).await;
                        permit.release().await.expect("released");
                    }
                    Kind::Lock => {
                        let lock = redlock.lock(&resource).await.expect("a lock");
                        tokio::time::sleep(HOLD).await;
                        lock.release().await.expect("released");
                    }
                }
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    let seconds = started.elapsed().as_secs_f64();
    let (mut grants, mut attempts, mut won) = (0, 0, 0);
    for (redlock, before) in redlocks.iter().zip(before) {
        let after = redlock.stats();
        grants += after.acquired + after.handed_over - before.acquired - before.handed_over;
        attempts += after.attempts - before.attempts;
        won += after.acquired - before.acquired;
    }
    (grants, attempts, attempts - won, seconds)
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` does not: run only when asked.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let rounds: usize = std::env::var("QUORUMLOCK_PERMITS_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let quorum = LocalQuorum::start_with(NODES, NodeOptions::volatile())
            .await
            .expect("start redis-server");
        let urls = quorum.urls();
        println!("| shape | round | grants | attempts | wasted per grant | grants/s |");
        println!("|---|--:|--:|--:|--:|--:|");
        for round in 0..rounds {
            for (name, kind, clients) in [
                ("semaphore of 4, one client", Kind::Semaphore, 1),
                ("semaphore of 4, four clients", Kind::Semaphore, 4),
                ("lock, one client", Kind::Lock, 1),
                ("lock, four clients", Kind::Lock, 4),
            ] {
                let resource = format!("bench:permits:{round}:{clients}:{name}");
                let (grants, attempts, wasted, seconds) =
                    run(&urls, kind, clients, &resource).await;
                let wasted = wasted as f64 / grants.max(1) as f64;
                println!(
                    "| {name} | {round} | {grants} | {attempts} | {wasted:.2} | {:.0} |",
                    grants as f64 / seconds
                );
            }
        }
        drop(quorum);
    });
}
