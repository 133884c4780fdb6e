//! The floor a node is re-seeded with, from a survey of the other nodes (design 2.6a).

/// One node's answer to a survey (`engine/seeder.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(unreachable_pub)] // Re-exported to the model checker (`model.rs`).
pub struct Surveyed {
    /// Whether its marker is intact (written by the server now running).
    pub intact: bool,
    /// Its `quorumlock:hwm`, 0 when missing.
    pub hwm: u64,
    /// Its clock (`TIME`) in microseconds since the Unix epoch.
    pub clock_us: u64,
}

/// The floor to re-seed a node with, from the answers of a survey of `nodes` nodes (the
/// node being re-seeded included, as not intact).
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(unreachable_pub)] // Re-exported to the model checker (`model.rs`).
pub enum Floor {
    /// A majority of intact nodes answered: above every counter any of them recorded.
    Majority(u64),
    /// So many nodes may have lost data that no intact majority can exist: above every
    /// counter the answering nodes hold and above their clocks, in microseconds.
    Clock(u64),
    /// Neither yet: too few nodes answered. Try again later.
    Wait,
}

/// Decides the floor of a re-seed (design 2.6a).
///
/// Every token handed out was recorded on a majority; if a majority of intact nodes
/// answered, one of them holds it (or a floor above it), and the largest `hwm` of the
/// answers is at least that token. If the nodes that answered and are not intact are so many
/// that the intact ones cannot be a majority even counting every node that did not answer,
/// the counters of a majority may be gone: then the floor is also at least the largest clock
/// among the answers. Tokens grow by one per round trip at most, and a node's first floor
/// is its clock, so a later clock is above them while the nodes' clocks agree to within the
/// time between two such re-seeds (design 6, assumption 6).
pub(crate) fn floor(nodes: usize, answers: &[Surveyed]) -> Floor {
    let quorum = nodes / 2 + 1;
    let intact = answers.iter().filter(|a| a.intact).count();
    let lost = answers.len() - intact;
    let hwm = answers.iter().map(|a| a.hwm).max().unwrap_or(0);
    if intact >= quorum {
        Floor::Majority(hwm)
    } else if nodes - lost < quorum {
        let clock = answers.iter().map(|a| a.clock_us).max().unwrap_or(0);
        Floor::Clock(hwm.max(clock))
    } else {
        Floor::Wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(intact: bool, hwm: u64, clock_us: u64) -> Surveyed {
        Surveyed {
            intact,
            hwm,
            clock_us,
        }
    }

    #[test]
    fn a_majority_of_intact_nodes_gives_the_floor_without_any_clock() {
        // 3 nodes: the node being seeded (lost) and two intact.
        let answers = [answer(false, 0, 9), answer(true, 5, 9), answer(true, 3, 9)];
        assert_eq!(floor(3, &answers), Floor::Majority(5));
        // A stale hwm on a lost node is still a lower bound.
        let answers = [answer(false, 8, 9), answer(true, 5, 9), answer(true, 3, 9)];
        assert_eq!(floor(3, &answers), Floor::Majority(8));
    }

    #[test]
    fn too_few_answers_wait_and_a_lost_majority_falls_back_on_the_clocks() {
        // 3 nodes: one lost, one intact, one silent: the silent one may be intact.
        assert_eq!(
            floor(3, &[answer(false, 0, 9), answer(true, 5, 9)]),
            Floor::Wait
        );
        // Two lost of three: no intact majority can exist.
        assert_eq!(
            floor(3, &[answer(false, 0, 100), answer(false, 2, 120)]),
            Floor::Clock(120)
        );
        // The counters win when they are above the clocks.
        assert_eq!(
            floor(3, &[answer(false, 500, 100), answer(true, 2, 120)]),
            Floor::Wait
        );
        assert_eq!(
            floor(
                3,
                &[
                    answer(false, 500, 100),
                    answer(false, 2, 120),
                    answer(true, 1, 1)
                ]
            ),
            Floor::Clock(500)
        );
        // 5 nodes: 2 lost and 3 silent: wait; 3 lost: clocks.
        let two = [answer(false, 0, 9), answer(false, 0, 9)];
        assert_eq!(floor(5, &two), Floor::Wait);
        let three = [
            answer(false, 0, 9),
            answer(false, 0, 9),
            answer(false, 0, 7),
        ];
        assert_eq!(floor(5, &three), Floor::Clock(9));
    }
}
