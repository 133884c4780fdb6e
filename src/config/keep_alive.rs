//! Keep-alive settings: [`KeepAlive`], and the `KeepSchedule` (`algo/schedule.rs`) it makes once checked against a ttl.

use std::time::Duration;

use crate::algo::schedule::KeepSchedule;
use crate::error::ConfigError;

/// How a [`KeptLock`](crate::KeptLock) is kept: when extensions start, how early loss is signalled, and for
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
    /// at most `limit` after [`Lock::keep_alive`](crate::Lock::keep_alive) and loss is signalled (with
    /// [`LostReason::HoldLimit`](crate::LostReason::HoldLimit)) a margin before. Defaults to no limit.
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
    pub(crate) fn check(&self, ttl: Duration) -> Result<KeepSchedule, ConfigError> {
        let invalid = |reason: String| Err(ConfigError::InvalidKeepAlive(reason));
        let fraction = self.extend_when_left;
        if !(fraction.is_finite() && fraction > 0.0 && fraction < 1.0) {
            return invalid(format!(
                "extend_when_left must be between 0.0 and 1.0 (exclusive), got {fraction}"
            ));
        }
        let extend_at = ttl.mul_f64(fraction);
        let margin = self.margin.unwrap_or_else(|| ttl / 10);
        if margin.is_zero() {
            return invalid("the margin must be greater than zero".into());
        }
        if margin >= extend_at {
            return invalid(format!(
                "the margin ({}) must be shorter than the validity left when extensions start \
                 ({} of the {} ttl)",
                humantime::format_duration(margin),
                humantime::format_duration(extend_at),
                humantime::format_duration(ttl),
            ));
        }
        if self.max_hold.is_some_and(|limit| limit.is_zero()) {
            return invalid("the hold limit must be greater than zero".into());
        }
        if self.retry_delay.is_zero() {
            return invalid("the retry delay must be greater than zero".into());
        }
        Ok(KeepSchedule {
            extend_at,
            margin,
            max_hold: self.max_hold,
            retry_delay: self.retry_delay,
        })
    }
}
