//! The coordinator: fans each operation out to every node at once, counts the votes, and
//! decides as soon as the outcome is known.
//!
//! Three layers, as in the algorithm's description: [`RedLock::lock_with`] retries with
//! jitter; `attempt` makes one attempt on all nodes and judges it; `round` sends one
//! command to every node in parallel and tallies the answers (each node's command runs under
//! its own timeout, see `node/connection.rs`).

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fred::types::{Key, Value};
use futures::stream::{FuturesUnordered, StreamExt};
use futures::FutureExt;
use tokio::sync::Notify;
use tracing::Instrument;

use crate::algo::keys;
use crate::algo::quorum::{quorum, Ballot, Decision, Stake, Tally};
use crate::config::KeepAlive;
use crate::config::{Config, Retry, Ttl};
use crate::engine::attempt::{self, ClaimKind, Grant, Target};
use crate::engine::fencing::{self, Hints};
use crate::engine::held::{Held, Keys, Released};
use crate::engine::keeper::Keeper;
use crate::engine::kept::KeptHandle;
use crate::engine::shutdown::Holdings;
use crate::engine::token::Token;
use crate::engine::waiters::{self, Ticket, Wakeups, Woken};
use crate::error::{ConfigError, Error, NodeError};
use crate::node::admission::Fleet;
use crate::node::probe::KeySpace;
use crate::node::scripts::release_args;
use crate::node::{Acquired, Answer, Node, NodeResult, Primitive, SetNx};
use crate::report::facts::Excluded;
use crate::stats::{self, Counters, Event, Stats};

#[derive(Debug, Clone)]
pub(crate) struct Coordinator {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: Config,
    nodes: Vec<Node>,
    fleet: Arc<Fleet>,
    background: Arc<Background>,
    /// The task that extends this client's kept locks, started with the first one.
    keeper: Keeper,
    /// The locks this client holds, for its shutdown (`engine/shutdown.rs`).
    held: Holdings,
    /// The waiters for releases, by key (see `engine/waiters.rs`).
    wakeups: Arc<Wakeups>,
    counters: Counters,
    /// Set once a fencing token of one of this client's locks was asked for: from then on,
    /// acquisitions of one resource read the fencing counters too, and record the token this
    /// client expects next where they can (see `attempt`).
    tokens_asked: AtomicBool,
    /// The hints of its acquisitions' fencing tokens (`engine/fencing.rs`).
    hints: Hints,
}

impl AsRef<[Node]> for Inner {
    fn as_ref(&self) -> &[Node] {
        &self.nodes
    }
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

/// A caller's place in the line for a key (see `engine/waiters.rs`); it leaves the line when dropped,
/// and the last to leave unsubscribes.
#[derive(Debug)]
struct Place {
    redlock: Coordinator,
    key: String,
    ticket: Arc<Ticket>,
    /// Whether it leaves with the lock (then the next in line waits for its release).
    acquired: bool,
}

impl Drop for Place {
    fn drop(&mut self) {
        let inner = &self.redlock.inner;
        let channel = keys::release_channel(&self.key);
        inner
            .wakeups
            .leave(&self.key, &self.ticket, self.acquired, || {
                for node in &inner.nodes {
                    node.listener().unsubscribe(vec![channel.clone()]);
                }
            });
    }
}

/// The answers of one round, as far as they were awaited.
#[derive(Debug)]
pub(crate) struct Round<T> {
    pub(crate) tally: Tally,
    /// Every node that did not vote yes, as far as known when the round was decided: those
    /// that failed, those that answered no (`Refused`), and those not awaited that could not
    /// have voted yes (see `Node::not_awaited`).
    pub(crate) failures: Vec<NodeError>,
    /// Bit i is set when node i answered yes or no (not failed) before the round was
    /// decided.
    pub(crate) answered: u64,
    /// The answers counted (node index, answer), in the order they came.
    pub(crate) answers: Vec<(usize, T)>,
}

impl Coordinator {
    pub(crate) fn connect(config: Config, preload: bool) -> Result<Coordinator, ConfigError> {
        let (reseed, reseeds) = tokio::sync::mpsc::unbounded_channel();
        let fleet = Arc::new(Fleet::new(
            config.nodes.len(),
            config.quarantine,
            config.max_ttl,
            config.node_timeout,
            KeySpace::of(&config),
            reseed,
        ));
        let nodes = config
            .nodes
            .iter()
            .enumerate()
            .zip(&config.sources)
            .map(|((i, url), source)| {
                Node::connect(i, url, source, &config, Arc::clone(&fleet), preload)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let wakeups = Arc::new(Wakeups::new(config.nodes.len()));
        let background = Arc::new(Background::new(
            config.nodes.len(),
            tokio::runtime::Handle::try_current().ok(),
        ));
        let inner = Arc::new(Inner {
            config,
            nodes,
            fleet,
            background,
            keeper: Keeper::default(),
            held: Holdings::default(),
            wakeups,
            counters: Counters::default(),
            tokens_asked: AtomicBool::new(false),
            hints: Hints::default(),
        });
        // An inspection (`preload` off) writes nothing: it re-seeds no node either.
        if preload {
            crate::engine::seeder::start(Arc::downgrade(&inner), reseeds);
        }
        Ok(Coordinator { inner })
    }

    pub(crate) fn config(&self) -> &Config {
        &self.inner.config
    }

    pub(crate) fn wakeups(&self) -> &Wakeups {
        &self.inner.wakeups
    }

    pub(crate) fn keeper(&self) -> &Keeper {
        &self.inner.keeper
    }

    pub(crate) fn held(&self) -> &Holdings {
        &self.inner.held
    }

    pub(crate) fn hints(&self) -> &Hints {
        &self.inner.hints
    }

    /// Notes that a fencing token of one of this client's locks was asked for.
    pub(crate) fn token_asked(&self) {
        if !self.inner.tokens_asked.load(Ordering::Relaxed) {
            self.inner.tokens_asked.store(true, Ordering::Relaxed);
        }
    }

    pub(crate) fn node_list(&self) -> &[Node] {
        &self.inner.nodes
    }

    pub(crate) fn stats(&self) -> Stats {
        self.inner.counters.read()
    }

    pub(crate) fn nodes(&self) -> usize {
        self.inner.nodes.len()
    }

    pub(crate) fn quorum(&self) -> usize {
        quorum(self.nodes())
    }

    pub(crate) fn connected_nodes(&self) -> usize {
        self.inner.nodes.iter().filter(|n| n.is_ready()).count()
    }

    pub(crate) async fn wait_for_nodes(&self, within: Duration) -> usize {
        let all = futures::future::join_all(self.inner.nodes.iter().map(|n| n.connected()));
        let _ = tokio::time::timeout(within, all).await;
        self.connected_nodes()
    }

    pub(crate) async fn wait_for_quorum(&self, within: Duration) -> usize {
        let deadline = tokio::time::Instant::now() + within;
        let needed = self.config().votes_needed.unwrap_or(self.quorum());
        loop {
            // Subscribed before counting, so that a check ending in between is not missed.
            let checked = self.inner.fleet.checked.notified();
            tokio::pin!(checked);
            checked.as_mut().enable();
            let (counted, pending) = self.counted_and_pending();
            if counted >= needed || counted + pending < needed {
                return counted;
            }
            if tokio::time::timeout_at(deadline, checked).await.is_err() {
                return self.counted_and_pending().0;
            }
        }
    }

    /// How long until quarantine lets enough nodes count to decide a lock, as their checks
    /// found: zero when they count now, `None` when the checked nodes cannot, whatever the
    /// wait (too few are connected and checked, or too many do not count for other reasons).
    pub(crate) fn quarantine_left(&self) -> Option<Duration> {
        let needed = self.config().votes_needed.unwrap_or(self.quorum());
        let mut waits: Vec<Duration> = self
            .inner
            .nodes
            .iter()
            .filter(|n| n.is_ready())
            .filter_map(|n| match n.excluded() {
                None => Some(Duration::ZERO),
                Some(Excluded::Quarantined { left, .. }) => Some(left),
                Some(_) => None,
            })
            .collect();
        waits.sort_unstable();
        waits.get(needed.checked_sub(1)?).copied()
    }

    /// How many nodes count now, and how many are not checked yet (connecting, being
    /// checked, or down).
    fn counted_and_pending(&self) -> (usize, usize) {
        let nodes = &self.inner.nodes;
        let counted = nodes
            .iter()
            .filter(|n| n.is_ready() && n.excluded().is_none())
            .count();
        let pending = nodes.iter().filter(|n| !n.admission().is_checked()).count();
        (counted, pending)
    }

    pub(crate) async fn lock(&self, resource: &str) -> Result<Held, Error> {
        let config = self.config();
        self.lock_with(resource, config.ttl, config.retry).await
    }

    pub(crate) async fn try_lock(&self, resource: &str) -> Result<Held, Error> {
        self.lock_with(resource, self.config().ttl, Retry::none())
            .await
    }

    pub(crate) async fn lock_with(
        &self,
        resource: &str,
        ttl: Duration,
        retry: Retry,
    ) -> Result<Held, Error> {
        self.lock_all_with(&[resource], ttl, retry).await
    }

    pub(crate) async fn with_lock<F, Fut, T>(&self, resource: &str, work: F) -> Result<T, Error>
    where
        F: FnOnce(KeptHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        let keep = KeepAlive::new();
        keep.check(self.config().ttl)?;
        self.lock(resource).await?.keep_alive(keep)?.run(work).await
    }

    pub(crate) async fn lock_all<S: AsRef<str>>(&self, resources: &[S]) -> Result<Held, Error> {
        let config = self.config();
        self.lock_all_with(resources, config.ttl, config.retry)
            .await
    }

    pub(crate) async fn lock_all_with<S: AsRef<str>>(
        &self,
        resources: &[S],
        ttl: Duration,
        retry: Retry,
    ) -> Result<Held, Error> {
        self.refuse_if_shut_down()?;
        let target = self.target(resources)?;
        let ttl = self.config().check_ttl(ttl)?;
        retry.validate()?;
        // One resource: callers of this client that find it taken wait in line for a release
        // (`engine/waiters.rs`); several: they pause between attempts.
        let key = match target.resources.as_slice() {
            [resource] => Some(keys::lock_key(&self.config().key_prefix, resource)),
            _ => None,
        };
        self.acquiring(&target.name, key, None, ttl, retry, || {
            attempt::attempt(self, &target, ttl, Locking::default())
        })
        .await
    }

    /// Attempts with `attempt` until it is granted, retrying as `retry` says: callers that
    /// find `key` taken wait in this client's line for its release (`engine/waiters.rs`),
    /// without a key they pause between attempts. A lock's acquisition and a permit's
    /// (`engine/semaphore.rs`) both run this loop; only their attempts differ. `name` names
    /// the resource in traces. An attempt that is granted says whether the resource may have
    /// room for the next caller in line (a semaphore with a slot still free): that caller
    /// then attempts at once instead of waiting for a release. `permits` says what the
    /// callers wait for (a lock: `None`), so that only a release of that kind is handed
    /// over to them.
    pub(crate) async fn acquiring<F, Fut>(
        &self,
        name: &str,
        key: Option<String>,
        permits: Option<u32>,
        ttl: Ttl,
        retry: Retry,
        mut attempt: F,
    ) -> Result<Held, Error>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<(Held, bool), Error>>,
    {
        let started = Instant::now();
        let counters = &self.inner.counters;
        let deadline = tokio::time::Instant::from_std(started)
            .checked_add(retry.waiting_budget())
            .unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(86_400 * 365));
        let mut made = 0u32;
        let mut place: Option<Place> = None;
        let mut last: Option<Error> = None;
        // Do not barge in before this client's callers already waiting for the resource.
        let mut attempt_now = true;
        if let Some(key) = key.as_deref().filter(|k| self.inner.wakeups.queued(k)) {
            let joined = self.join(key, ttl, permits).await;
            attempt_now = joined.ticket.is_head();
            place = Some(joined);
        }
        loop {
            if let (false, Some(waiting)) = (attempt_now, &place) {
                let pause = retry
                    .next_pause(0, started.elapsed(), jitter(retry.jitter))
                    .unwrap_or(Duration::ZERO);
                match waiters::wait(&waiting.ticket, pause, Some(deadline)).await {
                    Woken::Handed => {
                        if let Some(lock) = waiting.ticket.take_handed() {
                            counters.count(Event::HandedOver);
                            stats::call_ended(started.elapsed(), true);
                            if let Some(mut waiting) = place.take() {
                                waiting.acquired = true;
                            }
                            return self.refuse_after_shutdown(lock);
                        }
                    }
                    Woken::Released => counters.count(Event::Woken),
                    Woken::Paused => counters.count(Event::Paused),
                    Woken::Deadline => {
                        if let Some(error) = last {
                            stats::call_ended(started.elapsed(), false);
                            return Err(error);
                        }
                        // Never attempted: one attempt before giving up.
                    }
                }
            }
            self.refuse_if_shut_down()?;
            made += 1;
            counters.count(Event::Attempt);
            let span = tracing::debug_span!(
                "quorumlock.attempt",
                resource = %name,
                attempt = made,
                outcome = tracing::field::Empty,
                yes = tracing::field::Empty,
                failed = tracing::field::Empty,
            );
            let result = attempt().instrument(span.clone()).await;
            record_attempt(&span, &result.as_ref().map(|(lock, _)| lock));
            let error = match result {
                Ok((lock, room)) => {
                    counters.count(Event::Acquired);
                    stats::call_ended(started.elapsed(), true);
                    if let Some(mut waiting) = place.take() {
                        // Leaving with the lock, the next in line waits for its release;
                        // where there is room still, it attempts at once.
                        waiting.acquired = !room;
                    }
                    return self.refuse_after_shutdown(lock);
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
            // A lock's first refusal: a semaphore or read-write lock of that name refuses
            // every lock, which its `SET NX` cannot tell from another lock. Say so rather
            // than wait for it (design 2.9).
            if let (true, 1, None, Some(key)) = (taken, made, permits, &key) {
                if let Some(found) = self.kind_in_the_way(key).await {
                    stats::call_ended(started.elapsed(), false);
                    return Err(Error::KindMismatch {
                        resource: name.to_string(),
                        found,
                    });
                }
            }
            let Some(pause) = retry.next_pause(made, started.elapsed(), jitter(retry.jitter))
            else {
                stats::call_ended(started.elapsed(), false);
                return Err(error);
            };
            tracing::debug!(resource = %name, attempt = made, error = %error, "lock attempt failed");
            last = Some(error);
            match (&key, &place) {
                // Taken: wait in line for a release. The head's next attempt comes right after
                // the subscription, since a release made before it sent no message we could get.
                (Some(key), None) if taken => {
                    let joined = self.join(key, ttl, permits).await;
                    attempt_now = joined.ticket.is_head();
                    place = Some(joined);
                }
                (_, Some(_)) => attempt_now = false,
                _ => {
                    tokio::time::sleep(pause).await;
                    counters.count(Event::Paused);
                    attempt_now = true;
                }
            }
        }
    }

    /// Joins the line of this client's callers waiting for `key`; the first subscribes to the
    /// key's release channel on every node and waits until a majority confirmed it (or every
    /// node answered or timed out).
    async fn join(&self, key: &str, ttl: Ttl, permits: Option<u32>) -> Place {
        let wakeups = &self.inner.wakeups;
        let channel = keys::release_channel(key);
        let mut confirmations = Vec::new();
        let ticket = wakeups.join(key, Some(ttl), permits, || {
            for node in &self.inner.nodes {
                confirmations.push(node.listener().subscribe(vec![channel.clone()], wakeups));
            }
        });
        let place = Place {
            redlock: self.clone(),
            key: key.to_string(),
            ticket,
            acquired: false,
        };
        if !confirmations.is_empty() {
            let mut pending: FuturesUnordered<_> = confirmations.into_iter().collect();
            let mut confirmed = 0;
            // At most one node timeout: with a majority down, waiting longer would only
            // delay the attempt (which the pause then covers).
            let _ = tokio::time::timeout(self.config().node_timeout, async {
                while let Some(answer) = pending.next().await {
                    confirmed += usize::from(answer.unwrap_or(false));
                    if confirmed >= self.quorum() {
                        break;
                    }
                }
            })
            .await;
            tracing::debug!(key, confirmed, "subscribed to the release channel");
        }
        place
    }

    /// Deletes `resource`'s key on every node where it holds `token`, with the RELEASE
    /// script (compare-and-delete, announced to the waiters as a release is): an operator
    /// breaking the lock of a holder that is gone (`RedLock::break_lock`, design 3.4b).
    /// Decided as a release is ([`verdict::confirmation`]).
    pub(crate) async fn break_lock(&self, resource: &str, token: &str) -> Result<Released, Error> {
        if token.is_empty() {
            return Err(ConfigError::EmptyToken.into());
        }
        let target = self.target(&[resource])?;
        let locks = target.keys.locks().to_vec();
        let args = release_args(&[Value::from(token)]);
        let round = self
            .round_marking(None, Stake::Held, |node| {
                node.release(Primitive::Lock, locks.clone(), args.clone())
            })
            .await;
        attempt::confirmed(&target.name, round.tally, round.failures)
    }

    /// Checks resource names and makes their keys.
    fn target<S: AsRef<str>>(&self, resources: &[S]) -> Result<Target, ConfigError> {
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
        let prefix = &self.config().key_prefix;
        let locks: Vec<String> = names.iter().map(|r| keys::lock_key(prefix, r)).collect();
        if let Some(reserved) = locks.iter().find(|k| keys::is_reserved(k)) {
            return Err(ConfigError::ReservedResource(reserved.clone()));
        }
        let mut keys: Vec<Key> = locks.iter().map(|k| Key::from(k.as_str())).collect();
        if self.config().fencing {
            keys.extend(locks.iter().map(|k| Key::from(keys::fence_key(k))));
        }
        Ok(Target {
            name: names.join(","),
            keys: Keys {
                all: keys,
                locks: names.len(),
            },
            resources: names,
        })
    }

    /// Whether an acquisition of `keys` reads their fencing counters (see [`Locking`]).
    pub(crate) fn reads_counters(&self, keys: &Keys) -> bool {
        keys.fencing() && (keys.locks > 1 || self.inner.tokens_asked.load(Ordering::Relaxed))
    }

    /// Sends one command to every node at once and counts the answers until the outcome is
    /// decided. Commands still in flight then are driven to their end in a background task:
    /// dropping them instead would let the client send a queued one after a reconnect, long
    /// after we gave up on it; awaiting them to their timeout marks them dead.
    pub(crate) async fn round<T, F, Fut>(&self, op: F) -> Round<T>
    where
        T: Answer,
        F: Fn(&Node) -> Fut,
        Fut: Future<Output = NodeResult<T>> + Send + 'static,
    {
        self.round_marking(None, Stake::Taking, op).await
    }

    /// [`round`](Self::round), setting `decided` once the outcome is decided and before any
    /// undecided command is handed to the background: a per-node future that finds it set
    /// knows that its answer will not be counted, and can act on it itself.
    ///
    /// `stake` says when the round is decided (see [`Stake`]). Only a round that takes a
    /// lock presumes suspect nodes failed until they answer, once a no has been seen
    /// (design 2.2a): there a no means another holder. On a lock we hold, a no ("missing",
    /// "not ours") can come from a node that merely missed the acquisition or earlier
    /// extensions while the suspects still hold our keys, and the round waits until the
    /// answers alone tell whether a majority confirmed or our token is gone.
    pub(crate) async fn round_marking<T, F, Fut>(
        &self,
        decided: Option<&AtomicBool>,
        stake: Stake,
        op: F,
    ) -> Round<T>
    where
        T: Answer,
        F: Fn(&Node) -> Fut,
        Fut: Future<Output = NodeResult<T>> + Send + 'static,
    {
        self.round_deciding(decided, stake, op, |tally, _| tally.decision())
            .await
    }

    /// [`round_marking`](Self::round_marking), decided by `decide` from the tally and the
    /// answers heard so far instead of by the tally alone: a permit's round is won by a
    /// majority on one slot, not by a majority of yes (`algo::slots::decision`).
    pub(crate) async fn round_deciding<T, F, Fut, D>(
        &self,
        decided: Option<&AtomicBool>,
        stake: Stake,
        op: F,
        decide: D,
    ) -> Round<T>
    where
        T: Answer,
        F: Fn(&Node) -> Fut,
        Fut: Future<Output = NodeResult<T>> + Send + 'static,
        D: Fn(&Tally, &[(usize, T)]) -> Decision,
    {
        let mut suspects = 0u64;
        let pending: FuturesUnordered<_> = self
            .inner
            .nodes
            .iter()
            .map(|node| {
                let index = node.index();
                if stake == Stake::Taking && node.is_suspect() {
                    suspects |= 1 << index;
                }
                let counted = self.inner.background.count(index);
                op(node).map(move |vote| {
                    drop(counted);
                    (index, vote)
                })
            })
            .collect();
        let tally = Tally::presuming(self.nodes(), suspects.count_ones() as usize)
            .needing(self.config().votes_needed.unwrap_or(self.quorum()));
        let mut round = Round {
            tally: match stake {
                Stake::Taking => tally,
                Stake::Held => tally.holding(),
            },
            failures: Vec::new(),
            answered: 0,
            answers: Vec::with_capacity(self.nodes()),
        };
        // Owned by a guard so that the undecided commands are finished in the background
        // however this function ends: decided, or dropped half-way by a cancelled caller.
        let mut pending = InBackgroundOnDrop(pending, Arc::clone(&self.inner.background));
        while let Some((index, vote)) = pending.0.next().await {
            let suspect = suspects & (1 << index) != 0;
            match vote {
                Ok(answer) => {
                    round.answered |= 1 << index;
                    let ballot = answer.ballot();
                    if let (Ballot::No, Some(node)) = (ballot, self.inner.nodes.get(index)) {
                        round
                            .failures
                            .push(node.answered_no(stake == Stake::Taking));
                    }
                    round.tally.record_from(ballot, suspect);
                    round.answers.push((index, answer));
                }
                Err(e) => {
                    round.failures.push(e);
                    round.tally.record_from(Ballot::Failed, suspect);
                }
            }
            if decide(&round.tally, &round.answers) != Decision::Pending {
                if let Some(decided) = decided {
                    decided.store(true, Ordering::SeqCst);
                }
                break;
            }
        }
        // Decided before every node answered: name those not awaited that could not have
        // voted yes (not connected, not counted, unanswering), so that a node that is down
        // is reported whether or not the round had to wait for it (design 4.1).
        for node in &self.inner.nodes {
            let index = node.index();
            let heard = round.answered & (1 << index) != 0
                || round.failures.iter().any(|f| f.index == index);
            if !heard {
                round.failures.extend(node.not_awaited());
            }
        }
        round
    }

    /// Compare-and-delete on every node without announcing it (the cleanup of a failed
    /// attempt); waits for the nodes in `wait_for` (a bit mask of node indexes), deletes on
    /// the rest in the background.
    pub(crate) async fn discard_round(
        &self,
        primitive: Primitive,
        keys: &[Key],
        args: &[Value],
        wait_for: u64,
    ) {
        let mut waited = FuturesUnordered::new();
        let background = FuturesUnordered::new();
        let (keys, args): (Arc<[Key]>, Arc<[Value]>) = (keys.into(), args.into());
        for node in &self.inner.nodes {
            let release = self.counted(node, node.discard(primitive, &keys, &args));
            if wait_for & (1 << node.index()) != 0 {
                waited.push(release);
            } else {
                background.push(release);
            }
        }
        drop(InBackgroundOnDrop(
            background,
            Arc::clone(&self.inner.background),
        ));
        while waited.next().await.is_some() {}
    }

    /// Runs `op` on the nodes in `mask` (a bit mask of node indexes) in a background task,
    /// without waiting for their answers (needs a runtime; a no-op without one).
    pub(crate) fn detached<F, Fut>(&self, mask: u64, op: F)
    where
        F: Fn(&Node) -> Fut,
        Fut: Future + Send + 'static,
    {
        let pending: FuturesUnordered<_> = self
            .inner
            .nodes
            .iter()
            .filter(|node| mask & (1 << node.index()) != 0)
            .map(|node| self.counted(node, op(node)))
            .collect();
        drop(InBackgroundOnDrop(
            pending,
            Arc::clone(&self.inner.background),
        ));
    }

    /// Starts a silent delete of an attempt's keys on every node without waiting for it
    /// (needs a runtime; a no-op without one, the keys then expire after their ttl).
    pub(crate) fn discard_detached(&self, primitive: Primitive, keys: Vec<Key>, args: Vec<Value>) {
        self.detached(u64::MAX, |node| {
            node.discard(primitive, keys.clone(), args.clone())
        });
    }

    /// Starts a release of `key` on every node without waiting for it (needs a runtime; a
    /// no-op without one, the keys then expire after their ttl).
    pub(crate) fn release_detached(&self, primitive: Primitive, keys: Vec<Key>, value: Value) {
        // Made here rather than in the task, so that `settle` counts them from now on.
        let args = release_args(&[value]);
        self.detached(u64::MAX, |node| {
            node.release(primitive, keys.clone(), args.clone())
        });
    }

    /// `future`, for `node`, counted as its node's work until it ends or is dropped (see
    /// [`settle`](Self::settle)).
    fn counted<F: Future>(&self, node: &Node, future: F) -> impl Future<Output = F::Output> {
        let counted = self.inner.background.count(node.index());
        future.map(move |out| {
            drop(counted);
            out
        })
    }

    pub(crate) async fn settle(&self, within: Duration) -> bool {
        let nodes = &self.inner.nodes;
        let never_connected = |i: usize| nodes.get(i).is_some_and(Node::never_connected);
        self.inner.background.settled(within, never_connected).await
    }
}

/// Per-node futures that, when dropped, are driven to completion (answer or timeout) in a
/// background task rather than cancelled.
struct InBackgroundOnDrop<F: Future + Send + 'static>(FuturesUnordered<F>, Arc<Background>);

impl<F: Future + Send + 'static> Drop for InBackgroundOnDrop<F> {
    fn drop(&mut self) {
        // Those already answered end here (inside a runtime, where their timers may be
        // polled): under load the last answers often come with the one that decided, and
        // then no task is spawned for them.
        if tokio::runtime::Handle::try_current().is_ok() {
            while let Some(Some(_)) = self.0.next().now_or_never() {}
        }
        if self.0.is_empty() {
            return;
        }
        let mut pending = std::mem::take(&mut self.0);
        self.1
            .spawn(async move { while pending.next().await.is_some() {} });
    }
}

/// Counts the client's background tasks, and the per-node commands they drive, so that
/// [`RedLock::settle`] can wait for them.
#[derive(Debug, Default)]
pub(crate) struct Background {
    /// The runtime the client was built in: background work started where no runtime is
    /// current (a [`Lock`](crate::Lock) dropped on a plain thread, as `blocking` does) goes
    /// there.
    home: Option<tokio::runtime::Handle>,
    pending: AtomicUsize,
    /// Per node index: how many of its commands are under way.
    per_node: Box<[AtomicUsize]>,
    /// Notified when `pending` or a count of `per_node` falls to zero.
    idle: Notify,
}

/// One command of a node, counted until this is dropped.
struct Counted {
    background: Arc<Background>,
    index: usize,
}

impl Drop for Counted {
    fn drop(&mut self) {
        let Some(n) = self.background.per_node.get(self.index) else {
            return;
        };
        if n.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.background.idle.notify_waiters();
        }
    }
}

impl Background {
    /// For a client of `nodes` nodes, built in `home` (see [`spawn`](Self::spawn)).
    fn new(nodes: usize, home: Option<tokio::runtime::Handle>) -> Background {
        Background {
            home,
            pending: AtomicUsize::new(0),
            per_node: (0..nodes).map(|_| AtomicUsize::new(0)).collect(),
            idle: Notify::new(),
        }
    }

    /// Spawns `work` on the current runtime, or else on the one the client was built in (a
    /// no-op if that one is shut down: the keys then expire).
    fn spawn(self: &Arc<Self>, work: impl Future<Output = ()> + Send + 'static) {
        let Some(runtime) = tokio::runtime::Handle::try_current()
            .ok()
            .or_else(|| self.home.clone())
        else {
            return;
        };
        self.pending.fetch_add(1, Ordering::SeqCst);
        let this = Arc::clone(self);
        runtime.spawn(async move {
            work.await;
            if this.pending.fetch_sub(1, Ordering::SeqCst) == 1 {
                this.idle.notify_waiters();
            }
        });
    }

    /// Counts one command of node `index` until the result is dropped.
    fn count(self: &Arc<Self>, index: usize) -> Counted {
        if let Some(n) = self.per_node.get(index) {
            n.fetch_add(1, Ordering::SeqCst);
        }
        Counted {
            background: Arc::clone(self),
            index,
        }
    }

    /// Whether nothing is under way, but for nodes for which `ignored` holds.
    fn done(&self, ignored: &impl Fn(usize) -> bool) -> bool {
        self.pending.load(Ordering::SeqCst) == 0
            || self
                .per_node
                .iter()
                .enumerate()
                .all(|(i, n)| n.load(Ordering::SeqCst) == 0 || ignored(i))
    }

    async fn settled(&self, within: Duration, ignored: impl Fn(usize) -> bool) -> bool {
        let now = tokio::time::Instant::now();
        let deadline = now
            .checked_add(within)
            .unwrap_or_else(|| now + crate::config::FAR_FUTURE);
        loop {
            let idle = self.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if self.done(&ignored) {
                return true;
            }
            if tokio::time::timeout_at(deadline, idle).await.is_err() {
                return self.done(&ignored);
            }
        }
    }
}

/// Releases an attempt's keys in the background if the attempt is cancelled half-way.
pub(crate) struct CleanupOnDrop<'a> {
    redlock: &'a Coordinator,
    primitive: Primitive,
    keys: &'a [Key],
    /// What the DISCARD script gets (see `Node::discard`).
    args: Vec<Value>,
    armed: bool,
}

impl<'a> CleanupOnDrop<'a> {
    pub(crate) fn new(
        redlock: &'a Coordinator,
        primitive: Primitive,
        keys: &'a [Key],
        args: Vec<Value>,
    ) -> Self {
        CleanupOnDrop {
            redlock,
            primitive,
            keys,
            args,
            armed: true,
        }
    }

    pub(crate) fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for CleanupOnDrop<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.redlock.discard_detached(
                self.primitive,
                self.keys.to_vec(),
                std::mem::take(&mut self.args),
            );
        }
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

/// A lock's claim: its keys, set on every node (`SET NX PX`, or the ACQUIRE script when it
/// reads the fencing counters), granted on a majority of yes. With fencing, nothing more:
/// the token is recorded only when the holder asks for it (`engine/fencing.rs`).
#[derive(Debug, Default)]
struct Locking {
    reads_counters: bool,
    /// The fencing token the ACQUIRE script records where it can (0: none).
    hint: u64,
}

impl ClaimKind for Locking {
    type Answer = Acquired;

    fn primitive(&self) -> Primitive {
        Primitive::Lock
    }

    fn noun(&self) -> Option<&'static str> {
        Some("lock")
    }

    fn discard(&self, value: &Value) -> Option<Vec<Value>> {
        Some(vec![value.clone()])
    }

    async fn send(
        &mut self,
        redlock: &Coordinator,
        target: &Target,
        token: &Token,
        ttl: Ttl,
    ) -> Round<Acquired> {
        let value = Value::from(token.as_str());
        let keys = &target.keys;
        // Without fencing, or until a token of this client's locks is asked for, one
        // resource is taken with `SET NX PX`: a lock whose token nobody asks for costs what
        // a lock without fencing costs, and asking costs two rounds (read the counters, then
        // record the token). Several resources take the ACQUIRE script, which reads the
        // counters too, for next to nothing; so does one resource once this client's locks
        // have had their token asked for, and it records the next token too if this client
        // guesses it (its hint, `engine/fencing.rs`): then asking sends nothing, and
        // otherwise one round.
        self.reads_counters = redlock.reads_counters(keys);
        if self.reads_counters && redlock.inner.tokens_asked.load(Ordering::Relaxed) {
            self.hint = redlock.inner.hints.next(keys.counters());
        }
        if keys.locks == 1 && !self.reads_counters {
            let key = &keys.all[0];
            let set = SetNx::new(key.clone(), value, ttl.px);
            redlock.round(|node| node.set_nx(&set)).await
        } else {
            let sent = keys.sent(self.reads_counters);
            let px = (ttl.px, self.hint);
            redlock
                .round(|node| node.acquire(sent.to_vec(), keys.locks, value.clone(), px))
                .await
        }
    }

    fn granted(
        &mut self,
        redlock: &Coordinator,
        target: &Target,
        round: &Round<Acquired>,
    ) -> Grant {
        // With the counters, if read: the largest on the majority that said yes.
        let hints = (self.hint, &redlock.inner.hints);
        Grant {
            fencing: fencing::granted(&target.keys, self.reads_counters, round, hints),
            member: None,
            handovers: 0,
            room: false,
        }
    }
}
