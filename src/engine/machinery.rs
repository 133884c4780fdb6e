//! What a held claim needs of its client, and no more: the fan-out, the registries a claim is
//! entered in or reads, the settings and the counters (ARCHITECTURE.md, its `engine/` row),
//! kept by the [`Coordinator`](crate::engine::coordinator::Coordinator) and every held claim.
//!
//! Here too the registry of held locks ([`Holdings`]) and the clean end it serves
//! ([`Machinery::shut_down`]; why a process needs it, and what the registry costs: design
//! 3.4).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use fred::types::Key;

use crate::config::Config;
use crate::engine::fanout::Fanout;
use crate::engine::held::{Held, Ident, Keys, Token};
use crate::engine::keeper::Keeper;
use crate::engine::waiters::Wakeups;
use crate::error::Error;
use crate::node::Node;
use crate::stats::Counters;

/// The fan-out and the registries of one client, shared by the client and its held claims.
#[derive(Debug)]
pub(crate) struct Machinery {
    pub(crate) config: Config,
    /// Every node, and the rounds sent to them.
    pub(crate) fanout: Fanout,
    /// The task that extends this client's kept locks, started with the first one.
    pub(crate) keeper: Keeper<Held>,
    /// The locks this client holds, for its shutdown (below).
    pub(crate) held: Holdings<Ident>,
    /// The waiters for releases, by key (see `engine/waiters.rs`).
    pub(crate) wakeups: Arc<Wakeups>,
    /// Set once a fencing token of one of this client's locks was asked for: from then on,
    /// acquisitions of one resource read the fencing counters too, and record the token this
    /// client expects next where they can (see `Locking` in `engine/coordinator.rs`).
    tokens_asked: AtomicBool,
    /// The hints of its acquisitions' fencing tokens (below).
    pub(crate) hints: Hints,
    /// What the client has done, for `RedLock::stats`.
    pub(crate) counters: Counters,
}

impl Machinery {
    pub(crate) fn new(config: Config, fanout: Fanout, wakeups: Arc<Wakeups>) -> Machinery {
        Machinery {
            config,
            fanout,
            keeper: Keeper::default(),
            held: Holdings::default(),
            wakeups,
            tokens_asked: AtomicBool::new(false),
            hints: Hints::default(),
            counters: Counters::default(),
        }
    }

    pub(crate) fn node_list(&self) -> &[Node] {
        self.fanout.nodes()
    }

    pub(crate) fn nodes(&self) -> usize {
        self.node_list().len()
    }

    pub(crate) fn token_asked(&self) {
        if !self.tokens_asked.load(Ordering::Relaxed) {
            self.tokens_asked.store(true, Ordering::Relaxed);
        }
    }

    pub(crate) fn tokens_asked(&self) -> bool {
        self.tokens_asked.load(Ordering::Relaxed)
    }

    /// Whether an acquisition of `keys` reads their fencing counters (see `Locking`).
    pub(crate) fn reads_counters(&self, keys: &Keys) -> bool {
        keys.fencing() && (keys.locks > 1 || self.tokens_asked())
    }

    /// Releases every lock the client holds, waits for the nodes, and refuses later lock calls
    /// ([`RedLock::shutdown`](crate::RedLock::shutdown)).
    pub(crate) async fn shut_down(&self) -> Shutdown {
        let held = &self.held;
        // Set before the registry is read: a lock entered after that is seen by its lock call
        // (the acquisition loop, `engine/acquire.rs`), which releases it.
        held.shut();
        // The keeper lets go of its locks: dropping them releases them (below, as `Lock` does),
        // and their handles see them no longer kept.
        let mut released = self.keeper.let_go().await;
        for lock in held.held() {
            if lock.start_release() {
                lock.release_detached();
                released += 1;
            }
        }
        // The callers waiting in line attempt now, and fail.
        self.wakeups.wake_all();
        let settled = self.fanout.settle(self.config.node_timeout() * 2).await;
        tracing::debug!(released, settled, "client shut down");
        Shutdown { released, settled }
    }
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

/// How many independently locked parts the registry has.
const SHARDS: usize = 16;

/// The locks a client holds (each a `T`, the part of a held lock its shutdown releases), and
/// whether it was shut down.
#[derive(Debug)]
pub(crate) struct Holdings<T> {
    shut: AtomicBool,
    shards: [Mutex<Slab<T>>; SHARDS],
}

impl<T> Default for Holdings<T> {
    fn default() -> Self {
        Holdings {
            shut: AtomicBool::new(false),
            shards: std::array::from_fn(|_| Mutex::default()),
        }
    }
}

/// One shard: slots in a vector, the free ones chained.
#[derive(Debug)]
struct Slab<T> {
    slots: Vec<Slot<T>>,
    /// The first free slot, if any.
    free: Option<u32>,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab {
            slots: Vec::new(),
            free: None,
        }
    }
}

#[derive(Debug)]
enum Slot<T> {
    Held(Weak<T>),
    /// Free, with the next free slot.
    Free(Option<u32>),
}

/// Where a lock is in the registry: its shard and its slot there.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Registration {
    shard: u8,
    slot: u32,
}

impl<T> Holdings<T> {
    fn shard(&self, shard: u8) -> MutexGuard<'_, Slab<T>> {
        // A slab is never left half-written: its methods do not panic between writes.
        self.shards[usize::from(shard) % SHARDS]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Enters a lock whose token is `token` (see `Held::new`).
    pub(crate) fn enter(&self, token: &Token, lock: Weak<T>) -> Registration {
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

    pub(crate) fn held(&self) -> Vec<Arc<T>> {
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

    /// Marks the client shut down: [`refuse`](Self::refuse) refuses from now on.
    pub(crate) fn shut(&self) {
        self.shut.store(true, Ordering::SeqCst);
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

/// Resources remembered by [`Hints`], at most; past that, it starts afresh (a hint missing
/// costs a round, never safety).
const HINTS: usize = 1024;

/// The last fencing token a client knows of for each resource it fenced recently: a token it
/// recorded, or the largest counter it read. One more is the hint of its next acquisition of
/// the resource (see `engine/fencing.rs`). A wrong hint costs the FENCE round that the
/// acquisition would otherwise have spared, never safety: a node records the hint only
/// if its counters are below it, and the token counts as recorded only where a majority did.
#[derive(Debug, Default)]
pub(crate) struct Hints {
    last: Mutex<HashMap<Key, u64>>,
}

impl Hints {
    /// The hint for an acquisition of the resources whose fencing counters are `counters`:
    /// one more than the largest token known of any of them (1 if none is known).
    pub(crate) fn next(&self, counters: &[Key]) -> u64 {
        let last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        let known = counters.iter().filter_map(|k| last.get(k)).max();
        known.copied().unwrap_or(0).saturating_add(1)
    }

    /// Notes that the counters `counters` are at least `token` on a majority.
    pub(crate) fn note(&self, counters: &[Key], token: u64) {
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        if last.len() + counters.len() > HINTS {
            last.clear();
        }
        for counter in counters {
            let known = last.entry(counter.clone()).or_insert(0);
            *known = (*known).max(token);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hint_is_one_more_than_the_largest_token_known_of_any_resource_locked() {
        let hints = Hints::default();
        let (a, b) = (
            Key::from("quorumlock:fence:a"),
            Key::from("quorumlock:fence:b"),
        );
        assert_eq!(hints.next(std::slice::from_ref(&a)), 1);
        hints.note(std::slice::from_ref(&a), 7);
        hints.note(std::slice::from_ref(&a), 5); // never lowered
        hints.note(std::slice::from_ref(&b), 3);
        assert_eq!(hints.next(std::slice::from_ref(&a)), 8);
        assert_eq!(hints.next(std::slice::from_ref(&b)), 4);
        assert_eq!(hints.next(&[a.clone(), b.clone()]), 8);
        assert_eq!(hints.next(&[]), 1);
        hints.note(std::slice::from_ref(&b), u64::MAX);
        assert_eq!(hints.next(&[b]), u64::MAX);
    }

    #[test]
    fn hints_start_afresh_past_their_bound() {
        let hints = Hints::default();
        let first = Key::from("quorumlock:fence:first");
        hints.note(std::slice::from_ref(&first), 9);
        for i in 1..HINTS {
            hints.note(&[Key::from(format!("quorumlock:fence:{i}"))], 1);
        }
        assert_eq!(hints.next(std::slice::from_ref(&first)), 10);
        hints.note(&[Key::from("quorumlock:fence:one-too-many")], 1);
        assert_eq!(hints.next(std::slice::from_ref(&first)), 1);
        assert_eq!(hints.last.lock().unwrap().len(), 1);
    }
}
