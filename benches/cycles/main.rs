//! The client's instructions per cycle, for `valgrind --tool=callgrind`: instruction counts
//! do not move with the machine's load as times do, so two builds (before and after a change)
//! can be compared to a fraction of a percent on a busy machine.
//!
//! ```sh
//! cargo bench --bench cycles --no-run          # prints the binary's path
//! scripts/bench-instructions BINARY [BINARY2]  # callgrind, interleaved; per-cycle medians
//! ```
//!
//! The binary takes `KIND CYCLES`: it starts five `redis-server` processes (the testkit's;
//! not traced by callgrind), connects one client on a current-thread runtime, runs 20
//! cycles to warm up and then `CYCLES` cycles of `KIND`: `plain` (a lock without fencing:
//! acquire and release), `fenced` (the same with fencing on), `permit` (a permit of a
//! semaphore of 4), `read` or `write` (a side of a read-write lock). Run with 0 and with N
//! cycles, the difference over N is one cycle's instructions, the start-up taken out.
//! Under callgrind the client runs about fifty times slower, so the node timeout is 10 s
//! and the ttl a minute; a failed cycle is counted and printed, never retried. `cargo bench`
//! passes `--bench`, which is ignored: run without arguments, it does nothing.

use std::time::Duration;

use quorumlock::testkit::{LocalQuorum, NodeOptions};
use quorumlock::{Access, RedLock, Retry};

const NODES: usize = 5;
const TTL: Duration = Duration::from_secs(60);
const NODE_TIMEOUT: Duration = Duration::from_secs(10);
const WARM_UP_CYCLES: u64 = 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Plain,
    Fenced,
    Permit,
    Read,
    Write,
}

impl Kind {
    fn parse(name: &str) -> Option<Kind> {
        Some(match name {
            "plain" => Kind::Plain,
            "fenced" => Kind::Fenced,
            "permit" => Kind::Permit,
            "read" => Kind::Read,
            "write" => Kind::Write,
            _ => return None,
        })
    }
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let (kind, cycles) = match args.as_slice() {
        [] => return,
        [kind, cycles] => match (Kind::parse(kind), cycles.parse::<u64>()) {
            (Some(kind), Ok(cycles)) => (kind, cycles),
            _ => usage(),
        },
        _ => usage(),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime");
    let failed = runtime.block_on(run(kind, cycles));
    eprintln!("{kind:?}: {cycles} cycles, {failed} failed");
}

fn usage() -> ! {
    eprintln!("usage: cycles plain|fenced|permit|read|write CYCLES");
    std::process::exit(2);
}

/// Runs the cycles; how many failed.
async fn run(kind: Kind, cycles: u64) -> u64 {
    let quorum = LocalQuorum::start_with(NODES, NodeOptions::volatile())
        .await
        .expect("start redis-server");
    let redlock = RedLock::builder()
        .nodes(quorum.urls())
        .ttl(TTL)
        .node_timeout(NODE_TIMEOUT)
        .fencing(kind != Kind::Plain)
        // Just started, the servers would be quarantined for a ttl: quarantine decides
        // whether a node counts, not what a cycle costs.
        .quarantine(false)
        .build()
        .expect("configuration");
    let connected = redlock.wait_for_nodes(Duration::from_secs(60)).await;
    assert_eq!(connected, NODES, "nodes connected and checked");
    for _ in 0..WARM_UP_CYCLES {
        cycle(&redlock, kind).await;
    }
    let mut failed = 0;
    for _ in 0..cycles {
        if !cycle(&redlock, kind).await {
            failed += 1;
        }
    }
    failed
}

/// One acquisition and its release; false if either failed.
async fn cycle(redlock: &RedLock, kind: Kind) -> bool {
    const RESOURCE: &str = "bench:cycles";
    match kind {
        Kind::Plain | Kind::Fenced => match redlock.try_lock(RESOURCE).await {
            Ok(lock) => lock.release().await.is_ok(),
            Err(_) => false,
        },
        Kind::Permit => {
            let Ok(semaphore) = redlock.semaphore(RESOURCE, 4) else {
                return false;
            };
            match semaphore.try_acquire().await {
                Ok(permit) => permit.release().await.is_ok(),
                Err(_) => false,
            }
        }
        Kind::Read | Kind::Write => {
            let access = if kind == Kind::Read {
                Access::Read
            } else {
                Access::Write
            };
            let Ok(rw) = redlock.rw_lock(RESOURCE) else {
                return false;
            };
            match rw.acquire(access, TTL, Retry::none()).await {
                Ok(side) => side.release().await.is_ok(),
                Err(_) => false,
            }
        }
    }
}
