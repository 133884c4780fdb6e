//! The runs of the semaphore and the read-write lock (`claims.rs`, docs/verification.md): the
//! crate's rules hold and witness what each run is for; each known-bad rule is caught, its
//! counterexample printed and its length asserted.

use std::collections::{BTreeSet, HashSet, VecDeque};
use std::time::Instant;

use stateright::{Checker, HasDiscoveries, Model, Path, Representative};

use super::claims::{
    Action, Bounds, Claims, Resource, Rules, State, AT_MOST_N, N_HOLDERS, TWO_READERS,
    WRITER_AFTER_READERS, WRITER_ALONE,
};
use super::claims_explore::show;
use super::{CAP, LARGER_CAP};

/// Two permits, three processes contending, replies late, releases.
const SEMAPHORE: Bounds = Bounds {
    resource: Resource::Semaphore(2),
    clients: 3,
    ticks: 2,
    attempts: 3,
    late_replies: false,
    releases: true,
};

/// The N+1 trap as small as it shows: three nodes, two permits, three processes, one
/// attempt each, in one instant.
const TRAP: Bounds = Bounds {
    ticks: 0,
    attempts: 3,
    late_replies: false,
    releases: false,
    ..SEMAPHORE
};

/// Readers and writers: three processes, each attempt a read or a write.
const RW_LOCK: Bounds = Bounds {
    resource: Resource::RwLock,
    ..SEMAPHORE
};

/// A known-bad rule's run: every attempt in one tick, no release.
const RW_CONTEND: Bounds = Bounds {
    resource: Resource::RwLock,
    ..TRAP
};

/// Explores every state of `model` (symmetry reduced) or, looking for a counterexample to
/// `fail`, breadth first until it is found.
fn explore<const N: usize>(
    label: &str,
    model: Claims<N>,
    fail: Option<&'static str>,
    cap: usize,
) -> (bool, usize, Checked<N>) {
    let started = Instant::now();
    let builder = model.checker().target_state_count(cap);
    match fail {
        None => summary(
            label,
            started,
            builder.symmetry().threads(2).spawn_dfs().join(),
        ),
        Some(property) => summary(
            label,
            started,
            builder
                .finish_when(HasDiscoveries::AnyOf(BTreeSet::from([property])))
                .spawn_bfs()
                .join(),
        ),
    }
}

/// What a checker found, whether it explored everything, and how much, printed.
fn summary<const N: usize>(
    label: &str,
    started: Instant,
    checker: impl Checker<Claims<N>>,
) -> (bool, usize, Checked<N>) {
    println!(
        "{label}: {} states ({} unique), depth {}, {:.1?}",
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth(),
        started.elapsed()
    );
    (
        checker.is_done(),
        checker.state_count(),
        checker.discoveries(),
    )
}

type Checked<const N: usize> = std::collections::HashMap<&'static str, Path<State<N>, Action>>;

fn assert_holds<const N: usize>(label: &str, model: Claims<N>, always: &str, witnessed: &[&str]) {
    assert_holds_within(label, model, always, witnessed, CAP);
}

/// [`assert_holds`] with room for `cap` states.
fn assert_holds_within<const N: usize>(
    label: &str,
    model: Claims<N>,
    always: &str,
    witnessed: &[&str],
    cap: usize,
) {
    let (done, states, found) = explore(label, model, None, cap);
    if let Some(path) = found.get(always) {
        panic!("{label}: \"{always}\" fails:\n{}", show(path));
    }
    assert!(
        done && states < cap,
        "{label}: not explored to the end within {cap} states"
    );
    for property in witnessed {
        assert!(
            found.contains_key(property),
            "{label}: \"{property}\" never happens: the run checks less than it claims"
        );
    }
}

fn assert_caught<const N: usize>(
    label: &str,
    model: Claims<N>,
    property: &'static str,
    steps: usize,
) {
    let (_, _, found) = explore(label, model, Some(property), CAP);
    let path = found.get(property).unwrap_or_else(|| {
        panic!("{label}: \"{property}\" never fails: the checker misses this known-bad rule")
    });
    let shown = show(path);
    println!("{label}: \"{property}\" fails:\n{shown}");
    assert_eq!(
        path.clone().into_actions().len(),
        steps,
        "{label}: a counterexample of another length than docs/verification.md gives:\n{shown}"
    );
}

/// Breadth first over the states up to symmetry (stateright reduces only depth first): a
/// state is explored unless one of its class was, each along the path that first reached
/// it. Symmetric states have shortest paths of the same length, so the first counterexample
/// to `property` found is a shortest one. Answers it, if any within `cap` classes, and the
/// classes explored.
fn shortest_reduced<const N: usize>(
    label: &str,
    model: &Claims<N>,
    property: &'static str,
    cap: usize,
) -> (Option<Path<State<N>, Action>>, usize) {
    let started = Instant::now();
    let holds = model
        .properties()
        .into_iter()
        .find(|p| p.name == property)
        .expect("a property of the model")
        .condition;
    let mut seen = HashSet::new();
    let mut queue = VecDeque::new();
    for init in model.init_states() {
        if seen.insert(init.representative()) {
            queue.push_back((init.clone(), init, Vec::new()));
        }
    }
    let mut found = None;
    let mut actions = Vec::new();
    while let Some((init, state, path)) = queue.pop_front() {
        if !holds(model, &state) {
            found = Some((init, path));
            break;
        }
        if seen.len() >= cap {
            break;
        }
        actions.clear();
        model.actions(&state, &mut actions);
        for action in actions.drain(..) {
            let Some(next) = model.next_state(&state, action) else {
                continue;
            };
            if seen.insert(next.representative()) {
                let mut path = path.clone();
                path.push(action);
                queue.push_back((init.clone(), next, path));
            }
        }
    }
    println!(
        "{label}: {} unique states up to symmetry, {:.1?}",
        seen.len(),
        started.elapsed()
    );
    let path = found.map(|(init, path)| {
        Path::from_actions(model, init, &path).expect("a path the model takes")
    });
    (path, seen.len())
}

/// [`assert_caught`] breadth first up to symmetry ([`shortest_reduced`]).
fn assert_caught_reduced<const N: usize>(
    label: &str,
    model: Claims<N>,
    property: &'static str,
    steps: usize,
) {
    let (path, classes) = shortest_reduced(label, &model, property, CAP);
    let path = path.unwrap_or_else(|| {
        assert!(
            classes < CAP,
            "{label}: not explored to the end within {CAP} states"
        );
        panic!("{label}: \"{property}\" never fails: the checker misses this known-bad rule")
    });
    let shown = show(&path);
    println!("{label}: \"{property}\" fails:\n{shown}");
    assert_eq!(
        path.into_actions().len(),
        steps,
        "{label}: a counterexample of another length than docs/verification.md gives:\n{shown}"
    );
}

fn claims(rules: Rules, bounds: Bounds) -> Claims {
    Claims { rules, bounds }
}

#[test]
fn at_most_n_holders_of_a_semaphore_of_n_permits() {
    assert_holds(
        "semaphore",
        claims(Rules::CRATE, SEMAPHORE),
        AT_MOST_N,
        &[N_HOLDERS],
    );
}

/// The N+1 trap: counting a majority of yes, whatever slot each node recorded, grants three
/// permits of two.
#[test]
fn permits_counted_per_node_let_n_plus_one_hold() {
    let rules = Rules {
        per_slot: false,
        ..Rules::CRATE
    };
    assert_caught("per node", claims(rules, TRAP), AT_MOST_N, 9);
}

/// The N+1 trap at the size: five nodes, two permits, three processes, one attempt
/// each, in one instant. Three holders need nine yes of three nodes each, and five nodes
/// record ten claims.
#[test]
fn permits_counted_per_node_let_n_plus_one_hold_on_five_nodes() {
    let rules = Rules {
        per_slot: false,
        ..Rules::CRATE
    };
    let model = Claims::<5> {
        rules,
        bounds: TRAP,
    };
    assert_caught_reduced("per node, five nodes", model, AT_MOST_N, 12);
}

/// The same five nodes and instant with the crate's rules: at most two holders.
#[test]
fn at_most_n_holders_on_five_nodes() {
    let model = Claims::<5> {
        rules: Rules::CRATE,
        bounds: TRAP,
    };
    assert_holds("semaphore, five nodes", model, AT_MOST_N, &[N_HOLDERS]);
}

#[test]
fn a_writer_holds_alone_and_readers_share() {
    assert_holds(
        "read-write lock",
        claims(Rules::CRATE, RW_LOCK),
        WRITER_ALONE,
        &[TWO_READERS, WRITER_AFTER_READERS],
    );
}

#[test]
fn readers_that_ignore_the_writer_hold_beside_it() {
    let rules = Rules {
        readers_see_the_writer: false,
        ..Rules::CRATE
    };
    assert_caught("readers blind", claims(rules, RW_CONTEND), WRITER_ALONE, 6);
}

#[test]
fn a_writer_granted_on_a_minority_holds_beside_a_reader() {
    let rules = Rules {
        writer_needed: Some(1),
        ..Rules::CRATE
    };
    assert_caught(
        "writer on one node",
        claims(rules, RW_CONTEND),
        WRITER_ALONE,
        5,
    );
}

/// Larger runs, not in the test command (`-- --ignored`): replies that come a tick late
/// (the semaphore's with two processes: with three, more than 60 million states, with or
/// without releases).
#[test]
#[ignore]
fn larger_semaphore_with_late_replies() {
    let bounds = Bounds {
        late_replies: true,
        clients: 2,
        ..SEMAPHORE
    };
    assert_holds_within(
        "semaphore, late replies",
        claims(Rules::CRATE, bounds),
        AT_MOST_N,
        &[N_HOLDERS],
        LARGER_CAP,
    );
}

#[test]
#[ignore]
fn larger_read_write_lock_with_late_replies() {
    let bounds = Bounds {
        late_replies: true,
        ..RW_LOCK
    };
    assert_holds_within(
        "read-write lock, late replies",
        claims(Rules::CRATE, bounds),
        WRITER_ALONE,
        &[TWO_READERS, WRITER_AFTER_READERS],
        LARGER_CAP,
    );
}
