//! A quorum semaphore: [`Semaphore`] and its [`Permit`], a thin face over
//! `engine::semaphore` and `engine::held`.

use std::future::Future;
use std::time::Duration;

use crate::api::kept::LockHandle;
use crate::config::{KeepAlive, Retry};
use crate::engine::census::{ClaimCensus, PermitHolder};
use crate::engine::coordinator::Coordinator;
use crate::engine::held::Held;
use crate::engine::semaphore::SemaphoreSpec;
use crate::error::Error;

/// At most [`permits`](Self::permits) holders of a resource at once, across every client
/// and host: a counting semaphore over the same independent masters as a lock, with every
/// guarantee a lock has. Made by [`RedLock::semaphore`](crate::RedLock::semaphore); cheap to
/// clone.
///
/// A semaphore of `N` permits is `N` slots, and a [`Permit`] is the hold of one slot on a
/// majority of nodes, granted exactly as a lock is (a majority, and validity left after the
/// round). Each slot is a mutex, so there are never more than `N` valid permits, under the
/// same assumptions as a lock and with the same fault tolerance: any minority of nodes may
/// fail, whatever `N` is. Counting holders per node would not bound them (docs/design.md,
/// section 2.9, gives the counter-example and the argument). Permits whose holder died
/// expire by the nodes' own clocks.
///
/// A resource name is one kind of thing, with one number of permits, for every client: see
/// [`Error::KindMismatch`].
///
/// ```
/// # #[cfg(feature = "testkit")]
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let nodes = quorumlock::testkit::LocalQuorum::start(3).await?;
/// # let redlock = quorumlock::RedLock::builder().nodes(nodes.urls()).build()?;
/// # redlock.wait_for_nodes(std::time::Duration::from_secs(5)).await;
/// // At most 2 exports at once, fleet-wide.
/// let exports = redlock.semaphore("exports", 2)?;
/// let first = exports.acquire().await?; // waits for a release when both are taken
/// let second = exports.acquire().await?;
/// assert_ne!(first.slot(), second.slot());
/// assert!(matches!(exports.try_acquire().await, Err(quorumlock::Error::Taken { .. })));
///
/// // Greater than every token handed out before, and naming the permit's slot.
/// let fence = first.fencing_token().await?;
/// assert_eq!(fence % u64::from(quorumlock::MAX_PERMITS), u64::from(first.slot()));
///
/// first.release().await?;
/// second.release().await?;
/// # Ok(()) }
/// # #[cfg(not(feature = "testkit"))]
/// # fn main() {}
/// ```
#[derive(Debug, Clone)]
pub struct Semaphore {
    pub(super) client: Coordinator,
    pub(super) spec: SemaphoreSpec,
}

impl Semaphore {
    /// The semaphore's name (its key on the nodes, after the client's key prefix).
    pub fn name(&self) -> &str {
        self.spec.name()
    }

    /// How many holders it allows at once.
    pub fn permits(&self) -> u32 {
        self.spec.permits()
    }

    /// Takes a permit with the client's ttl, retrying by its retry policy. When every permit
    /// is taken, waits for a release message instead of polling, first come first served
    /// among this client's callers, as [`RedLock::lock`](crate::RedLock::lock) does.
    ///
    /// # Errors
    /// As [`RedLock::lock`](crate::RedLock::lock) ([`Error::Taken`] when every permit stayed
    /// taken); [`Error::KindMismatch`] when the name is used as a lock, or as a semaphore of
    /// another number of permits, on more nodes than a majority may do without (on fewer,
    /// those nodes count as refusals).
    ///
    /// # Cancel safety
    /// If this future is dropped during an attempt, the claims that attempt may have made are
    /// removed in a background task; any left behind expire after the ttl.
    pub async fn acquire(&self) -> Result<Permit, Error> {
        let config = self.client.config();
        self.acquire_with(config.ttl, config.retry).await
    }

    /// Makes one attempt to take a permit with the client's ttl.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    pub async fn try_acquire(&self) -> Result<Permit, Error> {
        self.acquire_with(self.client.config().ttl, Retry::none())
            .await
    }

    /// Takes a permit for `ttl`, retrying by `retry`.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire); also [`Error::Config`] for a ttl or retry policy that
    /// a lock would refuse.
    pub async fn acquire_with(&self, ttl: Duration, retry: Retry) -> Result<Permit, Error> {
        self.spec
            .acquire(&self.client, ttl, retry)
            .await
            .map(Permit)
    }

    /// Runs `work` while holding a permit, kept alive with [`KeepAlive::new`]'s defaults,
    /// and releases it when `work` ends. If the permit is lost meanwhile, `work` is
    /// cancelled before the permit's validity ends, as
    /// [`KeptLock::run`](crate::KeptLock::run) does.
    ///
    /// ```no_run
    /// # async fn f(redlock: quorumlock::RedLock) -> Result<(), quorumlock::Error> {
    /// let exports = redlock.semaphore("exports", 4)?;
    /// let rows = exports.with_permit(|held| async move { /* the export */ 42 }).await?;
    /// # let _ = rows;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire) when no permit can be taken (`work` does not run);
    /// [`Error::Lost`] when the permit was lost while `work` ran.
    pub async fn with_permit<F, Fut, T>(&self, work: F) -> Result<T, Error>
    where
        F: FnOnce(LockHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        let keep = KeepAlive::new();
        keep.check(self.client.config().ttl)?;
        self.acquire()
            .await?
            .0
            .keep_alive(keep)?
            .run(|handle| work(LockHandle(handle)))
            .await
    }

    /// Who holds the semaphore's permits, as the nodes record them, changing nothing: one
    /// [`PermitHolder`] per slot and holder (the SHA1 of its token, never the token), with
    /// how many nodes record it and how long a majority will still record it by the nodes'
    /// own clocks ([`PermitHolder::ttl`]). Sorted by slot; claims on fewer than a quorum
    /// of nodes are listed too (their `nodes` says so), expired ones are not. Runs one
    /// read-only script per node.
    ///
    /// Advisory, as [`RedLock::leader`](crate::RedLock::leader) is: a permit may be taken
    /// or released right after the answer. Only a [`Permit`] says that its holder may act.
    ///
    /// ```
    /// # #[cfg(feature = "testkit")]
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let nodes = quorumlock::testkit::LocalQuorum::start(3).await?;
    /// # let redlock = quorumlock::RedLock::builder().nodes(nodes.urls()).build()?;
    /// # redlock.wait_for_nodes(std::time::Duration::from_secs(5)).await;
    /// let exports = redlock.semaphore("exports", 4)?;
    /// let permit = exports.acquire().await?;
    ///
    /// let holders = exports.holders().await?;
    /// assert_eq!(holders.len(), 1);
    /// assert_eq!(holders[0].slot, permit.slot());
    /// let sha1 = quorumlock::fred::util::sha1_hash(permit.token().as_str());
    /// assert_eq!(holders[0].token_sha1, sha1);
    /// assert!(holders[0].nodes >= redlock.quorum());
    /// assert!(holders[0].ttl <= permit.ttl());
    ///
    /// permit.release().await?;
    /// # redlock.settle(std::time::Duration::from_secs(5)).await; // every node, not a majority
    /// assert!(exports.holders().await?.is_empty());
    /// # Ok(()) }
    /// # #[cfg(not(feature = "testkit"))]
    /// # fn main() {}
    /// ```
    ///
    /// # Errors
    /// - [`Error::NoQuorum`] when fewer than a quorum of nodes answered: the list could miss
    ///   holders.
    /// - [`Error::KindMismatch`] when more nodes than a majority may do without hold
    ///   something else at the semaphore's key: a lock, or a semaphore of another number of
    ///   permits. Fewer such nodes hold no permit of it, and the list is read from the rest.
    /// - [`Error::ShutDown`] once the client is [shut down](crate::RedLock::shutdown).
    pub async fn holders(&self) -> Result<Vec<PermitHolder>, Error> {
        let spec = &self.spec;
        ClaimCensus::of(self.client.machinery())
            .holders(spec.name(), spec.key(), Some(spec.permits()))
            .await
    }
}

/// One permit of a [`Semaphore`], held on a majority of nodes until
/// [`valid_until`](Self::valid_until): a lock on one of the semaphore's slots, with
/// everything a [`Lock`](crate::Lock) has.
///
/// # Dropping
/// As a [`Lock`](crate::Lock): a dropped permit is released in the background.
#[derive(Debug)]
#[must_use = "a permit is released in the background as soon as it is dropped"]
pub struct Permit(Held);

impl Permit {
    /// The semaphore's name.
    pub fn semaphore(&self) -> &str {
        self.0.resource()
    }

    /// The slot this permit holds, from 0 to the semaphore's permits − 1: no two valid
    /// permits hold the same slot at once.
    pub fn slot(&self) -> u32 {
        self.0.ident().slot().unwrap_or_default()
    }

    crate::api::held_face::held_face! {
        "permit";
        /// This acquisition's unguessable token; the nodes record the claim `slot:token`.
        token;
        /// The fencing token, recorded on a majority on the first call as for
        /// [`Lock::fencing_token`](crate::Lock::fencing_token), from one counter per semaphore:
        /// greater than every token handed out for any permit of this semaphore before this call
        /// (permits are held at once, so not only those handed out before this one was acquired),
        /// and never the same as another permit's: its remainder modulo
        /// [`MAX_PERMITS`](crate::MAX_PERMITS) is the permit's [`slot`](Self::slot). A store fenced
        /// per slot refuses a token below the last it saw for that slot.
        ///
        /// # Errors
        /// As [`Lock::fencing_token`](crate::Lock::fencing_token).
        fencing_token;
        ttl;
        valid_until;
        validity;
        is_valid;
        acquired_on;
        failures;
        extend;
        /// Moves the permit's expiry on every node where its claim is still recorded to `ttl` from
        /// now (by each node's clock), and returns the new validity, decided as a lock's extension
        /// is. A node that lost the claim is not given it again.
        ///
        /// # Errors
        /// As [`Lock::extend_for`](crate::Lock::extend_for).
        extend_for;
        release;
        leave;
        /// Keeps the permit alive in the background until it is released or dropped, as
        /// [`Lock::keep_alive`](crate::Lock::keep_alive) keeps a lock: a kept permit is a
        /// [`KeptLock`](crate::KeptLock) whose resource is the semaphore.
        ///
        /// # Errors
        /// As [`Lock::keep_alive`](crate::Lock::keep_alive).
        keep_alive;
    }
}
