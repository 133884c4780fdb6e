//! The one acquisition path of every claim (a lock, a permit, a read-write lock's side, a
//! handover): the loop ([`Acquiring::run`]), which retries as the caller's [`Retry`] says
//! and waits in this client's line (`engine/waiters.rs`); one [`attempt`] of any
//! [`ClaimKind`], whose three ends (a [`Held`] claim, [`expired`], or a refusal, [`lost`],
//! discarded silently on every node) are written here once. Where it sits on a `lock()`'s
//! way down: ARCHITECTURE.md ("One `lock()`, top to bottom").

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::Instrument;

use fred::types::{Key, Value};

use crate::algo::keys;
use crate::algo::quorum::Tally;
use crate::algo::verdict::{self, Timed};
use crate::config::{Config, Retry, Ttl};
use crate::engine::census::ClaimCensus;
use crate::engine::fanout::{CleanupOnDrop, Round};
use crate::engine::held::{self, Acquisition, Fencing, Held, Keys, Member, Token};
use crate::engine::machinery::Machinery;
use crate::engine::waiters::{self, Place, Woken};
use crate::error::{ConfigError, Error, NodeError, NodeErrorKind};
use crate::node::{Answer, Primitive};
use crate::stats::{self, Event};

/// What one acquisition claims: the resources' names and their keys.
#[derive(Debug, Clone)]
pub(crate) struct Resources {
    /// The resources' names joined by commas, for messages.
    pub(crate) name: String,
    pub(crate) resources: Vec<String>,
    pub(crate) keys: Keys,
}

impl Resources {
    /// Checks resource names (a lock's, or a semaphore's or read-write lock's one) and
    /// makes their keys: the lock keys, then (with fencing) their fencing counters.
    pub(crate) fn new<S: AsRef<str>>(
        config: &Config,
        resources: &[S],
    ) -> Result<Resources, ConfigError> {
        if resources.is_empty() {
            return Err(ConfigError::NoResources);
        }
        let mut names: Vec<String> = Vec::with_capacity(resources.len());
        for resource in resources {
            let resource = resource.as_ref();
            if resource.is_empty() {
                return Err(ConfigError::EmptyResource);
            }
            if names.iter().any(|n| n == resource) {
                return Err(ConfigError::DuplicateResource(resource.to_string()));
            }
            names.push(resource.to_string());
        }
        let prefix = &config.key_prefix;
        let locks: Vec<String> = names.iter().map(|r| keys::lock_key(prefix, r)).collect();
        if let Some(reserved) = locks.iter().find(|k| keys::is_reserved(k)) {
            return Err(ConfigError::ReservedResource(reserved.clone()));
        }
        let mut keys: Vec<Key> = locks.iter().map(|k| Key::from(k.as_str())).collect();
        if config.fencing {
            keys.extend(locks.iter().map(|k| Key::from(keys::fence_key(k))));
        }
        Ok(Resources {
            name: names.join(","),
            keys: Keys {
                all: keys,
                locks: names.len(),
            },
            resources: names,
        })
    }
}

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
    fn noun(&self) -> Option<&'static str> {
        None
    }

    /// The token the attempt claims with: a fresh one, unless the kind has one.
    fn token(&mut self) -> Result<Token, Error> {
        Token::generate()
    }

    /// What the DISCARD script gets to drop the attempt's claims of `value` when it is
    /// refused or cancelled (by default, the token alone); `None`: nothing is discarded (a
    /// handover's tokens go with the release that follows it).
    fn discard(&self, value: &Value) -> Option<Vec<Value>> {
        Some(vec![value.clone()])
    }

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
        .map(|args| CleanupOnDrop::new(&client.fanout, primitive, locks, args));
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
            target: target.clone(),
            token,
            grant,
            ttl: ttl.ttl,
            valid_until: start + ttl.usable,
            acquired_on: tally.yes,
            failures: round.failures,
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
            .fanout
            .discard_round(primitive, locks, &args, round.answered)
            .await;
    }
    Err(failure)
}

/// `attempt`, the `made`-th for `name`, in a span of its own that records its outcome and its
/// nodes': how many said yes, and each failed node with its error kind (`2:timeout,4:io`).
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
    if span.is_disabled() {
        return result;
    }
    let failed = crate::error::failed_nodes;
    match &result {
        Ok((lock, _)) => {
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
    result
}

/// A round that got its majority too late: [`Error::ValidityExpired`].
pub(crate) fn expired(resource: &str, elapsed: Duration, ttl: Ttl) -> Error {
    Error::ValidityExpired {
        resource: resource.to_string(),
        elapsed,
        ttl: ttl.ttl,
        drift: ttl.drift,
    }
}

/// An acquisition round without a majority: [`Error::Taken`] when refusals decided it,
/// [`Error::NoQuorum`] when failures did.
pub(crate) fn lost(resource: &str, tally: Tally, failures: Vec<NodeError>) -> Error {
    if tally.lost_to_contention() {
        // The refusals are `held_elsewhere`.
        let failures = failures
            .into_iter()
            .filter(|f| f.kind != NodeErrorKind::Refused)
            .collect();
        Error::Taken {
            resource: resource.to_string(),
            held_elsewhere: tally.no,
            nodes: tally.nodes,
            failures,
        }
    } else {
        held::unheld(resource, tally, failures, false)
    }
}

/// One client's acquisition loop, over its machinery (whose counters its calls count in).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Acquiring<'a> {
    client: &'a Arc<Machinery>,
}

impl<'a> Acquiring<'a> {
    pub(crate) fn new(client: &'a Arc<Machinery>) -> Acquiring<'a> {
        Acquiring { client }
    }

    /// Attempts with `attempt` until it is granted, retrying as `retry` says (see the module
    /// doc); without a `key`, it pauses between attempts. `name` names the resource in
    /// traces. An attempt that is granted says whether the resource may have room for the
    /// next caller in line (a semaphore with a slot still free): that caller then attempts
    /// at once instead of waiting for a release. `permits` says what the callers wait for (a
    /// lock: `None`), so that only a release of that kind is handed over to them.
    pub(crate) async fn run<F, Fut>(
        &self,
        name: &str,
        (key, permits): (Option<String>, Option<u32>),
        ttl: Ttl,
        retry: Retry,
        mut attempt: F,
    ) -> Result<Held, Error>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<(Held, bool), Error>>,
    {
        let started = Instant::now();
        let counters = &self.client.counters;
        let deadline = tokio::time::Instant::from_std(started)
            .checked_add(retry.waiting_budget())
            .unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(86_400 * 365));
        let mut made = 0u32;
        let mut place: Option<Place> = None;
        let mut last: Option<Error> = None;
        // Do not barge in before this client's callers already waiting for the resource.
        let mut attempt_now = true;
        if let Some(key) = key.as_deref().filter(|k| self.client.wakeups.queued(k)) {
            let joined = Place::join(self.client, key, ttl, permits).await;
            attempt_now = joined.ticket.is_head();
            place = Some(joined);
        }
        loop {
            if !attempt_now {
                let waited = (&retry, started, deadline);
                if let Some(end) = self.wait_in_line(&mut place, waited, &mut last).await {
                    return end;
                }
            }
            self.client.held.refuse()?;
            made += 1;
            counters.count(Event::Attempt);
            let error = match traced(name, made, attempt()).await {
                Ok((lock, room)) => {
                    counters.count(Event::Acquired);
                    stats::call_ended(started.elapsed(), true);
                    if let Some(mut waiting) = place.take() {
                        // Leaving with the lock, the next in line waits for its release;
                        // where there is room still, it attempts at once.
                        waiting.acquired = !room;
                    }
                    self.client.held.refuse()?;
                    return Ok(lock);
                }
                Err(e) if !e.is_retryable() => return Err(e),
                Err(e) => e,
            };
            let taken = matches!(error, Error::Taken { .. });
            if taken {
                counters.count(Event::Taken);
            } else {
                stats::attempt_failed();
            }
            let first_refusal = (taken, made, permits, key.as_deref());
            if let Some(mismatch) = self.kind_mismatch(name, first_refusal).await {
                stats::call_ended(started.elapsed(), false);
                return Err(mismatch);
            }
            let Some(pause) = retry.next_pause(made, started.elapsed(), jitter(retry.jitter))
            else {
                stats::call_ended(started.elapsed(), false);
                return Err(error);
            };
            tracing::debug!(resource = %name, attempt = made, error = %error, "lock attempt failed");
            last = Some(error);
            let turn = (key.as_deref(), taken, pause);
            attempt_now = self.next_turn(&mut place, turn, (ttl, permits)).await;
        }
    }

    /// After a refused attempt, whether the next comes at once: `taken` and not in line yet,
    /// the caller joins the line for `key` (the head's next attempt comes right after the
    /// subscription, since a release made before it sent no message we could get); in line,
    /// it waits there; without a key, it sleeps `pause` first.
    async fn next_turn(
        &self,
        place: &mut Option<Place>,
        (key, taken, pause): (Option<&str>, bool, Duration),
        (ttl, permits): (Ttl, Option<u32>),
    ) -> bool {
        match (key, &place) {
            (Some(key), None) if taken => {
                let joined = Place::join(self.client, key, ttl, permits).await;
                let head = joined.ticket.is_head();
                *place = Some(joined);
                head
            }
            (_, Some(_)) => false,
            _ => {
                tokio::time::sleep(pause).await;
                self.client.counters.count(Event::Paused);
                true
            }
        }
    }

    /// Waits in this client's line at `place` (if it has one) for a release, a handover, or
    /// the pause after the last attempt; `Some` ends the call: with the lock handed over, or
    /// with the last error once the deadline has passed.
    async fn wait_in_line(
        &self,
        place: &mut Option<Place>,
        (retry, started, deadline): (&Retry, Instant, tokio::time::Instant),
        last: &mut Option<Error>,
    ) -> Option<Result<Held, Error>> {
        let counters = &self.client.counters;
        let waiting = place.as_ref()?;
        let pause = retry
            .next_pause(0, started.elapsed(), jitter(retry.jitter))
            .unwrap_or(Duration::ZERO);
        match waiters::wait(&waiting.ticket, pause, Some(deadline)).await {
            Woken::Handed => {
                let lock = waiting.ticket.take_handed()?;
                counters.count(Event::HandedOver);
                stats::call_ended(started.elapsed(), true);
                if let Some(mut waiting) = place.take() {
                    waiting.acquired = true;
                }
                // Unless the client was shut down meanwhile: then the lock is dropped
                // (which releases it, unless the shutdown did).
                return Some(self.client.held.refuse().map(|()| lock));
            }
            Woken::Released => counters.count(Event::Woken),
            Woken::Paused => counters.count(Event::Paused),
            Woken::Deadline => {
                if let Some(error) = last.take() {
                    stats::call_ended(started.elapsed(), false);
                    return Some(Err(error));
                }
                // Never attempted: one attempt before giving up.
            }
        }
        None
    }

    /// On a lock's first refusal (`Taken` at the first attempt, for a lock's `key`): a
    /// semaphore or read-write lock of that name refuses every lock, which its `SET NX`
    /// cannot tell from another lock. Says so rather than wait for it (design 2.9).
    async fn kind_mismatch(
        &self,
        name: &str,
        (taken, made, permits, key): (bool, u32, Option<u32>, Option<&str>),
    ) -> Option<Error> {
        let (true, 1, None, Some(key)) = (taken, made, permits, key) else {
            return None;
        };
        let found = ClaimCensus::of(self.client).kind_in_the_way(key).await?;
        Some(Error::KindMismatch {
            resource: name.to_string(),
            found,
        })
    }
}

/// A jitter sample for the pause between attempts: uniform from zero to `max`, drawn from
/// the fast thread-local generator (never the one tokens are drawn from).
fn jitter(max: Duration) -> Duration {
    let micros = u64::try_from(max.as_micros()).unwrap_or(u64::MAX);
    if micros == 0 {
        return Duration::ZERO;
    }
    Duration::from_micros(rand::Rng::random_range(&mut rand::rng(), 0..=micros))
}
