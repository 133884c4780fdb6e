//! Leading an election: [`Leadership`], a thin face over `engine::election`.

use std::future::Future;
use std::time::Instant;

use crate::api::kept::LockHandle;
use crate::engine::election::Leading;
use crate::engine::held::Released;
use crate::error::{Error, LostReason};

/// This process's leadership of an election, won by [`RedLock::campaign`](crate::RedLock::campaign).
///
/// The lock behind it is kept alive in the background. If it cannot be kept,
/// [`lost`](Self::lost) resolves at least the keep-alive margin before the lock's validity
/// ends: stop acting as the leader then. The next leader's [`term`](Self::term) is greater.
/// Dropping a `Leadership` resigns in the background; [`resign`](Self::resign) waits for
/// the nodes.
#[derive(Debug)]
#[must_use = "leadership is given up as soon as it is dropped"]
pub struct Leadership(pub(super) Leading);

impl Leadership {
    /// The election's name (the lock's resource).
    pub fn name(&self) -> &str {
        self.0.kept.resource()
    }

    /// The term: the lock's fencing token, recorded on a majority before the campaign
    /// returned, greater than the term of every earlier leader of this election.
    pub fn term(&self) -> u64 {
        self.0.term
    }

    /// The identity observers see.
    pub fn identity(&self) -> &str {
        &self.0.identity
    }

    /// Whether this process still leads: the lock is neither lost nor expired.
    pub fn is_leader(&self) -> bool {
        self.0.kept.is_held()
    }

    /// The instant until which the leadership can be relied on, as of the last extension.
    pub fn valid_until(&self) -> Instant {
        self.0.kept.valid_until()
    }

    /// A cloneable view of the lock, with its loss signal.
    pub fn handle(&self) -> LockHandle {
        LockHandle(self.0.kept.handle())
    }

    /// Resolves when the leadership is lost, at least the keep-alive margin before its
    /// validity ends; see [`KeptLock::lost`](crate::KeptLock::lost).
    ///
    /// # Cancel safety
    /// Cancel-safe: dropping the future changes nothing.
    pub fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
        self.0.kept.lost()
    }

    /// Gives the leadership up: releases the lock, which wakes the waiting candidates at
    /// once. The identity record is left to expire: observers ignore it as
    /// soon as the lock is released (it no longer matches the lock's token).
    ///
    /// # Errors
    /// As [`KeptLock::release`](crate::KeptLock::release).
    pub async fn resign(self) -> Result<Released, Error> {
        self.0.resign().await
    }

    /// Runs `work` while leading, then resigns, whichever way `work` ends. If the leadership
    /// is lost first, `work` is cancelled (dropped at its next await) before the lock's
    /// validity ends, and the result is [`Error::Lost`].
    ///
    /// # Errors
    /// As [`KeptLock::run`](crate::KeptLock::run).
    pub async fn run<F, Fut, T>(self, work: F) -> Result<T, Error>
    where
        F: FnOnce(LockHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        self.0.run(|handle| work(LockHandle(handle))).await
    }
}
