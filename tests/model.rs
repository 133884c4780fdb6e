//! The protocol model-checked on the crate's own decisions (docs/verification.md).
//!
//! Three nodes and two client slots (const parameters: `five.rs` runs five nodes and three
//! slots), in ticks of true time, with drift, late replies,
//! restarts, FLUSHALL, pauses and processes that come and go; every step of a client calls
//! the crate's decision code through `quorumlock::__model` (feature `model`). Each run
//! explores every interleaving within its bounds. The crate's rules must keep one holder at a
//! time and fencing tokens growing with the grants, and witness what the run is for (so that
//! it is not vacuous); each known-bad rule must be caught, with its counterexample printed.
//! A holder may check its lock and write to a storage with its fencing token, a pause
//! between the two (Kleppmann's, `storage.rs`): the storage must never go back in the
//! order of the grants, and one that ignores the token must be caught.
//! Holders may extend their locks, and RESTORE sets again the keys a node lost, once the
//! extension stands (`client.rs`): one holder at a time must hold across extensions, and an
//! extension that counts a missing key as a yes, or runs from its round's end, must be caught.
//! Once faults stop, a process that keeps trying must get the lock (`live.rs`, run by
//! `live_runs.rs`); campaigns of the election must take terms that grow with the leaders
//! (`election.rs`).
//!
//! The semaphore and the read-write lock are a model of their own on the same clocks
//! (`claims.rs`, `claims_steps.rs`, `claims_explore.rs`, run by `claim_runs.rs`), whose node step is checked against the crate's Lua
//! on a real server (`refinement.rs`). The lock's node steps are checked against the crate's
//! Lua likewise (`lock_refinement.rs`).
//!
//! `cargo test --features model --test model -- --nocapture` prints the state counts.

#[path = "model/claim_runs.rs"]
mod claim_runs;
#[path = "model/claims.rs"]
mod claims;
#[path = "model/claims_explore.rs"]
mod claims_explore;
#[path = "model/claims_steps.rs"]
mod claims_steps;
#[path = "model/client.rs"]
mod client;
#[path = "model/election.rs"]
mod election;
#[path = "model/explore.rs"]
mod explore;
#[path = "model/five.rs"]
mod five;
#[path = "model/live.rs"]
mod live;
#[path = "model/live_runs.rs"]
mod live_runs;
#[path = "model/lock_refinement.rs"]
mod lock_refinement;
#[path = "model/loss.rs"]
mod loss;
#[path = "model/node.rs"]
mod node;
#[path = "model/refinement.rs"]
mod refinement;
#[path = "model/storage.rs"]
mod storage;
#[path = "model/system.rs"]
mod system;
#[path = "model/trace.rs"]
mod trace;

use std::collections::{BTreeSet, HashMap};
use std::time::Instant;

use explore::{Action, System, ONE_HOLDER, TOKENS_GROW};
use stateright::{Checker, HasDiscoveries, Model, Path};
use system::{seen, Bounds, Quarantine, RecordStart, Rules, State};

/// No run may explore more states than this: a guard against a change that makes the model
/// explode (the run then fails as incomplete rather than taking CI's time).
const CAP: usize = 4_000_000;

/// The same guard for the larger runs, which are not in the test command.
const LARGER_CAP: usize = 60_000_000;

/// Locks alone: two processes contend, replies come late, one process pauses for longer
/// than the ttl.
const LOCKS: Bounds = Bounds {
    ticks: 3,
    attempts: 2,
    restarts: [0; 3],
    flushes: [0; 3],
    restarts_by: 0,
    flushes_by: 0,
    pauses: 1,
    pause_ticks: 3,
    processes: 0,
    lifetime: None,
    persistent: [false; 3],
    tokens: false,
    extensions: 0,
    election: false,
    late_replies: true,
    phases: &[],
    restart_first: false,
    fair_from: None,
    writes: false,
};

/// Two processes contend, without a pause: where a rule of the verdict is replaced (every
/// state of it is one of [`LOCKS`], where the crate's rules hold).
const CONTEND: Bounds = Bounds { pauses: 0, ..LOCKS };

/// A node restarts (empty, or with its data) while locks are held and taken.
const fn restart(persistent: bool) -> Bounds {
    Bounds {
        restarts: [1, 0, 0],
        restarts_by: 3,
        persistent: [persistent; 3],
        pauses: 0,
        late_replies: false,
        ..LOCKS
    }
}

/// Fencing tokens across a node that restarts empty in the first tick, its quarantine and
/// its re-seed.
const FENCING: Bounds = Bounds {
    tokens: true,
    restarts_by: 0,
    ..restart(false)
};

/// Short-lived processes (each lives two ticks, less than a quarantine) after a majority
/// of the nodes was flushed.
const SHORT_LIVED: Bounds = Bounds {
    ticks: 4,
    flushes: [0, 1, 1],
    processes: 3,
    lifetime: Some(2),
    pauses: 0,
    late_replies: false,
    ..LOCKS
};

/// One node is flushed while processes hold and take locks, and processes come and go.
const FLUSH: Bounds = Bounds {
    flushes: [1, 0, 0],
    processes: 2,
    lifetime: None,
    ..SHORT_LIVED
};

/// A young node flushed: node 0 restarts empty before the first step, its clock at a whole
/// second or just before one (the lowest and the highest `uptime_in_seconds` the
/// truncation allows at every tick: docs/verification.md), and is flushed once, at any tick up to
/// the one where the figure's boundary is; processes come and go.
const YOUNG_FLUSH: Bounds = Bounds {
    ticks: 3,
    restarts: [1, 0, 0],
    restart_first: true,
    flushes_by: 2,
    phases: &[0, 999],
    ..FLUSH
};

/// The pause of Kleppmann's article: two processes contend, a holder asks its fencing
/// token, checks its lock and writes to the storage with the token, and one process may
/// pause for longer than the ttl (between its check and its write, among other places).
const PAUSE: Bounds = Bounds {
    ticks: 2,
    pause_ticks: 2,
    tokens: true,
    writes: true,
    late_replies: false,
    ..LOCKS
};

/// A holder extends its lock (`engine/extension.rs`): two processes contend over two ticks,
/// one extension, and one process may pause for two ticks (during its extension's round,
/// among other places).
const EXTEND: Bounds = Bounds {
    ticks: 2,
    extensions: 1,
    late_replies: false,
    pause_ticks: 2,
    ..LOCKS
};

/// Node 0 restarts empty before the first step, and holders extend their locks, two
/// extensions in all: a holder whose lock was taken without the node extends it once the
/// node's votes count again, and restores the key there.
const EXTEND_RESTART: Bounds = Bounds {
    restart_first: true,
    extensions: 2,
    ..restart(false)
};

/// Two processes contend over two ticks, and a holder extends its lock once: where a rule of
/// the extension is replaced.
const EXTEND_CONTEND: Bounds = Bounds {
    ticks: 2,
    extensions: 1,
    late_replies: false,
    ..CONTEND
};

/// How a known-bad rule is looked for: breadth first for the shortest counterexample, or,
/// where that is deep in a large space, depth first (one thread, so the same one each time).
#[derive(Clone, Copy)]
enum Search {
    Shortest,
    Deep,
}

/// What one run explored.
struct Run<const N: usize = { system::NODES }, const C: usize = { system::CLIENTS }> {
    label: String,
    discoveries: Discoveries<N, C>,
    done: bool,
    states: usize,
}

impl<const N: usize, const C: usize> Run<N, C> {
    fn discovery(&self, property: &str) -> Option<&Path<State<N, C>, Action>> {
        self.discoveries.get(property)
    }
}

/// What a run is after.
#[derive(Clone, Copy)]
enum Goal {
    /// Every state within the bounds.
    All,
    /// A counterexample to this property, searched for so.
    Fail(&'static str, Search),
}

fn explore<const N: usize, const C: usize>(
    label: &str,
    sys: System<N, C>,
    goal: Goal,
    cap: usize,
) -> Run<N, C> {
    let started = Instant::now();
    let label = format!("{label} ({})", trace::label(&sys));
    let builder = sys.checker().target_state_count(cap);
    let until = |property| HasDiscoveries::AnyOf(BTreeSet::from([property]));
    let (discoveries, done, states, unique, depth) = match goal {
        Goal::All => summary(builder.symmetry().threads(2).spawn_dfs().join()),
        Goal::Fail(property, Search::Shortest) => {
            summary(builder.finish_when(until(property)).spawn_bfs().join())
        }
        Goal::Fail(property, Search::Deep) => summary(
            builder
                .symmetry()
                .finish_when(until(property))
                .spawn_dfs()
                .join(),
        ),
    };
    println!(
        "{label}: {states} states ({unique} unique), depth {depth}, {:.1?}",
        started.elapsed()
    );
    Run {
        label,
        discoveries,
        done,
        states,
    }
}

type Discoveries<const N: usize, const C: usize> = HashMap<&'static str, Path<State<N, C>, Action>>;

/// What a checker found, whether it explored everything, and how much it explored.
fn summary<const N: usize, const C: usize>(
    checker: impl Checker<System<N, C>>,
) -> (Discoveries<N, C>, bool, usize, usize, usize) {
    let (states, unique, depth) = (
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth(),
    );
    (
        checker.discoveries(),
        checker.is_done(),
        states,
        unique,
        depth,
    )
}

/// Explores every state of `sys` within its bounds: no property fails, and each of
/// `witnessed` is seen.
fn assert_holds(label: &str, sys: System, witnessed: &[&'static str]) -> Run {
    assert_holds_within(label, sys, witnessed, CAP)
}

/// [`assert_holds`] with room for `cap` states.
fn assert_holds_within<const N: usize, const C: usize>(
    label: &str,
    sys: System<N, C>,
    witnessed: &[&'static str],
    cap: usize,
) -> Run<N, C> {
    let run = explore(label, sys, Goal::All, cap);
    let properties = [
        ONE_HOLDER,
        TOKENS_GROW,
        explore::STORAGE_IN_ORDER,
        explore::TERMS_GROW,
        explore::EVENTUALLY_GRANT,
    ];
    for property in properties {
        if let Some(path) = run.discovery(property) {
            panic!(
                "{}: \"{property}\" fails:\n{}",
                run.label,
                trace::show(path)
            );
        }
    }
    assert!(
        run.done && run.states < cap,
        "{}: not explored to the end within {cap} states",
        run.label
    );
    for property in witnessed {
        assert!(
            run.discovery(property).is_some(),
            "{}: \"{property}\" never happens: the run checks less than it claims",
            run.label
        );
    }
    run
}

/// The checker finds that `property` fails under `sys`, searching as `search` says; the
/// counterexample, printed, takes `steps` steps, and is returned.
fn assert_caught<const N: usize, const C: usize>(
    label: &str,
    sys: System<N, C>,
    (property, search): (&'static str, Search),
    steps: usize,
) -> Path<State<N, C>, Action> {
    let run = explore(label, sys, Goal::Fail(property, search), CAP);
    let path = run.discovery(property).cloned().unwrap_or_else(|| {
        panic!(
            "{}: \"{property}\" never fails: the checker misses this known-bad rule",
            run.label
        )
    });
    let shown = trace::show(&path);
    println!("{}: \"{property}\" fails:\n{shown}", run.label);
    assert_eq!(
        path.clone().into_actions().len(),
        steps,
        "{}: a counterexample of another length than docs/verification.md gives:\n{shown}",
        run.label
    );
    path
}

/// The counterexample `path` fails for the reason its known-bad rule is there for: it
/// reaches what the [`seen`] bit `why` notes (a step that only the replaced rule allows).
fn assert_because<const N: usize, const C: usize>(
    path: &Path<State<N, C>, Action>,
    why: u32,
    what: &str,
) {
    assert!(
        path.last_state().seen & why != 0,
        "a counterexample without {what}:\n{}",
        trace::show(path)
    );
}

fn system(rules: Rules, bounds: Bounds) -> System {
    System { rules, bounds }
}

#[test]
fn one_holder_at_a_time_with_drift_late_replies_and_a_pause() {
    let sys = system(Rules::CRATE, LOCKS);
    assert_holds("locks", sys, &[explore::GRANT]);
}

#[test]
fn a_node_restarted_empty_votes_again_only_after_its_quarantine() {
    assert_holds(
        "restart, volatile",
        system(Rules::CRATE, restart(false)),
        &[explore::GRANT],
    );
}

#[test]
fn a_node_restarted_with_its_data_is_quarantined_too() {
    assert_holds(
        "restart, persistent",
        system(Rules::CRATE, restart(true)),
        &[explore::GRANT],
    );
}

#[test]
fn fencing_tokens_grow_across_a_restart_and_a_reseed() {
    assert_holds(
        "fencing",
        system(Rules::CRATE, FENCING),
        &[explore::TOKEN_AFTER_RESTART, explore::RESEED],
    );
}

#[test]
fn short_lived_processes_get_the_lock_after_a_majority_was_flushed() {
    assert_holds(
        "short-lived",
        system(Rules::CRATE, SHORT_LIVED),
        &[explore::GRANT_AFTER_MAJORITY_LOST],
    );
}

#[test]
fn without_the_drift_allowance_two_processes_hold_at_once() {
    let rules = Rules {
        drift: false,
        ..Rules::CRATE
    };
    assert_caught(
        "no drift",
        system(rules, CONTEND),
        (ONE_HOLDER, Search::Shortest),
        8,
    );
}

#[test]
fn without_the_elapsed_time_two_processes_hold_at_once() {
    let rules = Rules {
        elapsed: false,
        ..Rules::CRATE
    };
    assert_caught(
        "no elapsed",
        system(rules, CONTEND),
        (ONE_HOLDER, Search::Shortest),
        8,
    );
}

#[test]
fn with_a_quorum_of_half_the_nodes_two_processes_hold_at_once() {
    let rules = Rules {
        needed: Some(system::NODES / 2),
        ..Rules::CRATE
    };
    assert_caught(
        "quorum N/2",
        system(rules, CONTEND),
        (ONE_HOLDER, Search::Shortest),
        5,
    );
}

#[test]
fn without_quarantine_a_restarted_node_lets_two_processes_hold() {
    let rules = Rules {
        quarantine: Quarantine::Off,
        ..Rules::CRATE
    };
    assert_caught(
        "no quarantine",
        system(rules, restart(false)),
        (ONE_HOLDER, Search::Shortest),
        7,
    );
}

#[test]
fn one_holder_at_a_time_with_an_extension_and_a_pause() {
    assert_holds(
        "extend",
        system(Rules::CRATE, EXTEND),
        &[explore::GRANT, explore::EXTENDED],
    );
}

#[test]
fn a_key_lost_in_a_restart_is_restored_once_an_extension_stands() {
    assert_holds(
        "extend, restart",
        system(Rules::CRATE, EXTEND_RESTART),
        &[explore::EXTENDED, explore::RESTORED_AFTER_RESTART],
    );
}

/// The key missing on a node is not the lock held there: an extension that counted the
/// answer 2 as a yes keeps a lock whose keys expired on a majority.
#[test]
fn an_extension_that_counts_a_missing_key_as_a_yes_lets_two_processes_hold() {
    let rules = Rules {
        missing_refuses: false,
        ..Rules::CRATE
    };
    let path = assert_caught(
        "missing extends",
        system(rules, EXTEND_CONTEND),
        (ONE_HOLDER, Search::Shortest),
        11,
    );
    assert_because(&path, seen::MISSING_COUNTED, "an answer 2 counted as a yes");
}

/// An extension's validity runs from its round's start, as an acquisition's: measured from
/// the round's end, it outlives the keys the round's first EXTENDs reset.
#[test]
fn an_extension_measured_from_its_rounds_end_lets_two_processes_hold() {
    let rules = Rules {
        extension_from_start: false,
        ..Rules::CRATE
    };
    assert_caught(
        "extension from the end",
        system(rules, EXTEND_CONTEND),
        (ONE_HOLDER, Search::Shortest),
        11,
    );
}

/// What the model found (docs/verification.md), fixed: a process that was connected to a node
/// when it was flushed counts none of its votes after the flush, since each SET NX reads
/// back the node's marker and record (`lineage::still_checked`); it checks the node again,
/// and its votes count after the quarantine, as every other process's do.
#[test]
fn a_flush_under_a_connected_process_is_seen_by_its_next_vote() {
    assert_holds(
        "flush",
        system(Rules::CRATE, FLUSH),
        &[
            explore::GRANT,
            explore::FLUSH_SEEN,
            explore::GRANT_AFTER_FLUSH_SEEN,
        ],
    );
}

/// The rule before the fix: a vote counts without reading back the node's marker and
/// record, and a process connected before a flush counts the flushed node's votes at once.
#[test]
fn votes_counted_without_reading_back_the_marker_let_a_flush_under_a_connection_through() {
    let rules = Rules {
        votes_checked: false,
        ..Rules::CRATE
    };
    let path = assert_caught(
        "votes not checked",
        system(rules, FLUSH),
        (ONE_HOLDER, Search::Shortest),
        7,
    );
    assert_because(
        &path,
        seen::UNCHECKED_VOTE,
        "a yes counted that still_checked refuses",
    );
}

/// A flush of a node restarted a moment ago, at every tick of its youth, with every
/// `uptime_in_seconds` the truncation allows: the record starts at the flush (the crate no
/// longer dates a young node's record back, where the rules before did); and a process
/// whose re-seed comes after a flush that its check did not see checks the node again.
#[test]
fn a_young_node_flushed_is_quarantined_from_the_flush_once_its_votes_may_count() {
    assert_holds(
        "young flush",
        system(Rules::CRATE, YOUNG_FLUSH),
        &[
            explore::GRANT,
            explore::AT_THE_BOUNDARY,
            explore::RESEED_STALE,
        ],
    );
}

/// What the model found (docs/verification.md), fixed in 34d1a41, and the seeder before it: a
/// process that checked a node after a loss re-seeds it when its quarantine ends; if the
/// node was flushed since, after its votes counted again, a SEED that compares only the
/// marker (none before and after the flush) writes a marker on the flushed node, whose votes
/// then count for the re-seeding process, and for any process that checks it then (intact,
/// and without a record).
#[test]
fn a_reseed_not_held_to_its_checks_record_lets_two_processes_hold() {
    let rules = Rules {
        reseed_checked: false,
        ..Rules::CRATE
    };
    // The figure plays no part, and one process started is enough: one phase, one process.
    let bounds = Bounds {
        phases: &[0],
        processes: 1,
        ..YOUNG_FLUSH
    };
    let path = assert_caught(
        "re-seed without the record",
        system(rules, bounds),
        (ONE_HOLDER, Search::Shortest),
        13,
    );
    assert_because(
        &path,
        seen::RESEED_STALE,
        "a re-seed after the record its check found is gone",
    );
}

/// The rule before 91b693e: a figure a second short of the longest ttl may be a server up
/// for the longest ttl, whose votes a process counts; its flush, dated back to its start,
/// ends its quarantine while the key it took is valid on another node.
#[test]
fn a_young_nodes_record_dated_back_at_the_figures_boundary_lets_two_processes_hold() {
    let rules = Rules {
        record_start: RecordStart::FigureLessResolution,
        ..Rules::CRATE
    };
    // The lowest figure is the one it needs (4 s, for a server up 4.4 s), and one process
    // started: a third of the states (the crate's run above takes both phases, two more
    // processes).
    let bounds = Bounds {
        phases: &[0],
        processes: 1,
        ..YOUNG_FLUSH
    };
    let path = assert_caught(
        "record dated back at the boundary",
        system(rules, bounds),
        (ONE_HOLDER, Search::Shortest),
        14,
    );
    assert_because(
        &path,
        seen::AT_THE_BOUNDARY,
        "a record written where record_age dates otherwise",
    );
}

#[test]
fn a_record_that_starts_at_an_old_nodes_start_lets_two_processes_hold_after_a_flush() {
    let rules = Rules {
        record_start: RecordStart::NodeStart,
        ..Rules::CRATE
    };
    assert_caught(
        "record at the node's start",
        system(rules, FLUSH),
        (ONE_HOLDER, Search::Shortest),
        9,
    );
}

#[test]
fn a_quarantine_counted_per_process_never_ends_for_short_lived_processes() {
    let rules = Rules {
        quarantine: Quarantine::PerProcess,
        ..Rules::CRATE
    };
    let run = explore("per process", system(rules, SHORT_LIVED), Goal::All, CAP);
    assert!(run.done, "{}: not explored to the end", run.label);
    if let Some(path) = run.discovery(explore::GRANT_AFTER_MAJORITY_LOST) {
        panic!(
            "{}: a short-lived process got the lock after all:\n{}",
            run.label,
            trace::show(path)
        );
    }
}

/// The article's rescue: a holder that paused between its check and its write, past the
/// end of its lock, writes with an old token after a newer holder wrote with its own, and
/// the storage refuses it; the storage's writes never go back in the order of the grants.
#[test]
fn a_write_after_a_pause_is_refused_for_its_old_token() {
    let run = assert_holds(
        "pause",
        system(Rules::CRATE, PAUSE),
        &[explore::GRANT, explore::WRITE_REFUSED_AFTER_PAUSE],
    );
    let rescue = run.discovery(explore::WRITE_REFUSED_AFTER_PAUSE);
    let rescue = rescue.expect("witnessed above");
    println!(
        "{}: \"{}\":\n{}",
        run.label,
        explore::WRITE_REFUSED_AFTER_PAUSE,
        trace::show(rescue)
    );
}

/// The article's corruption: a storage that ignores the token takes the paused holder's
/// write after the newer holder's.
#[test]
fn a_storage_that_ignores_the_token_takes_a_paused_holders_write_after_a_newer_one() {
    let rules = Rules {
        fenced_storage: false,
        ..Rules::CRATE
    };
    let path = assert_caught(
        "storage without fencing",
        system(rules, PAUSE),
        (explore::STORAGE_IN_ORDER, Search::Deep),
        25,
    );
    let storage = path.last_state().storage;
    assert!(
        storage.stale_accepted,
        "a counterexample without a write accepted from a lock run out:\n{}",
        trace::show(&path)
    );
}

#[test]
fn counters_read_without_the_reseed_floor_repeat_a_token() {
    let rules = Rules {
        floor: false,
        ..Rules::CRATE
    };
    let found = (TOKENS_GROW, Search::Deep);
    assert_caught("no floor", system(rules, FENCING), found, 24);
}

#[test]
fn a_token_recorded_on_a_minority_repeats() {
    let rules = Rules {
        fence_needed: Some(1),
        ..Rules::CRATE
    };
    let found = (TOKENS_GROW, Search::Deep);
    assert_caught("token from a minority", system(rules, FENCING), found, 22);
}

/// Larger runs, not in the test command: `cargo test --features model --test model --
/// --ignored --nocapture` (their state counts and times are in docs/verification.md).
#[test]
#[ignore]
fn larger_locks_three_attempts_four_ticks() {
    let bounds = Bounds {
        ticks: 4,
        attempts: 3,
        ..LOCKS
    };
    let sys = system(Rules::CRATE, bounds);
    assert_holds_within("locks, larger", sys, &[explore::GRANT], LARGER_CAP);
}

#[test]
#[ignore]
fn larger_fencing_a_restart_at_any_tick_and_late_replies() {
    let bounds = Bounds {
        restarts_by: 3,
        late_replies: true,
        ..FENCING
    };
    let witnessed = [explore::TOKEN_AFTER_RESTART, explore::RESEED];
    assert_holds_within(
        "fencing, larger",
        system(Rules::CRATE, bounds),
        &witnessed,
        LARGER_CAP,
    );
}

#[test]
#[ignore]
fn larger_short_lived_with_tokens_and_a_flush_at_any_tick() {
    let bounds = Bounds {
        ticks: 5,
        flushes_by: 5,
        tokens: true,
        processes: 4,
        ..SHORT_LIVED
    };
    let witnessed = [
        explore::GRANT_AFTER_MAJORITY_LOST,
        explore::TOKEN_AFTER_MAJORITY_LOST,
    ];
    let sys = system(Rules::CRATE, bounds);
    assert_holds_within("short-lived, larger", sys, &witnessed, LARGER_CAP);
}

/// Extensions with replies a tick late: `cargo test --features model --test model --
/// --ignored --nocapture larger_extensions` (docs/verification.md).
#[test]
#[ignore]
fn larger_extensions_with_late_replies() {
    let bounds = Bounds {
        extensions: 1,
        pauses: 0,
        ..LOCKS
    };
    let sys = system(Rules::CRATE, bounds);
    assert_holds_within("extend, late", sys, &[explore::EXTENDED], LARGER_CAP);
}

/// Node 0 restarts empty at any tick while holders take and extend locks, three extensions.
#[test]
#[ignore]
fn larger_extensions_across_a_restart_at_any_tick() {
    let bounds = Bounds {
        extensions: 3,
        ..restart(false)
    };
    let witnessed = [explore::EXTENDED, explore::RESTORED_AFTER_RESTART];
    let sys = system(Rules::CRATE, bounds);
    assert_holds_within("extend, restart at any tick", sys, &witnessed, LARGER_CAP);
}

/// Node 0 is flushed in tick 0 while holders take and extend locks, and a process comes.
#[test]
#[ignore]
fn larger_extensions_across_a_flush() {
    let bounds = Bounds {
        ticks: 3,
        processes: 1,
        extensions: 2,
        ..FLUSH
    };
    let witnessed = [explore::EXTENDED, explore::FLUSH_SEEN];
    let sys = system(Rules::CRATE, bounds);
    assert_holds_within("extend, flush", sys, &witnessed, LARGER_CAP);
}

/// The runs whose node steps the refinement check runs on a real server: fencing tokens
/// across a restart and its re-seed, a young node flushed while processes come and go, and
/// extensions with their fencing tokens across a restart.
const REFINED: [Bounds; 4] = [
    Bounds {
        attempts: 1,
        ..FENCING
    },
    Bounds {
        tokens: true,
        attempts: 1,
        ..restart(true)
    },
    Bounds {
        phases: &[0],
        processes: 1,
        attempts: 1,
        ..YOUNG_FLUSH
    },
    Bounds {
        tokens: true,
        attempts: 1,
        ..EXTEND_RESTART
    },
];

/// Every distinct node step of the lock (SET NX with its read-back, PEEK, FENCE, EXTEND,
/// RESTORE, RELEASE, DISCARD, QUARANTINE, SEED) over the states of `runs` answers and leaves
/// the node as the crate's script does on a real server; and each model node of `teeth`
/// differs from the scripts, on a step of the kind it breaks (the runs must reach one: for a
/// SEED not held to its record, a re-seed after a flush that its check did not see; for a
/// RESTORE over another token, two attempts).
async fn lock_steps_refine(runs: &[Bounds], teeth: &[lock_refinement::Broken]) {
    use lock_refinement::{first_difference, node_steps, Broken};
    use node::Call;
    let started = Instant::now();
    let quorum = quorumlock::testkit::LocalQuorum::start(1)
        .await
        .expect("a redis-server");
    let server = quorum.node(0);
    let mut all = BTreeSet::new();
    for bounds in runs {
        let (states, steps) = node_steps(&system(Rules::CRATE, *bounds));
        println!(
            "lock refinement: {states} states, {} node steps",
            steps.len()
        );
        all.extend(steps);
    }
    use system::Stage;
    let stage = |c: &Call| match c {
        Call::Run(r, _) => Some(r.round.stage),
        _ => None,
    };
    let acquire = |c: &Call| stage(c) == Some(Stage::Acquire);
    let fence = |c: &Call| matches!(stage(c), Some(Stage::Peek | Stage::Fence(_)));
    let extend = |c: &Call| matches!(stage(c), Some(Stage::Extend(_)));
    let restore = |c: &Call| matches!(stage(c), Some(Stage::Restore(_)));
    let kinds = |pick: &dyn Fn(&Call) -> bool| all.iter().filter(|(_, c)| pick(c)).count();
    println!(
        "lock refinement: {} distinct steps ({} SET NX, {} PEEK or FENCE, {} EXTEND, {} RESTORE, \
         {} RELEASE, {} DISCARD, {} QUARANTINE, {} SEED)",
        all.len(),
        kinds(&acquire),
        kinds(&fence),
        kinds(&extend),
        kinds(&restore),
        kinds(&|c| matches!(c, Call::Delete(_, true))),
        kinds(&|c| matches!(c, Call::Delete(_, false))),
        kinds(&|c| matches!(c, Call::Quarantine(..))),
        kinds(&|c| matches!(c, Call::Seed(..))),
    );
    if let Some((_, difference)) = first_difference(server, &all, Broken::None).await {
        panic!("a node step differs from the Lua on {difference}");
    }
    for &broken in teeth {
        let found = first_difference(server, &all, broken).await;
        let (step, found) = found.unwrap_or_else(|| panic!("{broken:?}: no step differs"));
        // Each is caught on the step it breaks: a SET NX, a SEED, an EXTEND, a RESTORE.
        let on_its_step = match broken {
            Broken::SeedWithoutRecord => matches!(step.1, Call::Seed(..)),
            Broken::ExtendSetsMissing => extend(&step.1),
            Broken::RestoreOverAnother => restore(&step.1),
            _ => acquire(&step.1),
        };
        assert!(on_its_step, "{broken:?} caught on another step: {found}");
        println!("lock refinement, {broken:?}: {found}");
    }
    println!("lock refinement: {:.1?}", started.elapsed());
}

#[tokio::test]
async fn the_lock_node_steps_are_the_lua() {
    use lock_refinement::Broken;
    let teeth = [
        Broken::ReadBackWithoutRecord,
        Broken::SeedWithoutRecord,
        Broken::ExtendSetsMissing,
    ];
    lock_steps_refine(&REFINED, &teeth).await;
}

/// More holds, and so more PEEK and FENCE steps, and extensions with two attempts (a RESTORE
/// where another token is): `cargo test --features model --test model -- --ignored
/// --nocapture larger_lock_node_steps` (docs/verification.md).
#[tokio::test]
#[ignore]
async fn larger_lock_node_steps_are_the_lua() {
    let fencing = Bounds {
        ticks: 2,
        ..FENCING
    };
    let flush = Bounds {
        ticks: 3,
        attempts: 1,
        processes: 1,
        ..FLUSH
    };
    let extend = Bounds {
        tokens: true,
        ..EXTEND_RESTART
    };
    let teeth = [lock_refinement::Broken::RestoreOverAnother];
    lock_steps_refine(&[fencing, flush, extend], &teeth).await;
}
