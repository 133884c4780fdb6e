//! Keeping a lock: the client's keeper task extends it before its validity runs out, and a
//! signal fires, with a margin, before the validity ends if it cannot. The keeper itself,
//! shared by every kept lock of a [`RedLock`](crate::RedLock), is in `engine/keeper.rs`.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::config::KeepAlive;
use crate::engine::held::{Held, Ident};
use crate::engine::keeper::KeepTicket;
use crate::engine::outcome::Released;
use crate::engine::token::Token;
use crate::error::{ConfigError, Error, LostReason};

/// What the keeper publishes to the holder.
#[derive(Debug)]
struct Status {
    /// Never later than the validity the nodes guarantee.
    valid_until: Instant,
    extensions: u64,
    lost: Option<LostReason>,
}

/// One kept lock as its handles see it, shared by them and the keeper. One allocation per
/// kept lock: a `watch` channel would cost about three times as much.
#[derive(Debug)]
struct Shared {
    /// The lock's resources, keys and token, shared with the lock the keeper holds.
    lock: Arc<Ident>,
    status: Mutex<Status>,
    /// Woken when the lock is lost, and when the keeper lets go of it.
    changed: Notify,
    /// Set when the keeper let go of the lock (released, dropped, or the keeper's runtime
    /// shut down): what was published last is final.
    closed: AtomicBool,
}

impl Shared {
    fn status(&self) -> MutexGuard<'_, Status> {
        // A panic while the lock was held cannot leave a `Status` half-written.
        self.status.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Why the lock was lost, if it was. A lock still kept whose validity has ended without
    /// a signal is lost too: its keeper did not run in time. That is published here as the
    /// keeper would have ([`LostReason::KeeperLate`]), so that every handle reports it from
    /// this call on, without waiting for the keeper to run.
    fn lost_reason(&self) -> Option<LostReason> {
        let status = self.status();
        if status.lost.is_none() && !self.closed.load(Ordering::SeqCst) {
            let now = Instant::now();
            if now >= status.valid_until {
                let late = now - status.valid_until;
                self.publish_loss(status, LostReason::KeeperLate { late });
                return self.status().lost.clone();
            }
        }
        status.lost.clone()
    }

    /// Publishes the loss, unless one was published already (the first reason stays), and
    /// wakes `lost()`.
    fn publish_loss(&self, mut status: MutexGuard<'_, Status>, reason: LostReason) {
        if status.lost.is_some() {
            return;
        }
        status.valid_until = status.valid_until.min(Instant::now());
        status.lost = Some(reason.clone());
        drop(status);
        self.changed.notify_waiters();
        tracing::warn!(resource = %self.lock.name(), %reason, "lock lost");
        crate::stats::lock_lost(&reason);
    }

    /// Whether the keeper let go of the lock.
    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// `Ok` while the lock is kept, not lost, and its validity has not run out.
    fn held(&self) -> Result<(), Error> {
        let reason = match self.lost_reason() {
            Some(reason) => reason,
            None if self.is_closed() => released(),
            None => return self.lock.valid(self.status().valid_until),
        };
        Err(Error::Lost {
            resource: self.lock.name().to_string(),
            reason,
        })
    }
}

/// What the handles of a lock report once the keeper let go of it without losing it.
fn released() -> LostReason {
    LostReason::NotExtended {
        last_error: Some("the lock was released".into()),
        failures: Vec::new(),
    }
}

/// The keeper's end of a kept lock's status. Dropping it tells the handles that the lock is
/// no longer kept (as the end of a channel would).
#[derive(Debug)]
pub(crate) struct Publisher(Arc<Shared>);

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

    /// The lock is lost: its validity ends now, and `lost()` resolves. A loss published
    /// before (by a handle) keeps its reason.
    pub(crate) fn lost(&self, reason: LostReason) {
        self.0.publish_loss(self.0.status(), reason);
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        self.0.closed.store(true, Ordering::SeqCst);
        self.0.changed.notify_waiters();
    }
}

#[derive(Debug)]
pub(crate) struct Kept {
    handle: KeptHandle,
    /// Its place in the keeper; `None` once stopped.
    ticket: Option<KeepTicket>,
}

#[derive(Debug, Clone)]
pub(crate) struct KeptHandle {
    shared: Arc<Shared>,
}

impl KeptHandle {
    pub(crate) fn resource(&self) -> &str {
        self.shared.lock.name()
    }

    pub(crate) fn token(&self) -> &Token {
        self.shared.lock.token()
    }

    pub(crate) async fn fencing_token(&self) -> Result<u64, Error> {
        let shared = &self.shared;
        let until = shared.status().valid_until;
        shared.lock.fencing_token(|| shared.held(), until).await
    }

    pub(crate) fn valid_until(&self) -> Instant {
        self.shared.status().valid_until
    }

    pub(crate) fn validity(&self) -> Duration {
        if self.shared.lost_reason().is_some() || self.shared.is_closed() {
            return Duration::ZERO;
        }
        let valid_until = self.shared.status().valid_until;
        valid_until.saturating_duration_since(Instant::now())
    }

    pub(crate) fn is_held(&self) -> bool {
        !self.validity().is_zero()
    }

    pub(crate) fn lost_reason(&self) -> Option<LostReason> {
        self.shared.lost_reason()
    }

    pub(crate) fn extensions(&self) -> u64 {
        self.shared.status().extensions
    }

    pub(crate) fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
        let shared = Arc::clone(&self.shared);
        async move {
            loop {
                // Registered before the state is read, so that no change is missed.
                let changed = shared.changed.notified();
                tokio::pin!(changed);
                changed.as_mut().enable();
                if let Some(reason) = shared.lost_reason() {
                    return reason;
                }
                if shared.closed.load(Ordering::SeqCst) {
                    // The keeper let go of the lock (it was released or dropped): whatever
                    // it published last is final.
                    return shared.lost_reason().unwrap_or_else(released);
                }
                changed.await;
            }
        }
    }
}

impl Held {
    pub(crate) fn keep_alive(mut self, keep: KeepAlive) -> Result<Kept, Error> {
        self.machinery().held().refuse()?;
        let schedule = keep.check(self.ttl())?;
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| ConfigError::NoRuntime)?;
        // Nothing reads them once the lock is kept.
        self.forget_failures();
        let shared = Arc::new(Shared {
            lock: Arc::clone(self.ident()),
            status: Mutex::new(Status {
                valid_until: self.valid_until(),
                extensions: 0,
                lost: None,
            }),
            changed: Notify::new(),
            closed: AtomicBool::new(false),
        });
        let client = self.machinery().clone();
        let ticket = client
            .keeper()
            .keep(&runtime, self, schedule, Publisher(Arc::clone(&shared)));
        Ok(Kept {
            handle: KeptHandle { shared },
            ticket: Some(ticket),
        })
    }
}

impl Kept {
    pub(crate) fn handle(&self) -> KeptHandle {
        self.handle.clone()
    }

    pub(crate) fn resource(&self) -> &str {
        self.handle.resource()
    }

    pub(crate) async fn fencing_token(&self) -> Result<u64, Error> {
        self.handle.fencing_token().await
    }

    pub(crate) fn validity(&self) -> Duration {
        self.handle.validity()
    }

    pub(crate) fn valid_until(&self) -> Instant {
        self.handle.valid_until()
    }

    pub(crate) fn is_held(&self) -> bool {
        self.handle.is_held()
    }

    pub(crate) fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
        self.handle.lost()
    }

    pub(crate) async fn release(mut self) -> Result<Released, Error> {
        let lost = self.handle.lost_reason();
        let lock = self.stop().await;
        let released = match lock {
            Some(lock) => lock.release().await,
            // The client's shutdown took it from the keeper, and released it.
            None if self.handle.shared.lock.machinery().held().is_shut() => Err(Error::ShutDown),
            None => Err(Error::Lost {
                resource: self.resource().to_string(),
                reason: LostReason::NotExtended {
                    last_error: Some("the keep-alive task failed".into()),
                    failures: Vec::new(),
                },
            }),
        };
        match lost {
            Some(reason) => Err(Error::Lost {
                resource: self.resource().to_string(),
                reason,
            }),
            None => released,
        }
    }

    /// Stops keeping the lock and hands it back, still held, as of its last extension.
    pub(crate) async fn into_held(mut self) -> Result<Held, Error> {
        let lost = self.handle.lost_reason();
        let lock = self.stop().await;
        let resource = self.resource().to_string();
        match (lost, lock) {
            // Dropped: released in the background.
            (Some(reason), _) => Err(Error::Lost { resource, reason }),
            (None, Some(lock)) => Ok(lock),
            (None, None) if self.handle.shared.lock.machinery().held().is_shut() => {
                Err(Error::ShutDown)
            }
            (None, None) => Err(Error::Lost {
                resource,
                reason: LostReason::NotExtended {
                    last_error: Some("the keep-alive task failed".into()),
                    failures: Vec::new(),
                },
            }),
        }
    }

    pub(crate) async fn run<F, Fut, T>(mut self, work: F) -> Result<T, Error>
    where
        F: FnOnce(KeptHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        let handle = self.handle();
        let lost = handle.lost();
        let shared = Arc::clone(&handle.shared);
        let outcome = tokio::select! {
            biased;
            reason = lost => Err(reason),
            out = work(handle) => match shared.lost_reason() {
                // The work ended after the lock was lost (a poll of the work that blocked the
                // thread past the validity): its output may come from a time another client
                // held the lock.
                Some(reason) => Err(reason),
                None => Ok(out),
            },
        };
        // `work` has ended or been dropped: release now, whichever way it ended.
        if let Some(lock) = self.stop().await {
            if let Err(e) = lock.release().await {
                tracing::debug!(resource = %self.resource(), error = %e, "release after the work failed");
            }
        }
        let shut = self.handle.shared.lock.machinery().held().is_shut();
        outcome.map_err(|reason| match reason {
            // The client's shutdown took the lock from the keeper (and released it).
            _ if shut && self.handle.shared.is_closed() => Error::ShutDown,
            reason => Error::Lost {
                resource: self.resource().to_string(),
                reason,
            },
        })
    }

    /// Stops keeping the lock and takes it back from the keeper.
    async fn stop(&mut self) -> Option<Held> {
        self.ticket.take()?.take_back().await
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        // The keeper lets go of the lock and drops it, which releases it in the background.
        // Nothing here waits.
        if let Some(ticket) = self.ticket.take() {
            ticket.drop_lock();
        }
    }
}
