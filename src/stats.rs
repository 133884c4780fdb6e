//! Counters of what a client did, for services to export and benches to read; with the
//! `metrics` feature, the same events through the [`metrics`](https://docs.rs/metrics) facade
//! (their names, kinds and labels: the table in docs/operations.md, "What to monitor").

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
    /// Locks that a release of this client handed straight to its next caller waiting for
    /// the resource, without an attempt of the waiter's own (see
    /// [`Lock::release`](crate::Lock::release)).
    pub handed_over: u64,
}

/// One count per [`Event`], in its order (sized by the last event: a new one goes after it
/// and takes its place here, and in [`Counters::read`]).
#[derive(Debug, Default)]
pub(crate) struct Counters([AtomicU64; Event::HandedOver as usize + 1]);

/// What to count (its discriminant is its place in [`Counters`]).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Event {
    Attempt,
    Acquired,
    Taken,
    Woken,
    Paused,
    HandedOver,
}

impl Counters {
    pub(crate) fn count(&self, event: Event) {
        #[cfg(feature = "metrics")]
        match event {
            Event::Attempt => {}
            Event::Acquired => {
                metrics::counter!("quorumlock_lock_attempts_total", "outcome" => "acquired")
                    .increment(1)
            }
            Event::Taken => {
                metrics::counter!("quorumlock_lock_attempts_total", "outcome" => "taken")
                    .increment(1)
            }
            Event::Woken => {
                metrics::counter!("quorumlock_lock_waits_total", "ended" => "released").increment(1)
            }
            Event::Paused => {
                metrics::counter!("quorumlock_lock_waits_total", "ended" => "paused").increment(1)
            }
            Event::HandedOver => {
                metrics::counter!("quorumlock_lock_waits_total", "ended" => "handed_over")
                    .increment(1)
            }
        }
        self.0[event as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn read(&self) -> Stats {
        let [attempts, acquired, taken, woken, paused, handed_over] =
            self.0.each_ref().map(|n| n.load(Ordering::Relaxed));
        Stats {
            attempts,
            acquired,
            taken,
            woken,
            paused,
            handed_over,
        }
    }
}

/// An attempt that neither got the lock nor found it taken (no quorum, validity used up).
pub(crate) fn attempt_failed() {
    #[cfg(feature = "metrics")]
    metrics::counter!("quorumlock_lock_attempts_total", "outcome" => "failed").increment(1);
}

/// A lock call ended after `waited`, with the lock or without.
pub(crate) fn call_ended(_waited: std::time::Duration, _acquired: bool) {
    #[cfg(feature = "metrics")]
    metrics::histogram!(
        "quorumlock_lock_wait_seconds",
        "outcome" => if _acquired { "acquired" } else { "gave_up" }
    )
    .record(_waited.as_secs_f64());
}

/// A node failed a command.
pub(crate) fn node_error(_node: usize, _kind: crate::NodeErrorKind) {
    #[cfg(feature = "metrics")]
    metrics::counter!(
        "quorumlock_node_errors_total",
        "node" => _node.to_string(),
        "kind" => format!("{_kind:?}").to_ascii_lowercase()
    )
    .increment(1);
}

/// A kept lock's extension failed (it is retried until the loss instant).
pub(crate) fn extension_failed() {
    #[cfg(feature = "metrics")]
    metrics::counter!("quorumlock_extension_failures_total").increment(1);
}

/// A kept lock was lost.
pub(crate) fn lock_lost(_reason: &crate::LostReason) {
    #[cfg(feature = "metrics")]
    {
        let reason = match _reason {
            crate::LostReason::NotHeld { .. } => "not_held",
            crate::LostReason::NotExtended { .. } => "not_extended",
            crate::LostReason::HoldLimit { .. } => "hold_limit",
            crate::LostReason::KeeperLate { .. } => "keeper_late",
        };
        metrics::counter!("quorumlock_locks_lost_total", "reason" => reason).increment(1);
    }
}
