//! The model as stateright sees it: the initial state, the actions enabled in a state, the
//! step each one takes (`client.rs`, `node.rs`), and the properties.

use stateright::{Model, Property};

use super::storage::{Storage, Write};
use super::system::{
    seen, Answers, Bounds, Channel, Client, Fencing, Node, Phase, Rules, Stage, Standing, State,
    Used, View, CLIENTS, NODES,
};
use quorumlock::__model::Ballot;

/// What can happen next.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// A tick of true time.
    Tick,
    /// Process `c` starts a lock attempt.
    Attempt(usize),
    /// The first request from process `c` reaches node `n` and runs there, and the process
    /// takes the reply at once.
    Arrive(usize, usize),
    /// The same, but the reply comes at the next tick (an acquisition's).
    ArriveLate(usize, usize),
    /// Process `c` takes node `n`'s reply.
    Deliver(usize, usize),
    /// Holder `c` asks for its fencing token.
    AskToken(usize),
    /// Holder `c` extends its lock.
    Extend(usize),
    /// Holder `c` releases its lock.
    Release(usize),
    /// Process `c` re-seeds node `n`, due.
    Reseed(usize, usize),
    /// Node `n` crashes and restarts, its server started at this many ms past a whole
    /// second of its clock.
    Restart(usize, u16),
    /// FLUSHALL on node `n`.
    Flush(usize),
    /// Process `c` pauses (a GC pause, a stopped VM).
    Pause(usize),
    /// Process `c` exits.
    Exit(usize),
    /// A new process starts in slot `c`.
    Start(usize),
    /// Holder `c` checks that its lock is valid, by its own clock (`storage.rs`).
    Check(usize),
    /// Holder `c`, checked, writes to the storage with its fencing token.
    Write(usize),
}

/// One configuration to check: the rules and the bounds.
#[derive(Clone, Debug)]
pub struct System<const N: usize = NODES, const C: usize = CLIENTS> {
    pub rules: Rules,
    pub bounds: Bounds<N>,
}

/// Property names, for the tests.
pub const ONE_HOLDER: &str = "one holder at a time";
pub const TOKENS_GROW: &str = "fencing tokens grow with the grants";
pub const GRANT: &str = "a lock is granted";
pub const TOKEN_AFTER_RESTART: &str = "a token is handed out after a restart";
pub const RESEED: &str = "a node is re-seeded";
pub const GRANT_AFTER_MAJORITY_LOST: &str = "a grant after a majority lost data";
pub const TOKEN_AFTER_MAJORITY_LOST: &str = "a token after a majority lost data";
pub const FLUSH_SEEN: &str = "a vote of a node flushed under the process is refused";
pub const GRANT_AFTER_FLUSH_SEEN: &str = "a grant after a flush seen by a vote";
pub const DATED_BACK: &str = "a young node's record dated back to its start";
pub const AT_THE_BOUNDARY: &str = "a record written where the rule before 91b693e dates otherwise";
pub const RESEED_STALE: &str = "a re-seed after the record its check found is gone";
pub const TERMS_GROW: &str = "terms grow with the leaders";
pub const LEADER_AFTER_RESTART: &str = "a leader after a restart";
pub const EVENTUALLY_GRANT: &str = "once faults stop, a process that keeps trying gets the lock";
pub const STORAGE_IN_ORDER: &str = "the storage never goes back";
pub const WRITE_REFUSED_AFTER_PAUSE: &str = "a write refused for an old token after a pause";
pub const LIVE_AFTER_FAULTS: &str = "a grant once faults stopped, after a restart and a pause";
pub const EXTENDED: &str = "a lock extended";
pub const RESTORED_AFTER_RESTART: &str = "a key restored after a restart";

impl<const N: usize, const C: usize> Model for System<N, C> {
    type State = State<N, C>;
    type Action = Action;

    fn init_states(&self) -> Vec<State<N, C>> {
        let state = State {
            t: 0,
            nodes: std::array::from_fn(|n| {
                let b = &self.bounds;
                Node::provisioned(
                    u8::from(b.persistent[n]) | b.restarts[n] << 1 | b.flushes[n] << 4,
                )
            }),
            clients: std::array::from_fn(|_| Client::none()),
            next_token: 0,
            grants: 0,
            used: Used::default(),
            fenced: None,
            out_of_order: false,
            seen: 0,
            majority_lost_at: None,
            fair_token: (self.bounds.fair_from == Some(0)).then_some(0),
            storage: Storage::default(),
        };
        let b = &self.bounds;
        let phases = if b.phases.is_empty() { &[0] } else { b.phases };
        let first: Vec<Option<u16>> = if b.restart_first {
            phases.iter().map(|&phase| Some(phase)).collect()
        } else {
            vec![None]
        };
        first
            .into_iter()
            .map(|restart| {
                let mut state = state.clone();
                if let Some(phase) = restart {
                    state.restart(&self.rules, b, 0, phase);
                }
                for c in 0..C {
                    state.start(&self.rules, c);
                }
                state.used.starts = 0;
                state
            })
            .collect()
    }

    fn actions(&self, s: &State<N, C>, actions: &mut Vec<Action>) {
        let b = &self.bounds;
        // Once faults stop (`live.rs`): no fault is offered, the tick waits until the run
        // is settled, and a path ends at its goal.
        let fair = self.fair(s);
        if fair && self.live(s) {
            return;
        }
        // A running process writes within the tick it checked: only a pause lets time pass
        // between its check and its write (`storage.rs`).
        let writing = s
            .clients
            .iter()
            .any(|c| c.active(s.t) && matches!(c.write, Write::Checked { .. }));
        if s.t < b.ticks && (!fair || self.settled(s)) && !writing {
            actions.push(Action::Tick);
        }
        for (c, client) in s.clients.iter().enumerate() {
            let room = s.used.starts < b.processes;
            if !client.alive {
                if room || fair {
                    actions.push(Action::Start(c));
                }
                continue;
            }
            if room && b.lifetime.is_none() && !fair {
                actions.push(Action::Exit(c));
            }
            let active = client.active(s.t);
            for (n, channel) in client.channels.iter().enumerate() {
                if let Some(request) = channel.requests.first() {
                    let current = client.round() == Some(request.round);
                    actions.push(Action::Arrive(c, n));
                    // Only an acquisition's or an extension's verdict reads how long its
                    // round took.
                    let timed = matches!(request.round.stage, Stage::Acquire | Stage::Extend(_));
                    if current && timed && b.late_replies && s.t < b.ticks && !fair {
                        actions.push(Action::ArriveLate(c, n));
                    }
                }
            }
            if !active {
                continue;
            }
            // Where holders write, a pause falls between a check and its write, the
            // article's (pauses elsewhere are the runs without writes).
            let checked = matches!(client.write, Write::Checked { .. });
            if s.used.pauses < b.pauses && !fair && (checked || !b.writes) {
                actions.push(Action::Pause(c));
            }
            match client.phase {
                // Once fair, a process keeps trying, once a tick (`live.rs`).
                Phase::Idle if fair && s.may_attempt(c) => {
                    actions.push(Action::Attempt(c));
                }
                Phase::Idle if !fair && s.next_token < b.attempts => {
                    actions.push(Action::Attempt(c));
                }
                // A campaign asks its term first, and releases once it has it (resigns) or
                // cannot have it (and campaigns again): `election.rs`.
                Phase::Held { fencing, .. } if b.election => match fencing {
                    Fencing::NotAsked => actions.push(Action::AskToken(c)),
                    Fencing::Handed(_) | Fencing::Refused => actions.push(Action::Release(c)),
                    Fencing::Peeking(_) | Fencing::Recording(..) => {}
                },
                Phase::Held {
                    fencing,
                    extension,
                    valid_until,
                    ..
                } => {
                    // One round at a time: a token is not asked during an extension, nor
                    // an extension started during PEEK or FENCE.
                    let fencing_round =
                        matches!(fencing, Fencing::Peeking(_) | Fencing::Recording(..));
                    let extending = extension.is_some();
                    if b.tokens && fencing == Fencing::NotAsked && !extending {
                        actions.push(Action::AskToken(c));
                    }
                    let valid = s.client_ms() < valid_until;
                    let room = s.used.extensions < b.extensions;
                    if room && valid && !fair && !extending && !fencing_round {
                        actions.push(Action::Extend(c));
                    }
                    if b.writes && s.may_check(c) {
                        actions.push(Action::Check(c));
                    }
                    if b.writes && checked {
                        actions.push(Action::Write(c));
                    }
                    // Where holders write, a holder keeps its lock, as in the article (its
                    // lock runs out).
                    if !b.writes {
                        actions.push(Action::Release(c));
                    }
                }
                _ => {}
            }
            for (n, view) in client.views.iter().enumerate() {
                let channel = &client.channels[n];
                if channel.reply.is_some() && s.t >= channel.reply_at {
                    actions.push(Action::Deliver(c, n));
                }
                if view.checked
                    && view.marker.is_none()
                    && view.reseed_due.is_some_and(|due| due <= s.client_ms())
                {
                    actions.push(Action::Reseed(c, n));
                }
            }
        }
        let phases = if b.phases.is_empty() { &[0] } else { b.phases };
        for n in (0..N).filter(|_| !fair) {
            if s.t <= b.restarts_by && s.used.restarts[n] < b.restarts[n] {
                actions.extend(phases.iter().map(|&phase| Action::Restart(n, phase)));
            }
            if s.t <= b.flushes_by && s.used.flushes[n] < b.flushes[n] {
                actions.push(Action::Flush(n));
            }
        }
    }

    fn next_state(&self, last: &State<N, C>, action: Action) -> Option<State<N, C>> {
        let mut s = last.clone();
        let rules = &self.rules;
        match action {
            Action::Tick => s.tick(rules, &self.bounds),
            Action::Attempt(c) => s.attempt(rules, c),
            Action::Arrive(c, n) => s.arrive(rules, c, n, false),
            Action::ArriveLate(c, n) => s.arrive(rules, c, n, true),
            Action::Deliver(c, n) => s.deliver(rules, c, n),
            Action::AskToken(c) => s.ask_token(rules, c),
            Action::Extend(c) => s.extend(rules, c),
            Action::Release(c) => s.release(c),
            Action::Reseed(c, n) => {
                if !s.reseed(rules, c, n) {
                    return None;
                }
            }
            Action::Restart(n, phase) => s.restart(rules, &self.bounds, n, phase),
            Action::Flush(n) => s.flush(n),
            Action::Pause(c) => {
                s.used.pauses += 1;
                s.clients[c].paused_until = s.t + self.bounds.pause_ticks;
                if let Write::Checked { paused } = &mut s.clients[c].write {
                    *paused = true;
                }
            }
            Action::Check(c) => s.check_lock(c),
            Action::Write(c) => s.write(rules.fenced_storage, c),
            Action::Exit(c) => s.exit(c),
            Action::Start(c) => s.start(rules, c),
        }
        if self.bounds.election {
            s.note_leaders(last);
        }
        s.normalize(&self.bounds);
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut properties = vec![
            Property::always(ONE_HOLDER, |_, s: &State<N, C>| s.holders() <= 1),
            Property::always(TOKENS_GROW, |_, s: &State<N, C>| !s.out_of_order),
            Property::always(STORAGE_IN_ORDER, |_, s: &State<N, C>| !s.storage.went_back),
            Property::sometimes(WRITE_REFUSED_AFTER_PAUSE, |_, s: &State<N, C>| {
                s.storage.refused_after_pause
            }),
            Property::sometimes(GRANT, |_, s: &State<N, C>| s.seen & seen::GRANT != 0),
            Property::sometimes(TOKEN_AFTER_RESTART, |_, s: &State<N, C>| {
                s.seen & seen::TOKEN_AFTER_RESTART != 0
            }),
            Property::sometimes(RESEED, |_, s: &State<N, C>| s.seen & seen::RESEED != 0),
            Property::sometimes(GRANT_AFTER_MAJORITY_LOST, |_, s: &State<N, C>| {
                s.seen & seen::GRANT_AFTER_MAJORITY_LOST != 0
            }),
            Property::sometimes(TOKEN_AFTER_MAJORITY_LOST, |_, s: &State<N, C>| {
                s.seen & seen::TOKEN_AFTER_MAJORITY_LOST != 0
            }),
            Property::sometimes(FLUSH_SEEN, |_, s: &State<N, C>| {
                s.seen & seen::FLUSH_SEEN != 0
            }),
            Property::sometimes(GRANT_AFTER_FLUSH_SEEN, |_, s: &State<N, C>| {
                s.seen & seen::GRANT_AFTER_FLUSH_SEEN != 0
            }),
            Property::sometimes(DATED_BACK, |_, s: &State<N, C>| {
                s.seen & seen::DATED_BACK != 0
            }),
            Property::sometimes(AT_THE_BOUNDARY, |_, s: &State<N, C>| {
                s.seen & seen::AT_THE_BOUNDARY != 0
            }),
            Property::sometimes(RESEED_STALE, |_, s: &State<N, C>| {
                s.seen & seen::RESEED_STALE != 0
            }),
            Property::sometimes(EXTENDED, |_, s: &State<N, C>| s.seen & seen::EXTENDED != 0),
            Property::sometimes(RESTORED_AFTER_RESTART, |_, s: &State<N, C>| {
                s.seen & seen::RESTORED_AFTER_RESTART != 0
            }),
        ];
        if self.bounds.election {
            properties.push(Property::always(TERMS_GROW, |_, s: &State<N, C>| {
                s.seen & seen::TERM_NOT_GREATER == 0
            }));
            properties.push(Property::sometimes(
                LEADER_AFTER_RESTART,
                |_, s: &State<N, C>| s.seen & seen::LEADER_AFTER_RESTART != 0,
            ));
        }
        if self.bounds.fair_from.is_some() {
            // On every path to a terminal state (the model is bounded in ticks: every path
            // ends). The flag is kept once set, so a path that meets another in one state
            // has the same answer.
            properties.push(Property::eventually(
                EVENTUALLY_GRANT,
                |m: &System<N, C>, s| m.live(s),
            ));
            properties.push(Property::sometimes(
                LIVE_AFTER_FAULTS,
                |m: &System<N, C>, s| m.live(s) && s.seen & seen::RESTART != 0 && s.used.pauses > 0,
            ));
        }
        properties
    }
}

impl<const N: usize, const C: usize> State<N, C> {
    /// Forgets the instants that no longer decide anything, so that states that differ
    /// only in them are one state: a quarantine, a re-seed's due time or a pause that is
    /// over, the timeout of a node that answered, when a process started if its life is not
    /// bounded.
    pub fn normalize(&mut self, bounds: &Bounds<N>) {
        let (now, t) = (self.client_ms(), self.t);
        for client in &mut self.clients {
            if client.paused_until <= t {
                client.paused_until = 0;
            }
            if bounds.lifetime.is_none() {
                client.born = 0;
            }
            for view in &mut client.views {
                if view.quarantined_until <= now {
                    view.quarantined_until = 0;
                }
                if view.reseed_due.is_some_and(|due| due <= now) {
                    view.reseed_due = Some(0);
                }
            }
            // An extension's answer no longer awaited (past the node timeout) restores
            // nothing.
            for channel in &mut client.channels {
                for request in &mut channel.requests {
                    if matches!(request.round.stage, Stage::Extend(Standing::Stood(due)) if due < t)
                    {
                        request.round.stage = Stage::Extend(Standing::Fell);
                    }
                }
            }
            let awaited: [bool; N] = match client.answers() {
                Some(answers) => answers.map(|a| a.is_none()),
                None => [false; N],
            };
            for (channel, awaited) in client.channels.iter_mut().zip(awaited) {
                if !awaited {
                    channel.due = 0;
                }
                if channel.reply.is_none() {
                    channel.reply_at = 0;
                }
            }
        }
    }
}

/// An order of the nodes that keeps each node's class where it is and sorts the nodes of
/// each class by `key`, with the places whose nodes have equal keys (runs of two or more).
fn arranged<const N: usize, K: Ord>(
    nodes: &[Node; N],
    key: impl Fn(usize) -> K,
) -> ([usize; N], Vec<Vec<usize>>) {
    let mut sorted: [usize; N] = std::array::from_fn(|n| n);
    let mut classes: Vec<u8> = nodes.iter().map(|node| node.class).collect();
    classes.sort();
    classes.dedup();
    let mut ties = Vec::new();
    for class in classes {
        let places: Vec<usize> = (0..N).filter(|&n| nodes[n].class == class).collect();
        let mut ours = places.clone();
        ours.sort_by_key(|&n| key(n));
        for (&place, &node) in places.iter().zip(&ours) {
            sorted[place] = node;
        }
        let mut from = 0;
        while from < places.len() {
            let to = (from..places.len())
                .find(|&i| key(ours[i]) != key(ours[from]))
                .unwrap_or(places.len());
            if to - from > 1 {
                ties.push(places[from..to].to_vec());
            }
            from = to;
        }
    }
    (sorted, ties)
}

/// `order` with every permutation of the nodes among the places of each of `ties`.
fn permuted<const N: usize>(order: [usize; N], ties: &[Vec<usize>]) -> Vec<[usize; N]> {
    let mut orders = vec![order];
    for places in ties {
        for (i, &place) in places.iter().enumerate() {
            orders = orders
                .into_iter()
                .flat_map(|order| {
                    places[i..].iter().map(move |&other| {
                        let mut order = order;
                        order.swap(place, other);
                        order
                    })
                })
                .collect();
        }
    }
    orders
}

/// Up to this many orders of the nodes, the representative is the least state of them all
/// (always, with three nodes).
const ORDERS_IN_FULL: usize = 6;

/// What the processes hold of one node, in the order of the processes.
type Column = Vec<(View, Channel, Option<(Ballot, u64)>)>;

/// What a state holds of one node: the node, its faults so far, and what each process holds
/// of it.
type NodeKey<'a> = (&'a Node, u8, u8, Column);

impl<const N: usize, const C: usize> State<N, C> {
    /// What process `c` holds of node `n`: its view, its channel, its answer in the round
    /// under way.
    fn holds_of(&self, c: usize, n: usize) -> (View, Channel, Option<(Ballot, u64)>) {
        let client = &self.clients[c];
        let answer = match client.phase {
            Phase::Acquiring { answers, .. } => answers[n],
            Phase::Held {
                extension: Some((_, answers)),
                ..
            } => answers[n],
            Phase::Held {
                fencing: Fencing::Peeking(answers) | Fencing::Recording(_, answers),
                ..
            } => answers[n],
            _ => None,
        };
        (client.views[n], client.channels[n].clone(), answer)
    }

    /// Node `n` with all the state holds of it, the processes in their order.
    fn node_key(&self, n: usize) -> NodeKey<'_> {
        let column = (0..C).map(|c| self.holds_of(c, n)).collect();
        (
            &self.nodes[n],
            self.used.restarts[n],
            self.used.flushes[n],
            column,
        )
    }

    /// Process `c` whatever the order of the nodes: itself without what it holds of each
    /// node, and that, with the node, in the order of the values.
    fn client_key(&self, c: usize) -> (Client<N>, Vec<NodeKey<'_>>) {
        let mut client = self.clients[c].clone();
        client.views = [View::default(); N];
        client.channels = std::array::from_fn(|_| Channel::default());
        let blank = [None; N];
        match &mut client.phase {
            Phase::Acquiring { answers, .. } => *answers = blank,
            Phase::Held {
                extension: Some((_, answers)),
                ..
            } => *answers = blank,
            Phase::Held {
                fencing: Fencing::Peeking(answers) | Fencing::Recording(_, answers),
                ..
            } => *answers = blank,
            _ => {}
        }
        let mut nodes: Vec<NodeKey<'_>> = (0..N)
            .map(|n| {
                let (node, restarts, flushes, _) = self.node_key(n);
                (node, restarts, flushes, vec![self.holds_of(c, n)])
            })
            .collect();
        nodes.sort();
        (client, nodes)
    }

    /// The representative where many nodes are alike (five nodes, most of them untouched),
    /// without trying every order of them: the processes in the order of what they are
    /// whatever the order of the nodes (every order among processes alike in that), then,
    /// for each such order of the processes, the nodes in the order of all the state holds
    /// of them (nodes alike in that are alike in the whole state, so their order is moot).
    /// The least of these states stands for the class: every state of it gives the same.
    fn canonical(&self) -> Self {
        let keys: Vec<_> = (0..C).map(|c| self.client_key(c)).collect();
        let mut slots: [usize; C] = std::array::from_fn(|c| c);
        slots.sort_by(|&a, &b| keys[a].cmp(&keys[b]));
        let mut ties = Vec::new();
        let mut from = 0;
        while from < C {
            let to = (from..C)
                .find(|&i| keys[slots[i]] != keys[slots[from]])
                .unwrap_or(C);
            if to - from > 1 {
                ties.push((from..to).collect());
            }
            from = to;
        }
        permuted(slots, &ties)
            .into_iter()
            .map(|slots| {
                let mut s = self.clone();
                s.clients = std::array::from_fn(|i| self.clients[slots[i]].clone());
                let (order, _) = arranged(&s.nodes, |n| s.node_key(n));
                s.reordered(order)
            })
            .min()
            .expect("an order of the processes")
    }

    /// The same state with node `order[i]` as node `i`, in every place a node is named.
    fn reordered(&self, order: [usize; N]) -> State<N, C> {
        let mut s = self.clone();
        let pick = |n: usize| order[n];
        s.nodes = std::array::from_fn(|n| self.nodes[pick(n)].clone());
        s.used.restarts = std::array::from_fn(|n| self.used.restarts[pick(n)]);
        s.used.flushes = std::array::from_fn(|n| self.used.flushes[pick(n)]);
        for (to, from) in s.clients.iter_mut().zip(&self.clients) {
            to.views = std::array::from_fn(|n| from.views[pick(n)]);
            to.channels = std::array::from_fn(|n| from.channels[pick(n)].clone());
            let reorder = |a: &Answers<N>| -> Answers<N> { std::array::from_fn(|n| a[pick(n)]) };
            to.phase = match from.phase {
                Phase::Acquiring {
                    token,
                    start_ms,
                    answers,
                } => Phase::Acquiring {
                    token,
                    start_ms,
                    answers: reorder(&answers),
                },
                Phase::Held {
                    token,
                    valid_until,
                    hold,
                    fencing,
                    extension,
                } => Phase::Held {
                    token,
                    valid_until,
                    hold,
                    fencing: match fencing {
                        Fencing::Peeking(a) => Fencing::Peeking(reorder(&a)),
                        Fencing::Recording(f, a) => Fencing::Recording(f, reorder(&a)),
                        other => other,
                    },
                    extension: extension.map(|(start, a)| (start, reorder(&a))),
                },
                Phase::Idle => Phase::Idle,
            };
        }
        s
    }
}

impl<const N: usize, const C: usize> stateright::Representative for State<N, C> {
    /// Client slots run the same code under the same rules, and nodes of one class are
    /// alike: a state with its slots, or such nodes, in another order is the same state.
    /// The least of its orders stands for it.
    fn representative(&self) -> Self {
        // The least state has the least nodes first (they come before the clients in its
        // order): only the orders that give those are tried in full.
        let (order, ties) = arranged(&self.nodes, |n| &self.nodes[n]);
        let orders = permuted(order, &ties);
        if orders.len() > ORDERS_IN_FULL {
            // Which way is taken depends on the nodes alone, so on the class of the state.
            return self.canonical();
        }
        orders
            .into_iter()
            .map(|order| {
                let mut s = self.reordered(order);
                s.clients.sort();
                s
            })
            .min()
            .expect("the identity is an order")
    }
}
