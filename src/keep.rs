//! Keeping a lock: a background task that extends it before its validity runs out, and a
//! signal that fires, with a margin, before the validity ends if it cannot.

use std::fmt;
use std::future::Future;
use std::time::{Duration, Instant};

use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use crate::error::{ConfigError, Error};
use crate::lock::{Lock, Released};
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
    /// at most `limit` after the acquisition and loss is signalled (with
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
    extend_at: Duration,
    margin: Duration,
    max_hold: Option<Duration>,
    retry_delay: Duration,
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
#[derive(Debug, Clone)]
struct Status {
    /// Never later than the validity the nodes guarantee.
    valid_until: Instant,
    extensions: u64,
    lost: Option<LostReason>,
}

/// A lock kept alive by a background task, made by [`Lock::keep_alive`].
///
/// The task extends the lock before its validity runs out, recomputing the validity from
/// each extension exactly as for an acquisition. If the lock cannot be kept (a majority lost
/// it, or no extension succeeded in time), [`lost`](Self::lost) resolves **before** the
/// validity ends, at least the [margin](KeepAlive::margin) before it, and
/// [`validity`](Self::validity) is zero from then on; the validity it reports is never more
/// than the nodes guarantee.
///
/// Dropping a `KeptLock` stops the task at once (never blocking) and releases the lock in
/// the background; [`release`](Self::release) does the same and waits for the nodes.
#[derive(Debug)]
#[must_use = "a kept lock is released as soon as it is dropped"]
pub struct KeptLock {
    handle: LockHandle,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Lock>>,
}

/// A cheap, cloneable view of a [`KeptLock`]: its resource, fencing token, validity and
/// loss signal. Hand it to the code that does the work; it does not keep the lock by itself.
#[derive(Debug, Clone)]
pub struct LockHandle {
    resource: String,
    token: Token,
    fencing_token: Option<u64>,
    status: watch::Receiver<Status>,
}

impl LockHandle {
    /// The locked resource's name (names joined by commas for several).
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// The acquisition's token, as stored on the nodes.
    pub fn token(&self) -> &Token {
        &self.token
    }

    /// The fencing token, if fencing is on; see [`Lock::fencing_token`].
    pub fn fencing_token(&self) -> Option<u64> {
        self.fencing_token
    }

    /// The instant until which the lock can be relied on, as of the last successful
    /// acquisition or extension; the instant of the loss signal once it is lost.
    pub fn valid_until(&self) -> Instant {
        self.status.borrow().valid_until
    }

    /// The validity left: zero once lost or expired.
    pub fn validity(&self) -> Duration {
        let status = self.status.borrow();
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
        self.status.borrow().lost.clone()
    }

    /// How many extensions have succeeded.
    pub fn extensions(&self) -> u64 {
        self.status.borrow().extensions
    }

    /// Resolves when the lock is lost, before its validity ends (see [`KeptLock`]). Never
    /// resolves while the lock is kept; resolves at once if it was lost already.
    ///
    /// # Cancel safety
    /// Cancel-safe: dropping the future changes nothing.
    pub fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
        let mut status = self.status.clone();
        async move {
            loop {
                if let Some(reason) = status.borrow_and_update().lost.clone() {
                    return reason;
                }
                if status.changed().await.is_err() {
                    // The keeper is gone (the lock was released or dropped): whatever it
                    // published last is final.
                    return status
                        .borrow()
                        .lost
                        .clone()
                        .unwrap_or(LostReason::NotExtended {
                            last_error: Some("the lock was released".into()),
                        });
                }
            }
        }
    }
}

impl Lock {
    /// Keeps the lock alive in a background task until it is released or dropped; see
    /// [`KeptLock`].
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
    ///     _ = async { /* long work, checking handle.fencing_token() with storage */ } => {}
    ///     reason = handle.lost() => eprintln!("lock lost: {reason}; stopping"),
    /// }
    /// kept.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn keep_alive(self, keep: KeepAlive) -> Result<KeptLock, Error> {
        let schedule = keep.check(self.ttl())?;
        let (tx, rx) = watch::channel(Status {
            valid_until: self.valid_until(),
            extensions: 0,
            lost: None,
        });
        let (stop_tx, stop_rx) = oneshot::channel();
        let handle = LockHandle {
            resource: self.resource().to_string(),
            token: self.token().clone(),
            fencing_token: self.fencing_token(),
            status: rx,
        };
        let task = tokio::runtime::Handle::try_current()
            .map_err(|_| ConfigError::NoRuntime)?
            .spawn(keeper(self, schedule, tx, stop_rx));
        Ok(KeptLock {
            handle,
            stop: Some(stop_tx),
            task: Some(task),
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

    /// The fencing token, if fencing is on; see [`Lock::fencing_token`].
    pub fn fencing_token(&self) -> Option<u64> {
        self.handle.fencing_token()
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
                resource: self.handle.resource.clone(),
                reason: LostReason::NotExtended {
                    last_error: Some("the keep-alive task failed".into()),
                },
            }),
        };
        match lost {
            Some(reason) => Err(Error::Lost {
                resource: self.handle.resource.clone(),
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
                tracing::debug!(resource = %self.handle.resource, error = %e, "release after the work failed");
            }
        }
        outcome.map_err(|reason| Error::Lost {
            resource: self.handle.resource.clone(),
            reason,
        })
    }

    /// Stops the keeper and takes the lock back from it.
    async fn stop(&mut self) -> Option<Lock> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let task = self.task.take()?;
        task.await.ok()
    }
}

impl Drop for KeptLock {
    fn drop(&mut self) {
        // Dropping the sender stops the keeper; it drops the lock, which releases it in the
        // background. Nothing here waits.
        self.stop.take();
    }
}

/// The keeper: extends the lock on schedule until stopped, and publishes its validity and
/// its loss. Returns the lock when stopped.
async fn keeper(
    mut lock: Lock,
    schedule: Schedule,
    status: watch::Sender<Status>,
    mut stop: oneshot::Receiver<()>,
) -> Lock {
    let acquired = Instant::now();
    let ttl = lock.ttl();
    let hold_until = schedule.max_hold.map(|limit| acquired + limit);
    let mut last_error: Option<String> = None;
    let mut hold_reached = false;
    let mut next_try = lock.valid_until() - schedule.extend_at.min(lock.validity());
    let reason = loop {
        let lost_at = lock
            .valid_until()
            .checked_sub(schedule.margin)
            .unwrap_or_else(Instant::now);
        if Instant::now() >= lost_at {
            break match schedule.max_hold {
                Some(limit) if hold_reached => LostReason::HoldLimit { limit },
                _ => LostReason::NotExtended {
                    last_error: last_error.take(),
                },
            };
        }
        // Sleep until it is time to extend, or to give up.
        let wake = next_try.min(lost_at);
        tokio::select! {
            _ = &mut stop => return lock,
            _ = tokio::time::sleep_until(wake.into()) => {}
        }
        if hold_reached || Instant::now() < next_try {
            continue; // woke at lost_at: the loop head signals the loss
        }
        // How long to extend for: the ttl, cut down to the hold limit.
        let for_ttl = match hold_until {
            Some(h) => {
                let left = h.saturating_duration_since(Instant::now());
                if left <= schedule.margin * 2 || left <= ttl / 10 {
                    // Too little left to be worth an extension: let the lock run out.
                    hold_reached = true;
                    next_try = lost_at;
                    continue;
                }
                left.min(ttl)
            }
            None => ttl,
        };
        let result = tokio::select! {
            _ = &mut stop => return lock,
            _ = tokio::time::sleep_until(lost_at.into()) => None,
            r = lock.extend_for(for_ttl) => Some(r),
        };
        match result {
            Some(Ok(_)) => {
                last_error = None;
                status.send_modify(|s| {
                    s.valid_until = lock.valid_until();
                    s.extensions += 1;
                });
                let extend_at = schedule.extend_at.min(for_ttl.mul_f64(0.5));
                next_try = lock.valid_until() - extend_at.min(lock.validity());
            }
            Some(Err(Error::NotHeld { held, nodes, .. })) => {
                break LostReason::NotHeld { held, nodes };
            }
            Some(Err(e)) => {
                // No quorum, or too slow: keep the (possibly shorter) validity and try again.
                tracing::debug!(resource = %lock.resource(), error = %e, "extension failed; retrying");
                last_error = Some(e.to_string());
                status.send_modify(|s| s.valid_until = s.valid_until.min(lock.valid_until()));
                next_try = Instant::now() + schedule.retry_delay;
            }
            None => {} // the loop head signals the loss
        }
    };
    tracing::warn!(resource = %lock.resource(), %reason, "lock lost");
    status.send_modify(|s| {
        s.valid_until = s.valid_until.min(Instant::now());
        s.lost = Some(reason);
    });
    // Keep the lock (its keys are still released when it is dropped) until stopped.
    let _ = stop.await;
    lock
}
