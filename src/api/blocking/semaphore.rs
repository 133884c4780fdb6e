//! A quorum semaphore with blocking calls: [`Semaphore`] and its [`Permit`].

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::{Driver, KeptLock};
use crate::config::{KeepAlive, Retry};
use crate::engine::census::PermitHolder;
use crate::error::Error;

/// At most [`permits`](Self::permits) holders of a resource at once, across every client
/// and host: [`crate::Semaphore`] with blocking calls. Made by
/// [`RedLock::semaphore`](super::RedLock::semaphore); cheap to clone.
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
/// // At most 2 exports at once, fleet-wide.
/// let exports = redlock.semaphore("exports", 2)?;
/// let first = exports.acquire()?; // blocks for a release when both are taken
/// let second = exports.acquire()?;
/// assert_ne!(first.slot(), second.slot());
/// assert!(matches!(exports.try_acquire(), Err(quorumlock::Error::Taken { .. })));
///
/// // Greater than every token handed out before, and naming the permit's slot.
/// let fence = first.fencing_token()?;
/// assert_eq!(fence % u64::from(quorumlock::MAX_PERMITS), u64::from(first.slot()));
///
/// first.release()?;
/// second.release()?;
/// # Ok(()) }
/// # #[cfg(not(feature = "testkit"))]
/// # fn main() {}
/// ```
#[derive(Debug, Clone)]
pub struct Semaphore {
    pub(super) inner: crate::Semaphore,
    pub(super) driver: Arc<Driver>,
}

impl Semaphore {
    /// Blocks on `acquiring` and wraps the permit it returns.
    fn wrap(
        &self,
        acquiring: impl Future<Output = Result<crate::Permit, Error>> + Send,
    ) -> Result<Permit, Error> {
        Ok(Permit {
            inner: self.driver.block_on(acquiring)??,
            driver: Arc::clone(&self.driver),
        })
    }

    /// The async semaphore underneath, for code that runs on a runtime of its own.
    pub fn as_async(&self) -> &crate::Semaphore {
        &self.inner
    }

    /// The semaphore's name (its key on the nodes, after the client's key prefix).
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// How many holders it allows at once.
    pub fn permits(&self) -> u32 {
        self.inner.permits()
    }

    /// Takes a permit with the client's ttl, retrying by its retry policy, and blocking for a
    /// release while every permit is taken; see [`crate::Semaphore::acquire`].
    ///
    /// # Errors
    /// As [`crate::Semaphore::acquire`], and as [`RedLock::lock`](super::RedLock::lock).
    pub fn acquire(&self) -> Result<Permit, Error> {
        self.wrap(self.inner.acquire())
    }

    /// Makes one attempt to take a permit with the client's ttl.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire): [`Error::Taken`] when every permit is taken.
    pub fn try_acquire(&self) -> Result<Permit, Error> {
        self.wrap(self.inner.try_acquire())
    }

    /// Takes a permit for `ttl`, retrying by `retry`; see
    /// [`crate::Semaphore::acquire_with`].
    ///
    /// # Errors
    /// As [`crate::Semaphore::acquire_with`], and as [`acquire`](Self::acquire).
    pub fn acquire_with(&self, ttl: Duration, retry: Retry) -> Result<Permit, Error> {
        self.wrap(self.inner.acquire_with(ttl, retry))
    }

    /// Runs `work` on the caller's thread while holding a permit, as
    /// [`RedLock::with_lock`](super::RedLock::with_lock) does with a lock: `work` gets the
    /// permit as a [`KeptLock`] whose resource is the semaphore.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire) when no permit can be taken (`work` does not run), and
    /// [`Error::Config`] when the client's ttl is too short to keep a permit alive (nothing
    /// is sent); [`Error::Lost`] when the permit was lost before `work` ended.
    pub fn with_permit<T>(&self, work: impl FnOnce(&KeptLock) -> T) -> Result<T, Error> {
        let keep = KeepAlive::new();
        keep.check(self.driver.redlock.config().ttl())?;
        let kept = self.acquire()?.keep_alive(keep)?;
        super::run_kept(kept, work)
    }

    /// Who holds the semaphore's permits, as the nodes record them, changing nothing; see
    /// [`crate::Semaphore::holders`].
    ///
    /// # Errors
    /// As [`crate::Semaphore::holders`], and as [`acquire`](Self::acquire).
    pub fn holders(&self) -> Result<Vec<PermitHolder>, Error> {
        self.driver.block_on(self.inner.holders())?
    }
}

/// One permit of a [`Semaphore`], held on a majority of nodes: [`crate::Permit`] with
/// blocking calls. Dropped, it is released as a [`Lock`](super::Lock) is.
#[derive(Debug)]
#[must_use = "a permit is released in the background as soon as it is dropped"]
pub struct Permit {
    inner: crate::Permit,
    driver: Arc<Driver>,
}

impl Permit {
    /// The semaphore's name.
    pub fn semaphore(&self) -> &str {
        self.inner.semaphore()
    }

    /// The slot this permit holds; see [`crate::Permit::slot`].
    pub fn slot(&self) -> u32 {
        self.inner.slot()
    }

    crate::api::held_face::held_face!(inner "permit";
        token, ttl, valid_until, validity, is_valid, acquired_on, failures, leave,
    );

    super::held_calls!("permit", "crate::Permit");
}
