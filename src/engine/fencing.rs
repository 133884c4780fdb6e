//! Fencing tokens, recorded on a majority only when the holder asks for one: by the
//! acquisition's own round where its hint (`Hints`, in `engine/machinery.rs`) was recorded,
//! else by a FENCE round (after a PEEK round where a bare `SET NX` read no counters). The
//! protocol, and why every token handed out is above every earlier one: design 2.6.

use std::time::Instant;

use crate::algo::quorum::Stake;
use crate::engine::held::{self, largest, Ident};
use crate::error::NodeErrorKind;
use crate::error::{ConfigError, Error};
use crate::node::Node;

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
        let Some(fencing) = self.fencing.as_ref() else {
            return Err(ConfigError::FencingOff.into());
        };
        valid()?;
        if let Some(token) = fencing.handed() {
            return Ok(token);
        }
        let client = &self.machinery;
        client.token_asked();
        if let Some(recorded) = fencing.recorded {
            // Recorded by the acquisition, which counts against the validity; checked above.
            return Ok(fencing.hand_out(recorded));
        }
        reseeds_due(client.node_list(), until).await;
        valid()?;
        let (keys, locks, value) = (&self.keys, self.locks, self.value());
        let primitive = self.primitive();
        let seen = match fencing.seen {
            Some(seen) => seen,
            None => {
                // Read now, while we hold the lock: every token handed out before our
                // acquisition is on a majority, which shares a node with this one.
                let round = client
                    .fanout
                    .round_marking(None, Stake::Held, |node| {
                        node.peek(primitive, keys.to_vec(), locks, value.clone())
                    })
                    .await;
                let (seen, tally) = (largest(&round), round.tally);
                // Confirmed without counters to trust: refused as an unconfirmed round is.
                let failures = seen.map_or_else(|| round.failures.clone(), |_| Vec::new());
                held::confirmed(self.name(), tally, round.failures).map_err(no_token)?;
                let unconfirmed = || no_token(held::unheld(self.name(), tally, failures, false));
                seen.ok_or_else(unconfirmed)?
            }
        };
        // A permit's token also names its slot, so that permits valid at once never share
        // one (`algo::slots::next_token`).
        let fence = crate::algo::slots::next_token(seen, self.slot());
        let round = client
            .fanout
            .round_marking(None, Stake::Held, |node| {
                node.fence(primitive, keys.to_vec(), locks, value.clone(), fence)
            })
            .await;
        held::confirmed(self.name(), round.tally, round.failures).map_err(no_token)?;
        // The round counts against the validity, as the acquisition's rounds do.
        valid()?;
        client.hints.note(&keys[locks..], fence);
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
/// and a re-seed that would add one is due, briefly (design 2.6a, "What a refusal looks
/// like"): for re-seeds due within [`RESEED_TIMEOUTS`] node timeouts from now, and for that
/// long at most, and never more than half of what is left until `until` (the validity).
async fn reseeds_due(nodes: &[Node], until: Instant) {
    let Some(first) = nodes.first() else { return };
    let quorum = crate::algo::quorum::quorum(nodes.len());
    let now = Instant::now();
    let budget = (first.timeout() * RESEED_TIMEOUTS).min(until.saturating_duration_since(now) / 2);
    let until = tokio::time::Instant::from_std(now + budget);
    loop {
        let reseeded = first.admission().fleet.reseeded.notified();
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
