//! The semaphore and the read-write lock (design 2.9): claims in one sorted set per resource
//! on each node, taken in one round by `engine::semaphore::attempt_member`, and decided on
//! one slot recorded by a majority, with the lock's validity rule.
//!
//! Time, clocks and the ttl are the lock model's (`system.rs`: ticks of 2 s, nodes 10% fast,
//! clients 10% slow, a 4 s ttl, the drift factor 0.2). The client's decisions are the
//! crate's, through `quorumlock::__model`: the preference order (`slots::preference`), the
//! tally (`Tally`), when the round is decided (`slots::decision`), the slot granted
//! (`slots::most_recorded`), the tally its verdict sees (`slots::narrowed`) and the verdict
//! (`verdict::timed`, `quorumlock::drift`). What is written here is what a node does (the
//! Lua of PERMIT_ACQUIRE and RW_ACQUIRE, `src/node/scripts.rs`, rewritten as Rust) and the
//! order of the client's steps.
//!
//! The nodes keep their data here: a node's admission (its check, quarantine and re-seed)
//! is the same for every primitive and is checked by the lock's runs.

use std::fmt::Write;
use std::time::Duration;

use quorumlock::__model::{self as algo, Ballot, Decision, Tally, Timed};
use stateright::{Model, Path, Property};

use super::system::{CLIENT_MS_PER_TICK, DRIFT_FACTOR, NODE_MS_PER_TICK, TTL, UP_AT_START_MS};

/// Nodes.
pub const NODES: usize = 3;
/// Client processes (a run may use fewer).
pub const CLIENTS: usize = 3;

/// The resource the clients contend for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resource {
    /// A semaphore of this many permits.
    Semaphore(u8),
    /// A read-write lock.
    RwLock,
}

/// The rules a run checks: [`Rules::CRATE`], or one replaced by a known-bad one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rules {
    /// Whether a permit is granted on one slot recorded by a majority (`slots::decision`,
    /// `most_recorded`, `narrowed`); without, on a majority of yes whatever slot each node
    /// recorded (counting per node: the N+1 trap).
    pub per_slot: bool,
    /// Whether a node refuses a reader beside a live writer (RW_ACQUIRE); without, readers
    /// look only at the writers' intents.
    pub readers_see_the_writer: bool,
    /// The yes votes a writer's round needs instead of a majority (`Tally::needing`), if any.
    pub writer_needed: Option<usize>,
}

impl Rules {
    /// The crate's rules.
    pub const CRATE: Rules = Rules {
        per_slot: true,
        readers_see_the_writer: true,
        writer_needed: None,
    };
}

/// How far a run goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    pub resource: Resource,
    /// The processes that take part.
    pub clients: usize,
    /// The last tick.
    pub ticks: u8,
    /// Attempts, by all processes together.
    pub attempts: u8,
    /// Whether a reply may come a tick late.
    pub late_replies: bool,
    /// Whether holders release.
    pub releases: bool,
}

/// What a claim stands for in the sorted set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Member {
    /// `slot:token`, a permit's claim.
    Slot(u8),
    /// `r:token`.
    Reader,
    /// `w:token`.
    Writer,
    /// `i:waiter`, a writer's intent (its token is the waiter's).
    Intent,
}

/// One member of the sorted set on a node, scored with its expiry on the node's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Claim {
    pub token: u8,
    pub member: Member,
    pub expiry: u64,
}

/// What an attempt asks the nodes for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Ask {
    /// A permit, the slots in this preference order (`start`, `step`).
    Permit(u8, u8),
    Read,
    Write,
}

/// A request on its way to a node: the attempt's token, what it asks, and (a writer's)
/// waiter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Request {
    pub token: u8,
    pub ask: Ask,
    pub waiter: u8,
}

/// A node's answer, as the client counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Answer {
    /// The node recorded the claim on this slot (0 for a side of a read-write lock).
    Granted(u8),
    /// Every slot taken, or the side refused (nil).
    Refused,
    /// A timeout.
    Failed,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Phase {
    Idle,
    Acquiring {
        token: u8,
        ask: Ask,
        start_ms: u64,
        answers: [Option<Answer>; NODES],
    },
    Held {
        token: u8,
        member: Member,
        valid_until: u64,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Client {
    pub phase: Phase,
    /// The request on its way to each node, not yet run.
    pub requests: [Option<Request>; NODES],
    /// The tick by the end of which the round's replies must have come.
    pub due: u8,
    /// A reply that comes late, and the tick it comes at.
    pub replies: [Option<(Answer, u8)>; NODES],
    /// A writer's call under way (refused so far): its waiter, whose intent the nodes that
    /// refused it hold.
    pub waiter: Option<u8>,
}

impl Client {
    const NONE: Client = Client {
        phase: Phase::Idle,
        requests: [None; NODES],
        due: 0,
        replies: [None; NODES],
        waiter: None,
    };
}

/// Bits of what a run has seen, for the `sometimes` properties.
pub mod seen {
    pub const READER_GRANTED: u8 = 1;
    pub const WRITER_AFTER_READERS: u8 = 2;
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct State {
    pub t: u8,
    /// Each node's sorted set, kept sorted.
    pub nodes: [Vec<Claim>; NODES],
    pub clients: [Client; CLIENTS],
    pub next_token: u8,
    pub seen: u8,
}

impl State {
    fn node_ms(&self) -> u64 {
        UP_AT_START_MS + NODE_MS_PER_TICK * u64::from(self.t)
    }

    fn client_ms(&self) -> u64 {
        CLIENT_MS_PER_TICK * u64::from(self.t)
    }

    /// The holders now, each counted until the validity it computed by its own clock.
    pub fn holding(&self) -> impl Iterator<Item = Member> + '_ {
        let now = self.client_ms();
        self.clients.iter().filter_map(move |c| match c.phase {
            Phase::Held {
                member,
                valid_until,
                ..
            } if now < valid_until => Some(member),
            _ => None,
        })
    }

    fn writers(&self) -> usize {
        self.holding().filter(|m| *m == Member::Writer).count()
    }

    fn readers(&self) -> usize {
        self.holding().filter(|m| *m == Member::Reader).count()
    }
}

/// One configuration to check.
#[derive(Clone, Debug)]
pub struct Claims {
    pub rules: Rules,
    pub bounds: Bounds,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    Tick,
    /// Process `c` starts an attempt.
    Attempt(usize, Ask),
    /// The request of `c` reaches node `n` and runs; the reply is taken at once.
    Arrive(usize, usize),
    /// The same, the reply taken at the next tick.
    ArriveLate(usize, usize),
    /// Process `c` takes node `n`'s late reply.
    Deliver(usize, usize),
    /// Holder `c` releases (PERMIT_RELEASE on every node).
    Release(usize),
}

/// Property names.
pub const AT_MOST_N: &str = "at most N holders of N permits";
pub const N_HOLDERS: &str = "N holders at once";
pub const WRITER_ALONE: &str = "no writer beside a reader or a writer";
pub const TWO_READERS: &str = "two readers at once";
pub const WRITER_AFTER_READERS: &str = "a writer granted after readers";

fn ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

/// The crate's drift allowance for the ttl.
fn drift() -> Duration {
    quorumlock::drift(TTL, DRIFT_FACTOR).expect("a valid drift factor")
}

impl Claims {
    pub fn permits(&self) -> u8 {
        match self.bounds.resource {
            Resource::Semaphore(permits) => permits,
            Resource::RwLock => 1,
        }
    }

    /// Every preference order an attempt may draw (`slots::preference` over every sample
    /// that matters: both are taken modulo the permits).
    fn orders(&self) -> Vec<(u8, u8)> {
        let p = u32::from(self.permits());
        let mut orders: Vec<(u8, u8)> = (0..p)
            .flat_map(|a| (0..p).map(move |b| algo::preference(p, a, b)))
            .map(|(start, step)| (start as u8, step as u8))
            .collect();
        orders.sort();
        orders.dedup();
        orders
    }
}

/// What node `n` does with a request (PERMIT_ACQUIRE, RW_ACQUIRE), at `now` on its clock:
/// the expired claims pruned, then the claim recorded or refused.
pub fn run(
    rules: &Rules,
    claims: &mut Vec<Claim>,
    request: Request,
    permits: u8,
    now: u64,
) -> Answer {
    claims.retain(|c| c.expiry > now);
    let expiry = now + ms(TTL);
    let answer = match request.ask {
        Ask::Permit(start, step) => {
            let taken = |s: u8| claims.iter().any(|c| c.member == Member::Slot(s));
            let free = (0..permits)
                .map(|j| (start + j * step) % permits)
                .find(|&s| !taken(s));
            match free {
                Some(slot) => {
                    claims.push(Claim {
                        token: request.token,
                        member: Member::Slot(slot),
                        expiry,
                    });
                    Answer::Granted(slot)
                }
                None => Answer::Refused,
            }
        }
        Ask::Read => {
            let writer = claims.iter().any(|c| c.member == Member::Writer);
            let intent = claims.iter().any(|c| c.member == Member::Intent);
            if (writer && rules.readers_see_the_writer) || intent {
                Answer::Refused
            } else {
                claims.push(Claim {
                    token: request.token,
                    member: Member::Reader,
                    expiry,
                });
                Answer::Granted(0)
            }
        }
        Ask::Write => {
            let busy = claims
                .iter()
                .any(|c| matches!(c.member, Member::Reader | Member::Writer));
            let own = |c: &Claim| c.member == Member::Intent && c.token == request.waiter;
            claims.retain(|c| !own(c));
            if busy {
                // Records (or renews) its intent, for the intent's ttl (the lock's ttl).
                claims.push(Claim {
                    token: request.waiter,
                    member: Member::Intent,
                    expiry,
                });
                Answer::Refused
            } else {
                claims.push(Claim {
                    token: request.token,
                    member: Member::Writer,
                    expiry,
                });
                Answer::Granted(0)
            }
        }
    };
    claims.sort();
    answer
}

impl Claims {
    fn tick(&self, s: &mut State) {
        s.t += 1;
        let now = s.node_ms();
        for claims in &mut s.nodes {
            claims.retain(|c| c.expiry > now);
        }
        for c in 0..CLIENTS {
            let t = s.t;
            let client = &mut s.clients[c];
            let due = client.due;
            let Phase::Acquiring { answers, .. } = &mut client.phase else {
                continue;
            };
            let mut timed_out = false;
            for answer in answers.iter_mut() {
                if answer.is_none() && due < t {
                    *answer = Some(Answer::Failed);
                    timed_out = true;
                }
            }
            if timed_out {
                client.replies = [None; NODES];
                self.conclude(s, c);
            }
        }
    }

    fn attempt(&self, s: &mut State, c: usize, ask: Ask) {
        let token = s.next_token;
        s.next_token += 1;
        let client = &mut s.clients[c];
        let waiter = match (ask, client.waiter) {
            (Ask::Write, Some(waiter)) => waiter,
            (Ask::Write, None) => token,
            (_, Some(waiter)) => {
                // The writer's call ended without the write side: its intent is released.
                drop_intent(&mut s.nodes, waiter);
                token
            }
            (_, None) => token,
        };
        let (start_ms, t) = (s.client_ms(), s.t);
        let client = &mut s.clients[c];
        client.waiter = (ask == Ask::Write).then_some(waiter);
        client.phase = Phase::Acquiring {
            token,
            ask,
            start_ms,
            answers: [None; NODES],
        };
        client.requests = [Some(Request { token, ask, waiter }); NODES];
        client.due = t + 1;
    }

    fn arrive(&self, s: &mut State, c: usize, n: usize, late: bool) {
        let now = s.node_ms();
        let request = s.clients[c].requests[n].take().expect("a request");
        let answer = run(&self.rules, &mut s.nodes[n], request, self.permits(), now);
        let t = s.t;
        let client = &mut s.clients[c];
        match client.phase {
            Phase::Acquiring { token, answers, .. }
                if token == request.token && answers[n].is_none() =>
            {
                if late {
                    client.replies[n] = Some((answer, t + 1));
                } else {
                    self.deliver(s, c, n, answer);
                }
            }
            // Decided before this node answered: a claim on another slot than the one
            // granted is discarded (`attempt_member`), and so is the intent a writer's
            // refusal left (the drop of the intent follows on the connection).
            Phase::Held { token, member, .. } if token == request.token => {
                if self.rules.per_slot {
                    s.nodes[n].retain(|c| c.token != token || c.member == member);
                }
                if request.ask == Ask::Write {
                    s.nodes[n].retain(|c| c.token != request.waiter || c.member != Member::Intent);
                }
            }
            _ => {}
        }
    }

    fn deliver(&self, s: &mut State, c: usize, n: usize, answer: Answer) {
        if let Phase::Acquiring { answers, .. } = &mut s.clients[c].phase {
            answers[n] = Some(answer);
        }
        self.conclude(s, c);
    }

    /// Once the round of `c` is decided: its verdict (`attempt_member`).
    fn conclude(&self, s: &mut State, c: usize) {
        let now = s.client_ms();
        let Phase::Acquiring {
            token,
            ask,
            start_ms,
            answers,
        } = s.clients[c].phase
        else {
            return;
        };
        let mut tally = Tally::taking(NODES);
        if let (Ask::Write, Some(needed)) = (ask, self.rules.writer_needed) {
            tally = tally.needing(needed);
        }
        let mut granted = Vec::new();
        for answer in answers.iter().flatten() {
            tally.record(match answer {
                Answer::Granted(slot) => {
                    granted.push(u32::from(*slot));
                    Ballot::Yes
                }
                Answer::Refused => Ballot::No,
                Answer::Failed => Ballot::Failed,
            });
        }
        let best = algo::most_recorded(granted.iter().copied());
        let (decision, tally) = if self.rules.per_slot {
            let on_slot = best.map_or(0, |(_, n)| n);
            (
                algo::slot_decision(&tally, granted.iter().copied()),
                algo::narrowed(&tally, on_slot),
            )
        } else {
            (tally.decision(), tally)
        };
        if decision == Decision::Pending {
            return;
        }
        let client = &mut s.clients[c];
        client.replies = [None; NODES];
        let elapsed = Duration::from_millis(now - start_ms);
        match (best, algo::timed(&tally, TTL, drift(), elapsed)) {
            (Some((slot, _)), Timed::Valid(left)) => {
                let member = match ask {
                    Ask::Permit(..) => Member::Slot(slot as u8),
                    Ask::Read => Member::Reader,
                    Ask::Write => Member::Writer,
                };
                client.phase = Phase::Held {
                    token,
                    member,
                    valid_until: now + ms(left),
                };
                if let Some(waiter) = client.waiter.take() {
                    drop_intent(&mut s.nodes, waiter);
                }
                if self.rules.per_slot {
                    // The claims of this token on other slots go.
                    for claims in &mut s.nodes {
                        claims.retain(|c| c.token != token || c.member == member);
                    }
                }
                match member {
                    Member::Reader => s.seen |= seen::READER_GRANTED,
                    Member::Writer if s.seen & seen::READER_GRANTED != 0 => {
                        s.seen |= seen::WRITER_AFTER_READERS;
                    }
                    _ => {}
                }
            }
            _ => {
                // DISCARD follows the requests on each connection: they undo nothing.
                client.phase = Phase::Idle;
                client.requests = [None; NODES];
                delete(&mut s.nodes, token);
            }
        }
    }

    fn release(&self, s: &mut State, c: usize) {
        if let Phase::Held { token, .. } = s.clients[c].phase {
            delete(&mut s.nodes, token);
        }
        let client = &mut s.clients[c];
        client.phase = Phase::Idle;
        client.requests = [None; NODES];
    }
}

/// Every claim of `token` goes (PERMIT_DISCARD, PERMIT_RELEASE).
fn delete(nodes: &mut [Vec<Claim>; NODES], token: u8) {
    for claims in nodes {
        claims.retain(|c| c.token != token || c.member == Member::Intent);
    }
}

/// The intent of `waiter` goes from every node.
fn drop_intent(nodes: &mut [Vec<Claim>; NODES], waiter: u8) {
    for claims in nodes {
        claims.retain(|c| c.token != waiter || c.member != Member::Intent);
    }
}

impl Model for Claims {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            t: 0,
            nodes: Default::default(),
            clients: [Client::NONE; CLIENTS],
            next_token: 0,
            seen: 0,
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        let b = &self.bounds;
        if s.t < b.ticks {
            actions.push(Action::Tick);
        }
        for (c, client) in s.clients.iter().enumerate().take(b.clients) {
            for n in 0..NODES {
                if client.requests[n].is_some() {
                    actions.push(Action::Arrive(c, n));
                    let awaited = matches!(client.phase,
                        Phase::Acquiring { answers, token, .. }
                            if answers[n].is_none()
                                && client.requests[n].is_some_and(|r| r.token == token));
                    if awaited && b.late_replies && s.t < b.ticks {
                        actions.push(Action::ArriveLate(c, n));
                    }
                }
                if client.replies[n].is_some_and(|(_, at)| at <= s.t) {
                    actions.push(Action::Deliver(c, n));
                }
            }
            match client.phase {
                Phase::Idle if s.next_token < b.attempts => match b.resource {
                    Resource::Semaphore(_) => {
                        for (start, step) in self.orders() {
                            actions.push(Action::Attempt(c, Ask::Permit(start, step)));
                        }
                    }
                    Resource::RwLock => {
                        actions.push(Action::Attempt(c, Ask::Read));
                        actions.push(Action::Attempt(c, Ask::Write));
                    }
                },
                Phase::Held { .. } if b.releases => actions.push(Action::Release(c)),
                _ => {}
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Tick => self.tick(&mut s),
            Action::Attempt(c, ask) => self.attempt(&mut s, c, ask),
            Action::Arrive(c, n) => self.arrive(&mut s, c, n, false),
            Action::ArriveLate(c, n) => self.arrive(&mut s, c, n, true),
            Action::Deliver(c, n) => {
                let (answer, _) = s.clients[c].replies[n].take().expect("a reply");
                self.deliver(&mut s, c, n, answer);
            }
            Action::Release(c) => self.release(&mut s, c),
        }
        normalize(&mut s);
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        match self.bounds.resource {
            Resource::Semaphore(_) => vec![
                Property::always(AT_MOST_N, |m: &Claims, s: &State| {
                    s.holding().count() <= usize::from(m.permits())
                }),
                Property::sometimes(N_HOLDERS, |m: &Claims, s: &State| {
                    s.holding().count() == usize::from(m.permits())
                }),
            ],
            Resource::RwLock => vec![
                Property::always(WRITER_ALONE, |_, s: &State| {
                    s.writers() == 0 || s.holding().count() == 1
                }),
                Property::sometimes(TWO_READERS, |_, s: &State| s.readers() >= 2),
                Property::sometimes(WRITER_AFTER_READERS, |_, s: &State| {
                    s.seen & seen::WRITER_AFTER_READERS != 0
                }),
            ],
        }
    }
}

/// Forgets what no longer decides anything: the timeout of a process not acquiring, the
/// validity of a holder whose validity is over (it holds nothing, and only releases).
fn normalize(s: &mut State) {
    let now = s.client_ms();
    for client in &mut s.clients {
        match &mut client.phase {
            Phase::Acquiring { .. } => {}
            Phase::Held { valid_until, .. } => {
                client.due = 0;
                if *valid_until <= now {
                    *valid_until = 0;
                }
            }
            Phase::Idle => client.due = 0,
        }
    }
}

/// Every order of three nodes.
const ORDERS: [[usize; NODES]; 6] = [
    [0, 1, 2],
    [0, 2, 1],
    [1, 0, 2],
    [1, 2, 0],
    [2, 0, 1],
    [2, 1, 0],
];

impl stateright::Representative for State {
    /// Processes run the same code, and nodes are alike: a state with its processes, or its
    /// nodes, in another order is the same state. The least of its orders stands for it.
    fn representative(&self) -> Self {
        // The least state has the least nodes (they come before the processes in its
        // order): only the orders that give those are built in full.
        let nodes = |order: &[usize; NODES]| order.map(|n| &self.nodes[n]);
        let least = ORDERS.iter().map(nodes).min().expect("six orders");
        ORDERS
            .iter()
            .filter(|order| nodes(order) == least)
            .map(|order| {
                let mut s = self.clone();
                s.nodes = order.map(|n| self.nodes[n].clone());
                for client in &mut s.clients {
                    let from = *client;
                    client.requests = order.map(|n| from.requests[n]);
                    client.replies = order.map(|n| from.replies[n]);
                    if let Phase::Acquiring { answers, .. } = &mut client.phase {
                        *answers = order.map(|n| match from.phase {
                            Phase::Acquiring { answers, .. } => answers[n],
                            _ => unreachable!(),
                        });
                    }
                }
                s.clients.sort();
                s
            })
            .min()
            .expect("the least order")
    }
}

/// A path written out step by step: the tick, what happened, the claims on each node, and
/// who holds what.
pub fn show(path: &Path<State, Action>) -> String {
    let mut out = String::new();
    let states = path.clone().into_states();
    let actions = path.clone().into_actions();
    for (i, (action, s)) in actions.iter().zip(states.iter().skip(1)).enumerate() {
        let step = match *action {
            Action::Tick => "tick".to_string(),
            Action::Attempt(c, Ask::Permit(start, step)) => {
                format!("P{c} attempts {start}+{step}")
            }
            Action::Attempt(c, Ask::Read) => format!("P{c} reads"),
            Action::Attempt(c, Ask::Write) => format!("P{c} writes"),
            Action::Arrive(c, n) => format!("P{c} -> N{n}"),
            Action::ArriveLate(c, n) => format!("P{c} -> N{n} (late)"),
            Action::Deliver(c, n) => format!("P{c} <- N{n}"),
            Action::Release(c) => format!("P{c} releases"),
        };
        let nodes: Vec<String> = s
            .nodes
            .iter()
            .map(|claims| {
                let members: Vec<String> = claims
                    .iter()
                    .map(|c| match c.member {
                        Member::Slot(slot) => format!("{slot}:k{}", c.token),
                        Member::Reader => format!("r:k{}", c.token),
                        Member::Writer => format!("w:k{}", c.token),
                        Member::Intent => format!("i:k{}", c.token),
                    })
                    .collect();
                format!("[{}]", members.join(" "))
            })
            .collect();
        let now = s.client_ms();
        let held: Vec<String> = s
            .clients
            .iter()
            .enumerate()
            .filter_map(|(c, client)| match client.phase {
                Phase::Held {
                    token,
                    member,
                    valid_until,
                } if now < valid_until => Some(format!(
                    "P{c} holds {} (k{token}, until {valid_until} ms)",
                    match member {
                        Member::Slot(slot) => format!("slot {slot}"),
                        Member::Reader => "r".into(),
                        _ => "w".into(),
                    }
                )),
                _ => None,
            })
            .collect();
        let _ = writeln!(
            out,
            "{:>3}. t={} {:<18} {}  {}",
            i + 1,
            s.t,
            step,
            nodes.join(" "),
            held.join(", ")
        );
    }
    out
}
