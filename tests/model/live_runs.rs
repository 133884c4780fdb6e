//! The liveness runs (`live.rs`, docs/verification.md "Liveness"): once faults stop, the crate's
//! rules grant the lock on every fair path; the quarantine kept in each process's memory
//! does not, where every process lives shorter than the quarantine.

use super::explore::{EVENTUALLY_GRANT, GRANT, GRANT_AFTER_MAJORITY_LOST, LIVE_AFTER_FAULTS};
use super::system::{Bounds, Quarantine, Rules};
use super::{
    assert_caught, assert_holds, assert_holds_within, restart, system, Search, LARGER_CAP,
    SHORT_LIVED,
};

/// Short-lived processes (each lives two ticks, 3,600 ms of its clock, less than the
/// quarantine of 4,000 ms) after a majority of the nodes was flushed in tick 0; faults stop
/// at tick 1.
const LIVE_SHORT_LIVED: Bounds = Bounds {
    ticks: 5,
    processes: 1,
    fair_from: Some(1),
    writes: false,
    ..SHORT_LIVED
};

#[test]
fn once_faults_stop_short_lived_processes_get_the_lock() {
    assert_holds(
        "live, short-lived",
        system(Rules::CRATE, LIVE_SHORT_LIVED),
        &[GRANT_AFTER_MAJORITY_LOST],
    );
}

/// The quarantine kept in each process's memory (the rule before the record): a process
/// that lives shorter than the quarantine never counts the flushed nodes, and no process
/// gets the lock however long the run is fair.
#[test]
fn a_quarantine_counted_per_process_starves_short_lived_processes() {
    let rules = Rules {
        quarantine: Quarantine::PerProcess,
        ..Rules::CRATE
    };
    let path = assert_caught(
        "live, per process",
        system(rules, LIVE_SHORT_LIVED),
        (EVENTUALLY_GRANT, Search::Shortest),
        26,
    );
    // Starved for the reason the variant is there for: a majority of the nodes lost data.
    let last = path.last_state();
    assert!(
        last.majority_lost_at.is_some() && last.t == LIVE_SHORT_LIVED.ticks,
        "a counterexample without the flush of a majority, or short of the last tick"
    );
}

/// Two processes contend; in tick 0, node 0 restarts empty, replies come late, and a
/// process pauses for three ticks; faults stop at tick 1.
const LIVE_RESTART: Bounds = Bounds {
    ticks: 5,
    restarts_by: 0,
    late_replies: true,
    pauses: 1,
    fair_from: Some(1),
    writes: false,
    ..restart(false)
};

#[test]
fn once_faults_stop_a_process_that_keeps_trying_gets_the_lock() {
    assert_holds(
        "live, restart",
        system(Rules::CRATE, LIVE_RESTART),
        &[GRANT, LIVE_AFTER_FAULTS],
    );
}

/// The election's liveness, not in the test command (docs/verification.md: a million states and
/// more each): `cargo test --features model --test model -- --ignored --nocapture
/// larger_live_election`. Once faults stop, a campaign leads (a grant, and its term):
/// after the restart, the pause and late replies of the run above, its restarted node's
/// counters untrusted until it is re-seeded.
#[test]
#[ignore]
fn larger_live_election_a_campaign_leads_after_a_restart() {
    let bounds = Bounds {
        election: true,
        ..LIVE_RESTART
    };
    let witnessed = [LIVE_AFTER_FAULTS, super::explore::LEADER_AFTER_RESTART];
    let sys = system(Rules::CRATE, bounds);
    assert_holds_within("live election, restart", sys, &witnessed, LARGER_CAP);
}

/// The same with short-lived processes after a majority of the nodes was flushed: no term
/// can be had until the flushed nodes are re-seeded (a clock floor), which the fair
/// seeder does once their record is over.
#[test]
#[ignore]
fn larger_live_election_short_lived_campaigns_lead_after_a_majority_was_flushed() {
    let bounds = Bounds {
        election: true,
        ..LIVE_SHORT_LIVED
    };
    let witnessed = [super::explore::TOKEN_AFTER_MAJORITY_LOST];
    let sys = system(Rules::CRATE, bounds);
    assert_holds_within("live election, short-lived", sys, &witnessed, LARGER_CAP);
}
