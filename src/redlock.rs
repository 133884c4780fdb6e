//! The coordinator: fans each operation out to every node at once, counts the votes, and
//! decides as soon as the outcome is known.
//!
//! Three layers, as in the algorithm's description: [`RedLock::lock_with`] retries with
//! jitter; `attempt` makes one attempt on all nodes and judges it; `round` sends one
//! command to every node in parallel and tallies the answers (each node's command runs under
//! its own timeout, see `node.rs`).

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fred::types::{Key, Value};
use futures::stream::{FuturesUnordered, StreamExt};
use futures::FutureExt;

use crate::config::{Config, RedLockBuilder, Retry, Ttl};
use crate::error::{ConfigError, Error, NodeError};
use crate::lock::Lock;
use crate::node::{ballot, Node, Vote};
use crate::quorum::{quorum, validity, Decision, Tally};
use crate::token::Token;

/// A Redlock coordinator over N independent Redis masters.
///
/// Cheap to clone (an `Arc` inside); share one per process. Build it with
/// [`RedLock::builder`] or [`RedLockBuilder::from_env`].
///
/// ```no_run
/// # async fn f() -> Result<(), quorumlock::Error> {
/// let redlock = quorumlock::RedLock::builder()
///     .nodes(["redis://10.0.0.1", "redis://10.0.0.2", "redis://10.0.0.3"])
///     .build()?;
/// let lock = redlock.lock("invoice:42").await?;
/// // ... at most one holder at a time runs this, until lock.valid_until() ...
/// lock.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RedLock {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: Config,
    nodes: Vec<Node>,
}

/// The answers of one round, as far as they were awaited.
#[derive(Debug)]
pub(crate) struct Round {
    pub(crate) tally: Tally,
    pub(crate) failures: Vec<NodeError>,
    /// Bit i is set when node i answered yes or no (not failed) before the round was
    /// decided.
    pub(crate) answered: u64,
}

impl RedLock {
    /// A builder with the defaults and no nodes.
    pub fn builder() -> RedLockBuilder {
        RedLockBuilder::new()
    }

    pub(crate) fn connect(config: Config) -> Result<RedLock, ConfigError> {
        let nodes = config
            .nodes
            .iter()
            .enumerate()
            .map(|(i, url)| Node::connect(i, url, &config))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(RedLock {
            inner: Arc::new(Inner { config, nodes }),
        })
    }

    /// The validated configuration.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// How many nodes are configured.
    pub fn nodes(&self) -> usize {
        self.inner.nodes.len()
    }

    /// How many nodes must agree: a strict majority of those configured.
    pub fn quorum(&self) -> usize {
        quorum(self.nodes())
    }

    /// How many nodes are connected right now.
    pub fn connected_nodes(&self) -> usize {
        self.inner.nodes.iter().filter(|n| n.is_connected()).count()
    }

    /// Waits until every node is connected, or until `within` has passed, and returns how
    /// many are connected. Locking does not need this (commands to a node that is still
    /// connecting wait for it, up to the node timeout); it is for start-up checks.
    pub async fn wait_for_nodes(&self, within: Duration) -> usize {
        let all = futures::future::join_all(self.inner.nodes.iter().map(|n| n.connected()));
        let _ = tokio::time::timeout(within, all).await;
        self.connected_nodes()
    }

    /// Locks `resource` with the configured ttl, retrying as configured.
    ///
    /// # Errors
    /// [`Error::Taken`], [`Error::NoQuorum`] or [`Error::ValidityExpired`] from the last
    /// attempt when every attempt failed; [`Error::Config`] for an empty resource name
    /// (nothing is sent then).
    ///
    /// # Cancel safety
    /// If this future is dropped during an attempt, the keys that attempt may have set are
    /// released in a background task; any key left behind (the runtime shut down) expires
    /// after the ttl.
    pub async fn lock(&self, resource: &str) -> Result<Lock, Error> {
        let config = self.config();
        self.lock_with(resource, config.ttl, config.retry).await
    }

    /// Makes one attempt to lock `resource` with the configured ttl.
    ///
    /// # Errors
    /// As [`lock`](Self::lock).
    pub async fn try_lock(&self, resource: &str) -> Result<Lock, Error> {
        self.lock_with(resource, self.config().ttl, Retry::none())
            .await
    }

    /// Locks `resource` for `ttl`, retrying by `retry`.
    ///
    /// # Errors
    /// As [`lock`](Self::lock); also [`Error::Config`] for a zero ttl, a ttl not above its
    /// drift allowance, or a retry policy that can never attempt.
    pub async fn lock_with(
        &self,
        resource: &str,
        ttl: Duration,
        retry: Retry,
    ) -> Result<Lock, Error> {
        if resource.is_empty() {
            return Err(ConfigError::EmptyResource.into());
        }
        let ttl = self.config().check_ttl(ttl)?;
        retry.validate()?;
        let key = self.key(resource);
        let started = Instant::now();
        let mut made = 0u32;
        loop {
            made += 1;
            let error = match self.attempt(resource, &key, ttl).await {
                Ok(lock) => return Ok(lock),
                Err(e) if !e.is_retryable() => return Err(e),
                Err(e) => e,
            };
            match retry.next_pause(made, started) {
                Some(pause) => {
                    tracing::debug!(resource, attempt = made, error = %error, ?pause, "lock attempt failed; retrying");
                    tokio::time::sleep(pause).await;
                }
                None => return Err(error),
            }
        }
    }

    fn key(&self, resource: &str) -> Key {
        let prefix = &self.config().key_prefix;
        if prefix.is_empty() {
            Key::from(resource)
        } else {
            Key::from(format!("{prefix}{resource}"))
        }
    }

    /// One attempt: `SET key token NX PX ttl` on every node, decided at the quorum.
    async fn attempt(&self, resource: &str, key: &Key, ttl: Ttl) -> Result<Lock, Error> {
        let token = Token::generate()?;
        let value = Value::from(token.as_str());
        let mut guard = CleanupOnDrop::new(self, key, &value);
        let start = Instant::now();
        let round = self
            .round(|node| node.set_nx(key.clone(), value.clone(), ttl.px))
            .await;
        let elapsed = start.elapsed();
        let failure = match round.tally.decision() {
            Decision::Won => match validity(ttl.ttl, elapsed, ttl.drift) {
                Some(_) => {
                    guard.disarm();
                    for failure in &round.failures {
                        tracing::warn!(resource, node = failure.index, error = %failure, "lock acquired without this node");
                    }
                    // Every node that set the key did so after `start`, so on a majority the
                    // key lives until at least start + ttl (less the drift allowance).
                    return Ok(Lock::new(
                        self.clone(),
                        resource,
                        key.clone(),
                        token,
                        value.clone(),
                        ttl.ttl,
                        start + ttl.usable,
                        round.tally.yes,
                        round.failures,
                    ));
                }
                None => Error::ValidityExpired {
                    resource: resource.to_string(),
                    elapsed,
                    ttl: ttl.ttl,
                    drift: ttl.drift,
                },
            },
            _ => self.lost(resource, round.tally, round.failures),
        };
        // Release on every node, not only those that said yes: a yes may have been lost on
        // the way back, and a node that timed out may still run our SET later (its release
        // then runs right after it, on the same connection). Wait only for the nodes that
        // answered; the failed and the undecided ones are released in the background.
        guard.disarm();
        self.release_round(key, &value, round.answered).await;
        Err(failure)
    }

    pub(crate) fn lost(&self, resource: &str, tally: Tally, failures: Vec<NodeError>) -> Error {
        if tally.lost_to_contention() {
            Error::Taken {
                resource: resource.to_string(),
                held_elsewhere: tally.no,
                nodes: tally.nodes,
                failures,
            }
        } else {
            Error::NoQuorum {
                resource: resource.to_string(),
                needed: tally.quorum(),
                agreed: tally.yes,
                failures,
            }
        }
    }

    /// Sends one command to every node at once and counts the answers until the outcome is
    /// decided. Commands still in flight then are driven to their end in a background task:
    /// dropping them instead would let the client send a queued one after a reconnect, long
    /// after we gave up on it; awaiting them to their timeout marks them dead.
    pub(crate) async fn round<F, Fut>(&self, op: F) -> Round
    where
        F: Fn(&Node) -> Fut,
        Fut: Future<Output = Vote> + Send + 'static,
    {
        let mut suspects = 0u64;
        let pending: FuturesUnordered<_> = self
            .inner
            .nodes
            .iter()
            .map(|node| {
                let index = node.index();
                if node.is_suspect() {
                    suspects |= 1 << index;
                }
                op(node).map(move |vote| (index, vote))
            })
            .collect();
        let mut round = Round {
            tally: Tally::presuming(self.nodes(), suspects.count_ones() as usize),
            failures: Vec::new(),
            answered: 0,
        };
        // Owned by a guard so that the undecided commands are finished in the background
        // however this function ends: decided, or dropped half-way by a cancelled caller.
        let mut pending = InBackgroundOnDrop(pending);
        while let Some((index, vote)) = pending.0.next().await {
            let decision = round
                .tally
                .record_from(ballot(&vote), suspects & (1 << index) != 0);
            match vote {
                Ok(_) => round.answered |= 1 << index,
                Err(e) => round.failures.push(e),
            }
            if decision != Decision::Pending {
                break;
            }
        }
        round
    }

    /// Compare-and-delete on every node; waits for the nodes in `wait_for` (a bit mask of
    /// node indexes), releases the rest in the background.
    pub(crate) async fn release_round(&self, key: &Key, value: &Value, wait_for: u64) {
        let mut waited = FuturesUnordered::new();
        let background = FuturesUnordered::new();
        for node in &self.inner.nodes {
            let release = node.release(key.clone(), value.clone());
            if wait_for & (1 << node.index()) != 0 {
                waited.push(release);
            } else {
                background.push(release);
            }
        }
        drop(InBackgroundOnDrop(background));
        while waited.next().await.is_some() {}
    }

    /// Starts a release of `key` on every node without waiting for it (needs a runtime; a
    /// no-op without one, the keys then expire after their ttl).
    pub(crate) fn release_detached(&self, key: Key, value: Value) {
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let this = self.clone();
            runtime.spawn(async move { this.release_round(&key, &value, 0).await });
        }
    }
}

/// Per-node futures that, when dropped, are driven to completion (answer or timeout) in a
/// background task rather than cancelled.
struct InBackgroundOnDrop<F: Future + Send + 'static>(FuturesUnordered<F>);

impl<F: Future + Send + 'static> Drop for InBackgroundOnDrop<F> {
    fn drop(&mut self) {
        if self.0.is_empty() {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let mut pending = std::mem::take(&mut self.0);
            runtime.spawn(async move { while pending.next().await.is_some() {} });
        }
    }
}

/// Releases an attempt's keys in the background if the attempt is cancelled half-way.
struct CleanupOnDrop<'a> {
    redlock: &'a RedLock,
    key: &'a Key,
    value: &'a Value,
    armed: bool,
}

impl<'a> CleanupOnDrop<'a> {
    fn new(redlock: &'a RedLock, key: &'a Key, value: &'a Value) -> Self {
        CleanupOnDrop {
            redlock,
            key,
            value,
            armed: true,
        }
    }

    fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for CleanupOnDrop<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.redlock
                .release_detached(self.key.clone(), self.value.clone());
        }
    }
}
