//! A client's registry of the locks it holds, for its shutdown (`engine/shutdown.rs`):
//! every held lock is entered when it is made (acquired, or handed over by a release) and
//! removed when its release starts. The registry costs one uncontended mutex (one of 16,
//! picked by the token's first hex digit) and one slot in a vector per acquisition and per
//! release, and a weak pointer per held lock; it never keeps a lock alive.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use crate::engine::token::Token;
use crate::error::Error;

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

    /// The locks held now.
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
