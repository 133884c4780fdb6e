//! Fencing tokens, recorded on a majority only when the holder asks for one (design 2.6).
//!
//! A fencing token `f` is handed out only after a script raised the resource's counter to at
//! least `f` on a majority of nodes, each of which held our token when it did, and only if
//! the lock was still valid at the end of that round. `f` is above every counter on a
//! majority, read either by the acquisition itself (the ACQUIRE script: several resources,
//! or a client whose locks have had their token asked for before) or, after a bare
//! `SET NX`, by the PEEK script in a round of its own just before the round that records it.
//!
//! Which round records it:
//! - **the acquisition's**, when the client guessed well: a client whose tokens are asked
//!   for sends its ACQUIRE a hint, one more than the last token it knows of for the
//!   resource ([`Hints`]), and each node that grants the lock with its counters below the
//!   hint raises them to it. If a majority did, `hint` is recorded there and above
//!   everything that was handed out before (each earlier token is on a majority, which
//!   shares a node with ours, whose counter was below the hint), and asking for the token
//!   sends nothing. One round for the lock and its token, where another client did not
//!   fence the resource since this one last did;
//! - otherwise **a FENCE round** when the token is asked for: `f` is one more than the
//!   largest counter the acquisition (or PEEK) read on its majority.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use fred::types::Key;

use crate::algo::quorum::Stake;
use crate::engine::fanout::Round;
use crate::engine::claim::Keys;
use crate::engine::held::Ident;
use crate::engine::outcome;
use crate::error::NodeErrorKind;
use crate::error::{ConfigError, Error};
use crate::node::{Acquired, CounterRead, Node};

/// A lock's fencing state, shared by the lock and its handles.
#[derive(Debug)]
pub(crate) struct Fencing {
    /// The largest counter the acquisition read on the majority that granted the lock, when
    /// it read them; `None` when it sent a `SET NX`.
    seen: Option<u64>,
    /// The token the acquisition recorded on a majority, if it did (its hint).
    recorded: Option<u64>,
    /// The token handed out; 0 until one is (tokens start at 1).
    handed: AtomicU64,
}

impl Fencing {
    /// The state of a fresh lock whose acquisition read the counters (`Some`) or not, and
    /// recorded a token (`Some`) or not.
    pub(crate) fn new(seen: Option<u64>, recorded: Option<u64>) -> Fencing {
        Fencing {
            seen,
            recorded,
            handed: AtomicU64::new(0),
        }
    }

    /// The token handed out, if one was.
    pub(crate) fn handed(&self) -> Option<u64> {
        match self.handed.load(Ordering::SeqCst) {
            0 => None,
            token => Some(token),
        }
    }

    /// Hands out `token`, unless a concurrent call handed out one already: then that one,
    /// so that a lock only ever shows one token.
    fn hand_out(&self, token: u64) -> u64 {
        match self
            .handed
            .compare_exchange(0, token, Ordering::SeqCst, Ordering::SeqCst)
        {
            Ok(_) => token,
            Err(first) => first,
        }
    }
}

/// Resources remembered by [`Hints`], at most; past that, it starts afresh (a hint missing
/// costs a round, never safety).
const HINTS: usize = 1024;

/// The last fencing token a client knows of for each resource it fenced recently: a token it
/// recorded, or the largest counter it read. One more is the hint of its next acquisition of
/// the resource (see the module's documentation). A wrong hint costs the FENCE round that
/// the acquisition would otherwise have spared, never safety: a node records the hint only
/// if its counters are below it, and the token counts as recorded only where a majority did.
#[derive(Debug, Default)]
pub(crate) struct Hints {
    last: Mutex<HashMap<Key, u64>>,
}

impl Hints {
    /// The hint for an acquisition of the resources whose fencing counters are `counters`:
    /// one more than the largest token known of any of them (1 if none is known).
    pub(crate) fn next(&self, counters: &[Key]) -> u64 {
        let last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        let known = counters.iter().filter_map(|k| last.get(k)).max();
        known.copied().unwrap_or(0).saturating_add(1)
    }

    /// Notes that the counters `counters` are at least `token` on a majority.
    pub(crate) fn note(&self, counters: &[Key], token: u64) {
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        if last.len() + counters.len() > HINTS {
            last.clear();
        }
        for counter in counters {
            let known = last.entry(counter.clone()).or_insert(0);
            *known = (*known).max(token);
        }
    }
}

/// The fencing state of a lock granted by `round` on `keys`: none without fencing; with the
/// counters the round read, if it read them on a majority ([`largest`]), and the token
/// `hint` if the round recorded it on a majority ([`recorded`]). `hints` learns either.
pub(crate) fn granted(
    keys: &Keys,
    reads_counters: bool,
    round: &Round<Acquired>,
    (hint, hints): (u64, &Hints),
) -> Option<Fencing> {
    if !keys.fencing() {
        return None;
    }
    if !reads_counters {
        return Some(Fencing::new(None, None));
    }
    let (seen, recorded) = (largest(round), recorded(round, hint));
    if let Some(known) = recorded.or(seen) {
        hints.note(keys.counters(), known);
    }
    Some(Fencing::new(seen, recorded))
}

/// The largest counter among the answers of a round that read them (the nodes that said
/// yes), if a majority of them could be trusted (`algo/lineage.rs`): `None` otherwise, and the
/// counters are read again by a PEEK round when the token is asked for.
pub(crate) fn largest(round: &Round<Acquired>) -> Option<u64> {
    let read = || {
        round.answers.iter().filter_map(|(_, a)| match a.0 {
            Some(CounterRead::Read(c)) => Some(c),
            _ => None,
        })
    };
    (read().count() >= round.tally.quorum()).then(|| read().max().unwrap_or(0))
}

/// `hint`, if an ACQUIRE round sent with it recorded it on a majority: a majority of trusted
/// nodes said yes with counters below it, and so raised them to it (`node/scripts/`).
pub(crate) fn recorded(round: &Round<Acquired>, hint: u64) -> Option<u64> {
    let below = round
        .answers
        .iter()
        .filter(|(_, a)| matches!(a.0, Some(CounterRead::Read(c)) if c < hint))
        .count();
    (hint > 0 && below >= round.tally.quorum()).then_some(hint)
}

impl Ident {
    /// The fencing token of this lock (see `Lock::fencing_token`). `valid` says whether the
    /// lock is still valid; it is asked before anything is sent and again when the FENCE
    /// round is decided, and the token is handed out only if both say yes.
    ///
    /// `until` is when the lock's validity ends: where too few nodes have counters known to
    /// be complete, re-seeds due at once are awaited briefly ([`reseeds_due`]).
    pub(crate) async fn fencing_token(
        &self,
        valid: impl Fn() -> Result<(), Error>,
        until: Instant,
    ) -> Result<u64, Error> {
        let Some(fencing) = self.fencing() else {
            return Err(ConfigError::FencingOff.into());
        };
        valid()?;
        if let Some(token) = fencing.handed() {
            return Ok(token);
        }
        let client = self.machinery();
        client.token_asked();
        if let Some(recorded) = fencing.recorded {
            // Recorded by the acquisition, which counts against the validity; checked above.
            return Ok(fencing.hand_out(recorded));
        }
        reseeds_due(client.node_list(), until).await;
        valid()?;
        let (keys, locks, value) = (self.keys(), self.locks(), self.value());
        let primitive = self.primitive();
        let seen = match fencing.seen {
            Some(seen) => seen,
            None => {
                // Read now, while we hold the lock: every token handed out before our
                // acquisition is on a majority, which shares a node with this one.
                let round = client
                    .fanout()
                    .round_marking(None, Stake::Held, |node| {
                        node.peek(primitive, keys.to_vec(), locks, value.clone())
                    })
                    .await;
                let (seen, tally) = (largest(&round), round.tally);
                // Confirmed without counters to trust: refused as an unconfirmed round is.
                let failures = match seen {
                    None => round.failures.clone(),
                    Some(_) => Vec::new(),
                };
                outcome::confirmed(self.name(), tally, round.failures).map_err(no_token)?;
                match seen {
                    Some(seen) => seen,
                    None => {
                        let unconfirmed = outcome::unheld(self.name(), tally, failures, false);
                        return Err(no_token(unconfirmed));
                    }
                }
            }
        };
        // A permit's token also names its slot, so that permits valid at once never share
        // one (`algo::slots::next_token`).
        let fence = crate::algo::slots::next_token(seen, self.slot());
        let round = client
            .fanout()
            .round_marking(None, Stake::Held, |node| {
                node.fence(primitive, keys.to_vec(), locks, value.clone(), fence)
            })
            .await;
        outcome::confirmed(self.name(), round.tally, round.failures).map_err(no_token)?;
        // The round counts against the validity, as the acquisition's rounds do.
        valid()?;
        client.hints().note(&keys[locks..], fence);
        Ok(fencing.hand_out(fence))
    }
}

/// A PEEK or FENCE round that was not won: [`Error::FencingUnavailable`] where it lacked a
/// majority ([`Error::NoQuorum`]) and nodes that may have lost their counters are among its
/// failures; any other error as it is.
fn no_token(error: Error) -> Error {
    match error {
        Error::NoQuorum {
            resource,
            needed,
            agreed,
            failures,
        } if failures.iter().any(|f| f.kind == NodeErrorKind::LostData) => {
            Error::FencingUnavailable {
                resource,
                needed,
                counted: agreed,
                failures,
            }
        }
        error => error,
    }
}

/// Round trips of node timeouts a re-seed takes at most when the nodes answer: a survey, then
/// SEED (`engine/seeder.rs`), with a margin.
const RESEED_TIMEOUTS: u32 = 3;

/// Waits while fewer than a majority of `nodes` have fencing counters known to be complete
/// and a re-seed that would add one is due (design 2.6a): a process that has just started, on
/// nodes whose quarantine (kept on the nodes) is over or off, then gets its token once its
/// own re-seeds are done, a few round trips, rather than a refusal while they are in flight.
///
/// Briefly: for re-seeds due within [`RESEED_TIMEOUTS`] node timeouts from now, and for
/// that long at most, and never more than half of what is left until `until` (the lock's
/// validity). A re-seed that cannot finish (too few nodes answer its survey) must not use up
/// the holder's validity: the rounds that follow then refuse as before.
async fn reseeds_due(nodes: &[Node], until: Instant) {
    let Some(first) = nodes.first() else { return };
    let quorum = crate::algo::quorum::quorum(nodes.len());
    let now = Instant::now();
    let budget = (first.timeout() * RESEED_TIMEOUTS).min(until.saturating_duration_since(now) / 2);
    let until = tokio::time::Instant::from_std(now + budget);
    loop {
        let reseeded = first.admission().reseeded_notify().notified();
        tokio::pin!(reseeded);
        reseeded.as_mut().enable();
        let trusted = nodes.iter().filter(|n| n.admission().marker().is_some());
        let due = nodes.iter().filter_map(|n| n.admission().reseed_due());
        let due = due.filter(|&at| tokio::time::Instant::from_std(at) <= until);
        if trusted.count() >= quorum || due.count() == 0 {
            return;
        }
        if tokio::time::timeout_at(until, reseeded).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hint_is_one_more_than_the_largest_token_known_of_any_resource_locked() {
        let hints = Hints::default();
        let (a, b) = (
            Key::from("quorumlock:fence:a"),
            Key::from("quorumlock:fence:b"),
        );
        assert_eq!(hints.next(std::slice::from_ref(&a)), 1);
        hints.note(std::slice::from_ref(&a), 7);
        hints.note(std::slice::from_ref(&a), 5); // never lowered
        hints.note(std::slice::from_ref(&b), 3);
        assert_eq!(hints.next(std::slice::from_ref(&a)), 8);
        assert_eq!(hints.next(std::slice::from_ref(&b)), 4);
        assert_eq!(hints.next(&[a.clone(), b.clone()]), 8);
        assert_eq!(hints.next(&[]), 1);
        hints.note(std::slice::from_ref(&b), u64::MAX);
        assert_eq!(hints.next(&[b]), u64::MAX);
    }

    #[test]
    fn hints_start_afresh_past_their_bound() {
        let hints = Hints::default();
        let first = Key::from("quorumlock:fence:first");
        hints.note(std::slice::from_ref(&first), 9);
        for i in 1..HINTS {
            hints.note(&[Key::from(format!("quorumlock:fence:{i}"))], 1);
        }
        assert_eq!(hints.next(std::slice::from_ref(&first)), 10);
        hints.note(&[Key::from("quorumlock:fence:one-too-many")], 1);
        assert_eq!(hints.next(std::slice::from_ref(&first)), 1);
        assert_eq!(hints.last.lock().unwrap().len(), 1);
    }
}
