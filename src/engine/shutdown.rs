//! A clean end for a client: [`RedLock::shutdown`](crate::RedLock::shutdown) releases every lock the client holds,
//! waits for the nodes, and refuses later lock calls.
//!
//! Without it, a process that ends with a lock held leaves the lock's keys on the nodes for
//! the rest of their ttl: a dropped `Lock` releases in a background task, and the runtime's
//! end (`#[tokio::main]` returning) cancels that task before it sends anything. So the
//! client keeps a registry of the locks it holds (`engine/holdings.rs`), which this
//! releases.

use crate::engine::machinery::Machinery;

/// What [`RedLock::shutdown`](crate::RedLock::shutdown) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Shutdown {
    /// How many locks of this client it released: held, kept alive, or handed over by a
    /// release to a caller that had not taken them yet.
    pub released: usize,
    /// Whether every node had answered (or timed out on) this client's queued commands,
    /// the releases included, before it returned; see [`RedLock::settle`](crate::RedLock::settle).
    pub settled: bool,
}

/// Releases every lock `client` holds, waits for the nodes, and refuses later lock calls
/// ([`RedLock::shutdown`](crate::RedLock::shutdown)).
pub(crate) async fn shut_down(client: &Machinery) -> Shutdown {
    let held = client.held();
    // Set before the registry is read: a lock entered after that is seen by its lock call
    // (the acquisition loop, `engine/acquiring.rs`), which releases it.
    held.shut();
    // The keeper lets go of its locks: dropping them releases them (below, as `Lock` does),
    // and their handles see them no longer kept.
    let mut released = client.keeper().let_go().await;
    for lock in held.held() {
        if lock.start_release() {
            held.remove(lock.entry());
            lock.release_detached();
            released += 1;
        }
    }
    // The callers waiting in line attempt now, and fail.
    client.wakeups().wake_all();
    let settled = client
        .fanout()
        .settle(client.config().node_timeout() * 2)
        .await;
    tracing::debug!(released, settled, "client shut down");
    Shutdown { released, settled }
}
