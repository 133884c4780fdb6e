//! The retry policy: how many attempts, how far apart.

use std::time::Duration;

use crate::algo::schedule::{self, RetryLimit};
use crate::error::ConfigError;

/// How many times, and how far apart, a lock is attempted before giving up.
///
/// Between attempts the caller waits `delay` plus a random extra of up to `jitter`, drawn
/// from the thread-local generator (never from the OS generator that makes tokens), so that
/// clients that collided do not collide again.
///
/// ```
/// use std::time::Duration;
/// use quorumlock::Retry;
///
/// let patient = Retry::within(Duration::from_secs(5)).delay(Duration::from_millis(50));
/// let once = Retry::none();
/// # let _ = (patient, once);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    pub(crate) limit: RetryLimit,
    pub(crate) delay: Duration,
    pub(crate) jitter: Duration,
}

impl Retry {
    /// One attempt, no retry.
    pub const fn none() -> Retry {
        Retry::attempts(1)
    }

    /// At most `attempts` attempts in all (the first one included). Zero is rejected.
    pub const fn attempts(attempts: u32) -> Retry {
        Retry::limited(RetryLimit::Attempts(attempts))
    }

    /// Keep attempting until `total` has passed since the call began; no attempt starts
    /// after that. The first attempt is always made. Zero is rejected (use [`Retry::none`]).
    pub const fn within(total: Duration) -> Retry {
        Retry::limited(RetryLimit::Within(total))
    }

    const fn limited(limit: RetryLimit) -> Retry {
        Retry {
            limit,
            delay: Duration::from_millis(100),
            jitter: Duration::from_millis(100),
        }
    }

    /// The fixed part of the pause between attempts. Defaults to 100 ms.
    #[must_use]
    pub const fn delay(mut self, delay: Duration) -> Retry {
        self.delay = delay;
        self
    }

    /// The random part of the pause between attempts: uniform from zero to this. Defaults
    /// to 100 ms.
    #[must_use]
    pub const fn jitter(mut self, jitter: Duration) -> Retry {
        self.jitter = jitter;
        self
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        match self.limit {
            RetryLimit::Attempts(0) => Err(ConfigError::InvalidRetry("zero attempts")),
            RetryLimit::Within(d) if d.is_zero() => Err(ConfigError::InvalidRetry(
                "a zero deadline (use Retry::none() for a single attempt)",
            )),
            _ => Ok(()),
        }
    }

    /// How long a caller may wait in line for its turn (see `engine/waiters.rs`): until the
    /// deadline of [`Retry::within`], or for [`Retry::attempts`] as long as all its pauses
    /// could take ([`schedule::waiting_budget`]).
    pub(crate) fn waiting_budget(&self) -> Duration {
        schedule::waiting_budget(self.limit, self.delay, self.jitter)
    }

    /// The pause before attempt `made + 1` of a call that has run for `elapsed`, with
    /// `jitter` drawn (uniform, at most [`Retry::jitter`]'s), or `None` when no further
    /// attempt may start ([`schedule::next_pause`]).
    pub(crate) fn next_pause(
        &self,
        made: u32,
        elapsed: Duration,
        jitter: Duration,
    ) -> Option<Duration> {
        let pause = self.delay.saturating_add(jitter.min(self.jitter));
        schedule::next_pause(self.limit, made, elapsed, pause)
    }
}

/// Three attempts, 100 ms + up to 100 ms apart.
impl Default for Retry {
    fn default() -> Retry {
        Retry::attempts(3)
    }
}
