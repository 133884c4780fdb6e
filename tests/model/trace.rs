//! A path of the checker written out step by step, for the failure messages and for
//! docs/verification.md.

use std::fmt::Write;

use stateright::Path;

use super::explore::{Action, System};
use super::storage::Write as Writing;
use super::system::{Fencing, Phase, Rules, State};

/// One line per step: the tick, what happened, and what it left.
pub fn show<const N: usize, const C: usize>(path: &Path<State<N, C>, Action>) -> String {
    let mut out = String::new();
    let states = path.clone().into_states();
    let actions = path.clone().into_actions();
    for (i, (action, after)) in actions.iter().zip(states.iter().skip(1)).enumerate() {
        let _ = writeln!(
            out,
            "{:>3}. t={} {:<16} {}",
            i + 1,
            after.t,
            step(action),
            summary(after)
        );
    }
    out
}

fn step(action: &Action) -> String {
    match *action {
        Action::Tick => "tick".into(),
        Action::Attempt(c) => format!("P{c} attempts"),
        Action::Arrive(c, n) => format!("P{c} -> N{n}"),
        Action::ArriveLate(c, n) => format!("P{c} -> N{n} (late)"),
        Action::Deliver(c, n) => format!("P{c} <- N{n}"),
        Action::AskToken(c) => format!("P{c} asks token"),
        Action::Extend(c) => format!("P{c} extends"),
        Action::Release(c) => format!("P{c} releases"),
        Action::Reseed(c, n) => format!("P{c} re-seeds N{n}"),
        Action::Restart(n, 0) => format!("N{n} restarts"),
        Action::Restart(n, phase) => format!("N{n} restarts +{phase}"),
        Action::Flush(n) => format!("N{n} FLUSHALL"),
        Action::Pause(c) => format!("P{c} pauses"),
        Action::Exit(c) => format!("P{c} exits"),
        Action::Start(c) => format!("P{c} starts"),
        Action::Check(c) => format!("P{c} checks"),
        Action::Write(c) => format!("P{c} writes"),
    }
}

/// The keys on the nodes, and who holds what.
fn summary<const N: usize, const C: usize>(s: &State<N, C>) -> String {
    let keys: Vec<String> = s
        .nodes
        .iter()
        .map(|n| match n.key {
            Some((token, _)) => format!("k{token}"),
            None => "-".into(),
        })
        .collect();
    let now = s.client_ms();
    let clients: Vec<String> = s
        .clients
        .iter()
        .enumerate()
        .map(|(c, client)| {
            let what = match client.phase {
                _ if !client.alive => "gone".to_string(),
                Phase::Idle => "idle".into(),
                Phase::Acquiring { token, .. } => format!("acquiring k{token}"),
                Phase::Held {
                    token,
                    valid_until,
                    fencing,
                    ..
                } => {
                    let valid = if now < valid_until {
                        "valid"
                    } else {
                        "expired"
                    };
                    let fence = match fencing {
                        Fencing::Handed(f) => format!(", token {f}"),
                        _ => String::new(),
                    };
                    let write = match client.write {
                        Writing::None => "",
                        Writing::Checked { .. } => ", checked",
                        Writing::Done => ", wrote",
                    };
                    let paused = if client.active(s.t) { "" } else { ", paused" };
                    format!("holds k{token} ({valid}{fence}{write}{paused})")
                }
            };
            format!("P{c} {what}")
        })
        .collect();
    let store = match s.storage.newest {
        Some(newest) => format!("  store: token {newest}"),
        None => String::new(),
    };
    format!("keys [{}]  {}{store}", keys.join(" "), clients.join(", "))
}

/// The rules of a run, as they differ from the crate's.
pub fn label<const N: usize, const C: usize>(sys: &System<N, C>) -> String {
    let (rules, krate) = (sys.rules, Rules::CRATE);
    let mut changed = Vec::new();
    if rules.quarantine != krate.quarantine {
        changed.push(format!("quarantine {:?}", rules.quarantine));
    }
    if rules.record_start != krate.record_start {
        changed.push(format!("record start {:?}", rules.record_start));
    }
    if !rules.drift {
        changed.push("no drift".into());
    }
    if !rules.elapsed {
        changed.push("no elapsed time".into());
    }
    if let Some(n) = rules.needed {
        changed.push(format!("{n} votes win"));
    }
    if let Some(n) = rules.fence_needed {
        changed.push(format!("{n} FENCE votes win"));
    }
    if let Some(n) = rules.peek_needed {
        changed.push(format!("{n} PEEK votes win"));
    }
    if !rules.floor {
        changed.push("no floor".into());
    }
    if !rules.votes_checked {
        changed.push("votes not checked".into());
    }
    if !rules.reseed_checked {
        changed.push("re-seed without the record".into());
    }
    if !rules.fenced_storage {
        changed.push("storage ignores the token".into());
    }
    if !rules.missing_refuses {
        changed.push("a missing key extends".into());
    }
    if !rules.extension_from_start {
        changed.push("extension from the round's end".into());
    }
    if changed.is_empty() {
        "the crate's rules".into()
    } else {
        changed.join(", ")
    }
}
