//! The slots of a semaphore (design 2.9, "Slots": why a permit is granted on a slot recorded
//! by a majority, never on a count of claims): the order in which an attempt prefers them,
//! and which slot, if any, a round granted.

use crate::algo::quorum::{Decision, Tally};
use crate::error::{FoundKind, MAX_PERMITS};

/// The fencing token after `seen` (the largest token read on a majority) for a lock
/// (`slot` is `None`): `seen + 1`; for the permit of slot `slot`: the next multiple of
/// `MAX_PERMITS` above `seen`, plus the slot. Two permits valid at once hold different slots,
/// so even when both read the same `seen` (their token calls overlap) their tokens differ;
/// and every token is greater than `seen`, so greater than every token handed out before
/// its permit was acquired, as a lock's. A permit's token modulo `MAX_PERMITS` is its slot.
pub(crate) fn next_token(seen: u64, slot: Option<u32>) -> u64 {
    match slot {
        None => seen.saturating_add(1),
        Some(slot) => {
            let k = u64::from(MAX_PERMITS);
            (seen / k)
                .saturating_add(1)
                .saturating_mul(k)
                .saturating_add(u64::from(slot % MAX_PERMITS))
        }
    }
}

/// An attempt's preference order of the `permits` slots, as the nodes walk it: `start`,
/// `start + step`, `start + 2·step`, ... modulo `permits`, with `step` prime to `permits`
/// so that the walk meets every slot once. Made from two uniform samples, so that two
/// contenders rarely prefer the same slots in the same order.
pub(crate) fn preference(permits: u32, start_sample: u32, step_sample: u32) -> (u32, u32) {
    let permits = permits.max(1);
    let start = start_sample % permits;
    let mut step = 1 + step_sample % permits;
    while gcd(step, permits) != 1 {
        step = step % permits + 1;
    }
    (start, step)
}

fn gcd(mut a: u32, mut b: u32) -> u32 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// The slot recorded by the most nodes among `granted` (one slot per node that recorded
/// one), with how many recorded it; ties go to the smallest slot. `None` when no node
/// recorded any.
pub(crate) fn most_recorded(granted: impl IntoIterator<Item = u32>) -> Option<(u32, usize)> {
    let mut counts: Vec<(u32, usize)> = Vec::new();
    for slot in granted {
        match counts.iter_mut().find(|(s, _)| *s == slot) {
            Some((_, n)) => *n += 1,
            None => counts.push((slot, 1)),
        }
    }
    counts
        .into_iter()
        .max_by(|(s1, n1), (s2, n2)| n1.cmp(n2).then(s2.cmp(s1)))
}

/// The tally of a permit's round as the verdict must see it: only the nodes that recorded
/// the chosen slot (`on_slot` of the `tally.yes` that recorded some slot) said yes; those
/// that recorded another slot count as a no, since that claim does not make the permit.
pub(crate) fn narrowed(tally: &Tally, on_slot: usize) -> Tally {
    let on_slot = on_slot.min(tally.yes);
    let mut narrowed = *tally;
    narrowed.no += tally.yes - on_slot;
    narrowed.yes = on_slot;
    narrowed
}

/// Whether a permit's round is decided, from its tally and the slot each node that recorded
/// one recorded (`granted`): won once a quorum recorded one slot; lost once no slot can be
/// recorded by a quorum any more, even if every node not heard from recorded the best one;
/// pending otherwise. A majority of yes split across slots does not end the round while the
/// nodes still to answer could make a majority on one of them (right after a release that
/// some nodes saw and others not yet, nodes record different slots).
pub(crate) fn decision(tally: &Tally, granted: impl IntoIterator<Item = u32>) -> Decision {
    let on_slot = most_recorded(granted).map_or(0, |(_, n)| n);
    narrowed(tally, on_slot).decision()
}

/// The kind found at a semaphore's or read-write lock's key (`found`: one per node that
/// answered it holds another kind) on more nodes than a majority may do without, so that no
/// claim can be granted while it is there: the round is refused as a kind mismatch. Found on
/// fewer, those nodes only refused (as a node whose slots are all taken does), and the claim
/// can still be granted by the others. The rule a lock's call applies to what it reads after
/// its first refusal (`engine/census.rs`).
pub(crate) fn kind_in_the_way(
    tally: &Tally,
    found: impl IntoIterator<Item = FoundKind>,
) -> Option<FoundKind> {
    let spare = tally.nodes.saturating_sub(tally.quorum());
    let mut seen: Vec<(FoundKind, usize)> = Vec::new();
    for kind in found {
        match seen.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, n)) => *n += 1,
            None => seen.push((kind, 1)),
        }
    }
    seen.into_iter().find(|(_, n)| *n > spare).map(|(k, _)| k)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algo::quorum::{quorum, Ballot, Decision};
    use proptest::prelude::*;

    proptest! {
        /// The walk from any start with the step drawn visits every slot exactly once.
        #[test]
        fn the_preference_order_meets_every_slot_once(
            permits in 1u32..=300,
            start in any::<u32>(),
            step in any::<u32>(),
        ) {
            let (start, step) = preference(permits, start, step);
            prop_assert!(start < permits);
            let mut seen = vec![false; permits as usize];
            for j in 0..u64::from(permits) {
                let slot = (u64::from(start) + j * u64::from(step)) % u64::from(permits);
                prop_assert!(!seen[slot as usize], "slot {slot} twice");
                seen[slot as usize] = true;
            }
            prop_assert_eq!(seen.iter().filter(|s| **s).count(), permits as usize);
        }

        /// A permit is granted only on a slot that a majority recorded: the narrowed tally
        /// wins exactly when the most recorded slot has a quorum.
        #[test]
        fn only_a_slot_on_a_majority_wins(
            slots in proptest::collection::vec(proptest::option::of(0u32..4), 1..=9),
        ) {
            let nodes = slots.len();
            let mut tally = Tally::new(nodes);
            for slot in &slots {
                tally.record(if slot.is_some() { Ballot::Yes } else { Ballot::No });
            }
            let best = most_recorded(slots.iter().flatten().copied());
            let on_slot = best.map_or(0, |(_, n)| n);
            let wins = narrowed(&tally, on_slot).decision() == Decision::Won;
            prop_assert_eq!(wins, on_slot >= quorum(nodes));
            if let Some((slot, n)) = best {
                prop_assert_eq!(slots.iter().filter(|s| **s == Some(slot)).count(), n);
            }
        }
    }

    proptest! {
        /// A permit's round, its answers counted one by one (a slot recorded, or a refusal),
        /// is won exactly when a quorum recorded one slot, lost exactly when no slot can get
        /// a quorum whatever the nodes not heard from answer, and pending otherwise; every
        /// node heard, it is decided.
        #[test]
        fn a_round_ends_only_when_no_slot_or_one_slot_can_have_a_majority(
            answers in proptest::collection::vec(proptest::option::of(0u32..4), 1..=9),
        ) {
            let nodes = answers.len();
            let q = quorum(nodes);
            let mut tally = Tally::new(nodes);
            for heard in 1..=nodes {
                let slot = answers[heard - 1];
                tally.record(if slot.is_some() { Ballot::Yes } else { Ballot::No });
                let so_far = &answers[..heard];
                let on = |s: u32| so_far.iter().filter(|a| **a == Some(s)).count();
                let open = nodes - heard;
                let decided = decision(&tally, so_far.iter().flatten().copied());
                let won = (0..4).any(|s| on(s) >= q);
                let reachable = (0..4).any(|s| on(s) + open >= q);
                let expected = if won {
                    Decision::Won
                } else if reachable {
                    Decision::Pending
                } else {
                    Decision::Lost
                };
                prop_assert_eq!(decided, expected, "{:?} heard of {}", so_far, nodes);
            }
            prop_assert_ne!(
                decision(&tally, answers.iter().flatten().copied()),
                Decision::Pending
            );
        }

        /// A kind is in the way where it is on more nodes than a majority may do without:
        /// then no majority of the others is left to grant anything.
        #[test]
        fn a_kind_is_in_the_way_only_where_no_majority_is_left(
            nodes in 1usize..=9,
            found in proptest::collection::vec(0u32..3, 0..=9),
        ) {
            let found: Vec<FoundKind> = found
                .into_iter()
                .take(nodes)
                .map(|k| match k {
                    0 => FoundKind::Other,
                    1 => FoundKind::ReadWriteLock,
                    n => FoundKind::Semaphore { permits: n },
                })
                .collect();
            let tally = Tally::new(nodes);
            let in_the_way = kind_in_the_way(&tally, found.iter().copied());
            let on = |kind: FoundKind| found.iter().filter(|k| **k == kind).count();
            match in_the_way {
                Some(kind) => prop_assert!(nodes - on(kind) < quorum(nodes)),
                None => prop_assert!(found.iter().all(|k| nodes - on(*k) >= quorum(nodes))),
            }
        }
    }

    #[test]
    fn a_split_majority_waits_for_the_nodes_still_to_answer() {
        // Five nodes, a release seen by some of them: the first three answers name slots
        // 1, 1 and 2. A majority said yes, but on no one slot, and the two nodes still to
        // answer could make slot 1 a majority: the round goes on.
        let mut tally = Tally::new(5);
        for _ in 0..3 {
            tally.record(Ballot::Yes);
        }
        assert_eq!(tally.decision(), Decision::Won, "a majority of yes");
        assert_eq!(decision(&tally, [1, 1, 2]), Decision::Pending);
        tally.record(Ballot::Yes);
        assert_eq!(decision(&tally, [1, 1, 2, 1]), Decision::Won);
        assert_eq!(decision(&tally, [1, 1, 2, 2]), Decision::Pending);
        tally.record(Ballot::No);
        assert_eq!(decision(&tally, [1, 1, 2, 2]), Decision::Lost);
    }

    #[test]
    fn one_node_of_another_kind_is_a_refusal() {
        let five = Tally::new(5);
        assert_eq!(kind_in_the_way(&five, [FoundKind::Other]), None);
        let two = [FoundKind::Other, FoundKind::ReadWriteLock];
        assert_eq!(kind_in_the_way(&five, two), None);
        let three = [FoundKind::ReadWriteLock; 3];
        assert_eq!(
            kind_in_the_way(&five, three),
            Some(FoundKind::ReadWriteLock)
        );
        // Four nodes need three: two of another kind leave no majority.
        let four = Tally::new(4);
        assert_eq!(
            kind_in_the_way(&four, [FoundKind::Other; 2]),
            Some(FoundKind::Other)
        );
    }

    proptest! {
        /// A token is above what was read; concurrent permits (different slots, the same
        /// read) get different tokens; a permit's token names its slot.
        #[test]
        fn permit_tokens_are_above_the_read_and_unique_per_slot(
            seen in 0u64..(1 << 52),
            a in 0u32..MAX_PERMITS,
            b in 0u32..MAX_PERMITS,
        ) {
            let (ta, tb) = (next_token(seen, Some(a)), next_token(seen, Some(b)));
            prop_assert!(ta > seen && tb > seen);
            prop_assert_eq!(ta == tb, a == b);
            prop_assert_eq!(ta % u64::from(MAX_PERMITS), u64::from(a));
            prop_assert_eq!(next_token(seen, None), seen + 1);
            // The next permit of any slot, having read `ta`, is above it.
            prop_assert!(next_token(ta, Some(b)) > ta);
        }
    }

    #[test]
    fn split_claims_win_nothing() {
        // Five nodes, three recorded some slot, but two slots: no slot has a majority.
        let mut tally = Tally::new(5);
        for _ in 0..3 {
            tally.record(Ballot::Yes);
        }
        assert_eq!(tally.decision(), Decision::Won);
        let best = most_recorded([0, 1, 0]);
        assert_eq!(best, Some((0, 2)));
        let narrowed = narrowed(&tally, 2);
        assert_eq!((narrowed.yes, narrowed.no), (2, 1));
        assert_ne!(narrowed.decision(), Decision::Won);
    }

    #[test]
    fn one_permit_has_one_slot() {
        assert_eq!(preference(1, 7, 9), (0, 1));
        assert_eq!(preference(2, 3, 0), (1, 1));
    }
}
