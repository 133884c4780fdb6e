//! The refinement check of the lock's node steps (docs/verification.md): every distinct step the
//! model's node takes over every state a small lock run reaches (SET NX with its read-back
//! of marker and record, PEEK, FENCE, QUARANTINE, SEED: `node.rs`) is run again by the
//! crate's own script (through `quorumlock::__model`) on a real `redis-server` set to the
//! same state; the answers and the state left must be the same.
//!
//! What the model's node holds maps to the server's keys: the lock key (`k` and the attempt's
//! token, its expiry as a `PX`), its fencing counter and `quorumlock:hwm` (0 for none),
//! `quorumlock:node` and `quorumlock:quarantine` as their text. Times are the node's clock:
//! the model's step runs at [`STEP_AT_MS`], the server's at its `TIME`, and every absolute
//! time (an expiry, a record's start, QUARANTINE's now) is compared as an offset from it,
//! within the milliseconds the step took. Not mapped: the server's own run_id (the scripts
//! read the model's from their arguments, never `INFO`), and when it started (no script
//! reads it).

use std::collections::{BTreeSet, HashSet, VecDeque};

use quorumlock::__model as algo;
use quorumlock::testkit::{LocalNode, Reply};
use stateright::Model;

use super::explore::System;
use super::node::{self, Call, Seeded, Step, STEP_AT_MS};
use super::system::{run_id, Marker, Node, Stage, State, TTL};

const KEY: &str = "refine:lock";
const COUNTER: &str = "quorumlock:fence:refine:lock";
const HWM: &str = "quorumlock:hwm";
const MARKER: &str = "quorumlock:node";
const RECORD: &str = "quorumlock:quarantine";
/// What RELEASE announces a token's release with (its SHA1, which the node does not read).
const SHA1: &str = "da39a3ee5e6b4b0d3255bfef95601890afd80709";

/// A part of an answer or of a node's state: text to be equal, or a time (ms, the step's
/// clock) to be equal within the step's duration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Part {
    Is(String),
    At(u64),
}

fn is(text: impl ToString) -> Part {
    Part::Is(text.to_string())
}

/// A node step's model that differs from the crate's, for the check's teeth.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Broken {
    /// The model's node as it is.
    None,
    /// A SET NX whose read-back leaves out the record.
    ReadBackWithoutRecord,
    /// A SEED that is not held to the record.
    SeedWithoutRecord,
    /// An EXTEND that sets a missing key again and answers 1 (an extension by `SET`).
    ExtendSetsMissing,
    /// A RESTORE that sets the key over another token.
    RestoreOverAnother,
}

/// Every distinct node step of every state the run reaches (a plain breadth-first walk,
/// without the symmetry reduction, so that every node and order is there).
pub fn node_steps(model: &System) -> (usize, BTreeSet<Step>) {
    let mut seen: HashSet<State> = HashSet::new();
    let mut queue: VecDeque<State> = model.init_states().into();
    let mut actions = Vec::new();
    node::record_steps();
    while let Some(state) = queue.pop_front() {
        if !seen.insert(state.clone()) {
            continue;
        }
        actions.clear();
        model.actions(&state, &mut actions);
        for action in actions.drain(..) {
            if let Some(next) = model.next_state(&state, action) {
                if !seen.contains(&next) {
                    queue.push_back(next);
                }
            }
        }
    }
    (seen.len(), node::recorded_steps())
}

fn record_parts(text: Option<&str>, shift: i64) -> Vec<Part> {
    let Some(text) = text else {
        return vec![is("no record")];
    };
    let mut parts = text.splitn(3, ':');
    let (run, start, wait) = (
        parts.next().expect("RUN_ID"),
        parts.next().expect("START_MS"),
        parts.next().expect("WAIT_MS"),
    );
    let start: i64 = start.parse().expect("a start");
    vec![
        is(run),
        Part::At(u64::try_from(start + shift).expect("a start")),
        is(wait),
    ]
}

/// The model's node as the parts the server's keys hold.
fn image(node: &Node) -> Vec<Part> {
    let mut parts = match node.key {
        Some((token, until)) => vec![is(format!("k{token}")), Part::At(until)],
        None => vec![is("no key")],
    };
    parts.push(is(node.counter));
    parts.push(is(node.hwm));
    parts.push(is(node.marker_text().unwrap_or_default()));
    parts.extend(record_parts(node.record_text().as_deref(), 0));
    parts
}

/// The model's step: its answer and the node after.
pub fn model_step((before, call): &Step, broken: Broken) -> (Vec<Part>, Vec<Part>) {
    let mut node = before.clone();
    let answer = match call {
        Call::Run(request, floor) => {
            let token = request.round.token;
            let stage = request.round.stage;
            let other = node.key.is_some_and(|(held, _)| held != token);
            let revived = match stage {
                Stage::Extend(_) => broken == Broken::ExtendSetsMissing && node.key.is_none(),
                Stage::Restore(_) => broken == Broken::RestoreOverAnother && other,
                _ => false,
            };
            if revived {
                // The broken script sets the key as if it were ours.
                node.key = Some((token, STEP_AT_MS));
            }
            let mut reply = node.run(request, STEP_AT_MS, *floor);
            if broken == Broken::ReadBackWithoutRecord {
                reply.held.1 = None;
            }
            let yes = reply.ballot == algo::Ballot::Yes;
            match request.round.stage {
                Stage::Acquire => {
                    let mut parts = vec![is(if yes { "set" } else { "nil" })];
                    let marker = reply.held.0.map(|m| m.text());
                    parts.push(is(marker.unwrap_or_default()));
                    let record = node::record_text(reply.held.1);
                    parts.extend(record_parts(record.as_deref(), 0));
                    parts
                }
                Stage::Peek if reply.refused => vec![is(-1)],
                Stage::Peek if yes => vec![is(reply.value)],
                Stage::Peek => vec![is("nil")],
                Stage::Fence(_) if reply.refused => vec![is(-1)],
                Stage::Fence(_) => vec![is(u8::from(yes))],
                Stage::Extend(_) => vec![is(reply.value)],
                Stage::Restore(_) => vec![is(u8::from(yes))],
            }
        }
        Call::Delete(token, announce) => vec![is(node.delete(*token, *announce, STEP_AT_MS))],
        Call::Quarantine(wait, age) => {
            let (start, wait, now) = node.quarantine(*wait, *age, STEP_AT_MS);
            vec![Part::At(start), is(wait), Part::At(now)]
        }
        Call::Seed(old, marker, record) => {
            let record = record
                .as_deref()
                .filter(|_| broken != Broken::SeedWithoutRecord);
            match node.seed(*old, *marker, record, STEP_AT_MS) {
                Seeded::Written => vec![is(1)],
                Seeded::MarkerChanged => vec![is(0)],
                Seeded::RecordGone => vec![is(-1)],
            }
        }
    };
    (answer, image(&node))
}

async fn command(node: &LocalNode, args: &[&str]) -> Reply {
    let reply = node.command(args).await.expect("the node answers");
    assert!(!matches!(reply, Reply::Error(_)), "{args:?}: {reply:?}");
    reply
}

fn text(reply: &Reply) -> Option<String> {
    if reply.is_nil() {
        return None;
    }
    Some(reply.as_str().expect("text").to_string())
}

fn int(reply: &Reply) -> i64 {
    reply
        .as_int()
        .or_else(|| reply.as_str().and_then(|s| s.parse().ok()))
        .expect("a number")
}

/// The node's clock in milliseconds (`TIME`).
async fn node_ms(node: &LocalNode) -> u64 {
    let Reply::Array(Some(parts)) = command(node, &["TIME"]).await else {
        panic!("TIME")
    };
    let secs: u64 = text(&parts[0]).expect("seconds").parse().expect("seconds");
    let micros: u64 = text(&parts[1]).expect("micros").parse().expect("micros");
    secs * 1000 + micros / 1000
}

fn marker_arg(marker: Option<Marker>) -> String {
    marker.map(|m| m.text()).unwrap_or_default()
}

/// Runs the step's call with the crate's script on the real node set to the step's node:
/// the answer, the state left, and how many milliseconds the step may have taken.
pub async fn real_step(server: &LocalNode, (before, call): &Step) -> (Vec<Part>, Vec<Part>, u64) {
    command(server, &["DEL", KEY, COUNTER, HWM, MARKER, RECORD]).await;
    let t0 = node_ms(server).await;
    // The step's clock as the server's: `at + shift` is the server's time of `at`.
    let shift = i64::try_from(t0).expect("ms") - i64::try_from(STEP_AT_MS).expect("ms");
    let real = |at: u64| (i64::try_from(at).expect("ms") + shift).to_string();
    if let Some((token, until)) = before.key {
        let left = until.checked_sub(STEP_AT_MS).filter(|l| *l > 0);
        let left = left.expect("a key not yet expired").to_string();
        command(server, &["SET", KEY, &format!("k{token}"), "PX", &left]).await;
    }
    for (key, value) in [(COUNTER, before.counter), (HWM, before.hwm)] {
        if value > 0 {
            command(server, &["SET", key, &value.to_string()]).await;
        }
    }
    if let Some(marker) = before.marker_text() {
        command(server, &["SET", MARKER, &marker]).await;
    }
    if let Some((run, start, wait)) = before.record {
        let record = format!("{}:{}:{wait}", run_id(run), real(start));
        command(server, &["SET", RECORD, &record]).await;
    }
    let fenced = [KEY, COUNTER, MARKER, HWM];
    let answer = match call {
        Call::Run(request, _) => {
            let token = format!("k{}", request.round.token);
            let marker = marker_arg(request.marker);
            match request.round.stage {
                Stage::Acquire => {
                    let ttl = TTL.as_millis().to_string();
                    let argv = ["EVAL", algo::SET_NX_ALONE, "1", KEY, &token, &ttl];
                    let Reply::Array(Some(out)) = command(server, &argv).await else {
                        panic!("SET_NX_ALONE answers an array")
                    };
                    let set = if out[0].is_nil() { "nil" } else { "set" };
                    assert!(out[0].is_nil() || int(&out[0]) == 0, "{out:?}");
                    let mut parts = vec![is(set), is(text(&out[1]).unwrap_or_default())];
                    let record = text(&out[2]);
                    parts.extend(record_parts(record.as_deref(), -shift));
                    parts
                }
                Stage::Peek => {
                    let mut argv = vec!["EVAL", algo::PEEK, "4"];
                    argv.extend(fenced);
                    argv.extend([token.as_str(), "1", &marker]);
                    let reply = command(server, &argv).await;
                    vec![if reply.is_nil() {
                        is("nil")
                    } else {
                        is(int(&reply))
                    }]
                }
                Stage::Fence(f) => {
                    let f = f.to_string();
                    let mut argv = vec!["EVAL", algo::FENCE, "4"];
                    argv.extend(fenced);
                    argv.extend([token.as_str(), &f, "1", &marker]);
                    vec![is(int(&command(server, &argv).await))]
                }
                Stage::Extend(_) => {
                    let ttl = TTL.as_millis().to_string();
                    let argv = ["EVAL", algo::EXTEND, "1", KEY, &token, &ttl, "1"];
                    vec![is(int(&command(server, &argv).await))]
                }
                Stage::Restore(f) => {
                    // As `Node::restore` sends it for a fenced lock: the counter, and the
                    // marker and largest counter keys with the marker checked last.
                    let (ttl, f) = (TTL.as_millis().to_string(), f.to_string());
                    let mut argv = vec!["EVAL", algo::RESTORE, "4"];
                    argv.extend(fenced);
                    argv.extend([token.as_str(), &ttl, "1", &f, &marker]);
                    vec![is(int(&command(server, &argv).await))]
                }
            }
        }
        Call::Delete(token, announce) => {
            let token = format!("k{token}");
            let argv = if *announce {
                // The token's SHA1 is only the release message's payload.
                vec!["EVAL", algo::RELEASE, "1", KEY, &token, SHA1]
            } else {
                vec!["EVAL", algo::DISCARD, "1", KEY, &token]
            };
            vec![is(int(&command(server, &argv).await))]
        }
        Call::Quarantine(wait, age) => {
            let run = run_id(before.run);
            let (wait, age) = (wait.to_string(), age.to_string());
            let argv = [
                "EVAL",
                algo::QUARANTINE,
                "2",
                MARKER,
                RECORD,
                &run,
                &wait,
                &age,
            ];
            let Reply::Array(Some(out)) = command(server, &argv).await else {
                panic!("QUARANTINE answers an array")
            };
            let back = |r: &Reply| u64::try_from(int(r) - shift).expect("a time");
            match &out[..] {
                [start, wait, now] => {
                    vec![Part::At(back(start)), is(int(wait)), Part::At(back(now))]
                }
                other => other.iter().map(|r| is(format!("{r:?}"))).collect(),
            }
        }
        Call::Seed(old, marker, record) => {
            let (old, marker_text) = (marker_arg(*old), marker.text());
            let floor = marker.floor.to_string();
            let record = record.as_deref().map_or(String::new(), |r| {
                let (run, start) = r.rsplit_once(':').expect("RUN_ID:START_MS");
                format!("{run}:{}", real(start.parse().expect("START_MS")))
            });
            let argv = [
                "EVAL",
                algo::SEED,
                "3",
                MARKER,
                HWM,
                RECORD,
                &old,
                &marker_text,
                &floor,
                &record,
            ];
            vec![is(int(&command(server, &argv).await))]
        }
    };
    let pttl = command(server, &["PTTL", KEY])
        .await
        .as_int()
        .expect("PTTL");
    let key = text(&command(server, &["GET", KEY]).await);
    let mut after = Vec::new();
    let t1 = node_ms(server).await;
    match key {
        Some(token) => {
            let left = u64::try_from(pttl).expect("a key with a ttl");
            after.push(is(token));
            after.push(Part::At(t1 + left - t0 + STEP_AT_MS));
        }
        None => after.push(is("no key")),
    }
    for key in [COUNTER, HWM] {
        let value = text(&command(server, &["GET", key]).await);
        after.push(is(value.unwrap_or_else(|| "0".to_string())));
    }
    after.push(is(
        text(&command(server, &["GET", MARKER]).await).unwrap_or_default()
    ));
    let record = text(&command(server, &["GET", RECORD]).await);
    after.extend(record_parts(record.as_deref(), -shift));
    (answer, after, t1 - t0)
}

/// The parts are the same, times within `slack` ms.
pub fn same(model: &[Part], real: &[Part], slack: u64) -> bool {
    model.len() == real.len()
        && model.iter().zip(real).all(|(m, r)| match (m, r) {
            (Part::At(m), Part::At(r)) => m.abs_diff(*r) <= slack,
            _ => m == r,
        })
}

/// The first step whose model (`broken` as given) differs from the script: the step, and
/// the two answers and states left.
pub async fn first_difference(
    server: &LocalNode,
    steps: &BTreeSet<Step>,
    broken: Broken,
) -> Option<(Step, String)> {
    for step in steps {
        let (answer, after) = model_step(step, broken);
        let (real_answer, real_after, took) = real_step(server, step).await;
        let slack = took + 5;
        if !(same(&answer, &real_answer, slack) && same(&after, &real_after, slack)) {
            let shown = format!(
                "{step:?}:\nmodel {answer:?} {after:?}\nreal  {real_answer:?} {real_after:?}"
            );
            return Some((step.clone(), shown));
        }
    }
    None
}
