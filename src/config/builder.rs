//! Configuration: the builder, its validation, node URLs, retry policy and environment.

use std::path::PathBuf;
use std::time::Duration;

use crate::config::given::{Given, Source};
use crate::config::tls::TlsFiles;
use crate::config::url::GivenUrl;
pub(crate) use crate::config::url::NodeUrl;
use crate::config::{Config, Retry, Ttl};
use crate::error::{ConfigError, MAX_NODES};

/// Redis keeps expiries in signed 64-bit milliseconds; we stay far below that. Timeouts
/// have the same bound, so that deadlines computed from them never overflow.
pub(crate) const MAX_TTL: Duration = Duration::from_secs(365 * 24 * 3600);

/// What a deadline too far to be represented becomes: later than any process lives.
pub(crate) const FAR_FUTURE: Duration = Duration::from_secs(30 * 365 * 24 * 3600);

/// Builds a [`RedLock`](crate::RedLock). Setters only record values; [`build`](Self::build) checks them all.
///
/// Nodes are URLs, or fred clients and configurations the application already has
/// ([`fred_client`](Self::fred_client), [`fred_config`](Self::fred_config)). With the `serde`
/// feature a builder also deserializes from a configuration file (`ConfigFile` is its file
/// form).
///
/// ```no_run
/// # async fn f() -> Result<(), quorumlock::Error> {
/// use std::time::Duration;
/// use quorumlock::{RedLock, Retry};
///
/// let redlock = RedLock::builder()
///     .nodes(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"])
///     .ttl(Duration::from_secs(30))
///     .retry(Retry::within(Duration::from_secs(2)))
///     .build()?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing by itself; call .build()"]
// A configuration file's table (feature `serde`): see `ConfigFile`.
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize),
    serde(try_from = "crate::config::file::ConfigFile")
)]
pub struct RedLockBuilder {
    /// As given; their `Debug` hides passwords.
    pub(crate) nodes: Vec<Given>,
    pub(crate) ttl: Duration,
    pub(crate) drift_factor: f64,
    pub(crate) node_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) retry: Retry,
    pub(crate) key_prefix: String,
    pub(crate) fencing: bool,
    pub(crate) quarantine: bool,
    pub(crate) max_ttl: Option<Duration>,
    pub(crate) decoder_warning: bool,
    pub(crate) tls: TlsFiles,
    pub(crate) votes_needed: Option<usize>,
}

impl Default for RedLockBuilder {
    fn default() -> Self {
        RedLockBuilder {
            nodes: Vec::new(),
            ttl: Duration::from_secs(10),
            drift_factor: 0.01,
            node_timeout: Duration::from_millis(100),
            connect_timeout: Duration::from_secs(1),
            retry: Retry::default(),
            key_prefix: String::new(),
            fencing: true,
            quarantine: true,
            max_ttl: None,
            decoder_warning: true,
            tls: TlsFiles::default(),
            votes_needed: None,
        }
    }
}

impl RedLockBuilder {
    /// A builder with the defaults and no nodes.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one node URL.
    pub fn node(self, url: impl Into<String>) -> Self {
        self.nodes([url])
    }

    /// Adds node URLs: `redis://[[user]:password@]host[:port][/db]`, or `rediss://` for TLS.
    /// Each must be a different, independent Redis master.
    ///
    /// [`build`](Self::build) refuses two URLs that name one server as far as the URLs show
    /// ([`ConfigError::DuplicateNode`]), and [`connect`](Self::connect) two that reach one
    /// server ([`ConfigError::SameServer`], by the servers' run_ids).
    ///
    /// With a password and no user name (`redis://:password@host`) the client
    /// authenticates as the `default` user; with both, as that ACL user. A user name
    /// without a password (`redis://app@host`) is refused by [`build`](Self::build):
    /// [`ConfigError::UserWithoutPassword`] says why.
    pub fn nodes<I, S>(mut self, urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.nodes
            .extend(urls.into_iter().map(|url| Given::Url(GivenUrl(url.into()))));
        self
    }

    /// Adds a node the application already has a client for: quorumlock sends its lock
    /// commands through this client (a clone of it: fred clients share their connection).
    ///
    /// What stays the application's: the connection. quorumlock never connects the client
    /// nor quits it: call [`init`](fred::interfaces::ClientLike::init) (or `connect`)
    /// yourself, before or after [`build`](Self::build) (the node counts as down until
    /// then), and `quit` it when you are done with it. Dropping the [`RedLock`](crate::RedLock) leaves the
    /// client connected and usable; it only removes the event handlers quorumlock
    /// registered on it. The client's own settings (address, credentials, TLS, RESP
    /// version, reconnect policy) are used as they are.
    ///
    /// What quorumlock still owns: the options of every command it sends (the
    /// [`node_timeout`](Self::node_timeout), no re-send after a reconnect), the check of each
    /// (re)connection, and its subscriber for release messages. The connection is shared: a
    /// slow command of the application delays the lock's commands, and one that changes the
    /// connection's state (`SELECT`, ...) breaks them; give the lock its own client (or a
    /// [`fred_config`](Self::fred_config)) then. docs/design.md, section 4.0a, lists each
    /// concern and who owns it.
    ///
    /// [`build`](Self::build) refuses ([`ConfigError::UnsuitableNode`]) a client of a
    /// cluster or sentinel deployment (not independent masters), and one without a
    /// reconnect policy (one dropped connection would fail the node for good). Its address
    /// counts for [`ConfigError::DuplicateNode`] like a URL's.
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
    /// use quorumlock::fred::prelude::*;
    /// use quorumlock::RedLock;
    ///
    /// let mut clients = Vec::new();
    /// for url in ["redis://10.0.0.1", "redis://10.0.0.2", "redis://10.0.0.3"] {
    ///     let client = Builder::from_config(Config::from_url(url)?)
    ///         .set_policy(ReconnectPolicy::new_exponential(0, 50, 2_000, 2))
    ///         .build()?;
    ///     client.init().await?;
    ///     clients.push(client);
    /// }
    /// let mut builder = RedLock::builder();
    /// for client in &clients {
    ///     builder = builder.fred_client(client.clone());
    /// }
    /// let redlock = builder.build()?;
    /// # Ok(()) }
    /// ```
    pub fn fred_client(mut self, client: fred::clients::Client) -> Self {
        self.nodes.push(Given::Client(client));
        self
    }

    /// Adds a node from a fred configuration (address, credentials, TLS, RESP version, as
    /// the application already has them): quorumlock builds, owns and connects its own client
    /// from it, as from a URL (docs/design.md, section 4.0a, says what it takes from the
    /// configuration). The TLS settings of this builder ([`tls_ca_file`](Self::tls_ca_file),
    /// [`tls_client_cert`](Self::tls_client_cert)) apply to URLs only.
    ///
    /// [`build`](Self::build) refuses a cluster or sentinel configuration with
    /// [`ConfigError::UnsuitableNode`].
    pub fn fred_config(mut self, config: fred::types::config::Config) -> Self {
        self.nodes.push(Given::Config(Box::new(config)));
        self
    }

    /// The ttl of [`RedLock::lock`](crate::RedLock::lock) and [`RedLock::try_lock`](crate::RedLock::try_lock): how long the keys live
    /// unless extended. Defaults to 10 seconds.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// The clock-drift factor: the drift allowance is `ttl × factor + 2 ms`, subtracted from
    /// every lock's validity. Defaults to 0.01.
    pub fn drift_factor(mut self, factor: f64) -> Self {
        self.drift_factor = factor;
        self
    }

    /// How long one node may take to answer one command before it counts as failed.
    /// Defaults to 100 milliseconds.
    ///
    /// The Redis documentation suggests 5-50 ms for a 10 s ttl. Because an attempt is decided
    /// as soon as a majority has answered, this timeout only costs time when a node whose
    /// vote is needed is slow; 100 ms is 1% of the default ttl and avoids the spurious
    /// timeouts that 50 ms produced on busy hosts. At most a year.
    ///
    /// [`build`](Self::build) refuses a timeout at least as long as the validity of the
    /// longest lock, [`max_ttl`](Self::max_ttl) less its drift allowance
    /// ([`ConfigError::NodeTimeoutOutlastsLocks`]: `ttl(50ms)` with the default 100 ms, or
    /// `node_timeout(10s)` with the default ttl). It accepts with a warning
    /// ([`Config::findings`], logged by [`build`](Self::build)) a timeout over a tenth, or
    /// over half, of the validity of a lock of the [`ttl`](Self::ttl), as it does fewer than
    /// three nodes and an even number of nodes. docs/design.md, section 6.1, gives the
    /// argument for each.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = timeout;
        self
    }

    /// How long connecting to one node (TCP, TLS, AUTH, SELECT) may take before it is
    /// retried. Defaults to 1 second; at most a year.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The retry policy of [`RedLock::lock`](crate::RedLock::lock). Defaults to [`Retry::default`].
    pub fn retry(mut self, retry: Retry) -> Self {
        self.retry = retry;
        self
    }

    /// A prefix for every Redis key (the key is `prefix + resource`). Defaults to none, so
    /// that other Redlock clients locking the same resource name exclude us and we them.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }

    /// Whether locks hand out a fencing token when asked
    /// ([`Lock::fencing_token`](crate::Lock::fencing_token)): a number greater than every
    /// token handed out for the resource before, for storage to reject writes from a holder
    /// whose lock has expired. Costs nothing until a token is asked for (what it costs then:
    /// see [`Lock::fencing_token`](crate::Lock::fencing_token)). Keeps one small counter key
    /// per resource on every node (`quorumlock:fence:` + the lock's key, without expiry).
    /// Defaults to on.
    pub fn fencing(mut self, on: bool) -> Self {
        self.fencing = on;
        self
    }

    /// Whether a node that may have lost data is quarantined: one whose `quorumlock:node`
    /// marker is missing or was written by another server process (a restart, a flush, a
    /// failover), whatever its persistence settings, or that is younger than
    /// [`max_ttl`](Self::max_ttl). Its votes do not count until `max_ttl` has passed since
    /// it may have lost data: the Redlock algorithm's delayed restart, enforced by the client
    /// (docs/design.md, section 2.6a). Defaults to on; turn it off only when restarts are
    /// delayed by other means (a node's fencing counters are then re-seeded at once).
    pub fn quarantine(mut self, on: bool) -> Self {
        self.quarantine = on;
        self
    }

    /// The longest ttl of any lock or extension ([`RedLock::lock_with`](crate::RedLock::lock_with),
    /// [`Lock::extend_for`](crate::Lock::extend_for)); a longer one is refused. A node is
    /// quarantined this long after a restart. Clients sharing nodes should agree on it.
    /// Defaults to the [`ttl`](Self::ttl).
    pub fn max_ttl(mut self, max: Duration) -> Self {
        self.max_ttl = Some(max);
        self
    }

    /// Whether [`build`](Self::build) prints a warning on stderr when this build's RESP decoder
    /// does not bound the nesting of replies
    /// ([`decoder_is_bounded`](crate::decoder_is_bounded) is false: one hostile node can then
    /// abort the process). The warning says which `[patch]` lines fix it; it is printed once
    /// per process, whatever the number of clients, and besides the `tracing` warning and
    /// [`Config::findings`], which stay. Defaults to on: a new application often has no
    /// `tracing` subscriber, and would otherwise not know. Turn it off once the process
    /// reports [`Config::findings`] some other way (or accepts the risk); with a decoder that
    /// is bounded, nothing is printed either way.
    pub fn decoder_warning(mut self, on: bool) -> Self {
        self.decoder_warning = on;
        self
    }

    /// Trusts the CA certificates in this PEM file (one or more `BEGIN CERTIFICATE`
    /// sections) for `rediss://` nodes, besides the system's root certificates (which
    /// honour `SSL_CERT_FILE` and `SSL_CERT_DIR`). For servers whose certificates a private
    /// CA signed. Read and checked by [`build`](Self::build). Defaults to none.
    pub fn tls_ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.tls.ca = Some(path.into());
        self
    }

    /// Presents this client certificate (a PEM chain, leaf first) with its PEM private key
    /// (PKCS#8, PKCS#1 or SEC1) to `rediss://` nodes, for servers that require one
    /// (`tls-auth-clients yes`, Redis's default when TLS is on). Read and checked by
    /// [`build`](Self::build). Defaults to none.
    pub fn tls_client_cert(
        mut self,
        cert_file: impl Into<PathBuf>,
        key_file: impl Into<PathBuf>,
    ) -> Self {
        self.tls.cert = Some(cert_file.into());
        self.tls.key = Some(key_file.into());
        self
    }

    /// **Breaks the lock, for tests only**: an operation succeeds with `votes` yes votes
    /// instead of a majority. The test suite uses it to show that its exclusion checker
    /// catches a client that skips the quorum check.
    #[cfg(feature = "testkit")]
    #[doc(hidden)]
    pub fn testkit_skip_quorum(mut self, votes: usize) -> Self {
        self.votes_needed = Some(votes.max(1));
        self
    }

    /// Checks every setting without connecting to anything, and reads the TLS files (and
    /// the system's root certificates) when a node is `rediss://` or a file is given.
    ///
    /// # Errors
    /// The first problem found, as a [`ConfigError`].
    pub fn validate(&self) -> Result<Config, ConfigError> {
        if self.nodes.is_empty() {
            return Err(ConfigError::NoNodes);
        }
        if self.nodes.len() > MAX_NODES {
            return Err(ConfigError::TooManyNodes(self.nodes.len()));
        }
        let mut nodes: Vec<NodeUrl> = Vec::with_capacity(self.nodes.len());
        let mut sources = Vec::with_capacity(self.nodes.len());
        for (second, given) in self.nodes.iter().enumerate() {
            let (url, source) = given.check(second)?;
            if let Some(first) = nodes.iter().position(|n| n.names_the_same_server_as(&url)) {
                return Err(ConfigError::DuplicateNode {
                    url: url.redacted().to_string(),
                    first,
                    second,
                });
            }
            nodes.push(url);
            sources.push(source);
        }
        if !(self.drift_factor.is_finite() && (0.0..1.0).contains(&self.drift_factor)) {
            return Err(ConfigError::InvalidDriftFactor(self.drift_factor));
        }
        Ttl::new(self.ttl, self.drift_factor)?;
        let max_ttl = self.max_ttl.unwrap_or(self.ttl);
        let longest = Ttl::new(max_ttl, self.drift_factor)?;
        if self.ttl > max_ttl {
            return Err(ConfigError::TtlAboveMax {
                ttl: self.ttl,
                max: max_ttl,
            });
        }
        for (what, timeout) in [
            ("node timeout", self.node_timeout),
            ("connect timeout", self.connect_timeout),
        ] {
            if timeout.is_zero() {
                return Err(ConfigError::ZeroTimeout(what));
            }
            if timeout > MAX_TTL {
                return Err(ConfigError::TimeoutTooLarge {
                    what,
                    timeout,
                    max: MAX_TTL,
                });
            }
        }
        // Against the longest lock: the node timeout serves every lock up to max_ttl.
        crate::config::checks::check_node_timeout(self.node_timeout, &longest)?;
        self.retry.validate()?;
        // TLS settings are ours for URLs only: a fred configuration or client has its own.
        let rediss = (nodes.iter().zip(&sources))
            .any(|(url, source)| matches!(source, Source::Url) && url.tls());
        let tls = self.tls.load(rediss)?;
        Ok(Config {
            nodes,
            sources,
            ttl: self.ttl,
            drift_factor: self.drift_factor,
            node_timeout: self.node_timeout,
            connect_timeout: self.connect_timeout,
            retry: self.retry,
            key_prefix: self.key_prefix.clone(),
            fencing: self.fencing,
            quarantine: self.quarantine,
            max_ttl,
            decoder_warning: self.decoder_warning,
            tls,
            votes_needed: self.votes_needed,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_findings_name_an_unbounded_decoder_and_nothing_for_a_bounded_one() {
        let three = ["redis://a:7001", "redis://b:7002", "redis://c:7003"];
        let config = RedLockBuilder::new().nodes(three).validate().unwrap();
        assert_eq!(config.findings_with(true), Vec::new());
        let unbounded = config.findings_with(false);
        assert_eq!(unbounded.len(), 1, "{unbounded:?}");
        assert_eq!(unbounded[0].severity, crate::Severity::Unsafe);
        assert!(unbounded[0]
            .message
            .contains("[patch.crates-io]\nredis-protocol = "));
        // This repository builds with the patched decoder.
        assert_eq!(config.findings(), Vec::new());
        // Settings notes come beside it.
        let two = RedLockBuilder::new()
            .nodes(three[..2].iter().copied())
            .validate()
            .unwrap();
        let found = two.findings_with(false);
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[1].message.starts_with("2 nodes: no node may fail"));
    }
}
