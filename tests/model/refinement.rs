//! The refinement check of the node step (docs/verification.md): over every state a small run of
//! the semaphore and of the read-write lock reaches, each request a node may run there is
//! run twice, by the model's node step (`claims::run`) and by the crate's Lua
//! (PERMIT_ACQUIRE, RW_ACQUIRE, through `quorumlock::__model`) on a real `redis-server`
//! holding the same claims; the answers and the claims left must be the same.

use std::collections::{BTreeMap, HashSet, VecDeque};

use quorumlock::__model as algo;
use quorumlock::testkit::{LocalNode, LocalQuorum, Reply};
use stateright::Model;

use super::claims::{self, Answer, Ask, Bounds, Claim, Claims, Member, Request, Resource, Rules};
use super::claims_steps;
use super::system::{NODE_MS_PER_TICK, TTL, UP_AT_START_MS};

/// A node's claims, each with the milliseconds it has left (not the absolute expiry: the
/// real server's clock is elsewhere).
type Claimed = Vec<(u8, Member, u64)>;

/// What the model's node step does with one request: the claims before, the request, then
/// the answer and the claims after.
type Steps = BTreeMap<(Claimed, Request), (Answer, Claimed)>;

const KEY: &str = "refine";

fn left(claims: &[Claim], now: u64) -> Claimed {
    let mut out: Claimed = claims
        .iter()
        .map(|c| (c.token, c.member, c.expiry - now))
        .collect();
    out.sort();
    out
}

/// Every distinct node step of every state `model` reaches (a plain breadth-first walk,
/// without the symmetry reduction, so that every node and order is there).
fn node_steps(model: &Claims) -> (usize, Steps) {
    let mut seen: HashSet<claims::State> = HashSet::new();
    let mut queue: VecDeque<claims::State> = model.init_states().into();
    let mut steps = Steps::new();
    let mut actions = Vec::new();
    while let Some(state) = queue.pop_front() {
        if !seen.insert(state.clone()) {
            continue;
        }
        let now = UP_AT_START_MS + NODE_MS_PER_TICK * u64::from(state.t);
        for client in &state.clients {
            for (n, request) in client.requests.iter().enumerate() {
                let Some(request) = *request else { continue };
                let mut after = state.nodes[n].clone();
                let answer =
                    claims_steps::run(&Rules::CRATE, &mut after, request, model.permits(), now);
                steps.insert(
                    (left(&state.nodes[n], now), request),
                    (answer, left(&after, now)),
                );
            }
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
    (seen.len(), steps)
}

fn member_text(token: u8, member: Member) -> String {
    match member {
        Member::Slot(slot) => format!("{slot}:k{token}"),
        Member::Reader => format!("r:k{token}"),
        Member::Writer => format!("w:k{token}"),
        Member::Intent => format!("i:k{token}"),
    }
}

fn member_of(text: &str) -> (u8, Member) {
    let (side, token) = text.split_once(':').expect("a claim");
    let token = token
        .strip_prefix('k')
        .expect("a token")
        .parse()
        .expect("a number");
    let member = match side {
        "r" => Member::Reader,
        "w" => Member::Writer,
        "i" => Member::Intent,
        slot => Member::Slot(slot.parse().expect("a slot")),
    };
    (token, member)
}

async fn command(node: &LocalNode, args: &[&str]) -> Reply {
    let reply = node.command(args).await.expect("the node answers");
    assert!(!matches!(reply, Reply::Error(_)), "{args:?}: {reply:?}");
    reply
}

fn text(reply: &Reply) -> String {
    reply.as_str().expect("text").to_string()
}

/// The node's clock in milliseconds (`TIME`).
async fn node_ms(node: &LocalNode) -> u64 {
    let Reply::Array(Some(parts)) = command(node, &["TIME"]).await else {
        panic!("TIME")
    };
    let secs: u64 = text(&parts[0]).parse().expect("seconds");
    let micros: u64 = text(&parts[1]).parse().expect("microseconds");
    secs * 1000 + micros / 1000
}

/// Runs one request on the real node holding `before`: the answer, the claims left, and how
/// many milliseconds the step may have taken (the tolerance of the claims' expiries).
async fn real_step(
    node: &LocalNode,
    resource: Resource,
    before: &Claimed,
    request: Request,
) -> (Answer, Claimed, u64) {
    command(node, &["DEL", KEY]).await;
    let t0 = node_ms(node).await;
    if !before.is_empty() {
        let (record, score) = match resource {
            Resource::Semaphore(permits) => ("#", format!("-{permits}")),
            Resource::RwLock => ("#rw", "-1".to_string()),
        };
        command(node, &["ZADD", KEY, &score, record]).await;
        let mut longest = 0;
        for &(token, member, left) in before {
            let score = (t0 + left).to_string();
            command(node, &["ZADD", KEY, &score, &member_text(token, member)]).await;
            longest = longest.max(left);
        }
        command(node, &["PEXPIRE", KEY, &longest.to_string()]).await;
    }
    let ttl = TTL.as_millis().to_string();
    let token = format!("k{}", request.token);
    let reply = match (resource, request.ask) {
        (Resource::Semaphore(permits), Ask::Permit(start, step)) => {
            let args = [permits.to_string(), start.to_string(), step.to_string()];
            let argv = ["EVAL", algo::PERMIT_ACQUIRE, "1", KEY, &token, &ttl];
            let argv: Vec<&str> = argv
                .into_iter()
                .chain(args.iter().map(|a| a.as_str()))
                .collect();
            command(node, &argv).await
        }
        (Resource::RwLock, Ask::Read | Ask::Write) => {
            let (side, waiter) = match request.ask {
                Ask::Read => ("r", String::new()),
                _ => ("w", format!("k{}", request.waiter)),
            };
            let argv = [
                "EVAL",
                algo::RW_ACQUIRE,
                "1",
                KEY,
                &token,
                &ttl,
                side,
                &waiter,
                &ttl,
            ];
            command(node, &argv).await
        }
        other => panic!("a request of another resource: {other:?}"),
    };
    let answer = match &reply {
        Reply::Array(Some(parts)) => Answer::Granted(parts[0].as_int().expect("a slot") as u8),
        r if r.is_nil() => Answer::Refused,
        other => panic!("an answer the model has no name for: {other:?}"),
    };
    let pttl = command(node, &["PTTL", KEY]).await.as_int().expect("PTTL");
    let Reply::Array(Some(all)) = command(node, &["ZRANGE", KEY, "0", "-1", "WITHSCORES"]).await
    else {
        panic!("ZRANGE")
    };
    let t1 = node_ms(node).await;
    let mut after = Claimed::new();
    for pair in all.chunks(2) {
        let (member, score) = (text(&pair[0]), text(&pair[1]));
        if member.starts_with('#') {
            continue;
        }
        // A claim on a new key expires with the key (`date_claim!`).
        let expiry = if score == "inf" {
            t1 + u64::try_from(pttl).expect("a key with a ttl")
        } else {
            score.parse().expect("a score")
        };
        let (token, member) = member_of(&member);
        after.push((token, member, expiry.saturating_sub(t0)));
    }
    after.sort();
    (answer, after, t1 - t0)
}

/// The claims are the same, their expiries within `slack` ms.
fn same(model: &Claimed, real: &Claimed, slack: u64) -> bool {
    model.len() == real.len()
        && model
            .iter()
            .zip(real)
            .all(|(m, r)| m.0 == r.0 && m.1 == r.1 && m.2.abs_diff(r.2) <= slack)
}

async fn refines(node: &LocalNode, bounds: Bounds) -> (usize, usize) {
    let model = Claims {
        rules: Rules::CRATE,
        bounds,
    };
    let (states, steps) = node_steps(&model);
    for ((before, request), (answer, after)) in &steps {
        let (real_answer, real_after, took) =
            real_step(node, bounds.resource, before, *request).await;
        assert!(
            *answer == real_answer && same(after, &real_after, took + 5),
            "the node step differs from the Lua on {before:?} with {request:?}:\n\
             model {answer:?} {after:?}\nreal  {real_answer:?} {real_after:?}"
        );
    }
    (states, steps.len())
}

#[tokio::test]
async fn the_node_step_is_the_lua_of_the_semaphore_and_the_read_write_lock() {
    let quorum = LocalQuorum::start(1).await.expect("a redis-server");
    let node = quorum.node(0);
    for bounds in [
        Bounds {
            resource: Resource::Semaphore(2),
            clients: 2,
            ticks: 2,
            attempts: 3,
            late_replies: false,
            releases: false,
        },
        Bounds {
            resource: Resource::RwLock,
            clients: 2,
            ticks: 2,
            attempts: 3,
            late_replies: false,
            releases: false,
        },
    ] {
        let (states, steps) = refines(node, bounds).await;
        println!(
            "refinement, {:?}: {states} states, {steps} node steps run on both",
            bounds.resource
        );
    }
}
