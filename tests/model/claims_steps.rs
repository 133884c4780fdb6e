//! The steps of the semaphore's and read-write lock's model (`claims.rs`): what a node does
//! with a request (PERMIT_ACQUIRE and RW_ACQUIRE as Rust, held to the Lua by
//! `refinement.rs`), and what a process does with its round, each decision taken by the
//! crate's code through `quorumlock::__model`.

use std::time::Duration;

use quorumlock::__model::{self as algo, Ballot, Decision, Tally, Timed};

use super::claims::{
    seen, Answer, Ask, Claim, Claims, Member, Phase, Request, Rules, State, CLIENTS,
};
use super::system::{DRIFT_FACTOR, TTL};

fn ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

/// The crate's drift allowance for the ttl.
fn drift() -> Duration {
    quorumlock::drift(TTL, DRIFT_FACTOR).expect("a valid drift factor")
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

impl<const N: usize> Claims<N> {
    pub fn tick(&self, s: &mut State<N>) {
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
                client.replies = [None; N];
                self.conclude(s, c);
            }
        }
    }

    pub fn attempt(&self, s: &mut State<N>, c: usize, ask: Ask) {
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
            answers: [None; N],
        };
        client.requests = [Some(Request { token, ask, waiter }); N];
        client.due = t + 1;
    }

    pub fn arrive(&self, s: &mut State<N>, c: usize, n: usize, late: bool) {
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
            // granted is discarded (the claim kind `Seat` in `acquire::attempt`), and so is
            // the intent a writer's refusal left (the drop of the intent follows on the
            // connection).
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

    pub fn deliver(&self, s: &mut State<N>, c: usize, n: usize, answer: Answer) {
        if let Phase::Acquiring { answers, .. } = &mut s.clients[c].phase {
            answers[n] = Some(answer);
        }
        self.conclude(s, c);
    }

    /// Once the round of `c` is decided: its verdict (the claim kind `Seat` in `acquire::attempt`).
    fn conclude(&self, s: &mut State<N>, c: usize) {
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
        let mut tally = Tally::taking(N);
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
        client.replies = [None; N];
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
                client.requests = [None; N];
                delete(&mut s.nodes, token);
            }
        }
    }

    pub fn release(&self, s: &mut State<N>, c: usize) {
        if let Phase::Held { token, .. } = s.clients[c].phase {
            delete(&mut s.nodes, token);
        }
        let client = &mut s.clients[c];
        client.phase = Phase::Idle;
        client.requests = [None; N];
    }
}

/// Every claim of `token` goes (PERMIT_DISCARD, PERMIT_RELEASE).
fn delete<const N: usize>(nodes: &mut [Vec<Claim>; N], token: u8) {
    for claims in nodes {
        claims.retain(|c| c.token != token || c.member == Member::Intent);
    }
}

/// The intent of `waiter` goes from every node.
fn drop_intent<const N: usize>(nodes: &mut [Vec<Claim>; N], waiter: u8) {
    for claims in nodes {
        claims.retain(|c| c.token != waiter || c.member != Member::Intent);
    }
}
