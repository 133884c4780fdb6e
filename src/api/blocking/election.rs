//! Leadership of an election with blocking calls: [`Leadership`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Driver;
use crate::engine::held::Released;
use crate::error::{ConfigError, Error, LostReason};

/// This process's leadership of an election, won by
/// [`RedLock::campaign`](super::RedLock::campaign): [`crate::Leadership`] with blocking calls.
/// Its lock is kept alive on the client's runtime thread; a loss while the caller's thread was
/// busy is reported by the next call ([`is_leader`](Self::is_leader),
/// [`lost_reason`](Self::lost_reason)). Dropping it resigns in the background.
#[derive(Debug)]
#[must_use = "leadership is given up as soon as it is dropped"]
pub struct Leadership {
    pub(super) inner: crate::Leadership,
    pub(super) handle: crate::LockHandle,
    pub(super) driver: Arc<Driver>,
}

impl Leadership {
    /// The election's name.
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// The term: greater than the term of every earlier leader of this election.
    pub fn term(&self) -> u64 {
        self.inner.term()
    }

    /// The identity observers see.
    pub fn identity(&self) -> &str {
        self.inner.identity()
    }

    /// Whether this process still leads.
    pub fn is_leader(&self) -> bool {
        self.inner.is_leader()
    }

    /// Why the leadership was lost, once it was.
    pub fn lost_reason(&self) -> Option<LostReason> {
        self.handle.lost_reason()
    }

    /// The instant until which the leadership can be relied on, as of the last extension.
    pub fn valid_until(&self) -> Instant {
        self.inner.valid_until()
    }

    /// A cloneable async view of the leadership's lock, with its loss signal.
    pub fn handle(&self) -> crate::LockHandle {
        self.handle.clone()
    }

    /// Blocks until the leadership is lost or `within` has passed; returns why it was lost,
    /// or `None` while it lasts.
    ///
    /// # Errors
    /// [`ConfigError::ThreadStart`] if the call needed a helper thread and none could start.
    pub fn wait_lost(&self, within: Duration) -> Result<Option<LostReason>, ConfigError> {
        self.driver.wait_lost(&self.handle, within)
    }

    /// Gives the leadership up and waits for the nodes; see [`crate::Leadership::resign`].
    ///
    /// # Errors
    /// As [`crate::Leadership::resign`], and as [`RedLock::lock`](super::RedLock::lock) (the
    /// leadership is then given up in the background).
    pub fn resign(self) -> Result<Released, Error> {
        let Leadership { inner, driver, .. } = self;
        driver.block_on(inner.resign())?
    }
}
