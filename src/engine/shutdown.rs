//! A clean end for a client: [`RedLock::shutdown`](crate::RedLock::shutdown) releases every lock the client holds,
//! waits for the nodes, and refuses later lock calls.
//!
//! Without it, a process that ends with a lock held leaves the lock's keys on the nodes for
//! the rest of their ttl: a dropped `Lock` releases in a background task, and the runtime's
//! end (`#[tokio::main]` returning) cancels that task before it sends anything. So the
//! client keeps a registry of the locks it holds: every `Lock` is entered when it is made
//! (acquired, or handed over by a release) and removed when its release starts. The
//! registry costs one uncontended mutex (one of 16, picked by the token's first hex digit)
//! and one slot in a vector per acquisition and per release, and a weak pointer per held
//! lock; it never keeps a lock alive.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use crate::engine::coordinator::Coordinator;
use crate::engine::held::Ident;
use crate::engine::token::Token;
use crate::error::Error;

/// How many independently locked parts the registry has.
const SHARDS: usize = 16;

/// The locks a client holds, and whether it was shut down.
#[derive(Debug, Default)]
pub(crate) struct Holdings {
    shut: AtomicBool,
    shards: [Mutex<Slab>; SHARDS],
}

/// One shard: slots in a vector, the free ones chained.
#[derive(Debug, Default)]
struct Slab {
    slots: Vec<Slot>,
    /// The first free slot, if any.
    free: Option<u32>,
}

#[derive(Debug)]
enum Slot {
    Held(Weak<Ident>),
    /// Free, with the next free slot.
    Free(Option<u32>),
}

/// Where a lock is in the registry: its shard and its slot there.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Registration {
    shard: u8,
    slot: u32,
}

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

impl Holdings {
    fn shard(&self, shard: u8) -> MutexGuard<'_, Slab> {
        // A slab is never left half-written: its methods do not panic between writes.
        self.shards[usize::from(shard) % SHARDS]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Enters a lock whose token is `token` (see `Held::new`).
    pub(crate) fn enter(&self, token: &Token, lock: Weak<Ident>) -> Registration {
        // Random, so the shards share the locks evenly.
        let shard = token
            .as_str()
            .chars()
            .next()
            .and_then(|c| c.to_digit(16))
            .unwrap_or(0) as u8;
        let mut slab = self.shard(shard);
        let slot = match slab.free {
            Some(free) => {
                let index = free as usize;
                if let Some(Slot::Free(next)) = slab.slots.get(index) {
                    slab.free = *next;
                }
                slab.slots[index] = Slot::Held(lock);
                free
            }
            None => {
                slab.slots.push(Slot::Held(lock));
                u32::try_from(slab.slots.len() - 1).unwrap_or(u32::MAX)
            }
        };
        Registration { shard, slot }
    }

    /// Removes a lock whose release has started.
    pub(crate) fn remove(&self, entry: Registration) {
        let mut slab = self.shard(entry.shard);
        let free = slab.free;
        if let Some(slot) = slab.slots.get_mut(entry.slot as usize) {
            if matches!(slot, Slot::Held(_)) {
                *slot = Slot::Free(free);
                slab.free = Some(entry.slot);
            }
        }
    }

    /// The locks held now.
    fn held(&self) -> Vec<Arc<Ident>> {
        let mut held = Vec::new();
        for shard in 0..SHARDS {
            let slab = self.shard(shard as u8);
            held.extend(slab.slots.iter().filter_map(|slot| match slot {
                Slot::Held(lock) => lock.upgrade(),
                Slot::Free(_) => None,
            }));
        }
        held
    }

    pub(crate) fn is_shut(&self) -> bool {
        self.shut.load(Ordering::SeqCst)
    }

    /// [`Error::ShutDown`] once the client is shut down (before anything is sent).
    pub(crate) fn refuse(&self) -> Result<(), Error> {
        match self.is_shut() {
            true => Err(Error::ShutDown),
            false => Ok(()),
        }
    }
}

/// Releases every lock `client` holds, waits for the nodes, and refuses later lock calls
/// ([`RedLock::shutdown`](crate::RedLock::shutdown)).
pub(crate) async fn shut_down(client: &Coordinator) -> Shutdown {
    let held = client.held();
    // Set before the registry is read: a lock entered after that is seen by its lock call
    // (`Coordinator::acquiring`), which releases it.
    held.shut.store(true, Ordering::SeqCst);
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
    let settled = client.settle(client.config().node_timeout() * 2).await;
    tracing::debug!(released, settled, "client shut down");
    Shutdown { released, settled }
}
