//! The semaphore and the read-write lock (design 2.9): claims in one sorted set per resource
//! on each node, taken in one round by `engine::acquire::attempt` of the claim kind `Seat`
//! (`engine::semaphore`), and decided on one slot recorded by a majority, with the lock's
//! validity rule.
//!
//! Time, clocks and the ttl are the lock model's (`system.rs`: ticks of 2 s, nodes 10% fast,
//! clients 10% slow, a 4 s ttl, the drift factor 0.2). The client's decisions are the
//! crate's, through `quorumlock::__model`: the preference order (`slots::preference`), the
//! tally (`Tally`), when the round is decided (`slots::decision`), the slot granted
//! (`slots::most_recorded`), the tally its verdict sees (`slots::narrowed`) and the verdict
//! (`verdict::timed`, `quorumlock::drift`). What the model writes itself is what a node does
//! (the Lua of PERMIT_ACQUIRE and RW_ACQUIRE, `src/node/scripts/`, rewritten as Rust) and
//! the order of the client's steps (`claims_steps.rs`). This file holds the rules, the
//! bounds and the state; `claims_explore.rs` the model as stateright sees it.
//!
//! The nodes keep their data here: a node's admission (its check, quarantine and re-seed)
//! is the same for every primitive and is checked by the lock's runs.

use quorumlock::__model as algo;

use super::system::{CLIENT_MS_PER_TICK, NODE_MS_PER_TICK, UP_AT_START_MS};

/// Nodes of the default runs: a run's node count is the const parameter `N` of
/// [`Claims`] and of its state.
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
pub enum Phase<const N: usize = NODES> {
    Idle,
    Acquiring {
        token: u8,
        ask: Ask,
        start_ms: u64,
        answers: [Option<Answer>; N],
    },
    Held {
        token: u8,
        member: Member,
        valid_until: u64,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Client<const N: usize = NODES> {
    pub phase: Phase<N>,
    /// The request on its way to each node, not yet run.
    pub requests: [Option<Request>; N],
    /// The tick by the end of which the round's replies must have come.
    pub due: u8,
    /// A reply that comes late, and the tick it comes at.
    pub replies: [Option<(Answer, u8)>; N],
    /// A writer's call under way (refused so far): its waiter, whose intent the nodes that
    /// refused it hold.
    pub waiter: Option<u8>,
}

impl<const N: usize> Client<N> {
    pub const NONE: Client<N> = Client {
        phase: Phase::Idle,
        requests: [None; N],
        due: 0,
        replies: [None; N],
        waiter: None,
    };
}

/// Bits of what a run has seen, for the `sometimes` properties.
pub mod seen {
    pub const READER_GRANTED: u8 = 1;
    pub const WRITER_AFTER_READERS: u8 = 2;
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct State<const N: usize = NODES> {
    pub t: u8,
    /// Each node's sorted set, kept sorted.
    pub nodes: [Vec<Claim>; N],
    pub clients: [Client<N>; CLIENTS],
    pub next_token: u8,
    pub seen: u8,
}

impl<const N: usize> State<N> {
    pub fn node_ms(&self) -> u64 {
        UP_AT_START_MS + NODE_MS_PER_TICK * u64::from(self.t)
    }

    pub fn client_ms(&self) -> u64 {
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

    pub fn writers(&self) -> usize {
        self.holding().filter(|m| *m == Member::Writer).count()
    }

    pub fn readers(&self) -> usize {
        self.holding().filter(|m| *m == Member::Reader).count()
    }
}

/// One configuration to check, on `N` nodes.
#[derive(Clone, Debug)]
pub struct Claims<const N: usize = NODES> {
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

impl<const N: usize> Claims<N> {
    pub fn permits(&self) -> u8 {
        match self.bounds.resource {
            Resource::Semaphore(permits) => permits,
            Resource::RwLock => 1,
        }
    }

    /// Every preference order an attempt may draw (`slots::preference` over every sample
    /// that matters: both are taken modulo the permits).
    pub fn orders(&self) -> Vec<(u8, u8)> {
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
