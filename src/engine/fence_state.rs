//! A lock's fencing state ([`Fencing`]) and a client's hints of the tokens to come
//! ([`Hints`]), and what an acquisition round says of them ([`granted`]). The rounds that
//! record a token when its holder asks for one, and why they are safe, are in
//! `engine/fencing.rs` (design 2.6).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use fred::types::Key;

use crate::engine::claim::Keys;
use crate::engine::fanout::Round;
use crate::node::{Acquired, CounterRead};

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

    /// The largest counter the acquisition read on the majority that granted the lock, if
    /// it read them.
    pub(crate) fn seen(&self) -> Option<u64> {
        self.seen
    }

    /// The token the acquisition recorded on a majority, if it did.
    pub(crate) fn recorded(&self) -> Option<u64> {
        self.recorded
    }

    /// Hands out `token`, unless a concurrent call handed out one already: then that one,
    /// so that a lock only ever shows one token.
    pub(crate) fn hand_out(&self, token: u64) -> u64 {
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
/// yes), if a majority of them could be trusted (`algo/lineage/`): `None` otherwise, and the
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
