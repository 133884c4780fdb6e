//! The validated settings a client runs with ([`Config`]), and a checked ttl ([`Ttl`]).

use std::time::Duration;

use crate::algo::keys;
use crate::algo::quorum::drift;
use crate::config::given::Source;
use crate::config::tls::Tls;
use crate::config::url::NodeUrl;
use crate::config::{Retry, MAX_TTL};
use crate::error::ConfigError;
use crate::report::Finding;

/// A validated configuration: what [`RedLockBuilder::build`](crate::RedLockBuilder::build) runs with.
#[derive(Debug, Clone)]
pub struct Config {
    pub(crate) nodes: Vec<NodeUrl>,
    /// Where each node's connection comes from (a URL, a fred configuration or client).
    pub(crate) sources: Vec<Source>,
    pub(crate) ttl: Duration,
    pub(crate) drift_factor: f64,
    pub(crate) node_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) retry: Retry,
    pub(crate) key_prefix: String,
    pub(crate) fencing: bool,
    pub(crate) quarantine: bool,
    pub(crate) max_ttl: Duration,
    pub(crate) decoder_warning: bool,
    /// Set when a node is `rediss://` or TLS files are given.
    pub(crate) tls: Option<Tls>,
    /// Set only by the test kit's deliberately broken client.
    pub(crate) votes_needed: Option<usize>,
}

impl Config {
    /// The nodes, in the order given.
    pub fn nodes(&self) -> &[NodeUrl] {
        &self.nodes
    }
    /// The default ttl of a lock.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }
    /// The clock-drift factor.
    pub fn drift_factor(&self) -> f64 {
        self.drift_factor
    }
    /// How long one node may take to answer one command.
    pub fn node_timeout(&self) -> Duration {
        self.node_timeout
    }
    /// How long connecting (and TLS, AUTH, SELECT) to one node may take.
    pub fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }
    /// The retry policy of [`RedLock::lock`](crate::RedLock::lock).
    pub fn retry(&self) -> Retry {
        self.retry
    }
    /// The prefix put in front of every resource name to make its Redis key.
    pub fn key_prefix(&self) -> &str {
        &self.key_prefix
    }
    /// Whether locks hand out fencing tokens when asked.
    pub fn fencing(&self) -> bool {
        self.fencing
    }
    /// The Redis key of `resource`'s lock: the [key prefix](Self::key_prefix) and the name.
    pub fn lock_key(&self, resource: &str) -> String {
        keys::lock_key(&self.key_prefix, resource)
    }
    /// The key of `resource`'s fencing counter on each node (`quorumlock:fence:` + the
    /// lock's key): the greatest fencing token recorded there.
    pub fn fencing_key(&self, resource: &str) -> String {
        keys::fence_key(&self.lock_key(resource))
    }
    /// Whether `key` is one quorumlock keeps for itself on the nodes (fencing counters,
    /// election identity records, a node's marker and largest counter, permission probes),
    /// never a lock's key: what an operator's listing of the locks leaves out.
    pub fn is_internal_key(key: &str) -> bool {
        keys::is_internal(key)
    }
    /// Whether restarted nodes are quarantined.
    pub fn quarantine(&self) -> bool {
        self.quarantine
    }
    /// The longest ttl a lock or an extension may have.
    pub fn max_ttl(&self) -> Duration {
        self.max_ttl
    }
    /// Whether [`build`](crate::RedLockBuilder::build) prints the warning about an unbounded RESP
    /// decoder on stderr ([`RedLockBuilder::decoder_warning`](crate::RedLockBuilder::decoder_warning)).
    pub fn decoder_warning(&self) -> bool {
        self.decoder_warning
    }

    /// What is fragile about this client, none of it refused by
    /// [`validate`](crate::RedLockBuilder::validate): its settings (fewer than three nodes, an even
    /// number of nodes, a node timeout large against the validity of a lock of the ttl:
    /// notes) and its build (a RESP decoder that does not bound nesting, see
    /// [`decoder_is_bounded`](crate::decoder_is_bounded): unsafe, with the `[patch]` lines
    /// that fix it). [`build`](crate::RedLockBuilder::build) logs each one as a `tracing` warning,
    /// and prints the decoder's on stderr too, once per process, unless
    /// [`decoder_warning`](crate::RedLockBuilder::decoder_warning) is off; `quorumlock doctor`
    /// prints them under `client`, and names the decoder in its verdict.
    pub fn findings(&self) -> Vec<Finding> {
        self.findings_with(crate::report::decoder::decoder_is_bounded())
    }

    /// [`findings`](Self::findings) for a build whose decoder is `bounded` or not.
    pub(crate) fn findings_with(&self, bounded: bool) -> Vec<Finding> {
        let mut found: Vec<Finding> = crate::report::decoder::finding(bounded)
            .into_iter()
            .collect();
        // The ttl was checked by `validate`.
        if let Ok(ttl) = Ttl::new(self.ttl, self.drift_factor) {
            found.extend(crate::config::checks::warnings(
                self.nodes.len(),
                &ttl,
                self.node_timeout,
            ));
        }
        found
    }

    /// Checks a ttl for use with this configuration.
    pub(crate) fn check_ttl(&self, ttl: Duration) -> Result<Ttl, ConfigError> {
        let checked = Ttl::new(ttl, self.drift_factor)?;
        if ttl > self.max_ttl {
            return Err(ConfigError::TtlAboveMax {
                ttl,
                max: self.max_ttl,
            });
        }
        Ok(checked)
    }
}

/// A checked ttl: as Redis applies it (whole milliseconds, rounded down), its `PX`
/// argument, and its drift allowance, which is always smaller than it. The one place where
/// a ttl becomes milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ttl {
    pub(crate) ttl: Duration,
    pub(crate) px: i64,
    pub(crate) drift: Duration,
    /// `ttl - drift`, strictly positive.
    pub(crate) usable: Duration,
}

impl Ttl {
    pub(crate) fn new(ttl: Duration, drift_factor: f64) -> Result<Ttl, ConfigError> {
        if ttl.is_zero() {
            return Err(ConfigError::ZeroTtl);
        }
        if ttl > MAX_TTL {
            return Err(ConfigError::TtlTooLarge { ttl });
        }
        // MAX_TTL keeps the milliseconds far inside i64.
        let px = i64::try_from(ttl.as_millis()).map_err(|_| ConfigError::TtlTooLarge { ttl })?;
        let whole = Duration::from_millis(px.unsigned_abs());
        let drift =
            drift(whole, drift_factor).ok_or(ConfigError::InvalidDriftFactor(drift_factor))?;
        match whole.checked_sub(drift) {
            Some(usable) if !usable.is_zero() => Ok(Ttl {
                ttl: whole,
                px,
                drift,
                usable,
            }),
            _ => Err(ConfigError::TtlNotAboveDrift { ttl, drift }),
        }
    }
}
