//! When to act, pure: the pauses between lock attempts ([`RetryLimit`], [`next_pause`]) and
//! when a kept lock is extended, retried and given up ([`KeepSchedule`]). The clock is read
//! and the jitter drawn by the caller (`engine/acquire.rs`, `engine/keep_cycle.rs`), which
//! pass instants, elapsed times and samples in.

use std::time::{Duration, Instant};

/// How many attempts one lock call may make (see `Retry` in `config/retry.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RetryLimit {
    /// At most this many attempts in all, the first one included.
    Attempts(u32),
    /// Attempts may start until this much time has passed since the call began.
    Within(Duration),
}

/// The pause before attempt `made + 1`, or `None` when no further attempt may start: `pause`
/// (the fixed delay plus a jitter sample) if `limit` allows one more attempt after it, the
/// call having run for `elapsed`.
pub(crate) fn next_pause(
    limit: RetryLimit,
    made: u32,
    elapsed: Duration,
    pause: Duration,
) -> Option<Duration> {
    match limit {
        RetryLimit::Attempts(n) => (made < n).then_some(pause),
        RetryLimit::Within(total) => (elapsed.saturating_add(pause) < total).then_some(pause),
    }
}

/// How long a caller may wait in line for its turn (`engine/waiters.rs`): until the deadline
/// of a [`RetryLimit::Within`], or for [`RetryLimit::Attempts`] as long as all its pauses
/// (`delay` plus at most `jitter` each) could take.
pub(crate) fn waiting_budget(limit: RetryLimit, delay: Duration, jitter: Duration) -> Duration {
    match limit {
        RetryLimit::Attempts(n) => delay.saturating_add(jitter).saturating_mul(n),
        RetryLimit::Within(total) => total,
    }
}

/// At most how early a kept lock is extended so that it shares a wake-up with others (also
/// at most a tenth of the time between two of its extensions).
pub(crate) const COALESCE_MAX: Duration = Duration::from_millis(500);

/// A kept lock's schedule, checked against its ttl (`KeepAlive` in `config/keep_alive.rs`
/// makes one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KeepSchedule {
    /// Extend once this much validity is left.
    pub(crate) extend_at: Duration,
    /// Signal the loss this long before the validity ends if no extension succeeded.
    pub(crate) margin: Duration,
    /// Stop extending this long after the lock was kept.
    pub(crate) max_hold: Option<Duration>,
    /// The pause after a failed extension.
    pub(crate) retry_delay: Duration,
}

impl KeepSchedule {
    /// When the next extension is due, for a lock of `ttl` valid until `valid_until`
    /// (`validity` from now) whose last extension was for `for_ttl` (the ttl itself when it
    /// was acquired): when `extend_at` is left, or at once if less is. After an extension
    /// cut down to the hold limit, at the latest halfway between the extension and the loss
    /// instant, so that a short extension is not extended again at once and the loss
    /// instant never comes first.
    pub(crate) fn due(
        &self,
        valid_until: Instant,
        validity: Duration,
        for_ttl: Duration,
        ttl: Duration,
    ) -> Instant {
        let mut extend_at = self.extend_at;
        if for_ttl < ttl {
            let halfway = self.margin + for_ttl.saturating_sub(self.margin) / 2;
            extend_at = extend_at.min(halfway);
        }
        valid_until - extend_at.min(validity)
    }

    /// When the loss is signalled at the latest if no extension succeeds: `margin` before
    /// `valid_until` (`now` if that instant cannot be told).
    pub(crate) fn lost_at(&self, valid_until: Instant, now: Instant) -> Instant {
        valid_until.checked_sub(self.margin).unwrap_or(now)
    }

    /// How much earlier than due an extension of a lock of `ttl` may start, to share a
    /// wake-up: a tenth of the time between two extensions, at most [`COALESCE_MAX`]; none
    /// for a retry, which keeps its `retry_delay`.
    pub(crate) fn early(&self, ttl: Duration, retrying: bool) -> Duration {
        if retrying {
            return Duration::ZERO;
        }
        (ttl.saturating_sub(self.extend_at) / 10).min(COALESCE_MAX)
    }

    /// How long to extend a lock of `ttl` for at `now`: the ttl, cut down to what is left
    /// before `hold_until`; `None` when too little is left to be worth an extension (twice
    /// the margin, or a tenth of the ttl): the lock is let run out.
    pub(crate) fn extend_for(
        &self,
        hold_until: Option<Instant>,
        now: Instant,
        ttl: Duration,
    ) -> Option<Duration> {
        let Some(until) = hold_until else {
            return Some(ttl);
        };
        let left = until.saturating_duration_since(now);
        if left <= self.margin * 2 || left <= ttl / 10 {
            None
        } else {
            Some(left.min(ttl))
        }
    }

    /// When to try again after an extension failed at `now`; a retry later than any instant
    /// is no retry: the loss instant `lost_at` comes first.
    pub(crate) fn retry_at(&self, now: Instant, lost_at: Instant) -> Instant {
        now.checked_add(self.retry_delay).unwrap_or(lost_at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn schedule() -> KeepSchedule {
        KeepSchedule {
            extend_at: ms(5_000),
            margin: ms(1_000),
            max_hold: None,
            retry_delay: ms(50),
        }
    }

    #[test]
    fn attempts_count_the_first_one_and_a_deadline_bounds_the_start_of_the_next() {
        let limit = RetryLimit::Attempts(3);
        assert_eq!(next_pause(limit, 1, ms(0), ms(150)), Some(ms(150)));
        assert_eq!(next_pause(limit, 2, ms(0), ms(150)), Some(ms(150)));
        assert_eq!(next_pause(limit, 3, ms(0), ms(150)), None);
        let within = RetryLimit::Within(ms(1_000));
        assert_eq!(next_pause(within, 9, ms(849), ms(150)), Some(ms(150)));
        assert_eq!(next_pause(within, 9, ms(850), ms(150)), None);
        assert_eq!(waiting_budget(limit, ms(100), ms(100)), ms(600));
        assert_eq!(waiting_budget(within, ms(100), ms(100)), ms(1_000));
        assert_eq!(
            waiting_budget(RetryLimit::Attempts(u32::MAX), Duration::MAX, ms(1)),
            Duration::MAX
        );
    }

    #[test]
    fn a_kept_lock_is_extended_with_extend_at_left_and_signalled_lost_a_margin_early() {
        let s = schedule();
        let now = Instant::now();
        let until = now + ms(10_000);
        let ttl = ms(10_000);
        assert_eq!(s.due(until, ms(10_000), ttl, ttl), now + ms(5_000));
        // Less validity than extend_at: due at once.
        assert_eq!(s.due(until, ms(3_000), ttl, ttl), until - ms(3_000));
        // An extension cut down to 4 s: due halfway to the loss instant, 2.5 s left.
        assert_eq!(s.due(until, ms(4_000), ms(4_000), ttl), until - ms(2_500));
        // Extending early with a wide margin: due at extend_at, before the loss instant,
        // after every extension.
        let wide = KeepSchedule {
            extend_at: ms(8_000),
            margin: ms(6_000),
            ..s
        };
        assert_eq!(wide.due(until, ms(10_000), ttl, ttl), until - ms(8_000));
        assert!(wide.due(until, ms(10_000), ttl, ttl) < wide.lost_at(until, now));
        assert_eq!(s.lost_at(until, now), until - ms(1_000));
        assert_eq!(s.early(ms(10_000), false), ms(500));
        assert_eq!(s.early(ms(6_000), false), ms(100));
        assert_eq!(s.early(ms(10_000), true), Duration::ZERO);
        assert_eq!(s.retry_at(now, until), now + ms(50));
    }

    #[test]
    fn the_hold_limit_cuts_the_last_extension_and_stops_the_ones_not_worth_making() {
        let s = schedule();
        let now = Instant::now();
        let ttl = ms(10_000);
        assert_eq!(s.extend_for(None, now, ttl), Some(ttl));
        assert_eq!(s.extend_for(Some(now + ms(60_000)), now, ttl), Some(ttl));
        assert_eq!(
            s.extend_for(Some(now + ms(4_000)), now, ttl),
            Some(ms(4_000))
        );
        assert_eq!(s.extend_for(Some(now + ms(2_000)), now, ttl), None);
        assert_eq!(s.extend_for(Some(now), now, ttl), None);
    }

    proptest! {
        /// The next extension is never due after the validity ends, nor before extend_at is
        /// left; with more than the margin left it is due before the loss instant.
        #[test]
        fn due_and_lost_fall_within_the_validity(
            margin in 1u64..50_000,
            above in 1u64..50_000,
            ttl in 1u64..200_000,
            for_ttl in 1u64..200_000,
            validity in 0u64..200_000,
        ) {
            // What KeepAlive's check lets through: margin < extend_at < ttl.
            let extend_at = margin + above;
            prop_assume!(extend_at < ttl);
            let for_ttl = for_ttl.min(ttl);
            let validity = validity.min(for_ttl);
            let s = KeepSchedule {
                extend_at: ms(extend_at),
                margin: ms(margin),
                max_hold: None,
                retry_delay: ms(1),
            };
            let now = Instant::now();
            let until = now + ms(validity);
            let due = s.due(until, ms(validity), ms(for_ttl), ms(ttl));
            prop_assert!(due <= until && due >= now);
            prop_assert!(due >= until - ms(extend_at).min(ms(validity)));
            prop_assert!(s.lost_at(until, now) <= until);
            if validity > margin && for_ttl > 2 * margin {
                prop_assert!(due < s.lost_at(until, now));
            }
        }
    }
}
