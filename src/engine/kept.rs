//! Keeping a lock: the client's keeper task extends it before its validity runs out, and a
//! signal fires, with a margin, before the validity ends if it cannot. The keeper itself,
//! shared by every kept lock of a [`RedLock`](crate::RedLock), is in `engine/keeper.rs`, and
//! what it publishes to the handles in `engine/keep_cycle.rs`.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::KeepAlive;
use crate::engine::held::{Held, Ident, Released, Token};
use crate::engine::keep_cycle::{released, Publisher, Shared};
use crate::engine::keeper::KeepTicket;
use crate::error::{ConfigError, Error, LostReason};

#[derive(Debug)]
pub(crate) struct Kept {
    handle: KeptHandle,
    /// Its place in the keeper; `None` once stopped.
    ticket: Option<KeepTicket<Held>>,
}

#[derive(Debug, Clone)]
pub(crate) struct KeptHandle {
    /// The lock's resources, keys and token, shared with the lock the keeper holds.
    lock: Arc<Ident>,
    /// What the keeper publishes of it.
    shared: Arc<Shared>,
}

impl KeptHandle {
    pub(crate) fn resource(&self) -> &str {
        self.lock.name()
    }

    pub(crate) fn token(&self) -> &Token {
        &self.lock.token
    }

    pub(crate) async fn fencing_token(&self) -> Result<u64, Error> {
        let until = self.shared.status().valid_until;
        self.lock.fencing_token(|| self.held(), until).await
    }

    /// `Ok` while the lock is kept, not lost, and its validity has not run out.
    fn held(&self) -> Result<(), Error> {
        let reason = match self.lost_reason() {
            Some(reason) => reason,
            None if self.shared.is_closed() => released(),
            None => return self.lock.valid(self.shared.status().valid_until),
        };
        Err(self.lost_error(reason))
    }

    /// [`Error::Lost`] for this lock, with `reason`.
    fn lost_error(&self, reason: LostReason) -> Error {
        Error::Lost {
            resource: self.lock.name().to_string(),
            reason,
        }
    }

    pub(crate) fn valid_until(&self) -> Instant {
        self.shared.status().valid_until
    }

    pub(crate) fn validity(&self) -> Duration {
        if self.lost_reason().is_some() || self.shared.is_closed() {
            return Duration::ZERO;
        }
        let valid_until = self.shared.status().valid_until;
        valid_until.saturating_duration_since(Instant::now())
    }

    pub(crate) fn is_held(&self) -> bool {
        !self.validity().is_zero()
    }

    pub(crate) fn lost_reason(&self) -> Option<LostReason> {
        self.shared.lost_reason(self.lock.name())
    }

    pub(crate) fn extensions(&self) -> u64 {
        self.shared.status().extensions
    }

    pub(crate) fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
        let handle = self.clone();
        async move {
            let shared = &handle.shared;
            loop {
                // Registered before the state is read, so that no change is missed.
                let changed = shared.changed.notified();
                tokio::pin!(changed);
                changed.as_mut().enable();
                if let Some(reason) = handle.lost_reason() {
                    return reason;
                }
                if shared.is_closed() {
                    // The keeper let go of the lock (it was released or dropped): whatever
                    // it published last is final.
                    return handle.lost_reason().unwrap_or_else(released);
                }
                changed.await;
            }
        }
    }
}

impl Held {
    pub(crate) fn keep_alive(mut self, keep: KeepAlive) -> Result<Kept, Error> {
        self.ident().machinery.held.refuse()?;
        let schedule = keep.check(self.ttl())?;
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| ConfigError::NoRuntime)?;
        // Nothing reads them once the lock is kept.
        self.forget_failures();
        let lock = Arc::clone(self.ident());
        let shared = Arc::new(Shared::new(self.valid_until()));
        let client = Arc::clone(&self.ident().machinery);
        let ticket = client
            .keeper
            .keep(&runtime, self, schedule, Publisher(Arc::clone(&shared)));
        Ok(Kept {
            handle: KeptHandle { lock, shared },
            ticket: Some(ticket),
        })
    }
}

/// A kept lock reads as its handle does.
impl std::ops::Deref for Kept {
    type Target = KeptHandle;

    fn deref(&self) -> &KeptHandle {
        &self.handle
    }
}

impl Kept {
    pub(crate) fn handle(&self) -> KeptHandle {
        self.handle.clone()
    }

    pub(crate) async fn release(mut self) -> Result<Released, Error> {
        let lost = self.handle.lost_reason();
        let released = match self.stop().await {
            Some(lock) => lock.release().await,
            None => Err(self.gone()),
        };
        match lost {
            Some(reason) => Err(self.lost_error(reason)),
            None => released,
        }
    }

    /// Stops keeping the lock and hands it back, still held, as of its last extension.
    pub(crate) async fn into_held(mut self) -> Result<Held, Error> {
        let lost = self.handle.lost_reason();
        let lock = self.stop().await;
        match (lost, lock) {
            // Dropped: released in the background.
            (Some(reason), _) => Err(self.lost_error(reason)),
            (None, Some(lock)) => Ok(lock),
            (None, None) => Err(self.gone()),
        }
    }

    /// Why the keeper had no lock to hand back: the client's shutdown took it from the
    /// keeper (and released it), or the keeper is gone.
    fn gone(&self) -> Error {
        if self.handle.lock.machinery.held.is_shut() {
            return Error::ShutDown;
        }
        self.lost_error(LostReason::NotExtended {
            last_error: Some("the keep-alive task failed".into()),
            failures: Vec::new(),
        })
    }

    pub(crate) async fn run<F, Fut, T>(mut self, work: F) -> Result<T, Error>
    where
        F: FnOnce(KeptHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        let handle = self.handle();
        let lost = handle.lost();
        let watched = handle.clone();
        let outcome = tokio::select! {
            biased;
            reason = lost => Err(reason),
            out = work(handle) => match watched.lost_reason() {
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
        let shut = self.handle.lock.machinery.held.is_shut();
        outcome.map_err(|reason| match reason {
            // The client's shutdown took the lock from the keeper (and released it).
            _ if shut && self.handle.shared.is_closed() => Error::ShutDown,
            reason => self.lost_error(reason),
        })
    }

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
