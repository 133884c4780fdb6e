//! What a claim is, as plain data: the resources an acquisition claims and their keys
//! ([`Resources`], [`Keys`]), what a holder's claim is where it is a member of a sorted set
//! ([`Member`], [`PermitSlot`]), and which side of a read-write lock is held ([`Access`]).

use fred::types::Key;

/// What one acquisition claims: the resources' names and their keys.
#[derive(Debug, Clone)]
pub(crate) struct Resources {
    /// The resources' names joined by commas, for messages.
    pub(crate) name: String,
    pub(crate) resources: Vec<String>,
    pub(crate) keys: Keys,
}

/// The keys of one lock: the lock keys, then (with fencing) their fencing counters.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    pub(crate) all: Vec<Key>,
    /// How many of `all` are lock keys; the rest are fencing counters.
    pub(crate) locks: usize,
}

impl Keys {
    pub(crate) fn locks(&self) -> &[Key] {
        &self.all[..self.locks]
    }

    pub(crate) fn fencing(&self) -> bool {
        self.all.len() > self.locks
    }

    /// The fencing counters (none without fencing).
    pub(crate) fn counters(&self) -> &[Key] {
        &self.all[self.locks..]
    }

    /// What an acquisition round sends: every key when it reads the fencing counters, the
    /// lock keys alone otherwise.
    pub(crate) fn sent(&self, reads_counters: bool) -> &[Key] {
        if reads_counters {
            &self.all
        } else {
            self.locks()
        }
    }
}

/// A permit's slot, and how many permits its semaphore has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PermitSlot {
    pub(crate) slot: u32,
    pub(crate) permits: u32,
}

/// What a holder's claim is, where it is a member of a sorted set rather than a lock's key:
/// a semaphore's permit (design 2.9), or a read-write lock's reader or writer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Member {
    Permit(PermitSlot),
    Reader,
    Writer,
}

/// Which side of a [`RwLock`](crate::RwLock) an [`RwGuard`](crate::RwGuard) holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Shared with other readers.
    Read,
    /// Alone.
    Write,
}
