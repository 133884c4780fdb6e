//! One attempt at a claim, whatever its kind: a lock, a permit, a read-write lock's side, a
//! handover. It draws a token, sends one round, judges it by the grant rule
//! ([`verdict::timed`]), and ends in one of three ways, written here once: a [`Held`] claim,
//! [`Error::ValidityExpired`], or a refusal whose claims are discarded silently on every
//! node. What differs between kinds is a [`ClaimKind`]: what each node is sent, how the
//! answers are read, and what a granted claim holds.
//! The errors of a refused or late round are written once, in `engine/outcome.rs`.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use tracing::Instrument;

use fred::types::Value;

use crate::algo::quorum::Tally;
use crate::algo::verdict::{self, Timed};
use crate::config::Ttl;
use crate::engine::claim::Resources;
use crate::engine::fanout::{CleanupOnDrop, Round};
use crate::engine::held::{Acquisition, Fencing, Held, Member, Token};
use crate::engine::machinery::Machinery;
use crate::engine::outcome::{expired, lost};
use crate::error::Error;
use crate::node::{Answer, Primitive};

/// What a granted claim holds besides its token, as its kind says.
#[derive(Debug)]
pub(crate) struct Grant {
    /// `None` when fencing is off.
    pub(crate) fencing: Option<Fencing>,
    /// For a permit or a read-write lock's side, its claim; `None` for a lock.
    pub(crate) member: Option<Member>,
    /// How many handovers in a row led to the claim (0: its holder's own attempt got it).
    pub(crate) handovers: u32,
    /// Whether the next caller in this client's line may attempt at once (a slot still
    /// free).
    pub(crate) room: bool,
}

/// A round's answers as a kind reads them.
#[derive(Debug)]
pub(crate) struct Heard {
    /// The tally the grant rule judges (for a permit: the nodes that recorded its slot).
    pub(crate) tally: Tally,
    /// Refused whatever the tally says (another kind at the key).
    pub(crate) refusal: Option<Error>,
}

/// A kind of claim: what each node is sent, how the answers are read, what a granted claim
/// holds. A new primitive is a new kind, not another copy of [`attempt`].
pub(crate) trait ClaimKind {
    /// What each node answers.
    type Answer: Answer;

    /// What the rounds on the claim act on.
    fn primitive(&self) -> Primitive;

    /// What a grant without some nodes warns of (`lock`, `permit`); `None`: no warning.
    fn noun(&self) -> Option<&'static str>;

    /// The token the attempt claims with: a fresh one, unless the kind has one.
    fn token(&mut self) -> Result<Token, Error> {
        Token::generate()
    }

    /// What the DISCARD script gets to drop the attempt's claims of `value` when it is
    /// refused or cancelled; `None`: nothing is discarded (a handover's tokens go with the
    /// release that follows it).
    fn discard(&self, value: &Value) -> Option<Vec<Value>>;

    /// Sends the round for `token`: what each node is sent, and when the round is decided.
    fn send(
        &mut self,
        client: &Machinery,
        target: &Resources,
        token: &Token,
        ttl: Ttl,
    ) -> impl Future<Output = Round<Self::Answer>>;

    /// How the answers are read; by default, the round's tally as it is.
    fn read(&mut self, _target: &Resources, round: &Round<Self::Answer>) -> Heard {
        Heard {
            tally: round.tally,
            refusal: None,
        }
    }

    /// Granted: what the claim holds.
    fn granted(
        &mut self,
        client: &Machinery,
        target: &Resources,
        round: &Round<Self::Answer>,
    ) -> Grant;

    /// Refused: told before the attempt's claims are discarded.
    fn refused(&mut self, _round: &Round<Self::Answer>) {}
}

/// One attempt at `target` of the kind `kind`, for `ttl`: granted, it also says whether the
/// next caller in this client's line may attempt at once.
pub(crate) async fn attempt<K: ClaimKind>(
    client: &Arc<Machinery>,
    target: &Resources,
    ttl: Ttl,
    mut kind: K,
) -> Result<(Held, bool), Error> {
    let token = kind.token()?;
    let discard = kind.discard(&Value::from(token.as_str()));
    let (primitive, locks) = (kind.primitive(), target.keys.locks());
    // Whatever happens to this attempt, no claim of its token is left behind.
    let mut guard = discard
        .clone()
        .map(|args| CleanupOnDrop::new(client.fanout(), primitive, locks, args));
    let start = Instant::now();
    let round = kind.send(client, target, &token, ttl).await;
    let elapsed = start.elapsed();
    let Heard { tally, refusal } = kind.read(target, &round);
    if let Some(guard) = &mut guard {
        guard.disarm();
    }
    let timed = verdict::timed(&tally, ttl.ttl, ttl.drift, elapsed);
    if let (None, Timed::Valid(_)) = (&refusal, timed) {
        let grant = kind.granted(client, target, &round);
        if let Some(noun) = kind.noun() {
            for failure in &round.failures {
                tracing::warn!(resource = %target.name, node = failure.index, error = %failure, "{noun} acquired without this node");
            }
        }
        let room = grant.room;
        // Every node that set the claim did so after `start`, so on a majority it lives
        // until at least start + ttl (less the drift allowance).
        let held = Held::new(Acquisition {
            machinery: Arc::clone(client),
            name: target.name.clone(),
            resources: target.resources.clone(),
            keys: target.keys.clone(),
            token,
            fencing: grant.fencing,
            ttl: ttl.ttl,
            valid_until: start + ttl.usable,
            acquired_on: tally.yes,
            failures: round.failures,
            handovers: grant.handovers,
            member: grant.member,
        });
        return Ok((held, room));
    }
    kind.refused(&round);
    let failure = match (refusal, timed) {
        (Some(refusal), _) => refusal,
        (None, Timed::Late) => expired(&target.name, elapsed, ttl),
        (None, _) => lost(&target.name, tally, round.failures),
    };
    // Discarded on every node, not only those that said yes: a yes may have been lost on
    // the way back, and a node that timed out may still run our claim later (its discard
    // then runs right after it, on the same connection). Wait only for the nodes that
    // answered; the failed and the undecided ones discard in the background. Silently
    // (DISCARD): this token never held the claim, so its deletes must not wake the waiters
    // of the key (design 2.4a).
    if let Some(args) = discard {
        client
            .fanout()
            .discard_round(primitive, locks, &args, round.answered)
            .await;
    }
    Err(failure)
}

/// Records an attempt's outcome and its nodes' on its span: how many nodes said yes, and each
/// failed node with its error kind (`2:timeout,4:io`).
fn record_attempt(span: &tracing::Span, result: &Result<&Held, &Error>) {
    if span.is_disabled() {
        return;
    }
    let failed = crate::error::failed_nodes;
    match result {
        Ok(lock) => {
            span.record("outcome", "acquired");
            span.record("yes", lock.acquired_on());
            span.record("failed", failed(lock.failures()));
        }
        Err(e) => {
            let outcome = match e {
                Error::Taken { .. } => "taken",
                Error::NoQuorum { .. } => "no_quorum",
                Error::ValidityExpired { .. } => "validity_expired",
                _ => "error",
            };
            span.record("outcome", outcome);
            if let Error::Taken { failures, .. } | Error::NoQuorum { failures, .. } = e {
                span.record("failed", failed(failures));
            }
        }
    }
}

/// `attempt`, the `made`-th for `name`, in a span of its own that records its outcome.
pub(crate) async fn traced(
    name: &str,
    made: u32,
    attempt: impl Future<Output = Result<(Held, bool), Error>>,
) -> Result<(Held, bool), Error> {
    let span = tracing::debug_span!(
        "quorumlock.attempt",
        resource = %name,
        attempt = made,
        outcome = tracing::field::Empty,
        yes = tracing::field::Empty,
        failed = tracing::field::Empty,
    );
    let result = attempt.instrument(span.clone()).await;
    record_attempt(&span, &result.as_ref().map(|(lock, _)| lock));
    result
}
