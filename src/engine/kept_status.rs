//! A kept lock's status: what the keeper (`engine/keeper.rs`) publishes through its
//! [`Publisher`], and the handles of the lock (`engine/kept.rs`) read.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use tokio::sync::Notify;

use crate::error::LostReason;

/// What the keeper publishes to the holder.
#[derive(Debug)]
pub(crate) struct Status {
    /// Never later than the validity the nodes guarantee.
    pub(crate) valid_until: Instant,
    pub(crate) extensions: u64,
    lost: Option<LostReason>,
}

/// One kept lock's status as its handles see it, shared by them and the keeper. One
/// allocation per kept lock: a `watch` channel would cost about three times as much.
#[derive(Debug)]
pub(crate) struct Shared {
    status: Mutex<Status>,
    /// Woken when the lock is lost, and when the keeper lets go of it.
    pub(crate) changed: Notify,
    /// Set when the keeper let go of the lock (released, dropped, or the keeper's runtime
    /// shut down): what was published last is final.
    closed: AtomicBool,
}

impl Shared {
    /// The status of a lock kept from now on, valid until `valid_until`.
    pub(crate) fn new(valid_until: Instant) -> Shared {
        Shared {
            status: Mutex::new(Status {
                valid_until,
                extensions: 0,
                lost: None,
            }),
            changed: Notify::new(),
            closed: AtomicBool::new(false),
        }
    }

    pub(crate) fn status(&self) -> MutexGuard<'_, Status> {
        // A panic while the lock was held cannot leave a `Status` half-written.
        self.status.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Why the lock `resource` was lost, if it was. A lock still kept whose validity has
    /// ended without a signal is lost too: its keeper did not run in time. That is published
    /// here as the keeper would have ([`LostReason::KeeperLate`]), so that every handle
    /// reports it from this call on, without waiting for the keeper to run.
    pub(crate) fn lost_reason(&self, resource: &str) -> Option<LostReason> {
        let status = self.status();
        if status.lost.is_none() && !self.closed.load(Ordering::SeqCst) {
            let now = Instant::now();
            if now >= status.valid_until {
                let late = now - status.valid_until;
                self.publish_loss(status, resource, LostReason::KeeperLate { late });
                return self.status().lost.clone();
            }
        }
        status.lost.clone()
    }

    /// Publishes the loss of `resource`, unless one was published already (the first reason
    /// stays), and wakes `lost()`.
    fn publish_loss(&self, mut status: MutexGuard<'_, Status>, resource: &str, reason: LostReason) {
        if status.lost.is_some() {
            return;
        }
        status.valid_until = status.valid_until.min(Instant::now());
        status.lost = Some(reason.clone());
        drop(status);
        self.changed.notify_waiters();
        tracing::warn!(resource = %resource, %reason, "lock lost");
        crate::stats::lock_lost(&reason);
    }

    /// Whether the keeper let go of the lock.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }
}

/// What the handles of a lock report once the keeper let go of it without losing it.
pub(crate) fn released() -> LostReason {
    LostReason::NotExtended {
        last_error: Some("the lock was released".into()),
        failures: Vec::new(),
    }
}

/// The keeper's end of a kept lock's status. Dropping it tells the handles that the lock is
/// no longer kept (as the end of a channel would).
#[derive(Debug)]
pub(crate) struct Publisher(pub(crate) Arc<Shared>);

impl Publisher {
    /// An extension succeeded: the lock is valid until `valid_until`. Returns false, and
    /// publishes nothing, if the loss was published first (a handle found the validity over
    /// before the keeper ran): a lost lock stays lost, and its validity never grows again.
    pub(crate) fn extended(&self, valid_until: Instant) -> bool {
        let mut status = self.0.status();
        if status.lost.is_some() {
            return false;
        }
        status.valid_until = valid_until;
        status.extensions += 1;
        true
    }

    /// Whether the loss was published (by the keeper, or by a handle).
    pub(crate) fn is_lost(&self) -> bool {
        self.0.status().lost.is_some()
    }

    /// An extension failed: the validity is at most `valid_until` (never moved later).
    pub(crate) fn shortened(&self, valid_until: Instant) {
        let mut status = self.0.status();
        status.valid_until = status.valid_until.min(valid_until);
    }

    /// The lock `resource` is lost: its validity ends now, and `lost()` resolves. A loss
    /// published before (by a handle) keeps its reason.
    pub(crate) fn lost(&self, resource: &str, reason: LostReason) {
        self.0.publish_loss(self.0.status(), resource, reason);
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        self.0.closed.store(true, Ordering::SeqCst);
        self.0.changed.notify_waiters();
    }
}
