//! Counters of what a client did, for services to export and benches to read.

use std::sync::atomic::{AtomicU64, Ordering};

/// What a [`RedLock`](crate::RedLock) has done since it was built: cumulative counts, read
/// with [`RedLock::stats`](crate::RedLock::stats). Cheap to read; subtract two readings for
/// a rate.
///
/// ```
/// # fn f(redlock: &quorumlock::RedLock) {
/// let stats = redlock.stats();
/// let wasted = stats.attempts - stats.acquired;
/// println!("{wasted} attempts did not get their lock; {} waits woken by a release", stats.woken);
/// # }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Lock attempts made (each retry is one).
    pub attempts: u64,
    /// Attempts that got their lock.
    pub acquired: u64,
    /// Attempts that found the lock held by someone else.
    pub taken: u64,
    /// Waits between attempts that a release ended (see [`RedLock::lock`](crate::RedLock::lock)).
    pub woken: u64,
    /// Waits between attempts that ran their whole pause.
    pub paused: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    attempts: AtomicU64,
    acquired: AtomicU64,
    taken: AtomicU64,
    woken: AtomicU64,
    paused: AtomicU64,
}

/// What to count.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Event {
    Attempt,
    Acquired,
    Taken,
    Woken,
    Paused,
}

impl Counters {
    pub(crate) fn count(&self, event: Event) {
        let counter = match event {
            Event::Attempt => &self.attempts,
            Event::Acquired => &self.acquired,
            Event::Taken => &self.taken,
            Event::Woken => &self.woken,
            Event::Paused => &self.paused,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn read(&self) -> Stats {
        Stats {
            attempts: self.attempts.load(Ordering::Relaxed),
            acquired: self.acquired.load(Ordering::Relaxed),
            taken: self.taken.load(Ordering::Relaxed),
            woken: self.woken.load(Ordering::Relaxed),
            paused: self.paused.load(Ordering::Relaxed),
        }
    }
}
