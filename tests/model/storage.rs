//! The storage a holder writes to, and the holder's "check, then write" (Kleppmann, "How to
//! do distributed locking"): a holder that has its fencing token checks that its lock is
//! still valid by its own clock, then writes with the token. A running process writes within
//! the tick it checked; only a pause lets time pass between the two steps, and the lock may
//! run out in it.
//!
//! The storage is the resource, not the crate: its rule is the one design section 2.6 and
//! `examples/fenced_storage.rs` give a storage that fences (it remembers the largest token it
//! accepted and refuses a smaller one; an equal token is the same holder), or, as a known-bad
//! variant, none (it takes every write).

use super::system::{Fencing, Phase, State};

/// Where a holder is in its "check, then write".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub enum Write {
    /// Not checked yet (in this hold).
    #[default]
    None,
    /// It checked that its lock is valid; whether it paused since.
    Checked { paused: bool },
    /// It wrote (accepted or refused): one write a hold.
    Done,
}

/// The storage's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Storage {
    /// The largest token it accepted.
    pub newest: Option<u64>,
    /// The latest grant (in the order of the grants) whose write it accepted.
    pub latest: Option<u8>,
    /// It accepted a write of a grant after a write of a later grant: it went back.
    pub went_back: bool,
    /// It refused a write for an old token from a process that paused between its check
    /// and its write (the article's rescue).
    pub refused_after_pause: bool,
    /// It accepted a write from a process whose validity was over by its own clock.
    pub stale_accepted: bool,
}

impl<const N: usize, const C: usize> State<N, C> {
    /// Whether holder `c` may check: it holds the lock with its token handed out, has not
    /// checked in this hold, and its validity is not over by its own clock.
    pub fn may_check(&self, c: usize) -> bool {
        let client = &self.clients[c];
        matches!(
            client.phase,
            Phase::Held { valid_until, fencing: Fencing::Handed(_), .. }
                if self.client_ms() < valid_until
        ) && client.write == Write::None
    }

    /// Holder `c` checks that its lock is valid.
    pub fn check_lock(&mut self, c: usize) {
        self.clients[c].write = Write::Checked { paused: false };
    }

    /// Holder `c` writes with its token; the storage accepts it iff it does not fence or the
    /// token is at least the largest it accepted.
    pub fn write(&mut self, fenced: bool, c: usize) {
        let now = self.client_ms();
        let client = &mut self.clients[c];
        let Write::Checked { paused } = client.write else {
            return;
        };
        client.write = Write::Done;
        let Phase::Held {
            valid_until,
            hold,
            fencing: Fencing::Handed(f),
            ..
        } = client.phase
        else {
            return;
        };
        let storage = &mut self.storage;
        let accepted = !fenced || storage.newest.is_none_or(|newest| f >= newest);
        if !accepted {
            storage.refused_after_pause |= paused;
            return;
        }
        storage.newest = Some(storage.newest.map_or(f, |newest| newest.max(f)));
        if storage.latest.is_some_and(|latest| latest > hold) {
            storage.went_back = true;
        }
        storage.latest = Some(storage.latest.map_or(hold, |latest| latest.max(hold)));
        if now >= valid_until {
            storage.stale_accepted = true;
        }
    }
}
