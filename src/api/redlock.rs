//! The client: [`RedLock`], a thin face over the coordinator (`engine::coordinator`).

use std::future::Future;
use std::time::Duration;

use futures::Stream;

use crate::api::election::Leadership;
use crate::api::kept::LockHandle;
use crate::api::lock::Lock;
use crate::api::rwlock::RwLock;
use crate::api::semaphore::Semaphore;
use crate::config::{Candidacy, Config, RedLockBuilder, Retry};
use crate::engine::coordinator::Coordinator;
use crate::engine::election::Leading;
use crate::engine::held::Released;
use crate::engine::machinery::Shutdown;
use crate::engine::observe::{self, Leader};
use crate::engine::rwlock::RwSpec;
use crate::engine::semaphore::SemaphoreSpec;
use crate::error::{ConfigError, Error};
use crate::report::NodeReport;
use crate::stats::Stats;

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
pub struct RedLock(pub(super) Coordinator);

impl RedLock {
    /// A client that does not cache the scripts at connection (for tests counting tasks).
    #[cfg(test)]
    pub(crate) fn without_preload(config: Config) -> Result<RedLock, ConfigError> {
        Ok(RedLock(Coordinator::connect(config, false)?))
    }

    /// A builder with the defaults and no nodes.
    pub fn builder() -> RedLockBuilder {
        RedLockBuilder::new()
    }

    /// The validated configuration.
    pub fn config(&self) -> &Config {
        self.0.config()
    }

    /// What this client has done since it was built: attempts, acquisitions, contention, and
    /// how its waits between attempts ended.
    pub fn stats(&self) -> Stats {
        self.0.machinery().counters.read()
    }

    /// How many nodes are configured.
    pub fn nodes(&self) -> usize {
        self.0.node_list().len()
    }

    /// How many nodes must agree: a strict majority of those configured.
    pub fn quorum(&self) -> usize {
        self.0.quorum()
    }

    /// How many nodes are connected, and their connections checked, right now.
    pub fn connected_nodes(&self) -> usize {
        self.0.connected_nodes()
    }

    /// Waits until every node is connected and its connection checked (who the server is,
    /// whether it restarted, whether it allows what the client needs), or until `within` has
    /// passed, and returns how many are.
    ///
    /// Locking does not need this, but the first attempts after start-up fail with
    /// [`NodeErrorKind::Unchecked`](crate::NodeErrorKind::Unchecked) votes until the nodes
    /// are checked. One node that accepts connections but does not answer (a frozen process:
    /// its kernel still completes the TCP handshake) makes this wait the whole of `within`;
    /// [`wait_for_quorum`](Self::wait_for_quorum) does not wait for it.
    pub async fn wait_for_nodes(&self, within: Duration) -> usize {
        self.0.wait_for_nodes(within).await
    }

    /// Waits until enough nodes to decide a lock (a [`quorum`](Self::quorum)) are connected,
    /// checked and counted, or until that can no longer happen (too many of the checked nodes do not count: replicas,
    /// refused permissions, quarantine, a server listed twice), or until `within` has passed.
    /// Returns how many nodes count now.
    ///
    /// This is what a short-lived process wants before its first attempt: one frozen or
    /// unreachable node does not hold it up. The other nodes go on connecting in the
    /// background and count from the moment their own check passes; meanwhile an attempt's
    /// command waits for such a node's check in its queue, up to the node timeout, and counts
    /// as one failed node (docs/design.md, section 4.3).
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), quorumlock::Error> {
    /// let redlock = quorumlock::RedLock::builder()
    ///     .nodes(["redis://10.0.0.1", "redis://10.0.0.2", "redis://10.0.0.3"])
    ///     .build()?;
    /// redlock.wait_for_quorum(redlock.config().connect_timeout()).await;
    /// let lock = redlock.try_lock("invoice:42").await?;
    /// # Ok(()) }
    /// ```
    pub async fn wait_for_quorum(&self, within: Duration) -> usize {
        self.0.wait_for_quorum(within).await
    }

    /// How long until quarantine lets enough nodes count to decide a lock, as the nodes'
    /// checks found: zero when they count now, `None` when the nodes checked so far cannot,
    /// however long one waits (too few are connected and checked, or too many do not count
    /// for other reasons: replicas, refused permissions, a server listed twice).
    ///
    /// A node that may have lost data is quarantined for the longest ttl, an end every client
    /// reads from the node itself (docs/design.md, section 2.6a). This is what to wait for
    /// before the first attempt of a short-lived process after a loss:
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), quorumlock::Error> {
    /// let redlock = quorumlock::RedLock::builder()
    ///     .nodes(["redis://10.0.0.1", "redis://10.0.0.2", "redis://10.0.0.3"])
    ///     .build()?;
    /// redlock.wait_for_quorum(redlock.config().connect_timeout()).await;
    /// if let Some(left) = redlock.quarantine_left() {
    ///     tokio::time::sleep(left).await;
    /// }
    /// let lock = redlock.try_lock("invoice:42").await?;
    /// # Ok(()) }
    /// ```
    pub fn quarantine_left(&self) -> Option<Duration> {
        self.0.quarantine_left()
    }

    /// Locks `resource` with the configured ttl, retrying as configured.
    ///
    /// # Errors
    /// [`Error::Taken`], [`Error::NoQuorum`] or [`Error::ValidityExpired`] from the last
    /// attempt when every attempt failed; [`Error::Config`] for an empty resource name
    /// (nothing is sent then); [`Error::ShutDown`] once the client is
    /// [shut down](Self::shutdown).
    ///
    /// # Cancel safety
    /// If this future is dropped during an attempt, the keys that attempt may have set are
    /// released in a background task; any key left behind (the runtime shut down) expires
    /// after the ttl.
    pub async fn lock(&self, resource: &str) -> Result<Lock, Error> {
        self.lock_all(&[resource]).await
    }

    /// A semaphore of `permits` permits on the resource `name`: at most `permits` holders
    /// at once across every client (see [`Semaphore`]). Nothing is sent
    /// until a permit is asked for.
    ///
    /// # Errors
    /// [`ConfigError::InvalidPermits`] for 0 permits or more than
    /// [`MAX_PERMITS`](crate::MAX_PERMITS); [`ConfigError::EmptyResource`] and
    /// [`ConfigError::ReservedResource`] as for a lock.
    pub fn semaphore(&self, name: &str, permits: u32) -> Result<Semaphore, ConfigError> {
        let spec = SemaphoreSpec::new(self.0.config(), name, permits)?;
        Ok(Semaphore {
            client: self.0.clone(),
            spec,
        })
    }

    /// A read-write lock on the resource `name`: many readers or one writer at once across
    /// every client, writers first (see [`RwLock`]). Nothing is sent until a
    /// side is asked for.
    ///
    /// # Errors
    /// [`ConfigError::EmptyResource`] and [`ConfigError::ReservedResource`] as for a lock.
    pub fn rw_lock(&self, name: &str) -> Result<RwLock, ConfigError> {
        let spec = RwSpec::new(self.0.config(), name)?;
        Ok(RwLock {
            client: self.0.clone(),
            spec,
        })
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
        self.lock_all_with(&[resource], ttl, retry).await
    }

    /// Runs `work` while holding `resource`, kept alive with [`KeepAlive::new`](crate::KeepAlive::new)'s defaults,
    /// and releases the lock when `work` ends. See [`KeptLock::run`](crate::KeptLock::run).
    ///
    /// ```no_run
    /// # async fn f(redlock: quorumlock::RedLock) -> Result<(), quorumlock::Error> {
    /// let rows = redlock
    ///     .with_lock("nightly-export", |held| async move {
    ///         // held.fencing_token().await goes with every write to storage
    ///         42
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`lock`](Self::lock) when the lock cannot be taken (`work` does not run);
    /// [`Error::Lost`] when it was lost while `work` ran (`work` was cancelled).
    pub async fn with_lock<F, Fut, T>(&self, resource: &str, work: F) -> Result<T, Error>
    where
        F: FnOnce(LockHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        self.0
            .with_lock(resource, |handle| work(LockHandle(handle)))
            .await
    }

    /// Locks several resources at once, all or nothing, with the configured ttl and retry
    /// policy. See [`lock_all_with`](Self::lock_all_with).
    ///
    /// # Errors
    /// As [`lock_all_with`](Self::lock_all_with).
    pub async fn lock_all<S: AsRef<str>>(&self, resources: &[S]) -> Result<Lock, Error> {
        self.lock_all_with(resources, self.config().ttl, self.config().retry)
            .await
    }

    /// Locks several resources at once for `ttl`, retrying by `retry`.
    ///
    /// Each node sets either all of the keys or none, and the lock is granted as for one
    /// resource; two clients locking overlapping sets in any order cannot deadlock
    /// (docs/design.md, section 2.7). With fencing on, the lock's one fencing token is
    /// greater than every earlier token of each of the resources.
    ///
    /// # Errors
    /// As [`lock`](Self::lock); also [`Error::Config`] for an empty list, an empty or
    /// repeated resource name, besides the ttl and retry checks of
    /// [`lock_with`](Self::lock_with).
    pub async fn lock_all_with<S: AsRef<str>>(
        &self,
        resources: &[S],
        ttl: Duration,
        retry: Retry,
    ) -> Result<Lock, Error> {
        self.0.lock_all_with(resources, ttl, retry).await.map(Lock)
    }

    /// Waits until the work this client does in the background has finished, or until
    /// `within` has passed; returns whether it finished. That work is: the commands still in
    /// flight when a round was decided, releases started by dropped locks, and the deletes
    /// a release sends to nodes beyond the majority it waits for. A process about to exit
    /// calls this so that every node gets its release (otherwise those keys expire after
    /// their ttl). Each piece ends within about one node timeout.
    ///
    /// Work for a node that has never been connected does not count: nothing was ever sent
    /// to it (a command waits for the connection, and one that times out waiting is never
    /// sent), so there is nothing to undo there, and after the process exits nothing will be
    /// sent. One frozen or unreachable node then does not hold up an exiting process for a
    /// node timeout. (A node whose first connection comes up at that very moment may get a
    /// queued acquisition without the release behind it: its keys expire after their ttl, as
    /// after a crash.)
    pub async fn settle(&self, within: Duration) -> bool {
        self.0.settle(within).await
    }

    /// Ends this client cleanly, as a process about to exit should: releases every lock the
    /// client holds, waits for the nodes (up to twice the node timeout, as
    /// [`settle`](Self::settle)), and makes every later lock call fail with
    /// [`Error::ShutDown`]. Returns what it released and whether the nodes settled.
    ///
    /// It affects every clone of this `RedLock`, and releases, as a dropped lock is released,
    /// every lock of the client: [`Lock`]s, whoever holds them now, kept locks
    /// ([`KeptLock`](crate::KeptLock), [`Leadership`]), and locks handed over to a waiting
    /// caller not yet taken. The locks it released then report it ([`Lock::is_valid`] is
    /// false, their calls fail with [`Error::ShutDown`] without sending anything), as do the
    /// lock calls under way. docs/design.md, section 3.4, gives each step. Calling it again
    /// releases nothing more.
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), quorumlock::Error> {
    /// let redlock = quorumlock::RedLock::builder()
    ///     .nodes(["redis://10.0.0.1", "redis://10.0.0.2", "redis://10.0.0.3"])
    ///     .build()?;
    /// let lock = redlock.lock("invoice:42").await?;
    /// // ... the process must stop now, with the lock still held ...
    /// redlock.shutdown().await; // the keys are gone from the nodes: no wait for the ttl
    /// # drop(lock);
    /// # Ok(()) }
    /// ```
    pub async fn shutdown(&self) -> Shutdown {
        self.0.machinery().shut_down().await
    }

    /// Reports on every node, in parallel: reachability, round trip, version, role, run_id,
    /// uptime, persistence, eviction policy, clock rate over `clock_window`, refused
    /// commands, quarantine, and a verdict. Writes nothing to any node but, on a node that may
    /// have lost data, the record of its quarantine that every client shares (design 2.6a),
    /// so that the wait it reports is the one the clients wait out.
    pub async fn inspect(&self, clock_window: Duration) -> Vec<NodeReport> {
        crate::engine::inspect::inspect(self.0.node_list(), self.0.config(), clock_window).await
    }

    /// Breaks the lock on `resource` held with `token`: deletes its key on every node where
    /// it still holds that token (compare-and-delete, never a bare `DEL`), and announces the
    /// release to the clients waiting for it, as the holder's own release would. For an
    /// operator whose holder is gone for good (a crashed process with a long ttl); what
    /// `quorumlock release --force` does after reading the token from the nodes.
    ///
    /// Breaking a lock whose holder still works on it lets a second holder in beside it:
    /// only fencing tokens, checked by the storage, keep the first one's late writes out.
    ///
    /// # Errors
    /// [`Error::NotHeld`] when a majority answered that the key does not hold `token` (it
    /// expired, was released, or is held with another token); [`Error::NoQuorum`] when too
    /// few nodes answered to tell; [`Error::Config`] for an empty, reserved or empty-token
    /// request (nothing is sent then).
    pub async fn break_lock(&self, resource: &str, token: &str) -> Result<Released, Error> {
        self.0.break_lock(resource, token).await
    }

    /// Refuses a configuration in which two URLs reach the same server (the same `run_id`),
    /// among the nodes checked so far: what [`RedLockBuilder::connect`] does after waiting
    /// for every node, for a client that waited only for a quorum
    /// ([`wait_for_quorum`](Self::wait_for_quorum)). Whether or not this is called, the
    /// later of two such nodes never counts.
    ///
    /// # Errors
    /// [`ConfigError::SameServer`] for the first repeat found.
    pub fn check_distinct(&self) -> Result<(), ConfigError> {
        crate::engine::inspect::check_distinct(self.0.node_list())
    }

    /// Campaigns for leadership of the election `name` with [`Candidacy::new`]'s defaults;
    /// see [`campaign_with`](Self::campaign_with).
    ///
    /// ```no_run
    /// # async fn f(redlock: quorumlock::RedLock) -> Result<(), quorumlock::Error> {
    /// let leadership = redlock.campaign("scheduler").await?;
    /// println!("leading in term {}", leadership.term());
    /// tokio::select! {
    ///     _ = async { /* run the scheduler, passing leadership.term() to storage */ } => {}
    ///     reason = leadership.lost() => eprintln!("no longer leading: {reason}"),
    /// }
    /// leadership.resign().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`campaign_with`](Self::campaign_with).
    pub async fn campaign(&self, name: &str) -> Result<Leadership, Error> {
        self.campaign_with(name, Candidacy::new()).await
    }

    /// Waits until this candidate leads the election `name`, and returns its
    /// [`Leadership`]: the election's lock, taken with the configured ttl and kept alive,
    /// its fencing token recorded as the term, and the identity written beside it on a
    /// majority. While another candidate leads, it waits in line for a release (woken at
    /// once when the leader resigns) and attempts again after each pause.
    /// Failures to reach a quorum are retried too: the call returns only as a leader or on
    /// an error no retry can cure.
    ///
    /// # Errors
    /// [`Error::Config`] when fencing is off (the term is a fencing token), for an empty or
    /// reserved name, an invalid identity or keep-alive settings that do not fit the ttl;
    /// [`Error::Entropy`] when no token can be drawn; [`Error::ShutDown`] once the client
    /// is [shut down](RedLock::shutdown).
    ///
    /// # Cancel safety
    /// Dropping the future gives up: a lock taken meanwhile is released in the background.
    pub async fn campaign_with(
        &self,
        name: &str,
        candidacy: Candidacy,
    ) -> Result<Leadership, Error> {
        Leading::campaign(&self.0, name, candidacy)
            .await
            .map(Leadership)
    }

    /// Who leads the election `name`, as a majority of nodes reports it: the leader whose
    /// lock and identity record a majority holds, or `None` when no majority agrees on one
    /// (no leader, a leader still writing its identity, or nodes that disagree).
    ///
    /// The answer is advisory: by the time it arrives, the leader it names may have lost
    /// its lock (only the leader's [`Leadership::lost`](crate::Leadership::lost) says when it must stop), and a new
    /// leader may have won. Terms only grow, so of two answers the one with the greater
    /// term is the more recent.
    ///
    /// # Errors
    /// [`Error::NoQuorum`] when fewer than a quorum of nodes answered; [`Error::Config`] for
    /// an empty name.
    pub async fn leader(&self, name: &str) -> Result<Option<Leader>, Error> {
        observe::leader(&self.0, name).await
    }

    /// Reports who leads the election `name` now, then every change: a new leader or term,
    /// no leader, or a new error. Polls [`leader`](Self::leader) every `every` (at least
    /// 1 ms): the release channel would tell of resignations only, not of a new leader or of
    /// a lock that expired. As advisory as [`leader`](Self::leader).
    ///
    /// ```no_run
    /// # async fn f(redlock: quorumlock::RedLock) {
    /// use futures::StreamExt;
    /// let changes = redlock.observe("scheduler", std::time::Duration::from_secs(1));
    /// futures::pin_mut!(changes);
    /// while let Some(seen) = changes.next().await {
    ///     match seen {
    ///         Ok(Some(leader)) => println!("{leader} leads"),
    ///         Ok(None) => println!("nobody leads"),
    ///         Err(e) => eprintln!("cannot tell: {e}"),
    ///     }
    /// }
    /// # }
    /// ```
    pub fn observe(
        &self,
        name: &str,
        every: Duration,
    ) -> impl Stream<Item = Result<Option<Leader>, Error>> + Send + 'static {
        observe::observe(&self.0, name, every)
    }
}
