//! The semaphore's and read-write lock's model as stateright sees it (`claims.rs`): the
//! initial state, the actions enabled in a state, the properties, the symmetry, and a path
//! written out for the failure messages and docs/verification.md.

use std::fmt::Write;

use stateright::{Model, Path, Property};

use super::claims::{
    seen, Action, Ask, Claim, Claims, Client, Member, Phase, Resource, State, AT_MOST_N, CLIENTS,
    N_HOLDERS, TWO_READERS, WRITER_AFTER_READERS, WRITER_ALONE,
};

impl<const N: usize> Model for Claims<N> {
    type State = State<N>;
    type Action = Action;

    fn init_states(&self) -> Vec<State<N>> {
        vec![State {
            t: 0,
            nodes: std::array::from_fn(|_| Vec::new()),
            clients: [Client::NONE; CLIENTS],
            next_token: 0,
            seen: 0,
        }]
    }

    fn actions(&self, s: &State<N>, actions: &mut Vec<Action>) {
        let b = &self.bounds;
        if s.t < b.ticks {
            actions.push(Action::Tick);
        }
        for (c, client) in s.clients.iter().enumerate().take(b.clients) {
            for n in 0..N {
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

    fn next_state(&self, last: &State<N>, action: Action) -> Option<State<N>> {
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
                Property::always(AT_MOST_N, |m: &Claims<N>, s: &State<N>| {
                    s.holding().count() <= usize::from(m.permits())
                }),
                Property::sometimes(N_HOLDERS, |m: &Claims<N>, s: &State<N>| {
                    s.holding().count() == usize::from(m.permits())
                }),
            ],
            Resource::RwLock => vec![
                Property::always(WRITER_ALONE, |_, s: &State<N>| {
                    s.writers() == 0 || s.holding().count() == 1
                }),
                Property::sometimes(TWO_READERS, |_, s: &State<N>| s.readers() >= 2),
                Property::sometimes(WRITER_AFTER_READERS, |_, s: &State<N>| {
                    s.seen & seen::WRITER_AFTER_READERS != 0
                }),
            ],
        }
    }
}

/// Forgets what no longer decides anything: the timeout of a process not acquiring, the
/// validity of a holder whose validity is over (it holds nothing, and only releases).
fn normalize<const N: usize>(s: &mut State<N>) {
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

/// The orders of the nodes that arrange them least: sorted, and every order within each run
/// of equal nodes (the same orders as the least of all `N!`, without building the others).
fn least_orders<const N: usize>(nodes: &[Vec<Claim>; N]) -> Vec<[usize; N]> {
    let mut sorted: [usize; N] = std::array::from_fn(|n| n);
    sorted.sort_by(|&a, &b| nodes[a].cmp(&nodes[b]));
    let mut orders = vec![sorted];
    let mut from = 0;
    while from < N {
        let to = (from..N)
            .find(|&i| nodes[sorted[i]] != nodes[sorted[from]])
            .unwrap_or(N);
        // Every permutation of the positions `from..to` of each order so far.
        for i in from..to {
            orders = orders
                .into_iter()
                .flat_map(|order| {
                    (i..to).map(move |j| {
                        let mut order = order;
                        order.swap(i, j);
                        order
                    })
                })
                .collect();
        }
        from = to;
    }
    orders
}

impl<const N: usize> stateright::Representative for State<N> {
    /// Processes run the same code, and nodes are alike: a state with its processes, or its
    /// nodes, in another order is the same state. The least of its orders stands for it.
    fn representative(&self) -> Self {
        // The least state has the least nodes (they come before the processes in its
        // order): only the orders that give those are built in full.
        least_orders(&self.nodes)
            .iter()
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
pub fn show<const N: usize>(path: &Path<State<N>, Action>) -> String {
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
