//! The verdict of a round, written once for every operation that sends one: whether a
//! majority did what was asked, and, where a lock's validity is at stake, whether time is
//! left. Acquisition and handover ask [`timed`] whether they were granted a lock; extension
//! asks it whether the lock was extended in time; release, the fencing rounds and the
//! election's identity record ask [`confirmation`] whether the lock we hold confirmed it.
//!
//! Pure: the tally, the ttl, the drift allowance and the time the round took come in as
//! arguments (design 2.2, 2.3).

use std::time::Duration;

use crate::algo::quorum::{validity, Decision, Tally};

/// What a decided round says of a lock we hold (or, for a taking round, of the keys we
/// asked for).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(unreachable_pub)] // Re-exported to the model checker (`model.rs`).
pub enum Confirmation {
    /// A majority did what was asked: our token is (or was set) on a majority.
    Confirmed,
    /// So many nodes answered that our token is not there that it cannot be on a majority
    /// (`Tally::gone`): the lock is not ours (any more).
    Gone,
    /// Neither: too few nodes said yes, but too few said no to tell that the lock is gone
    /// (failures, timeouts). Whether the lock is still ours is unknown.
    Short,
}

/// The verdict on a round that would give us a lock for a ttl: an acquisition, a handover
/// to us, an extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(unreachable_pub)] // Re-exported to the model checker (`model.rs`).
pub enum Timed {
    /// A majority said yes and this much of the lock's validity is left
    /// (`ttl − elapsed − drift`, strictly positive).
    Valid(Duration),
    /// A majority said yes, but the round took the whole validity: nothing can rely on it.
    Late,
    /// Our token cannot be on a majority (see [`Confirmation::Gone`]).
    Gone,
    /// No majority either way (see [`Confirmation::Short`]).
    Short,
}

/// What the decided round of `tally` says of our token.
pub(crate) fn confirmation(tally: &Tally) -> Confirmation {
    match tally.decision() {
        Decision::Won => Confirmation::Confirmed,
        _ if tally.gone() => Confirmation::Gone,
        _ => Confirmation::Short,
    }
}

/// The verdict on a round of `tally` that took `elapsed` (from before its first request
/// was sent until it was decided) to set a lock of `ttl` with the clock-drift allowance
/// `drift`: granted only with a majority of yes and validity left.
pub(crate) fn timed(tally: &Tally, ttl: Duration, drift: Duration, elapsed: Duration) -> Timed {
    match confirmation(tally) {
        Confirmation::Confirmed => match validity(ttl, elapsed, drift) {
            Some(left) => Timed::Valid(left),
            None => Timed::Late,
        },
        Confirmation::Gone => Timed::Gone,
        Confirmation::Short => Timed::Short,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algo::quorum::{quorum, Ballot};
    use proptest::prelude::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn tally(nodes: usize, yes: usize, no: usize, failed: usize, held: bool) -> Tally {
        let mut t = Tally::new(nodes);
        if held {
            t = t.holding();
        }
        for (ballot, n) in [
            (Ballot::Yes, yes),
            (Ballot::No, no),
            (Ballot::Failed, failed),
        ] {
            for _ in 0..n {
                t.record(ballot);
            }
        }
        t
    }

    #[test]
    fn a_majority_in_time_is_granted_and_a_late_one_is_not() {
        let won = tally(3, 2, 1, 0, false);
        assert_eq!(timed(&won, ms(100), ms(3), ms(10)), Timed::Valid(ms(87)));
        assert_eq!(timed(&won, ms(100), ms(3), ms(97)), Timed::Late);
        assert_eq!(timed(&won, ms(100), ms(3), ms(200)), Timed::Late);
    }

    #[test]
    fn a_held_lock_is_gone_only_when_a_majority_can_no_longer_hold_our_token() {
        assert_eq!(
            confirmation(&tally(3, 3, 0, 0, true)),
            Confirmation::Confirmed
        );
        assert_eq!(confirmation(&tally(3, 1, 2, 0, true)), Confirmation::Gone);
        assert_eq!(confirmation(&tally(3, 1, 1, 1, true)), Confirmation::Short);
        assert_eq!(confirmation(&tally(3, 0, 0, 3, true)), Confirmation::Short);
        assert_eq!(confirmation(&tally(5, 2, 2, 1, true)), Confirmation::Short);
        assert_eq!(confirmation(&tally(5, 0, 3, 2, true)), Confirmation::Gone);
        assert_eq!(
            timed(&tally(5, 1, 3, 1, true), ms(100), ms(3), ms(1)),
            Timed::Gone
        );
    }

    proptest! {
        /// Granted exactly when a quorum said yes and `ttl − elapsed − drift` is positive,
        /// with that validity; a failure never counts as a no.
        #[test]
        fn granted_iff_a_quorum_said_yes_in_time(
            nodes in 1usize..=9,
            split in (0usize..=9, 0usize..=9),
            held in any::<bool>(),
            ttl in 0u64..10_000,
            drift in 0u64..200,
            elapsed in 0u64..10_000,
        ) {
            let yes = split.0.min(nodes);
            let no = split.1.min(nodes - yes);
            let failed = nodes - yes - no;
            let t = tally(nodes, yes, no, failed, held);
            let verdict = timed(&t, ms(ttl), ms(drift), ms(elapsed));
            let left = validity(ms(ttl), ms(elapsed), ms(drift));
            match verdict {
                Timed::Valid(v) => prop_assert!(yes >= quorum(nodes) && left == Some(v)),
                Timed::Late => prop_assert!(yes >= quorum(nodes) && left.is_none()),
                Timed::Gone => prop_assert!(yes < quorum(nodes) && no > nodes - quorum(nodes)),
                Timed::Short => prop_assert!(yes < quorum(nodes) && no <= nodes - quorum(nodes)),
            }
            let with_more_failures = tally(nodes, yes, no.saturating_sub(1), failed + usize::from(no > 0), held);
            if confirmation(&t) == Confirmation::Short {
                prop_assert_eq!(confirmation(&with_more_failures), Confirmation::Short);
            }
        }
    }
}
