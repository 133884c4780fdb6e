//! The pure arithmetic of Redlock: quorum size, clock drift, validity, and the vote tally
//! that decides an operation as soon as its outcome is known.
//!
//! Nothing here touches the network or reads a clock, so all of it is covered by unit and
//! property tests (below, with proptest).

use std::time::Duration;

/// The fixed part of the clock-drift allowance, added to `ttl × drift_factor`.
pub const DRIFT_FLOOR: Duration = Duration::from_millis(2);

/// How many of `nodes` votes make a majority: `nodes / 2 + 1`.
///
/// ```
/// assert_eq!(quorumlock::quorum(1), 1);
/// assert_eq!(quorumlock::quorum(3), 2);
/// assert_eq!(quorumlock::quorum(4), 3);
/// assert_eq!(quorumlock::quorum(5), 3);
/// ```
pub const fn quorum(nodes: usize) -> usize {
    nodes / 2 + 1
}

/// The clock-drift allowance for a lock of `ttl`: `ttl × drift_factor + 2 ms`.
///
/// Returns `None` when `drift_factor` is negative, not finite, or the product does not fit a
/// [`Duration`] (the builder rejects such factors before any lock is taken).
///
/// ```
/// use std::time::Duration;
/// let d = quorumlock::drift(Duration::from_secs(10), 0.01).unwrap();
/// assert_eq!(d, Duration::from_millis(102));
/// ```
pub fn drift(ttl: Duration, drift_factor: f64) -> Option<Duration> {
    if !drift_factor.is_finite() || drift_factor < 0.0 {
        return None;
    }
    // Whole microseconds: enough resolution, and exact for the usual factors.
    let micros = (ttl.as_micros() as f64 * drift_factor).round();
    if micros >= u64::MAX as f64 {
        return None;
    }
    Duration::from_micros(micros as u64).checked_add(DRIFT_FLOOR)
}

/// The time a lock can still be relied on: `ttl − elapsed − drift`, or `None` when that is
/// not strictly positive (the attempt failed even if a quorum agreed).
///
/// `elapsed` is measured on the client's monotonic clock from before the first request was
/// sent until the quorum answered.
///
/// ```
/// use std::time::Duration;
/// let ms = Duration::from_millis;
/// assert_eq!(quorumlock::validity(ms(10_000), ms(5), ms(102)), Some(ms(9_893)));
/// assert_eq!(quorumlock::validity(ms(100), ms(98), ms(3)), None);
/// ```
pub fn validity(ttl: Duration, elapsed: Duration, drift: Duration) -> Option<Duration> {
    ttl.checked_sub(elapsed)?
        .checked_sub(drift)
        .filter(|left| !left.is_zero())
}

/// One node's answer to one operation, as the tally counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[allow(unreachable_pub)] // Re-exported to the model checker (`model.rs`).
pub enum Ballot {
    /// The node did what was asked (set, extended or deleted our key).
    Yes,
    /// The node answered, but the key is someone else's (or not ours any more).
    No,
    /// The node did not answer usefully: timeout, connection or protocol error.
    Failed,
}

/// Whether an operation over all nodes is decided, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(unreachable_pub)] // Re-exported to the model checker (`model.rs`).
pub enum Decision {
    /// Not yet: more answers are needed.
    Pending,
    /// A majority said yes.
    Won,
    /// So many nodes said no or failed that a majority can no longer say yes.
    Lost,
}

/// What a round is about, which says what a "no" means and when the round is decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stake {
    /// Taking a lock (acquire): a no is another holder. Decided as soon as a majority
    /// of yes is out of reach, failures and refusals alike; suspects may be presumed failed.
    Taking,
    /// A lock we hold (extend, release, reading and recording its fencing token): a no is a
    /// node that answered that our token is not there. Decided once a majority said yes, or so many nodes answered no that our token
    /// cannot be on a majority ([`Tally::gone`]), or neither can happen any more. A failed
    /// node is never counted as a no, and no node is presumed failed.
    Held,
}

/// Counts votes and decides as soon as the outcome is known, presuming the suspects failed
/// once a round [`Taking`](Stake::Taking) a lock has seen contention (design 2.2a). A suspect
/// that answers is counted as it answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tally {
    pub(crate) nodes: usize,
    pub(crate) yes: usize,
    pub(crate) no: usize,
    pub(crate) failed: usize,
    /// Suspect nodes that have not answered yet.
    pub(crate) presumed_failed: usize,
    /// The yes votes needed: the quorum of `nodes` (lowered only by the test kit's
    /// deliberately broken client).
    needed: usize,
    stake: Stake,
}

impl Tally {
    #[cfg(test)]
    pub(crate) const fn new(nodes: usize) -> Self {
        Tally::presuming(nodes, 0)
    }

    /// A tally that presumes `suspects` of the `nodes` failed until they answer.
    pub(crate) const fn presuming(nodes: usize, suspects: usize) -> Self {
        Tally {
            nodes,
            yes: 0,
            no: 0,
            failed: 0,
            presumed_failed: suspects,
            needed: quorum(nodes),
            stake: Stake::Taking,
        }
    }

    /// The same tally for a round on a lock we hold (see [`Stake::Held`]).
    pub(crate) const fn holding(mut self) -> Self {
        self.stake = Stake::Held;
        self.presumed_failed = 0;
        self
    }

    /// The same tally needing `needed` yes votes instead of a majority.
    pub(crate) const fn needing(mut self, needed: usize) -> Self {
        self.needed = needed;
        self
    }

    pub(crate) const fn quorum(&self) -> usize {
        self.needed
    }

    /// Counts one node's answer; `suspect` says whether the tally presumed it failed.
    pub(crate) fn record_from(&mut self, ballot: Ballot, suspect: bool) -> Decision {
        if suspect {
            self.presumed_failed = self.presumed_failed.saturating_sub(1);
        }
        self.record(ballot)
    }

    pub(crate) fn record(&mut self, ballot: Ballot) -> Decision {
        match ballot {
            Ballot::Yes => self.yes += 1,
            Ballot::No => self.no += 1,
            Ballot::Failed => self.failed += 1,
        }
        self.decision()
    }

    pub(crate) const fn decision(&self) -> Decision {
        if self.yes >= self.quorum() {
            Decision::Won
        } else if let Stake::Held = self.stake {
            // Only answers decide whether our token is gone: wait while the nodes not heard
            // from could still make a majority of yes, or a majority that lost our token.
            let open = self.nodes.saturating_sub(self.yes + self.no + self.failed);
            if self.gone()
                || (self.yes + open < self.quorum() && self.no + open <= self.nodes - self.quorum())
            {
                Decision::Lost
            } else {
                Decision::Pending
            }
        } else if self.no + self.failed > self.nodes - self.quorum() {
            Decision::Lost
        } else if self.no > 0
            && self.no + self.failed + self.presumed_failed > self.nodes - self.quorum()
        {
            // Someone else holds the key somewhere, and only suspects could still make up a
            // majority: waiting for them would hold our partial keys for a whole node
            // timeout and jam every other contender.
            Decision::Lost
        } else {
            Decision::Pending
        }
    }

    /// After a lost vote: could the nodes that did not fail (those that said no, and those
    /// not yet heard from) have made a majority? Then the loss is contention ("taken"),
    /// otherwise unreachability.
    pub(crate) const fn lost_to_contention(&self) -> bool {
        self.failed + self.presumed_failed <= self.nodes - self.quorum()
    }

    /// For a lock we hold: so many nodes answered that our token is not there (`no > N − q`)
    /// that it cannot be on a majority, whatever the others would say. With an odd number of
    /// nodes, that is a majority of answers. Failures never count here.
    pub(crate) const fn gone(&self) -> bool {
        self.no > self.nodes - self.quorum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn quorum_is_a_strict_majority() {
        for n in 1..=64 {
            assert!(2 * quorum(n) > n, "{n}");
            assert!(2 * (quorum(n) - 1) <= n, "{n}");
        }
    }

    #[test]
    fn drift_is_one_percent_plus_two_ms_by_default() {
        assert_eq!(drift(ms(10_000), 0.01), Some(ms(102)));
        assert_eq!(drift(ms(30_000), 0.01), Some(ms(302)));
        assert_eq!(drift(ms(1_000), 0.0), Some(ms(2)));
        assert_eq!(drift(ms(1_000), -0.1), None);
        assert_eq!(drift(ms(1_000), f64::NAN), None);
        assert_eq!(drift(ms(1_000), f64::INFINITY), None);
        assert_eq!(drift(Duration::MAX, 2.0), None);
    }

    #[test]
    fn validity_never_wraps_around() {
        assert_eq!(validity(ms(100), ms(200), ms(3)), None);
        assert_eq!(validity(ms(100), ms(97), ms(3)), None);
        assert_eq!(validity(ms(100), ms(96), ms(3)), Some(ms(1)));
        assert_eq!(
            validity(Duration::ZERO, Duration::ZERO, Duration::ZERO),
            None
        );
    }

    #[test]
    fn five_nodes_decide_at_three_either_way() {
        let mut t = Tally::new(5);
        assert_eq!(t.record(Ballot::Yes), Decision::Pending);
        assert_eq!(t.record(Ballot::No), Decision::Pending);
        assert_eq!(t.record(Ballot::Yes), Decision::Pending);
        assert_eq!(t.record(Ballot::Yes), Decision::Won);

        let mut t = Tally::new(5);
        t.record(Ballot::No);
        t.record(Ballot::Failed);
        assert_eq!(t.record(Ballot::No), Decision::Lost);
        assert!(t.lost_to_contention());

        let mut t = Tally::new(5);
        t.record(Ballot::Failed);
        t.record(Ballot::Failed);
        assert_eq!(t.record(Ballot::Failed), Decision::Lost);
        assert!(!t.lost_to_contention());
    }

    #[test]
    fn a_suspect_node_is_not_waited_for_to_lose() {
        // Five nodes, one suspect: two yes and two no decide a loss without waiting.
        let mut t = Tally::presuming(5, 1);
        t.record(Ballot::Yes);
        t.record(Ballot::Yes);
        t.record(Ballot::No);
        assert_eq!(t.record(Ballot::No), Decision::Lost);
        assert!(t.lost_to_contention());
        // But it is waited for to win, and its yes counts.
        let mut t = Tally::presuming(5, 1);
        t.record(Ballot::Yes);
        t.record(Ballot::Yes);
        t.record(Ballot::No);
        assert_eq!(t.record_from(Ballot::Yes, true), Decision::Won);
        // Without contention, suspects are waited for: they may have recovered.
        let mut t = Tally::presuming(5, 3);
        assert_eq!(t.decision(), Decision::Pending);
        assert_eq!(t.record(Ballot::Yes), Decision::Pending);
        assert_eq!(t.record(Ballot::No), Decision::Lost);
        assert!(!t.lost_to_contention());
    }

    #[test]
    fn a_held_lock_is_gone_only_when_enough_nodes_answered_so() {
        // Two deleted our key, one never had it, two timed out: not a lost lock.
        let mut t = Tally::new(5).holding();
        t.record(Ballot::Yes);
        t.record(Ballot::Yes);
        assert_eq!(
            t.record(Ballot::No),
            Decision::Pending,
            "two may still confirm"
        );
        assert_eq!(
            t.record(Ballot::Failed),
            Decision::Pending,
            "one may still confirm"
        );
        assert_eq!(t.record(Ballot::Failed), Decision::Lost);
        assert!(!t.gone());
        // Three of five answered that our token is not there: gone, whatever the rest say.
        let mut t = Tally::new(5).holding();
        t.record(Ballot::Failed);
        t.record(Ballot::No);
        assert_eq!(
            t.record(Ballot::No),
            Decision::Pending,
            "a third no may come"
        );
        assert_eq!(t.record(Ballot::No), Decision::Lost);
        assert!(t.gone());
        // Neither a majority of yes nor of no is possible any more: not waited for.
        let mut t = Tally::new(5).holding();
        t.record(Ballot::Yes);
        t.record(Ballot::No);
        t.record(Ballot::Failed);
        assert_eq!(t.record(Ballot::Failed), Decision::Lost);
        assert!(!t.gone());
        // Four nodes: two that lost our token leave it on two at most, not a majority.
        let mut t = Tally::new(4).holding();
        t.record(Ballot::No);
        assert_eq!(t.record(Ballot::No), Decision::Lost);
        assert!(t.gone());
        // Suspects are not presumed failed: a no does not end the round.
        let mut t = Tally::presuming(5, 2).holding();
        t.record(Ballot::Yes);
        assert_eq!(t.record(Ballot::No), Decision::Pending);
    }

    #[test]
    fn one_node_decides_on_its_only_vote() {
        assert_eq!(Tally::new(1).record(Ballot::Yes), Decision::Won);
        assert_eq!(Tally::new(1).record(Ballot::No), Decision::Lost);
        assert_eq!(Tally::new(1).record(Ballot::Failed), Decision::Lost);
    }
}

#[cfg(test)]
mod props {
    use super::*;
    use proptest::prelude::*;

    fn ballot() -> impl Strategy<Value = Ballot> {
        prop_oneof![Just(Ballot::Yes), Just(Ballot::No), Just(Ballot::Failed)]
    }

    proptest! {
        /// Deciding early is sound: whatever the remaining nodes answer, the decision taken
        /// at the first decided prefix is the one the full count gives.
        #[test]
        fn early_decision_agrees_with_the_full_count(
            ballots in (1usize..=9).prop_flat_map(|n| proptest::collection::vec(ballot(), n))
        ) {
            let n = ballots.len();
            let mut tally = Tally::new(n);
            let mut early = None;
            for b in &ballots {
                let d = tally.record(*b);
                if early.is_none() && d != Decision::Pending {
                    early = Some(d);
                }
            }
            let yes = ballots.iter().filter(|b| **b == Ballot::Yes).count();
            let full = if yes >= quorum(n) { Decision::Won } else { Decision::Lost };
            prop_assert_eq!(tally.decision(), full);
            prop_assert_eq!(early, Some(full));
        }

        /// Presuming suspects failed never turns a loss into a win, and a win is always
        /// backed by a quorum of real yes votes.
        #[test]
        fn presumed_failures_never_make_a_win(
            ballots in (1usize..=9).prop_flat_map(|n| proptest::collection::vec((ballot(), any::<bool>()), n))
        ) {
            let n = ballots.len();
            let suspects = ballots.iter().filter(|(_, s)| *s).count();
            let mut tally = Tally::presuming(n, suspects);
            for (b, suspect) in &ballots {
                let d = tally.record_from(*b, *suspect);
                if d == Decision::Won {
                    prop_assert!(tally.yes >= quorum(n));
                    break;
                }
                if d == Decision::Lost {
                    break;
                }
            }
            prop_assert_eq!(tally.presumed_failed + ballots.iter().take(tally.yes + tally.no + tally.failed).filter(|(_, s)| *s).count(), suspects);
        }

        /// On a lock we hold, deciding early is sound for all three outcomes (confirmed by a
        /// majority, gone, unknown): the first decided prefix tells what the full count
        /// tells, and "gone" always rests on more than N − q answers that said so.
        #[test]
        fn a_held_lock_is_judged_early_as_the_full_count_judges_it(
            ballots in (1usize..=9).prop_flat_map(|n| proptest::collection::vec(ballot(), n))
        ) {
            let n = ballots.len();
            let outcome = |t: &Tally| match t.decision() {
                Decision::Won => Some("confirmed"),
                Decision::Lost if t.gone() => Some("gone"),
                Decision::Lost => Some("unknown"),
                Decision::Pending => None,
            };
            let mut tally = Tally::new(n).holding();
            let mut early = None;
            for b in &ballots {
                tally.record(*b);
                if early.is_none() {
                    early = outcome(&tally);
                    if tally.gone() {
                        prop_assert!(tally.no > n - quorum(n));
                    }
                }
            }
            let no = ballots.iter().filter(|b| **b == Ballot::No).count();
            let yes = ballots.iter().filter(|b| **b == Ballot::Yes).count();
            let full = if yes >= quorum(n) {
                "confirmed"
            } else if no > n - quorum(n) {
                "gone"
            } else {
                "unknown"
            };
            prop_assert_eq!(outcome(&tally), Some(full));
            prop_assert_eq!(early, Some(full));
        }

        /// Two disjoint sets of nodes can never both reach a quorum.
        #[test]
        fn two_quorums_always_share_a_node(n in 1usize..=64) {
            prop_assert!(quorum(n) + quorum(n) > n);
        }

        #[test]
        fn validity_is_exact_and_never_overstated(
            ttl_ms in 0u64..10_000_000, elapsed_us in 0u64..20_000_000_000, factor in 0.0f64..1.0
        ) {
            let ttl = Duration::from_millis(ttl_ms);
            let elapsed = Duration::from_micros(elapsed_us);
            let d = drift(ttl, factor).unwrap();
            prop_assert!(d >= DRIFT_FLOOR);
            match validity(ttl, elapsed, d) {
                Some(v) => {
                    prop_assert!(!v.is_zero());
                    prop_assert_eq!(v + elapsed + d, ttl);
                }
                None => prop_assert!(elapsed + d >= ttl),
            }
        }

        #[test]
        fn drift_grows_with_the_ttl(a in 0u64..1_000_000_000, b in 0u64..1_000_000_000, factor in 0.0f64..1.0) {
            let (lo, hi) = (a.min(b), a.max(b));
            prop_assert!(drift(Duration::from_millis(lo), factor) <= drift(Duration::from_millis(hi), factor));
        }
    }
}
