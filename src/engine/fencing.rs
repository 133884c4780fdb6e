//! Fencing tokens, recorded on a majority only when the holder asks for one (design 2.6).
//!
//! A fencing token `f` is handed out only after the FENCE script raised the resource's
//! counter to at least `f` on a majority of nodes, each of which still held our token, and
//! only if the lock was still valid when that round ended. `f` is one more than the largest
//! counter on a majority, read either by the acquisition itself (the ACQUIRE script: several
//! resources, or a client whose locks have had their token asked for before) or, after a
//! bare `SET NX`, by the PEEK script in a round of its own just before the FENCE round.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::algo::quorum::Stake;
use crate::algo::verdict::{self, Confirmation};
use crate::engine::coordinator::Round;
use crate::engine::held::{Ident, Keys};
use crate::error::NodeErrorKind;
use crate::error::{ConfigError, Error};
use crate::node::{Acquired, CounterRead};

/// A lock's fencing state, shared by the lock and its handles.
#[derive(Debug)]
pub(crate) struct Fencing {
    /// The largest counter the acquisition read on the majority that granted the lock, when
    /// it read them; `None` when it sent a bare `SET NX`.
    seen: Option<u64>,
    /// The token handed out; 0 until one is (tokens start at 1).
    handed: AtomicU64,
}

impl Fencing {
    /// The state of a fresh lock whose acquisition read the counters (`Some`) or not.
    pub(crate) fn new(seen: Option<u64>) -> Fencing {
        Fencing {
            seen,
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

/// The fencing state of a lock granted by `round` on `keys`: none without fencing; with the
/// counters the round read, if it read them on a majority ([`largest`]).
pub(crate) fn granted(
    keys: &Keys,
    reads_counters: bool,
    round: &Round<Acquired>,
) -> Option<Fencing> {
    keys.fencing()
        .then(|| Fencing::new(reads_counters.then(|| largest(round)).flatten()))
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

impl Ident {
    /// The fencing token of this lock (see `Lock::fencing_token`). `valid` says whether the
    /// lock is still valid; it is asked before anything is sent and again when the FENCE
    /// round is decided, and the token is handed out only if both say yes.
    pub(crate) async fn fencing_token(
        &self,
        valid: impl Fn() -> Result<(), Error>,
    ) -> Result<u64, Error> {
        let Some(fencing) = self.fencing() else {
            return Err(ConfigError::FencingOff.into());
        };
        valid()?;
        if let Some(token) = fencing.handed() {
            return Ok(token);
        }
        let redlock = self.redlock();
        redlock.token_asked();
        let (keys, locks, value) = (self.keys(), self.locks(), self.value());
        let primitive = self.primitive();
        let seen = match fencing.seen {
            Some(seen) => seen,
            None => {
                // Read now, while we hold the lock: every token handed out before our
                // acquisition is on a majority, which shares a node with this one.
                let round = redlock
                    .round_marking(None, Stake::Held, |node| {
                        node.peek(primitive, keys.to_vec(), locks, value.clone())
                    })
                    .await;
                match (verdict::confirmation(&round.tally), largest(&round)) {
                    (Confirmation::Confirmed, Some(seen)) => seen,
                    (Confirmation::Gone, _) => return Err(self.not_held(round.tally.yes)),
                    _ => return Err(self.no_token(round.tally, round.failures)),
                }
            }
        };
        // A permit's token also names its slot, so that permits valid at once never share
        // one (`algo::slots::next_token`).
        let fence = crate::algo::slots::next_token(seen, self.slot());
        let round = redlock
            .round_marking(None, Stake::Held, |node| {
                node.fence(primitive, keys.to_vec(), locks, value.clone(), fence)
            })
            .await;
        match verdict::confirmation(&round.tally) {
            Confirmation::Confirmed => {
                // The round counts against the validity, as the acquisition's rounds do.
                valid()?;
                Ok(fencing.hand_out(fence))
            }
            Confirmation::Gone => Err(self.not_held(round.tally.yes)),
            Confirmation::Short => Err(self.no_token(round.tally, round.failures)),
        }
    }

    /// A PEEK or FENCE round that was not won: [`Error::FencingUnavailable`] if nodes that
    /// may have lost their counters are among its failures, else [`Error::NoQuorum`].
    fn no_token(
        &self,
        tally: crate::algo::quorum::Tally,
        failures: Vec<crate::error::NodeError>,
    ) -> Error {
        if !failures.iter().any(|f| f.kind == NodeErrorKind::LostData) {
            return self.unconfirmed(tally, failures);
        }
        Error::FencingUnavailable {
            resource: self.name().to_string(),
            needed: tally.quorum(),
            counted: tally.yes,
            failures,
        }
    }
}
