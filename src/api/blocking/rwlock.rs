//! A quorum read-write lock with blocking calls: [`RwLock`] and its [`RwGuard`].

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::Driver;
use crate::config::Retry;
use crate::engine::census::RwHolder;
use crate::engine::held::Access;
use crate::error::Error;

/// Many readers or one writer of a resource, across every client and host, writers first:
/// [`crate::RwLock`] with blocking calls. Made by
/// [`RedLock::rw_lock`](super::RedLock::rw_lock); cheap to clone.
///
/// ```
/// # #[cfg(feature = "testkit")]
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let runtime = tokio::runtime::Runtime::new()?; // the servers' runtime, not the client's
/// # let nodes = runtime.block_on(quorumlock::testkit::LocalQuorum::start(3))?;
/// # let builder = quorumlock::RedLock::builder().nodes(nodes.urls());
/// use quorumlock::blocking;
///
/// let redlock = blocking::RedLock::connect(&builder)?;
/// let catalog = redlock.rw_lock("catalog")?;
/// let one = catalog.read()?; // many at once, fleet-wide
/// let two = catalog.read()?;
/// assert!(matches!(catalog.try_write(), Err(quorumlock::Error::Taken { .. })));
/// one.release()?;
/// two.release()?;
///
/// let writing = catalog.write()?; // alone
/// assert_eq!(writing.access(), quorumlock::Access::Write);
/// let fence = writing.fencing_token()?;
/// # let _ = fence;
/// writing.release()?;
/// # Ok(()) }
/// # #[cfg(not(feature = "testkit"))]
/// # fn main() {}
/// ```
#[derive(Debug, Clone)]
pub struct RwLock {
    pub(super) inner: crate::RwLock,
    pub(super) driver: Arc<Driver>,
}

impl RwLock {
    /// Blocks on `acquiring` and wraps the side it returns.
    fn wrap(
        &self,
        acquiring: impl Future<Output = Result<crate::RwGuard, Error>> + Send,
    ) -> Result<RwGuard, Error> {
        Ok(RwGuard {
            inner: self.driver.block_on(acquiring)??,
            driver: Arc::clone(&self.driver),
        })
    }

    /// The async read-write lock underneath, for code that runs on a runtime of its own.
    pub fn as_async(&self) -> &crate::RwLock {
        &self.inner
    }

    /// The lock's name (its key on the nodes, after the client's key prefix).
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// Takes the read side with the client's ttl and retry policy, blocking for a release
    /// while a writer holds or waits; see [`crate::RwLock::read`].
    ///
    /// # Errors
    /// As [`crate::RwLock::read`], and as [`RedLock::lock`](super::RedLock::lock).
    pub fn read(&self) -> Result<RwGuard, Error> {
        self.wrap(self.inner.read())
    }

    /// Takes the write side with the client's ttl and retry policy, blocking until the
    /// holders release; readers arriving meanwhile wait behind it. See
    /// [`crate::RwLock::write`].
    ///
    /// # Errors
    /// As [`read`](Self::read).
    pub fn write(&self) -> Result<RwGuard, Error> {
        self.wrap(self.inner.write())
    }

    /// One attempt at the read side with the client's ttl.
    ///
    /// # Errors
    /// As [`read`](Self::read): [`Error::Taken`] while a writer holds or waits.
    pub fn try_read(&self) -> Result<RwGuard, Error> {
        self.wrap(self.inner.try_read())
    }

    /// One attempt at the write side with the client's ttl (its intent is dropped at once
    /// when refused).
    ///
    /// # Errors
    /// As [`read`](Self::read): [`Error::Taken`] while either side is held.
    pub fn try_write(&self) -> Result<RwGuard, Error> {
        self.wrap(self.inner.try_write())
    }

    /// Takes `access` for `ttl`, retrying by `retry`; see [`crate::RwLock::acquire`].
    ///
    /// # Errors
    /// As [`crate::RwLock::acquire`], and as [`read`](Self::read).
    pub fn acquire(&self, access: Access, ttl: Duration, retry: Retry) -> Result<RwGuard, Error> {
        self.wrap(self.inner.acquire(access, ttl, retry))
    }

    /// Every reader and writer of the lock, and every writer waiting, as the nodes record
    /// them now; see [`crate::RwLock::holders`].
    ///
    /// # Errors
    /// As [`crate::RwLock::holders`], and as [`read`](Self::read).
    pub fn holders(&self) -> Result<Vec<RwHolder>, Error> {
        self.driver.block_on(self.inner.holders())?
    }
}

/// One side of a [`RwLock`], held on a majority of nodes: [`crate::RwGuard`] with blocking
/// calls. Dropped, it is released as a [`Lock`](super::Lock) is.
#[derive(Debug)]
#[must_use = "a read-write lock's side is released in the background as soon as it is dropped"]
pub struct RwGuard {
    inner: crate::RwGuard,
    driver: Arc<Driver>,
}

impl RwGuard {
    /// Which side it holds.
    pub fn access(&self) -> Access {
        self.inner.access()
    }

    /// The lock's name.
    pub fn resource(&self) -> &str {
        self.inner.resource()
    }

    crate::api::held_face::held_face!(inner "side";
        token, ttl, valid_until, validity, is_valid, acquired_on, failures,
    );

    super::held_calls!("side", "crate::RwGuard");
}
