//! Keeping a lock: the client's keeper task extends it before its validity runs out, and a
//! signal fires, with a margin, before the validity ends if it cannot. The keeper itself,
//! shared by every kept lock of a [`RedLock`](crate::RedLock), is in `keeper.rs`.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::error::{ConfigError, Error};
use crate::keeper::Ticket;
use crate::lock::{Ident, Lock, Released};
use crate::token::Token;

/// How a [`KeptLock`] is kept: when extensions start, how early loss is signalled, and for
/// how long at most the lock is held.
///
/// ```
/// use std::time::Duration;
/// let keep = quorumlock::KeepAlive::new()
///     .extend_when_left(0.5)
///     .margin(Duration::from_millis(500))
///     .max_hold(Duration::from_secs(600));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[must_use]
pub struct KeepAlive {
    extend_when_left: f64,
    margin: Option<Duration>,
    max_hold: Option<Duration>,
    retry_delay: Duration,
}

impl Default for KeepAlive {
    fn default() -> Self {
        KeepAlive {
            extend_when_left: 0.5,
            margin: None,
            max_hold: None,
            retry_delay: Duration::from_millis(50),
        }
    }
}

impl KeepAlive {
    /// The defaults: extend when half the ttl is left, signal loss a tenth of the ttl before
    /// the validity ends, no hold limit.
    pub fn new() -> Self {
        Self::default()
    }

    /// Start extending when the validity left falls to this fraction of the ttl
    /// (`0.0 < fraction < 1.0`). Defaults to 0.5: a 30 s lock is extended every ~15 s.
    ///
    /// An extension may start a little earlier (by at most a tenth of the time between two
    /// extensions, and at most 500 ms), so that the locks of a client that fall due at
    /// about the same time are extended together.
    pub fn extend_when_left(mut self, fraction: f64) -> Self {
        self.extend_when_left = fraction;
        self
    }

    /// How long before the validity ends the loss signal fires at the latest when the lock
    /// could not be extended: the time the holder has to stop. Must be shorter than the
    /// validity left when extensions start. Defaults to a tenth of the ttl.
    pub fn margin(mut self, margin: Duration) -> Self {
        self.margin = Some(margin);
        self
    }

    /// Stop extending once the lock has been held this long in all: its validity then ends
    /// at most `limit` after [`Lock::keep_alive`] and loss is signalled (with
    /// [`LostReason::HoldLimit`]) a margin before. Defaults to no limit.
    pub fn max_hold(mut self, limit: Duration) -> Self {
        self.max_hold = Some(limit);
        self
    }

    /// The pause between two extension attempts after one failed (no quorum, too slow).
    /// Defaults to 50 ms.
    pub fn retry_delay(mut self, delay: Duration) -> Self {
        self.retry_delay = delay;
        self
    }

    /// Checks the settings for a lock of `ttl`, and returns the margin and the validity left
    /// at which extensions start.
    pub(crate) fn check(&self, ttl: Duration) -> Result<Schedule, ConfigError> {
        let fraction = self.extend_when_left;
        if !(fraction.is_finite() && fraction > 0.0 && fraction < 1.0) {
            return Err(ConfigError::InvalidKeepAlive(format!(
                "extend_when_left must be between 0.0 and 1.0 (exclusive), got {fraction}"
            )));
        }
        let extend_at = ttl.mul_f64(fraction);
        let margin = self.margin.unwrap_or_else(|| ttl / 10);
        if margin.is_zero() {
            return Err(ConfigError::InvalidKeepAlive(
                "the margin must be greater than zero".into(),
            ));
        }
        if margin >= extend_at {
            return Err(ConfigError::InvalidKeepAlive(format!(
                "the margin ({}) must be shorter than the validity left when extensions start \
                 ({} of the {} ttl)",
                humantime::format_duration(margin),
                humantime::format_duration(extend_at),
                humantime::format_duration(ttl),
            )));
        }
        if self.max_hold.is_some_and(|limit| limit.is_zero()) {
            return Err(ConfigError::InvalidKeepAlive(
                "the hold limit must be greater than zero".into(),
            ));
        }
        if self.retry_delay.is_zero() {
            return Err(ConfigError::InvalidKeepAlive(
                "the retry delay must be greater than zero".into(),
            ));
        }
        Ok(Schedule {
            extend_at,
            margin,
            max_hold: self.max_hold,
            retry_delay: self.retry_delay,
        })
    }
}

/// [`KeepAlive`] checked against a ttl.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Schedule {
    /// The validity left at which extensions start.
    pub(crate) extend_at: Duration,
    pub(crate) margin: Duration,
    pub(crate) max_hold: Option<Duration>,
    pub(crate) retry_delay: Duration,
}

/// Why a kept lock was lost.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LostReason {
    /// A majority of nodes no longer had our token: the keys expired, were deleted, or were
    /// taken over.
    NotHeld {
        /// How many nodes still had our token.
        held: usize,
        /// How many nodes are configured.
        nodes: usize,
    },
    /// The lock could not be extended (too few nodes answered, or too late) before the margin
    /// before its validity's end.
    NotExtended {
        /// The last extension's error, if one returned before the deadline.
        last_error: Option<String>,
    },
    /// The hold limit ([`KeepAlive::max_hold`]) was reached.
    HoldLimit {
        /// The limit.
        limit: Duration,
    },
}

impl fmt::Display for LostReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LostReason::NotHeld { held, nodes } => write!(
                f,
                "a majority no longer holds it ({held} of {nodes} nodes still had our token)"
            ),
            LostReason::NotExtended { last_error: None } => {
                f.write_str("it could not be extended in time: no quorum answered")
            }
            LostReason::NotExtended {
                last_error: Some(e),
            } => write!(f, "it could not be extended in time: {e}"),
            LostReason::HoldLimit { limit } => write!(
                f,
                "the hold limit of {} was reached",
                humantime::format_duration(*limit)
            ),
        }
    }
}

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

    fn lost_reason(&self) -> Option<LostReason> {
        self.status().lost.clone()
    }

    /// `Ok` while the lock is kept, not lost, and its validity has not run out.
    fn held(&self) -> Result<(), Error> {
        let status = self.status();
        let reason = match (&status.lost, self.closed.load(Ordering::SeqCst)) {
            (Some(reason), _) => reason.clone(),
            (None, true) => released(),
            (None, false) => return self.lock.valid(status.valid_until),
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
    }
}

/// The keeper's end of a kept lock's status. Dropping it tells the handles that the lock is
/// no longer kept (as the end of a channel would).
#[derive(Debug)]
pub(crate) struct Publisher(Arc<Shared>);

impl Publisher {
    /// An extension succeeded: the lock is valid until `valid_until`.
    pub(crate) fn extended(&self, valid_until: Instant) {
        let mut status = self.0.status();
        status.valid_until = valid_until;
        status.extensions += 1;
    }

    /// An extension failed: the validity is at most `valid_until` (never moved later).
    pub(crate) fn shortened(&self, valid_until: Instant) {
        let mut status = self.0.status();
        status.valid_until = status.valid_until.min(valid_until);
    }

    /// The lock is lost: its validity ends now, and `lost()` resolves.
    pub(crate) fn lost(&self, reason: LostReason) {
        {
            let mut status = self.0.status();
            status.valid_until = status.valid_until.min(Instant::now());
            status.lost = Some(reason);
        }
        self.0.changed.notify_waiters();
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        self.0.closed.store(true, Ordering::SeqCst);
        self.0.changed.notify_waiters();
    }
}

/// A lock kept alive in the background, made by [`Lock::keep_alive`].
///
/// The client's keeper (one task per [`RedLock`](crate::RedLock), shared by all its kept
/// locks) extends the lock before its validity runs out, recomputing the validity from each
/// extension exactly as for an acquisition. If the lock cannot be kept (a majority lost it,
/// or no extension succeeded in time), [`lost`](Self::lost) resolves **before** the
/// validity ends, at least the [margin](KeepAlive::margin) before it, and
/// [`validity`](Self::validity) is zero from then on; the validity it reports is never more
/// than the nodes guarantee.
///
/// Dropping a `KeptLock` stops keeping it at once (never blocking) and releases the lock in
/// the background; [`release`](Self::release) does the same and waits for the nodes.
#[derive(Debug)]
#[must_use = "a kept lock is released as soon as it is dropped"]
pub struct KeptLock {
    handle: LockHandle,
    /// Its place in the keeper; `None` once stopped.
    ticket: Option<Ticket>,
}

/// A cheap, cloneable view of a [`KeptLock`]: its resource, fencing token, validity and
/// loss signal. Hand it to the code that does the work; it does not keep the lock by itself.
#[derive(Debug, Clone)]
pub struct LockHandle {
    shared: Arc<Shared>,
}

impl LockHandle {
    /// The locked resource's name (names joined by commas for several).
    pub fn resource(&self) -> &str {
        self.shared.lock.name()
    }

    /// The acquisition's token, as stored on the nodes.
    pub fn token(&self) -> &Token {
        self.shared.lock.token()
    }

    /// The fencing token, recorded on a majority by the first call of any handle (or of the
    /// [`KeptLock`]); see [`Lock::fencing_token`].
    ///
    /// # Errors
    /// As [`Lock::fencing_token`], and [`Error::Lost`] once the lock was lost or released.
    pub async fn fencing_token(&self) -> Result<u64, Error> {
        let shared = &self.shared;
        shared.lock.fencing_token(|| shared.held()).await
    }

    /// The instant until which the lock can be relied on, as of the last successful
    /// acquisition or extension; the instant of the loss signal once it is lost.
    pub fn valid_until(&self) -> Instant {
        self.shared.status().valid_until
    }

    /// The validity left: zero once lost or expired.
    pub fn validity(&self) -> Duration {
        let status = self.shared.status();
        if status.lost.is_some() {
            return Duration::ZERO;
        }
        status.valid_until.saturating_duration_since(Instant::now())
    }

    /// Whether the lock is still held: not lost and its validity not run out.
    pub fn is_held(&self) -> bool {
        !self.validity().is_zero()
    }

    /// Why the lock was lost, if it was.
    pub fn lost_reason(&self) -> Option<LostReason> {
        self.shared.lost_reason()
    }

    /// How many extensions have succeeded.
    pub fn extensions(&self) -> u64 {
        self.shared.status().extensions
    }

    /// Resolves when the lock is lost, before its validity ends (see [`KeptLock`]). Never
    /// resolves while the lock is kept; resolves at once if it was lost already.
    ///
    /// # Cancel safety
    /// Cancel-safe: dropping the future changes nothing.
    pub fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
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

impl Lock {
    /// Keeps the lock alive in the background until it is released or dropped; see
    /// [`KeptLock`]. The first kept lock of a client starts its keeper task on the current
    /// Tokio runtime; the task ends when the client keeps no lock any more.
    ///
    /// # Errors
    /// [`Error::Config`] if `keep` does not fit the lock's ttl (the margin must be shorter
    /// than the validity left when extensions start); the lock is then released in the
    /// background.
    ///
    /// ```no_run
    /// # async fn f(redlock: quorumlock::RedLock) -> Result<(), quorumlock::Error> {
    /// let kept = redlock.lock("report").await?.keep_alive(quorumlock::KeepAlive::new())?;
    /// let handle = kept.handle();
    /// tokio::select! {
    ///     _ = async { /* long work, sending handle.fencing_token().await? to storage */ } => {}
    ///     reason = handle.lost() => eprintln!("lock lost: {reason}; stopping"),
    /// }
    /// kept.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn keep_alive(mut self, keep: KeepAlive) -> Result<KeptLock, Error> {
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
        let redlock = self.redlock().clone();
        let ticket =
            redlock
                .keeper()
                .keep(&runtime, self, schedule, Publisher(Arc::clone(&shared)));
        Ok(KeptLock {
            handle: LockHandle { shared },
            ticket: Some(ticket),
        })
    }
}

impl KeptLock {
    /// A cloneable view of the lock, with its loss signal.
    pub fn handle(&self) -> LockHandle {
        self.handle.clone()
    }

    /// The locked resource's name.
    pub fn resource(&self) -> &str {
        self.handle.resource()
    }

    /// The fencing token; see [`LockHandle::fencing_token`].
    ///
    /// # Errors
    /// As [`LockHandle::fencing_token`].
    pub async fn fencing_token(&self) -> Result<u64, Error> {
        self.handle.fencing_token().await
    }

    /// The validity left: zero once lost or expired. See [`LockHandle::validity`].
    pub fn validity(&self) -> Duration {
        self.handle.validity()
    }

    /// The instant until which the lock can be relied on; see [`LockHandle::valid_until`].
    pub fn valid_until(&self) -> Instant {
        self.handle.valid_until()
    }

    /// Whether the lock is still held.
    pub fn is_held(&self) -> bool {
        self.handle.is_held()
    }

    /// Resolves when the lock is lost; see [`LockHandle::lost`].
    pub fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
        self.handle.lost()
    }

    /// Stops keeping the lock and releases it.
    ///
    /// # Errors
    /// As [`Lock::release`]; [`Error::Lost`] if the lock had been lost already (its keys are
    /// still deleted where they hold our token).
    pub async fn release(mut self) -> Result<Released, Error> {
        let lost = self.handle.lost_reason();
        let lock = self.stop().await;
        let released = match lock {
            Some(lock) => lock.release().await,
            None => Err(Error::Lost {
                resource: self.resource().to_string(),
                reason: LostReason::NotExtended {
                    last_error: Some("the keep-alive task failed".into()),
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

    /// Runs `work` while the lock is kept, then releases the lock, whichever way `work`
    /// ends. If the lock is lost first, `work` is cancelled (dropped at its next await)
    /// before the lock's validity ends, and the result is [`Error::Lost`].
    ///
    /// # Errors
    /// [`Error::Lost`] if the lock was lost while `work` ran. A failure to release after
    /// `work` completed is not an error (the keys expire by themselves): `work`'s output is
    /// returned.
    pub async fn run<F, Fut, T>(mut self, work: F) -> Result<T, Error>
    where
        F: FnOnce(LockHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        let handle = self.handle();
        let lost = handle.lost();
        let outcome = tokio::select! {
            biased;
            reason = lost => Err(reason),
            out = work(handle) => Ok(out),
        };
        // `work` has ended or been dropped: release now, whichever way it ended.
        if let Some(lock) = self.stop().await {
            if let Err(e) = lock.release().await {
                tracing::debug!(resource = %self.resource(), error = %e, "release after the work failed");
            }
        }
        outcome.map_err(|reason| Error::Lost {
            resource: self.resource().to_string(),
            reason,
        })
    }

    /// Stops keeping the lock and takes it back from the keeper.
    async fn stop(&mut self) -> Option<Lock> {
        self.ticket.take()?.take_back().await
    }
}

impl Drop for KeptLock {
    fn drop(&mut self) {
        // The keeper lets go of the lock and drops it, which releases it in the background.
        // Nothing here waits.
        if let Some(ticket) = self.ticket.take() {
            ticket.drop_lock();
        }
    }
}
