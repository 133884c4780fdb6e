//! A lock kept alive: [`KeptLock`] and its [`LockHandle`], thin faces over `engine::kept`.

use std::future::Future;
use std::time::{Duration, Instant};

use crate::engine::held::{Released, Token};
use crate::engine::kept::{Kept, KeptHandle};
use crate::error::{Error, LostReason};

/// A lock kept alive in the background, made by [`Lock::keep_alive`](crate::Lock::keep_alive).
///
/// The client's keeper (one task per [`RedLock`](crate::RedLock), shared by all its kept
/// locks) extends the lock before its validity runs out, recomputing the validity from each
/// extension exactly as for an acquisition. If the lock cannot be kept (a majority lost it,
/// or no extension succeeded in time), [`lost`](Self::lost) resolves **before** the
/// validity ends, at least the [margin](crate::KeepAlive::margin) before it, and
/// [`validity`](Self::validity) is zero from then on; the validity it reports is never more
/// than the nodes guarantee.
///
/// Dropping a `KeptLock` stops keeping it at once (never blocking) and releases the lock in
/// the background; [`release`](Self::release) does the same and waits for the nodes.
///
/// # What the keeper needs: a free runtime thread
/// The keeper is a task on the Tokio runtime that kept the client's first lock, and it
/// extends the lock and signals its loss only when that runtime polls it. Use a
/// multi-thread runtime (`#[tokio::main]`), or never block a runtime thread: blocking
/// work goes to [`tokio::task::spawn_blocking`] or a thread of its own. On a
/// current-thread runtime (`flavor = "current_thread"`, `#[tokio::test]`) a task that
/// blocks the thread for longer than the validity left (a `std::thread::sleep`, a long
/// computation, a blocking read) stops the keeper: the lock expires on the nodes and
/// another client can take it, with no signal possible meanwhile. When the thread runs
/// again, the first call on the lock, on any handle, reports the loss
/// ([`LostReason::KeeperLate`]; docs/design.md, section 3.5).
#[derive(Debug)]
#[must_use = "a kept lock is released as soon as it is dropped"]
pub struct KeptLock(pub(super) Kept);

impl KeptLock {
    /// A cloneable view of the lock, with its loss signal.
    pub fn handle(&self) -> LockHandle {
        LockHandle(self.0.handle())
    }

    /// The locked resource's name.
    pub fn resource(&self) -> &str {
        self.0.resource()
    }

    /// The fencing token; see [`LockHandle::fencing_token`].
    ///
    /// # Errors
    /// As [`LockHandle::fencing_token`].
    pub async fn fencing_token(&self) -> Result<u64, Error> {
        self.0.fencing_token().await
    }

    /// The validity left: zero once lost or expired. See [`LockHandle::validity`].
    pub fn validity(&self) -> Duration {
        self.0.validity()
    }

    /// The instant until which the lock can be relied on; see [`LockHandle::valid_until`].
    pub fn valid_until(&self) -> Instant {
        self.0.valid_until()
    }

    /// Whether the lock is still held.
    pub fn is_held(&self) -> bool {
        self.0.is_held()
    }

    /// Resolves when the lock is lost; see [`LockHandle::lost`].
    pub fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
        self.0.lost()
    }

    /// Stops keeping the lock and releases it.
    ///
    /// # Errors
    /// As [`Lock::release`](crate::Lock::release); [`Error::Lost`] if the lock had been lost already (its keys are
    /// still deleted where they hold our token); [`Error::ShutDown`] if the client's
    /// [shutdown](crate::RedLock::shutdown) released it already.
    pub async fn release(self) -> Result<Released, Error> {
        self.0.release().await
    }

    /// Stops keeping the lock and hands it back as a [`Lock`](crate::Lock), still held, valid
    /// until its last extension's validity ends: to extend it one last time and
    /// [`leave`](crate::Lock::leave) it to expire (what `quorumlock run --hold-at-least`
    /// does), or to release it later.
    ///
    /// # Errors
    /// [`Error::Lost`] if the lock had been lost (it is released in the background);
    /// [`Error::ShutDown`] if the client's [shutdown](crate::RedLock::shutdown) released it.
    pub async fn into_lock(self) -> Result<crate::Lock, Error> {
        self.0.into_held().await.map(crate::api::lock::Lock)
    }

    /// Runs `work` while the lock is kept, then releases the lock, whichever way `work`
    /// ends. If the lock is lost first, `work` is cancelled (dropped at its next await)
    /// before the lock's validity ends, and the result is [`Error::Lost`]. Work that blocks
    /// the thread cannot be cancelled: if it ends after the lock was lost (its validity
    /// ended while it blocked: [`LostReason::KeeperLate`]), the result is [`Error::Lost`]
    /// too, never its output.
    ///
    /// # Errors
    /// [`Error::Lost`] if the lock was lost before `work` ended; [`Error::ShutDown`] if the
    /// client's [shutdown](crate::RedLock::shutdown) released it first. A failure to release after
    /// `work` completed is not an error (the keys expire by themselves): `work`'s output is
    /// returned.
    pub async fn run<F, Fut, T>(self, work: F) -> Result<T, Error>
    where
        F: FnOnce(LockHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        self.0.run(|handle| work(LockHandle(handle))).await
    }
}

/// A cheap, cloneable view of a [`KeptLock`]: its resource, fencing token, validity and
/// loss signal. Hand it to the code that does the work; it does not keep the lock by itself.
#[derive(Debug, Clone)]
pub struct LockHandle(pub(super) KeptHandle);

impl LockHandle {
    /// The locked resource's name (names joined by commas for several).
    pub fn resource(&self) -> &str {
        self.0.resource()
    }

    /// The acquisition's token, as stored on the nodes.
    pub fn token(&self) -> &Token {
        self.0.token()
    }

    /// The fencing token, recorded on a majority by the first call of any handle (or of the
    /// [`KeptLock`]); see [`Lock::fencing_token`](crate::Lock::fencing_token).
    ///
    /// # Errors
    /// As [`Lock::fencing_token`](crate::Lock::fencing_token), and [`Error::Lost`] once the lock was lost or released.
    pub async fn fencing_token(&self) -> Result<u64, Error> {
        self.0.fencing_token().await
    }

    /// The instant until which the lock can be relied on, as of the last successful
    /// acquisition or extension; the instant of the loss signal once it is lost.
    pub fn valid_until(&self) -> Instant {
        self.0.valid_until()
    }

    /// The validity left: zero once lost, expired, or no longer kept (released).
    pub fn validity(&self) -> Duration {
        self.0.validity()
    }

    /// Whether the lock is still held: kept, not lost, and its validity not run out.
    pub fn is_held(&self) -> bool {
        self.0.is_held()
    }

    /// Why the lock was lost, if it was. A validity that ended without a signal counts as
    /// a loss from the first call that sees it ([`LostReason::KeeperLate`]).
    pub fn lost_reason(&self) -> Option<LostReason> {
        self.0.lost_reason()
    }

    /// How many extensions have succeeded.
    pub fn extensions(&self) -> u64 {
        self.0.extensions()
    }

    /// Resolves when the lock is lost, before its validity ends (see [`KeptLock`]). Never
    /// resolves while the lock is kept; resolves at once if it was lost already, or if its
    /// validity has ended without a signal (its keeper did not run in time:
    /// [`LostReason::KeeperLate`]). Woken by the keeper, so the signal before the validity
    /// ends needs the keeper's runtime to have a thread free (see [`KeptLock`]).
    ///
    /// # Cancel safety
    /// Cancel-safe: dropping the future changes nothing.
    pub fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
        self.0.lost()
    }
}
