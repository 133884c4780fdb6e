//! What a client process does with its rounds, step by step, taking every decision with the
//! crate's own code (`quorumlock::__model`, which forwards to `src/algo/`): the tally and
//! verdict of each round (`Tally`, `timed`, `confirmation`, `quorumlock::drift`) and the
//! token (`next_token`). What is written here is the order of the steps, as `engine/` takes
//! them; the checks and re-seeds are in `loss.rs`.

use std::time::Duration;

use quorumlock::__model::{self as algo, Ballot, Confirmation, Decision, Tally, Timed};

use super::storage::Write;
use super::system::{
    seen, Answers, Bounds, Channel, Client, Fencing, Phase, Request, Round, Rules, Stage, Standing,
    State, View, TTL,
};

fn ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

/// The EXTEND script's answer where the key is missing (`node::Extended::Missing`).
pub const MISSING: u64 = 2;

/// A RESTORE of `token`'s key, raising the counters to `fence`.
fn restore(token: u8, fence: u64) -> Request {
    Request {
        round: Round {
            token,
            stage: Stage::Restore(fence),
        },
        marker: None,
    }
}

impl Rules {
    /// A fresh tally for a round of `stage` (taking a lock, or PEEK or FENCE on a lock we
    /// hold).
    fn tally<const N: usize>(&self, answers: &Answers<N>, stage: Stage) -> Tally {
        let mut tally = match stage {
            Stage::Acquire => Tally::taking(N),
            // `Stake::Held`: extend, release, PEEK, FENCE (RESTORE is not tallied).
            Stage::Peek | Stage::Fence(_) | Stage::Extend(_) | Stage::Restore(_) => {
                Tally::holding(N)
            }
        };
        if let Some(needed) = self.needed {
            tally = tally.needing(needed);
        }
        let only = match stage {
            Stage::Acquire | Stage::Extend(_) | Stage::Restore(_) => None,
            Stage::Peek => self.peek_needed,
            Stage::Fence(_) => self.fence_needed,
        };
        if let Some(needed) = only {
            tally = tally.needing(needed);
        }
        for (ballot, _) in answers.iter().flatten() {
            tally.record(*ballot);
        }
        tally
    }

    fn drift(&self) -> Duration {
        if self.drift {
            quorumlock::drift(TTL, super::system::DRIFT_FACTOR).expect("a valid drift factor")
        } else {
            Duration::ZERO
        }
    }
}

impl<const N: usize> Client<N> {
    /// No process in the slot yet.
    pub fn none() -> Client<N> {
        Client {
            alive: false,
            born: 0,
            paused_until: 0,
            tried: false,
            views: [View::default(); N],
            channels: std::array::from_fn(|_| Channel::default()),
            phase: Phase::Idle,
            write: Write::None,
        }
    }

    /// The round under way, if any.
    pub fn round(&self) -> Option<Round> {
        match self.phase {
            Phase::Acquiring { token, .. } => Some(Round {
                token,
                stage: Stage::Acquire,
            }),
            Phase::Held {
                token,
                extension: Some(_),
                ..
            } => Some(Round {
                token,
                stage: Stage::Extend(Standing::Pending),
            }),
            Phase::Held {
                token,
                fencing: Fencing::Peeking(_),
                ..
            } => Some(Round {
                token,
                stage: Stage::Peek,
            }),
            Phase::Held {
                token,
                fencing: Fencing::Recording(f, _),
                ..
            } => Some(Round {
                token,
                stage: Stage::Fence(f),
            }),
            _ => None,
        }
    }

    /// The answers of the round under way, if any.
    pub fn answers(&mut self) -> Option<&mut Answers<N>> {
        match &mut self.phase {
            Phase::Acquiring { answers, .. }
            | Phase::Held {
                extension: Some((_, answers)),
                ..
            }
            | Phase::Held {
                fencing: Fencing::Peeking(answers) | Fencing::Recording(_, answers),
                ..
            } => Some(answers),
            _ => None,
        }
    }

    /// The fencing token handed out to its hold, 0 if none (`Ident::handed_fence`).
    pub fn handed(&self) -> u64 {
        match self.phase {
            Phase::Held {
                fencing: Fencing::Handed(f),
                ..
            } => f,
            _ => 0,
        }
    }

    /// Whether it may take a step at tick `t`: alive, and not paused.
    pub fn active(&self, t: u8) -> bool {
        self.alive && t >= self.paused_until
    }

    /// Whether node `n`'s votes count now, by the clock reading `now`.
    pub fn admitted(&self, n: usize, now: u64) -> bool {
        let view = &self.views[n];
        view.checked && now >= view.quarantined_until
    }
}

impl<const N: usize, const C: usize> State<N, C> {
    /// A new process in slot `c`: it connects to every node and checks each.
    pub fn start(&mut self, rules: &Rules, c: usize) {
        self.used.starts += 1;
        self.clients[c] = Client {
            alive: true,
            born: self.t,
            ..Client::none()
        };
        for n in 0..N {
            self.check(rules, c, n);
        }
    }

    /// The process in slot `c` exits; what it had sent and not yet had run goes with it.
    pub fn exit(&mut self, c: usize) {
        self.clients[c] = Client::none();
    }

    /// Sends the current round of process `c` to every node whose votes count (and, for
    /// PEEK and FENCE, whose counters are trusted); the others fail at once.
    fn send(&mut self, c: usize) {
        let (now, t) = (self.client_ms(), self.t);
        let client = &mut self.clients[c];
        let round = client.round().expect("a round under way");
        for n in 0..N {
            let marker = client.views[n].marker;
            // Only PEEK and FENCE are about the counters, and carry the marker.
            let fenced = matches!(round.stage, Stage::Peek | Stage::Fence(_));
            let counters = !fenced || marker.is_some();
            if client.admitted(n, now) && counters {
                let marker = marker.filter(|_| fenced);
                let channel = &mut client.channels[n];
                channel.requests.push(Request { round, marker });
                channel.due = t + 1;
            } else {
                client.answers().expect("answers")[n] = Some((Ballot::Failed, 0));
            }
        }
    }

    /// A tick of true time: keys expire; a process that took no reply from a node by the
    /// end of the tick after its request counts a timeout.
    pub fn tick(&mut self, rules: &Rules, bounds: &Bounds<N>) {
        self.t += 1;
        let now = self.node_ms();
        self.nodes.iter_mut().for_each(|node| node.expire(now));
        if let Some(life) = bounds.lifetime {
            for client in &mut self.clients {
                if client.alive && self.t >= client.born + life {
                    *client = Client::none();
                }
            }
        }
        self.fair_tick(bounds);
        for c in 0..self.clients.len() {
            let t = self.t;
            let client = &mut self.clients[c];
            if !client.active(t) {
                continue;
            }
            let overdue: Vec<usize> = (0..N).filter(|&n| client.channels[n].due < t).collect();
            let Some(answers) = client.answers() else {
                continue;
            };
            let mut timed_out = false;
            for n in overdue {
                if answers[n].is_none() {
                    answers[n] = Some((Ballot::Failed, 0));
                    timed_out = true;
                }
            }
            if timed_out {
                client.channels.iter_mut().for_each(|ch| ch.reply = None);
                self.conclude(rules, c);
            }
        }
    }

    /// Process `c` starts an attempt: a new token, SET NX on every node.
    pub fn attempt(&mut self, rules: &Rules, c: usize) {
        let token = self.next_token;
        self.next_token += 1;
        self.clients[c].tried = self.fair_token.is_some();
        self.clients[c].phase = Phase::Acquiring {
            token,
            start_ms: self.client_ms(),
            answers: [None; N],
        };
        self.send(c);
        self.conclude(rules, c);
    }

    /// The holder `c` asks for its fencing token: PEEK, then FENCE (`engine/fencing.rs`),
    /// unless its validity is over.
    pub fn ask_token(&mut self, rules: &Rules, c: usize) {
        let now = self.client_ms();
        let Phase::Held {
            valid_until,
            fencing,
            ..
        } = &mut self.clients[c].phase
        else {
            return;
        };
        if now >= *valid_until {
            *fencing = Fencing::Refused;
            return;
        }
        *fencing = Fencing::Peeking([None; N]);
        self.send(c);
        self.conclude(rules, c);
    }

    /// The holder `c` extends its lock: EXTEND on every node whose votes count
    /// (`Extendable::extension`), refused unless its validity is not over.
    pub fn extend(&mut self, rules: &Rules, c: usize) {
        let now = self.client_ms();
        let Phase::Held {
            valid_until,
            extension,
            ..
        } = &mut self.clients[c].phase
        else {
            return;
        };
        if now >= *valid_until {
            return;
        }
        *extension = Some((now, [None; N]));
        self.used.extensions += 1;
        self.send(c);
        self.conclude(rules, c);
    }

    /// Process `c` releases its lock: compare-and-delete on every node.
    pub fn release(&mut self, c: usize) {
        if let Phase::Held { token, .. } = self.clients[c].phase {
            self.delete(token, true);
        }
        // What it had sent and not yet had run goes before the RELEASE on each connection,
        // to no effect: a SET undone, a PEEK, a FENCE that only raises counters.
        let client = &mut self.clients[c];
        client.phase = Phase::Idle;
        client.write = Write::None;
        client.channels = std::array::from_fn(|_| Channel::default());
    }

    /// Compare-and-delete of `token` on every node: RELEASE (`announce`), DISCARD.
    fn delete(&mut self, token: u8, announce: bool) {
        let now = self.node_ms();
        for node in &mut self.nodes {
            node.delete(token, announce, now);
        }
    }

    /// The first request on its way from `c` to `n` runs there; its reply goes back if it
    /// belongs to the round under way, to be taken at once (`late` false) or at the next
    /// tick.
    pub fn arrive(&mut self, rules: &Rules, c: usize, n: usize, late: bool) {
        let now = self.node_ms();
        let request = self.clients[c].channels[n].requests.remove(0);
        let reply = self.nodes[n].run(&request, now, rules.floor);
        let t = self.t;
        let client = &mut self.clients[c];
        let awaited = client.answers().is_some_and(|a| a[n].is_none());
        if awaited && client.round() == Some(request.round) {
            client.channels[n].reply = Some(reply);
            client.channels[n].reply_at = t + u8::from(late);
            // A paused process takes it once it runs again.
            if !late && client.active(t) {
                self.deliver(rules, c, n);
            }
            return;
        }
        match request.round.stage {
            Stage::Extend(Standing::Stood(due)) if reply.value == MISSING && t <= due => {
                // Answered after the extension was decided, so not counted: the node lost
                // our key, and is restored once the extension stands, if the answer counts
                // as a vote would (`Extendable::extension`).
                let counts = self.clients[c].admitted(n, self.client_ms());
                if counts && self.votes_count(rules, c, n, &reply.held, false) {
                    let token = request.round.token;
                    let fence = self.clients[c].handed();
                    self.clients[c].channels[n]
                        .requests
                        .push(restore(token, fence));
                } else if counts {
                    self.check(rules, c, n);
                }
            }
            Stage::Restore(_) if reply.ballot == Ballot::Yes && self.nodes[n].run > 0 => {
                self.seen |= seen::RESTORED_AFTER_RESTART;
            }
            _ => {}
        }
    }

    /// Process `c` takes the reply of node `n` (`Node::vote`, `counters_still_trusted`, and
    /// for an acquisition `Admission::still_checked`).
    pub fn deliver(&mut self, rules: &Rules, c: usize, n: usize) {
        let now = self.client_ms();
        let reply = self.clients[c].channels[n].reply.take().expect("a reply");
        let round = self.clients[c].round().expect("a round under way");
        let (mut ballot, mut recheck) = (reply.ballot, false);
        if let Stage::Extend(_) = round.stage {
            if reply.value == MISSING && !rules.missing_refuses {
                ballot = Ballot::Yes;
            }
        }
        if matches!(round.stage, Stage::Acquire | Stage::Extend(_)) {
            let counts = self.clients[c].admitted(n, now) && ballot == Ballot::Yes;
            if !self.votes_count(rules, c, n, &reply.held, counts) {
                // The node lost its data since its check: the votes fail, and it is checked
                // again.
                recheck = true;
                ballot = Ballot::Failed;
            }
        } else {
            let view = &self.clients[c].views[n];
            if reply.refused {
                // Another marker than the one checked: the node is checked again.
                recheck = true;
                ballot = Ballot::Failed;
            } else if view.marker != reply.marker {
                ballot = Ballot::Failed;
            }
        }
        let client = &mut self.clients[c];
        if !client.admitted(n, now) {
            ballot = Ballot::Failed;
        }
        client.answers().expect("answers")[n] = Some((ballot, reply.value));
        if recheck {
            self.check(rules, c, n);
        }
        self.conclude(rules, c);
    }

    /// Once the round of `c` is decided: its verdict, and what follows.
    fn conclude(&mut self, rules: &Rules, c: usize) {
        let now = self.client_ms();
        let client = &mut self.clients[c];
        match client.phase {
            Phase::Held {
                token,
                extension: Some((start_ms, answers)),
                ..
            } => self.settle_extension(rules, c, token, start_ms, answers),
            Phase::Acquiring {
                token,
                start_ms,
                answers,
            } => {
                let tally = rules.tally(&answers, Stage::Acquire);
                if tally.decision() == Decision::Pending {
                    return;
                }
                client.channels.iter_mut().for_each(|ch| ch.reply = None);
                let elapsed = if rules.elapsed { now - start_ms } else { 0 };
                let elapsed = Duration::from_millis(elapsed);
                match algo::timed(&tally, TTL, rules.drift(), elapsed) {
                    Timed::Valid(left) => {
                        client.phase = Phase::Held {
                            token,
                            valid_until: now + ms(left),
                            hold: self.grants,
                            fencing: Fencing::NotAsked,
                            extension: None,
                        };
                        client.write = Write::None;
                        self.grants += 1;
                        self.seen |= seen::GRANT;
                        if self.seen & seen::FLUSH_SEEN != 0 {
                            self.seen |= seen::GRANT_AFTER_FLUSH_SEEN;
                        }
                        if self.majority_lost_at.is_some_and(|at| token >= at) {
                            self.seen |= seen::GRANT_AFTER_MAJORITY_LOST;
                        }
                        if self.fair_token.is_some_and(|at| token >= at) {
                            self.seen |= seen::FAIR_GRANT;
                        }
                    }
                    Timed::Late | Timed::Gone | Timed::Short => {
                        // DISCARD follows its SETs on each connection: they undo nothing.
                        client.phase = Phase::Idle;
                        client.channels = std::array::from_fn(|_| Channel::default());
                        self.delete(token, false);
                    }
                }
            }
            Phase::Held {
                fencing: Fencing::Peeking(answers),
                ..
            } => {
                let tally = rules.tally(&answers, Stage::Peek);
                if tally.decision() == Decision::Pending {
                    return;
                }
                for channel in &mut client.channels {
                    // The PEEKs not awaited read only.
                    channel.reply = None;
                    channel.requests.retain(|r| r.round.stage != Stage::Peek);
                }
                let fencing = match client.phase {
                    Phase::Held {
                        ref mut fencing, ..
                    } => fencing,
                    Phase::Idle | Phase::Acquiring { .. } => unreachable!(),
                };
                if algo::confirmation(&tally) != Confirmation::Confirmed {
                    *fencing = Fencing::Refused;
                    return;
                }
                // Every yes of a PEEK read the counters (`fencing::largest`).
                let read = answers.iter().flatten().filter(|(b, _)| *b == Ballot::Yes);
                let seen = read.map(|(_, value)| *value).max().unwrap_or(0);
                let f = algo::next_token(seen, None);
                *fencing = Fencing::Recording(f, [None; N]);
                self.send(c);
                self.conclude(rules, c);
            }
            Phase::Held {
                token,
                valid_until,
                hold,
                fencing: Fencing::Recording(f, answers),
                ..
            } => {
                let tally = rules.tally(&answers, Stage::Fence(0));
                if tally.decision() == Decision::Pending {
                    return;
                }
                client.channels.iter_mut().for_each(|ch| ch.reply = None);
                let confirmed = algo::confirmation(&tally) == Confirmation::Confirmed;
                // Handed out only if the validity is not over when the round is decided.
                let handed = confirmed && now < valid_until;
                if let Phase::Held { fencing, .. } = &mut client.phase {
                    *fencing = if handed {
                        Fencing::Handed(f)
                    } else {
                        Fencing::Refused
                    };
                }
                if handed {
                    self.hand_out(token, hold, f);
                }
            }
            Phase::Idle | Phase::Held { .. } => {}
        }
    }

    /// Once the extension of holder `c` (of the attempt `token`, started at `start_ms`) is
    /// decided: `Extendable::settle_extension`. Granted, the validity is the new one and the
    /// nodes that answered 2 (missing) are restored (`Held::restore_missing`); late or short,
    /// the validity ends no later than the extension would have; gone, at its start.
    fn settle_extension(
        &mut self,
        rules: &Rules,
        c: usize,
        token: u8,
        start_ms: u64,
        answers: Answers<N>,
    ) {
        let stage = Stage::Extend(Standing::Pending);
        let tally = rules.tally(&answers, stage);
        if tally.decision() == Decision::Pending {
            return;
        }
        let now = self.client_ms();
        let elapsed = if rules.elapsed && rules.extension_from_start {
            now - start_ms
        } else {
            0
        };
        let verdict = algo::timed(&tally, TTL, rules.drift(), Duration::from_millis(elapsed));
        let stood = matches!(verdict, Timed::Valid(_));
        let client = &mut self.clients[c];
        let fence = client.handed();
        for (n, channel) in client.channels.iter_mut().enumerate() {
            channel.reply = None;
            // The EXTENDs still on their way learn the verdict: where the node had not
            // answered yet (not timed out), its answer is still awaited until its timeout.
            let standing = match answers[n] {
                None if stood => Standing::Stood(channel.due),
                _ => Standing::Fell,
            };
            for request in &mut channel.requests {
                if request.round == (Round { token, stage }) {
                    request.round.stage = Stage::Extend(standing);
                }
            }
            let missing = matches!(answers[n], Some((b, MISSING)) if b != Ballot::Failed);
            if stood && missing {
                channel.requests.push(restore(token, fence));
            }
        }
        let usable_until = start_ms + ms(TTL - rules.drift());
        let Phase::Held {
            valid_until,
            extension,
            ..
        } = &mut client.phase
        else {
            unreachable!("an extension is a holder's")
        };
        *extension = None;
        match verdict {
            Timed::Valid(left) => {
                *valid_until = now + ms(left);
                self.seen |= seen::EXTENDED;
                if answers
                    .iter()
                    .any(|a| matches!(a, Some((Ballot::Yes, MISSING))))
                {
                    self.seen |= seen::MISSING_COUNTED;
                }
            }
            Timed::Late | Timed::Short => *valid_until = (*valid_until).min(usable_until),
            Timed::Gone => *valid_until = (*valid_until).min(start_ms),
        }
    }

    /// Fencing token `f` handed out to grant `hold` (of the attempt `token`): in the order
    /// of the grants?
    fn hand_out(&mut self, token: u8, hold: u8, f: u64) {
        if let Some((h, g)) = self.fenced {
            if (h < hold && g >= f) || (h > hold && g <= f) {
                self.out_of_order = true;
            }
        }
        if self.fenced.is_none_or(|(_, g)| f > g) {
            self.fenced = Some((hold, f));
        }
        if self.seen & seen::RESTART != 0 {
            self.seen |= seen::TOKEN_AFTER_RESTART;
        }
        if self.majority_lost_at.is_some_and(|at| token >= at) {
            self.seen |= seen::TOKEN_AFTER_MAJORITY_LOST;
        }
    }
}
