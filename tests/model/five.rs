//! The lock at the issue's size: five nodes and three client slots (docs/verification.md, "Runs").
//! The same model as the three-node runs, its node count and client slots the const
//! parameters of [`System`]; the runs are larger, not in the test command (`--ignored`), and
//! built with the package optimised:
//!
//! ```text
//! cargo test --all-features --config 'profile.dev.package.quorumlock.opt-level=3' \
//!     --test model -- --ignored --nocapture five::
//! ```

use super::explore::{self, System};
use super::system::{Bounds, Rules};
use super::{assert_holds_within, LARGER_CAP};

/// Nodes.
const FIVE: usize = 5;
/// Client slots.
const THREE: usize = 3;

/// Three processes contend on five nodes for two ticks (0 and 1): replies at once or a
/// timeout, no fault, no pause.
const LOCKS: Bounds<FIVE> = Bounds {
    ticks: 1,
    attempts: 3,
    restarts: [0; FIVE],
    flushes: [0; FIVE],
    restarts_by: 0,
    flushes_by: 0,
    pauses: 0,
    pause_ticks: 0,
    processes: 0,
    lifetime: None,
    persistent: [false; FIVE],
    tokens: false,
    extensions: 0,
    election: false,
    late_replies: false,
    phases: &[],
    restart_first: false,
    fair_from: None,
    writes: false,
};

/// Holders ask their fencing tokens (two attempts).
const TOKENS: Bounds<FIVE> = Bounds {
    attempts: 2,
    tokens: true,
    ..LOCKS
};

fn five(bounds: Bounds<FIVE>) -> System<FIVE, THREE> {
    System {
        rules: Rules::CRATE,
        bounds,
    }
}

/// One holder at a time.
#[test]
#[ignore]
fn larger_five_nodes_three_clients() {
    assert_holds_within(
        "five nodes, three clients",
        five(LOCKS),
        &[explore::GRANT],
        LARGER_CAP,
    );
}

/// Fencing tokens grow with the grants.
#[test]
#[ignore]
fn larger_five_nodes_three_clients_tokens() {
    assert_holds_within(
        "five nodes, three clients, tokens",
        five(TOKENS),
        &[explore::GRANT],
        LARGER_CAP,
    );
}

/// Node 0 (a minority) restarts empty in tick 0: its quarantine, its re-seed, and tokens
/// after.
#[test]
#[ignore]
fn larger_five_nodes_three_clients_a_restart() {
    let bounds = Bounds {
        restarts: [1, 0, 0, 0, 0],
        ..TOKENS
    };
    assert_holds_within(
        "five nodes, three clients, a restart",
        five(bounds),
        &[explore::GRANT, explore::TOKEN_AFTER_RESTART],
        LARGER_CAP,
    );
}

/// Node 0 (a minority) is flushed in tick 0 while processes hold and take the lock.
#[test]
#[ignore]
fn larger_five_nodes_three_clients_a_flush() {
    let bounds = Bounds {
        flushes: [1, 0, 0, 0, 0],
        attempts: 2,
        ..LOCKS
    };
    assert_holds_within(
        "five nodes, three clients, a flush",
        five(bounds),
        &[explore::GRANT],
        LARGER_CAP,
    );
}

/// Nodes 2, 3 and 4 (a majority) are flushed in tick 0: their quarantine, recorded on them,
/// ends for processes that live two ticks, shorter than it.
#[test]
#[ignore]
fn larger_five_nodes_three_clients_a_majority_flushed() {
    let bounds = Bounds {
        ticks: 4,
        attempts: 2,
        flushes: [0, 0, 1, 1, 1],
        processes: 2,
        lifetime: Some(2),
        ..LOCKS
    };
    assert_holds_within(
        "five nodes, three clients, a majority flushed",
        five(bounds),
        &[explore::GRANT_AFTER_MAJORITY_LOST],
        LARGER_CAP,
    );
}

/// Nodes 2, 3 and 4 (a majority) restart empty in tick 0: their quarantine, recorded on
/// them, ends for processes that live two ticks. (With fencing tokens asked, more than 60
/// million states: not run to the end.)
#[test]
#[ignore]
fn larger_five_nodes_three_clients_a_majority_restarted() {
    let bounds = Bounds {
        ticks: 4,
        attempts: 2,
        restarts: [0, 0, 1, 1, 1],
        processes: 2,
        lifetime: Some(2),
        ..LOCKS
    };
    assert_holds_within(
        "five nodes, three clients, a majority restarted",
        five(bounds),
        &[explore::GRANT_AFTER_MAJORITY_LOST],
        LARGER_CAP,
    );
}

/// Ticks 0 to 3: a process pauses for longer than the ttl (the Kleppmann pause). (With
/// replies a tick late too, more than 3 million unique states in four minutes: stopped.)
#[test]
#[ignore]
fn larger_five_nodes_three_clients_a_pause() {
    let bounds = Bounds {
        ticks: 3,
        attempts: 2,
        pauses: 1,
        pause_ticks: 3,
        ..LOCKS
    };
    assert_holds_within(
        "five nodes, three clients, a pause",
        five(bounds),
        &[explore::GRANT],
        LARGER_CAP,
    );
}

/// Ticks 0 to 2, three attempts.
#[test]
#[ignore]
fn larger_five_nodes_three_clients_three_ticks() {
    let bounds = Bounds { ticks: 2, ..LOCKS };
    assert_holds_within(
        "five nodes, three clients, ticks 0 to 2",
        five(bounds),
        &[explore::GRANT],
        LARGER_CAP,
    );
}
