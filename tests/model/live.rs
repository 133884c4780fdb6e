//! Liveness: once faults stop, a process that keeps trying gets the lock (docs/verification.md,
//! "Liveness"). stateright checks `eventually` on the paths to terminal states, and the
//! model is bounded in ticks, so every path ends; what makes a path fair is written here,
//! as what a fair run may and must do from the tick `Bounds::fair_from` on:
//!
//! - no faults: no restart, flush, pause, exit or late reply (the actions are not offered);
//! - no loss: the tick does not come while a request is on its way or a reply is waiting
//!   to be taken, so every request runs and its reply is taken within the tick (no
//!   timeout);
//! - processes keep trying: the tick does not come while a slot is empty (a new process
//!   starts when one ends) or while a live process that holds no valid lock has not
//!   attempted in this tick (the retry schedule, a pause of at most a tick); a holder whose
//!   validity is over has lost the lock, and tries again;
//! - contenders are separated: a process attempts only while no other's round is under
//!   way (the retry's jitter, which in the crate breaks the split votes of contenders that
//!   start together; without it two processes can split the nodes at every tick);
//! - in an election (`election.rs`), a campaign that holds the lock asks its term, and one
//!   whose term was refused releases, within the tick; and the seeder runs when due: a
//!   re-seed that can be done now is done within the tick.
//!
//! The goal, `FAIR_GRANT`, is a grant to an attempt that started once the run was fair; in
//! an election, `FAIR_LEADER`, a leader whose campaign started once the run was fair.
//! It is a flag of the state, kept once set, so that two paths that meet in one state agree
//! on it (stateright keeps the first path's view of an `eventually` at such a join). A path
//! ends at the goal: the actions stop there.

use super::explore::System;
use super::system::{seen, Bounds, Fencing, Phase, Stage, State};

impl<const N: usize, const C: usize> System<N, C> {
    /// Whether the run is fair in state `s`.
    pub fn fair(&self, s: &State<N, C>) -> bool {
        self.bounds.fair_from.is_some_and(|from| s.t >= from)
    }

    /// Whether the goal of a fair run is reached in `s`: the path ends.
    pub fn live(&self, s: &State<N, C>) -> bool {
        let goal = if self.bounds.election {
            seen::FAIR_LEADER
        } else {
            seen::FAIR_GRANT
        };
        s.seen & goal != 0
    }

    /// Whether a fair run may move on from `s` to the next tick: every slot has a process,
    /// no request is on its way, no reply waits to be taken, and every process that may
    /// attempt did; in an election, no campaign waits to ask its term or to release after
    /// a refusal, and no re-seed that can be done now waits.
    pub fn settled(&self, s: &State<N, C>) -> bool {
        let election = self.bounds.election;
        let waits = |c: usize| {
            let client = &s.clients[c];
            let campaign = matches!(
                client.phase,
                Phase::Held {
                    fencing: Fencing::NotAsked | Fencing::Refused,
                    ..
                }
            );
            let reseed = (0..N).any(|n| {
                let view = &client.views[n];
                view.checked
                    && view.marker.is_none()
                    && view.reseed_due.is_some_and(|due| due <= s.client_ms())
                    && s.clone().reseed(&self.rules, c, n)
            });
            election && (campaign || reseed)
        };
        s.settled() && (0..s.clients.len()).all(|c| !s.clients[c].active(s.t) || !waits(c))
    }
}

impl<const N: usize, const C: usize> State<N, C> {
    /// At a tick: once the run is fair, the first token of its attempts, a new tick to
    /// attempt in, and the holders whose validity is over back to trying.
    pub fn fair_tick(&mut self, bounds: &Bounds<N>) {
        if bounds.fair_from.is_none_or(|from| self.t < from) {
            return;
        }
        if self.fair_token.is_none() {
            self.fair_token = Some(self.next_token);
        }
        let now = self.client_ms();
        for client in &mut self.clients {
            client.tried = false;
            if matches!(client.phase, Phase::Held { valid_until, .. } if now >= valid_until) {
                // Its PEEK or FENCE, if any, is abandoned with the lock (a campaign's, sent
                // before a pause): what is left of it runs to no effect, as after a release.
                client.phase = Phase::Idle;
                for channel in &mut client.channels {
                    channel.reply = None;
                    channel.requests.retain(|r| r.round.stage == Stage::Acquire);
                }
            }
        }
    }

    /// Whether process `c` may attempt in a fair run: idle, it has not attempted in this
    /// tick, and no other process's round is under way.
    pub fn may_attempt(&self, c: usize) -> bool {
        let client = &self.clients[c];
        let under_way = self.clients.iter().enumerate().any(|(other, o)| {
            other != c && o.active(self.t) && matches!(o.phase, Phase::Acquiring { .. })
        });
        matches!(client.phase, Phase::Idle) && !client.tried && !under_way
    }

    /// Whether a fair run may move to the next tick: every slot has a process, no request
    /// is on its way, no reply waits to be taken, and every process that may attempt did.
    pub fn settled(&self) -> bool {
        self.clients.iter().enumerate().all(|(c, client)| {
            if !client.alive {
                return false;
            }
            let active = client.active(self.t);
            let pending = client.channels.iter().any(|ch| {
                !ch.requests.is_empty() || (active && ch.reply.is_some() && ch.reply_at <= self.t)
            });
            let trying = active && self.may_attempt(c);
            !pending && !trying
        })
    }
}
