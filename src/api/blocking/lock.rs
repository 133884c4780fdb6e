//! A held lock and a kept one with blocking calls: [`Lock`] and [`KeptLock`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Driver;
use crate::engine::held::{Released, Token};
use crate::error::{ConfigError, Error, LostReason};

/// A lock held on a majority of nodes: [`crate::Lock`] with blocking calls.
///
/// Dropping it without [`release`](Self::release) releases it in the background, on the
/// client's runtime thread, and never blocks.
#[derive(Debug)]
#[must_use = "a lock is released in the background as soon as it is dropped"]
pub struct Lock {
    pub(super) inner: crate::Lock,
    pub(super) driver: Arc<Driver>,
}

impl Lock {
    /// The locked resource's name; see [`crate::Lock::resource`].
    pub fn resource(&self) -> &str {
        self.inner.resource()
    }

    /// The names of the locked resources.
    pub fn resources(&self) -> &[String] {
        self.inner.resources()
    }

    crate::api::held_face::held_face!(inner "lock";
        token, ttl, valid_until, validity, is_valid, acquired_on, failures, leave,
    );

    super::held_calls!("lock", "crate::Lock");
}

/// A lock kept alive on the client's runtime thread: [`crate::KeptLock`] with blocking calls.
///
/// The keeper extends it and notices its loss whatever the caller's thread does; a loss while
/// that thread was busy is reported by the next call on the lock ([`is_held`](Self::is_held),
/// [`lost_reason`](Self::lost_reason), [`validity`](Self::validity),
/// [`fencing_token`](Self::fencing_token), [`release`](Self::release)). Dropping it stops
/// keeping it and releases it in the background.
#[derive(Debug)]
#[must_use = "a kept lock is released as soon as it is dropped"]
pub struct KeptLock {
    inner: crate::KeptLock,
    handle: crate::LockHandle,
    driver: Arc<Driver>,
}

impl KeptLock {
    /// Wraps `inner`, kept alive on `driver`'s runtime thread.
    pub(super) fn new(inner: crate::KeptLock, driver: Arc<Driver>) -> KeptLock {
        KeptLock {
            handle: inner.handle(),
            inner,
            driver,
        }
    }

    /// The locked resource's name.
    pub fn resource(&self) -> &str {
        self.inner.resource()
    }

    /// The lock's token.
    pub fn token(&self) -> &Token {
        self.handle.token()
    }

    /// A cloneable async view of the lock, with its loss signal, for code that runs on a
    /// runtime of its own.
    pub fn handle(&self) -> crate::LockHandle {
        self.handle.clone()
    }

    /// Whether the lock is still held: kept, and within its validity.
    pub fn is_held(&self) -> bool {
        self.inner.is_held()
    }

    /// Why the lock was lost, once it was.
    pub fn lost_reason(&self) -> Option<LostReason> {
        self.handle.lost_reason()
    }

    /// The validity left: zero once the lock is lost.
    pub fn validity(&self) -> Duration {
        self.inner.validity()
    }

    /// The instant the lock stops being valid unless extended again.
    pub fn valid_until(&self) -> Instant {
        self.inner.valid_until()
    }

    /// How many times the keeper has extended the lock.
    pub fn extensions(&self) -> u64 {
        self.handle.extensions()
    }

    /// The fencing token; see [`crate::LockHandle::fencing_token`].
    ///
    /// # Errors
    /// As [`crate::LockHandle::fencing_token`], and as [`RedLock::lock`](super::RedLock::lock).
    pub fn fencing_token(&self) -> Result<u64, Error> {
        self.driver.block_on(self.inner.fencing_token())?
    }

    /// Blocks until the lock is lost or `within` has passed; returns why it was lost, or
    /// `None` if it is still held.
    ///
    /// # Errors
    /// [`ConfigError::ThreadStart`] if the call needed a helper thread and none could start.
    pub fn wait_lost(&self, within: Duration) -> Result<Option<LostReason>, ConfigError> {
        self.driver.wait_lost(&self.handle, within)
    }

    /// Stops keeping the lock and hands it back, still held; see
    /// [`crate::KeptLock::into_lock`].
    ///
    /// # Errors
    /// As [`crate::KeptLock::into_lock`], and as [`fencing_token`](Self::fencing_token).
    pub fn into_lock(self) -> Result<Lock, Error> {
        let KeptLock { inner, driver, .. } = self;
        let lock = driver.block_on(inner.into_lock())??;
        Ok(Lock {
            inner: lock,
            driver,
        })
    }

    /// Stops keeping the lock and releases it; see [`crate::KeptLock::release`].
    ///
    /// # Errors
    /// As [`crate::KeptLock::release`] ([`Error::Lost`] if it had been lost); as
    /// [`fencing_token`](Self::fencing_token).
    pub fn release(self) -> Result<Released, Error> {
        let KeptLock { inner, driver, .. } = self;
        driver.block_on(inner.release())?
    }
}
