//! How a candidate campaigns in an election: [`Candidacy`].

use std::time::Duration;

use crate::config::KeepAlive;
use crate::error::ConfigError;

/// The longest identity accepted, in bytes.
const MAX_IDENTITY: usize = 1024;

/// How a candidate campaigns: the identity it shows to observers, how its leadership is
/// kept, and how often it tries again while another leads.
///
/// ```
/// use std::time::Duration;
/// let candidacy = quorumlock::Candidacy::new()
///     .identity("scheduler@host-a")
///     .keep(quorumlock::KeepAlive::new().margin(Duration::from_secs(2)));
/// ```
#[derive(Debug, Clone, PartialEq)]
#[must_use]
pub struct Candidacy {
    identity: Option<String>,
    pub(crate) keep: KeepAlive,
    pub(crate) retry_delay: Duration,
    pub(crate) retry_jitter: Duration,
}

impl Default for Candidacy {
    fn default() -> Self {
        Candidacy {
            identity: None,
            keep: KeepAlive::new(),
            retry_delay: Duration::from_millis(100),
            retry_jitter: Duration::from_millis(100),
        }
    }
}

impl Candidacy {
    /// The defaults: the identity `PID@HOST`, [`KeepAlive::new`], another attempt 100 ms +
    /// up to 100 ms after a refusal (or at once when the leader resigns).
    pub fn new() -> Self {
        Self::default()
    }

    /// The identity observers see while this candidate leads (1 to 1024 bytes). Defaults
    /// to `PID@HOST`.
    pub fn identity(mut self, identity: impl Into<String>) -> Self {
        self.identity = Some(identity.into());
        self
    }

    /// How the leadership's lock is kept; its margin is how long before the lock's validity
    /// ends the leader is told that it lost. Defaults to [`KeepAlive::new`].
    pub fn keep(mut self, keep: KeepAlive) -> Self {
        self.keep = keep;
        self
    }

    /// The pause between two attempts while another candidate leads: `delay` plus up to
    /// `jitter`. A leader that resigns wakes the waiting candidates at once (its release is
    /// announced on every node); one that dies is followed within the ttl plus one pause.
    /// Defaults to 100 ms + up to 100 ms.
    pub fn retry_delay(mut self, delay: Duration, jitter: Duration) -> Self {
        self.retry_delay = delay;
        self.retry_jitter = jitter;
        self
    }

    pub(crate) fn identity_or_default(&self) -> Result<String, ConfigError> {
        let identity = self.identity.clone().unwrap_or_else(default_identity);
        if identity.is_empty() || identity.len() > MAX_IDENTITY {
            return Err(ConfigError::InvalidIdentity(format!(
                "it must be 1 to {MAX_IDENTITY} bytes long, got {}",
                identity.len()
            )));
        }
        Ok(identity)
    }
}

/// `PID@HOST`, or `PID` where the host name cannot be read.
fn default_identity() -> String {
    let pid = std::process::id();
    match std::fs::read_to_string("/proc/sys/kernel/hostname") {
        Ok(host) if !host.trim().is_empty() => format!("{pid}@{}", host.trim()),
        _ => pid.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_are_checked() {
        assert!(Candidacy::new().identity("").identity_or_default().is_err());
        let long = "x".repeat(MAX_IDENTITY + 1);
        assert!(Candidacy::new()
            .identity(long)
            .identity_or_default()
            .is_err());
        assert!(!Candidacy::new()
            .identity_or_default()
            .expect("default")
            .is_empty());
    }
}
