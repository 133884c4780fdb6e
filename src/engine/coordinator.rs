//! The coordinator: the client's machinery, one per `RedLock`: its nodes' fan-out
//! (`engine/fanout.rs`), its registries (held locks, waiters, fencing hints, the keeper), and
//! the acquisition loop.
//!
//! Three layers, as in the algorithm's description: [`Coordinator::acquiring`] retries with
//! jitter and waits in line; one attempt (`engine/attempt.rs`) claims on all nodes and judges
//! the round; [`Fanout::round`] sends one command to every node in parallel and tallies the
//! answers (each node's command runs under its own timeout, see `node/connection.rs`).

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fred::types::{Key, Value};
use futures::stream::{FuturesUnordered, StreamExt};

use crate::algo::keys;
use crate::algo::quorum::{quorum, Stake};
use crate::config::KeepAlive;
use crate::config::{Config, Retry, Ttl};
use crate::engine::attempt::{self, ClaimKind, Grant};
use crate::engine::census::ClaimCensus;
use crate::engine::claim::{Keys, Resources};
use crate::engine::fanout::{Background, Fanout, Round};
use crate::engine::fence_state;
use crate::engine::held::Held;
use crate::engine::held::Ident;
use crate::engine::holdings::Holdings;
use crate::engine::kept::KeptHandle;
use crate::engine::machinery::Machinery;
use crate::engine::outcome::{self, Released};
use crate::engine::token::Token;
use crate::engine::waiters::{self, Ticket, Wakeups, Woken};
use crate::error::{ConfigError, Error};
use crate::node::admission::Fleet;
use crate::node::probe::KeySpace;
use crate::node::scripts::release_args;
use crate::node::{Acquired, Node, Primitive, SetNx};
use crate::report::facts::Excluded;
use crate::stats::{self, Counters, Event, Stats};

#[derive(Debug, Clone)]
pub(crate) struct Coordinator {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// The fan-out and the registries, shared with the client's held claims.
    machinery: Arc<Machinery>,
    fleet: Arc<Fleet>,
    counters: Counters,
}

/// A caller's place in the line for a key (see `engine/waiters.rs`); it leaves the line when dropped,
/// and the last to leave unsubscribes.
#[derive(Debug)]
struct Place {
    client: Coordinator,
    key: String,
    ticket: Arc<Ticket>,
    /// Whether it leaves with the lock (then the next in line waits for its release).
    acquired: bool,
}

impl Drop for Place {
    fn drop(&mut self) {
        let inner = &self.client.inner.machinery;
        let channel = keys::release_channel(&self.key);
        inner
            .wakeups()
            .leave(&self.key, &self.ticket, self.acquired, || {
                for node in inner.fanout().nodes() {
                    node.listener().unsubscribe(vec![channel.clone()]);
                }
            });
    }
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
        let needed = config.votes_needed.unwrap_or(quorum(nodes.len()));
        let fanout = Fanout::new(nodes, background, needed);
        let machinery = Arc::new(Machinery::new(config, fanout, wakeups));
        // An inspection (`preload` off) writes nothing: it re-seeds no node either. The
        // re-seeds go on while the client or one of its held claims lives.
        if preload {
            crate::engine::seeder::start(Arc::downgrade(&machinery), reseeds);
        }
        let inner = Arc::new(Inner {
            machinery,
            fleet,
            counters: Counters::default(),
        });
        Ok(Coordinator { inner })
    }

    /// The fan-out and the registries, which its held claims share.
    pub(crate) fn machinery(&self) -> &Arc<Machinery> {
        &self.inner.machinery
    }

    pub(crate) fn config(&self) -> &Config {
        self.inner.machinery.config()
    }

    pub(crate) fn wakeups(&self) -> &Arc<Wakeups> {
        self.inner.machinery.wakeups()
    }

    pub(crate) fn held(&self) -> &Holdings<Ident> {
        self.inner.machinery.held()
    }

    pub(crate) fn node_list(&self) -> &[Node] {
        self.inner.machinery.node_list()
    }

    /// The fan-out of rounds to every node.
    pub(crate) fn fanout(&self) -> &Fanout {
        self.inner.machinery.fanout()
    }

    pub(crate) fn stats(&self) -> Stats {
        self.inner.counters.read()
    }

    pub(crate) fn nodes(&self) -> usize {
        self.node_list().len()
    }

    pub(crate) fn quorum(&self) -> usize {
        quorum(self.nodes())
    }

    pub(crate) fn connected_nodes(&self) -> usize {
        self.node_list().iter().filter(|n| n.is_ready()).count()
    }

    pub(crate) async fn wait_for_nodes(&self, within: Duration) -> usize {
        let all = futures::future::join_all(self.node_list().iter().map(|n| n.connected()));
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
            .node_list()
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
        let nodes = self.node_list();
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
        self.held().refuse()?;
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
            attempt::attempt(self.machinery(), &target, ttl, Locking::default())
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
        if let Some(key) = key.as_deref().filter(|k| self.wakeups().queued(k)) {
            let joined = self.join(key, ttl, permits).await;
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
            self.held().refuse()?;
            made += 1;
            counters.count(Event::Attempt);
            let error = match attempt::traced(name, made, attempt()).await {
                Ok((lock, room)) => {
                    counters.count(Event::Acquired);
                    stats::call_ended(started.elapsed(), true);
                    if let Some(mut waiting) = place.take() {
                        // Leaving with the lock, the next in line waits for its release;
                        // where there is room still, it attempts at once.
                        waiting.acquired = !room;
                    }
                    self.held().refuse()?;
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
                let joined = self.join(key, ttl, permits).await;
                let head = joined.ticket.is_head();
                *place = Some(joined);
                head
            }
            (_, Some(_)) => false,
            _ => {
                tokio::time::sleep(pause).await;
                self.inner.counters.count(Event::Paused);
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
        let counters = &self.inner.counters;
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
                return Some(self.held().refuse().map(|()| lock));
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
        let found = ClaimCensus::of(self.machinery())
            .kind_in_the_way(key)
            .await?;
        Some(Error::KindMismatch {
            resource: name.to_string(),
            found,
        })
    }

    /// Joins the line of this client's callers waiting for `key`; the first subscribes to the
    /// key's release channel on every node and waits until a majority confirmed it (or every
    /// node answered or timed out).
    async fn join(&self, key: &str, ttl: Ttl, permits: Option<u32>) -> Place {
        let wakeups = self.wakeups();
        let channel = keys::release_channel(key);
        let mut confirmations = Vec::new();
        let ticket = wakeups.join(key, Some(ttl), permits, || {
            for node in self.node_list() {
                confirmations.push(node.listener().subscribe(vec![channel.clone()], wakeups));
            }
        });
        let place = Place {
            client: self.clone(),
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
    /// Decided as a release is ([`outcome::confirmed`]).
    pub(crate) async fn break_lock(&self, resource: &str, token: &str) -> Result<Released, Error> {
        if token.is_empty() {
            return Err(ConfigError::EmptyToken.into());
        }
        let target = self.target(&[resource])?;
        let locks = target.keys.locks().to_vec();
        let args = release_args(&[Value::from(token)]);
        let round = self
            .fanout()
            .round_marking(None, Stake::Held, |node| {
                node.release(Primitive::Lock, locks.clone(), args.clone())
            })
            .await;
        outcome::confirmed(&target.name, round.tally, round.failures)
    }

    /// Checks resource names and makes their keys.
    fn target<S: AsRef<str>>(&self, resources: &[S]) -> Result<Resources, ConfigError> {
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
        Ok(Resources {
            name: names.join(","),
            keys: Keys {
                all: keys,
                locks: names.len(),
            },
            resources: names,
        })
    }

    pub(crate) async fn settle(&self, within: Duration) -> bool {
        self.fanout().settle(within).await
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
        client: &Machinery,
        target: &Resources,
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
        // guesses it (its hint, `engine/fence_state.rs`): then asking sends nothing, and
        // otherwise one round.
        self.reads_counters = client.reads_counters(keys);
        if self.reads_counters && client.tokens_asked() {
            self.hint = client.hints().next(keys.counters());
        }
        if keys.locks == 1 && !self.reads_counters {
            let key = &keys.all[0];
            let set = SetNx::new(key.clone(), value, ttl.px);
            client.fanout().round(|node| node.set_nx(&set)).await
        } else {
            let sent = keys.sent(self.reads_counters);
            let px = (ttl.px, self.hint);
            client
                .fanout()
                .round(|node| node.acquire(sent.to_vec(), keys.locks, value.clone(), px))
                .await
        }
    }

    fn granted(
        &mut self,
        client: &Machinery,
        target: &Resources,
        round: &Round<Acquired>,
    ) -> Grant {
        // With the counters, if read: the largest on the majority that said yes.
        let hints = (self.hint, client.hints());
        Grant {
            fencing: fence_state::granted(&target.keys, self.reads_counters, round, hints),
            member: None,
            handovers: 0,
            room: false,
        }
    }
}
