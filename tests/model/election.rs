//! The election (design 2.8, `engine/election.rs`; docs/verification.md, "The election"): a
//! campaign is a lock acquisition whose fencing token is the term. The model's processes
//! campaign where the run says so (`Bounds::election`): a holder asks its token before
//! anything else (PEEK, then FENCE, decided by the crate's `confirmation` and `next_token`,
//! as every token is), and releases the lock if the token cannot be had, to campaign again;
//! a holder that has its term leads until it resigns (releases) or its validity ends. The
//! identity record (IDENTIFY, on a majority of the nodes that hold the lock) is left out: it
//! informs observers, and no term depends on it.
//!
//! Always: **terms grow with the leaders**, each leader's term greater than every earlier
//! leader's, in the order in which they came to lead. Sometimes: a leader after a restart.

use super::explore::{System, LEADER_AFTER_RESTART, TERMS_GROW};
use super::system::{seen, Bounds, Fencing, Phase, Rules, State};
use super::{assert_caught, assert_holds, system, Search, FENCING};

impl<const N: usize, const C: usize> State<N, C> {
    /// After a step of an election run, from `last`: the campaigns that got their term in
    /// it are leaders now, each in its turn. Every holder campaigns, so the largest term of
    /// the earlier leaders is the largest token handed out before the step.
    pub fn note_leaders(&mut self, last: &State<N, C>) {
        let mut largest = last.fenced.map(|(_, term)| term);
        for (client, before) in self.clients.iter().zip(&last.clients) {
            let handed = |phase: &Phase<N>| match phase {
                Phase::Held {
                    fencing: Fencing::Handed(term),
                    ..
                } => Some(*term),
                _ => None,
            };
            let (Some(term), None) = (handed(&client.phase), handed(&before.phase)) else {
                continue;
            };
            if let Phase::Held { token, .. } = client.phase {
                if self.fair_token.is_some_and(|from| token >= from) {
                    self.seen |= seen::FAIR_LEADER;
                }
            }
            if largest.is_some_and(|earlier| term <= earlier) {
                self.seen |= seen::TERM_NOT_GREATER;
            }
            if self.seen & seen::RESTART != 0 {
                self.seen |= seen::LEADER_AFTER_RESTART;
            }
            largest = largest.max(Some(term));
        }
    }
}

/// Two processes campaign, 2 attempts, while node 0 restarts empty in tick 0: leaders
/// before the restart and after it, in its quarantine, over 2 ticks (the re-seed, at tick 3,
/// is in the larger run).
const ELECTION: Bounds = Bounds {
    election: true,
    ticks: 2,
    ..FENCING
};

fn campaigns(rules: Rules) -> System {
    system(rules, ELECTION)
}

#[test]
fn terms_grow_with_the_leaders_across_a_restart() {
    assert_holds("election", campaigns(Rules::CRATE), &[LEADER_AFTER_RESTART]);
}

/// The same over 3 ticks, the restarted node re-seeded after its quarantine: `cargo test
/// --features model --test model -- --ignored --nocapture larger_election` (docs/verification.md).
#[test]
#[ignore]
fn larger_election_terms_grow_across_a_reseed() {
    let bounds = Bounds {
        ticks: 3,
        ..ELECTION
    };
    assert_holds(
        "election, larger",
        system(Rules::CRATE, bounds),
        &[LEADER_AFTER_RESTART, super::explore::RESEED],
    );
}

/// The term read from one node (PEEK decided on one yes): a leader whose node had not
/// recorded the last term takes it again; no fault is needed (one tick, no restart).
#[test]
fn a_term_read_from_a_minority_repeats() {
    let rules = Rules {
        peek_needed: Some(1),
        ..Rules::CRATE
    };
    let bounds = Bounds {
        ticks: 0,
        restarts: [0; 3],
        ..ELECTION
    };
    let found = (TERMS_GROW, Search::Shortest);
    assert_caught("term from a minority", system(rules, bounds), found, 17);
}

/// Terms rely on the re-seed (design 2.8): read without its floor, a term recorded on a
/// node that restarted empty and on one other is read again from the re-seeded node and the
/// third, and repeats (depth first, over the larger run's 3 ticks).
#[test]
fn terms_read_without_the_reseed_floor_repeat() {
    let rules = Rules {
        floor: false,
        ..Rules::CRATE
    };
    let bounds = Bounds {
        ticks: 3,
        ..ELECTION
    };
    let found = (TERMS_GROW, Search::Deep);
    assert_caught("election, no floor", system(rules, bounds), found, 23);
}
