//! A quorum read-write lock: [`RwLock`] and its [`RwGuard`], a thin face over
//! `engine::rwlock` and `engine::held`.

use std::time::Duration;

use crate::config::Retry;
use crate::engine::census::{ClaimCensus, RwHolder};
use crate::engine::coordinator::Coordinator;
use crate::engine::held::{Access, Held, Member};
use crate::engine::rwlock::RwSpec;
use crate::error::Error;

/// Many readers or one writer of a resource, across every client and host, over the same
/// independent masters as a lock. Made by [`RedLock::rw_lock`](crate::RedLock::rw_lock);
/// cheap to clone.
///
/// Each side is held as a lock is (a majority, validity left) and has what a lock has:
/// extension, keep-alive with the loss signal, waiting for a release without polling,
/// release on drop and shutdown, and a fencing token (a writer's is above every earlier
/// token of the lock; readers held at once may share one). A writer is never held beside a
/// reader or another writer (docs/design.md, section 2.9, gives the argument).
///
/// **Writers first.** A writer refused because others hold leaves an intent on the nodes,
/// renewed by each of its attempts and dropped when its call ends: readers arriving after it
/// are refused until it is through, so a stream of readers cannot starve it. Readers already
/// in finish first. A writer that gives up or is cancelled announces the drop as a release
/// is announced, so readers waiting for a release come in at once.
///
/// ```
/// # #[cfg(feature = "testkit")]
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let nodes = quorumlock::testkit::LocalQuorum::start(3).await?;
/// # let redlock = quorumlock::RedLock::builder().nodes(nodes.urls()).build()?;
/// # redlock.wait_for_nodes(std::time::Duration::from_secs(5)).await;
/// let catalog = redlock.rw_lock("catalog")?;
/// let one = catalog.read().await?; // many at once, fleet-wide
/// let two = catalog.read().await?;
/// assert!(matches!(catalog.try_write().await, Err(quorumlock::Error::Taken { .. })));
/// one.release().await?;
/// two.release().await?;
///
/// let writing = catalog.write().await?; // alone
/// let fence = writing.fencing_token().await?;
/// # let _ = fence;
/// writing.release().await?;
/// # Ok(()) }
/// # #[cfg(not(feature = "testkit"))]
/// # fn main() {}
/// ```
#[derive(Debug, Clone)]
pub struct RwLock {
    pub(super) client: Coordinator,
    pub(super) spec: RwSpec,
}

impl RwLock {
    /// The lock's name (its key on the nodes, after the client's key prefix).
    pub fn name(&self) -> &str {
        self.spec.name()
    }

    /// Takes the read side with the client's ttl and retry policy, waiting for a release
    /// while a writer holds or waits.
    ///
    /// # Errors
    /// As [`RedLock::lock`](crate::RedLock::lock); [`Error::KindMismatch`] when the name is
    /// in use as a lock or a semaphore on more nodes than a majority may do without (nothing
    /// was changed on any node; on fewer, those nodes count as refusals).
    pub async fn read(&self) -> Result<RwGuard, Error> {
        let config = self.client.config();
        self.acquire(Access::Read, config.ttl, config.retry).await
    }

    /// Takes the write side with the client's ttl and retry policy, waiting for the
    /// holders to release; readers arriving meanwhile wait behind it.
    ///
    /// # Errors
    /// As [`read`](Self::read).
    pub async fn write(&self) -> Result<RwGuard, Error> {
        let config = self.client.config();
        self.acquire(Access::Write, config.ttl, config.retry).await
    }

    /// One attempt at the read side with the client's ttl.
    ///
    /// # Errors
    /// As [`read`](Self::read).
    pub async fn try_read(&self) -> Result<RwGuard, Error> {
        self.acquire(Access::Read, self.client.config().ttl, Retry::none())
            .await
    }

    /// One attempt at the write side with the client's ttl (its intent is dropped at once
    /// when refused).
    ///
    /// # Errors
    /// As [`read`](Self::read).
    pub async fn try_write(&self) -> Result<RwGuard, Error> {
        self.acquire(Access::Write, self.client.config().ttl, Retry::none())
            .await
    }

    /// Every reader and writer of the lock, and every writer waiting, as the nodes record
    /// them now (read-only, advisory, as [`Semaphore::holders`](crate::Semaphore::holders)).
    ///
    /// # Errors
    /// [`Error::NoQuorum`] when too few nodes answered; [`Error::KindMismatch`] when the
    /// name is in use as another kind on more nodes than a majority may do without (fewer
    /// such nodes hold no claim of it); [`Error::ShutDown`] after the client's shutdown.
    pub async fn holders(&self) -> Result<Vec<RwHolder>, Error> {
        ClaimCensus::of(self.client.machinery())
            .rw_holders(self.spec.name(), self.spec.key())
            .await
    }

    /// Takes `access` for `ttl`, retrying by `retry`. A writer's pauses between attempts are
    /// at most a third of `ttl` (each renews its intent).
    ///
    /// # Errors
    /// As [`read`](Self::read); also [`Error::Config`] for a ttl or retry policy that a lock
    /// would refuse.
    pub async fn acquire(
        &self,
        access: Access,
        ttl: Duration,
        retry: Retry,
    ) -> Result<RwGuard, Error> {
        let reader = access == Access::Read;
        self.spec
            .acquire(&self.client, reader, ttl, retry)
            .await
            .map(RwGuard)
    }
}

/// One side of a [`RwLock`], held on a majority of nodes until
/// [`valid_until`](Self::valid_until); everything a [`Lock`](crate::Lock) has.
///
/// # Dropping
/// As a [`Lock`](crate::Lock): released in the background.
#[derive(Debug)]
#[must_use = "a read-write lock's side is released in the background as soon as it is dropped"]
pub struct RwGuard(Held);

impl RwGuard {
    /// Which side it holds.
    pub fn access(&self) -> Access {
        match self.0.ident().member() {
            Some(Member::Writer) => Access::Write,
            _ => Access::Read,
        }
    }

    /// The lock's name.
    pub fn resource(&self) -> &str {
        self.0.resource()
    }

    crate::api::held_face::held_face! {
        "side";
        token;
        /// The fencing token, as [`Lock::fencing_token`](crate::Lock::fencing_token), from one
        /// counter for both sides: a writer's is above every token handed out before it was
        /// acquired, and so is a reader's; readers held at once may share one.
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
        extend_for;
        release;
        keep_alive;
    }
}
