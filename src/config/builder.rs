//! Configuration: the builder, its validation, node URLs, retry policy and environment.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use crate::algo::keys;
use crate::algo::quorum::drift;
use crate::algo::schedule::{self, RetryLimit};
use crate::config::given::{Given, Source};
use crate::config::tls::{Tls, TlsFiles};
pub(crate) use crate::config::url::NodeUrl;
use crate::config::url::{redact, GivenUrl};
use crate::error::ConfigError;
use crate::report::Finding;

use crate::error::MAX_NODES;

/// Redis keeps expiries in signed 64-bit milliseconds; we stay far below that. Timeouts
/// have the same bound, so that deadlines computed from them never overflow.
const MAX_TTL: Duration = Duration::from_secs(365 * 24 * 3600);

/// What a deadline too far to be represented becomes: later than any process lives.
pub(crate) const FAR_FUTURE: Duration = Duration::from_secs(30 * 365 * 24 * 3600);

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
        Retry {
            limit: RetryLimit::Attempts(attempts),
            delay: Duration::from_millis(100),
            jitter: Duration::from_millis(100),
        }
    }

    /// Keep attempting until `total` has passed since the call began; no attempt starts
    /// after that. The first attempt is always made. Zero is rejected (use [`Retry::none`]).
    pub const fn within(total: Duration) -> Retry {
        Retry {
            limit: RetryLimit::Within(total),
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

/// A validated configuration: what [`RedLockBuilder::build`] runs with.
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
    /// Whether [`build`](RedLockBuilder::build) prints the warning about an unbounded RESP
    /// decoder on stderr ([`RedLockBuilder::decoder_warning`]).
    pub fn decoder_warning(&self) -> bool {
        self.decoder_warning
    }

    /// What is fragile about this client, none of it refused by
    /// [`validate`](RedLockBuilder::validate): its settings (fewer than three nodes, an even
    /// number of nodes, a node timeout large against the validity of a lock of the ttl:
    /// notes) and its build (a RESP decoder that does not bound nesting, see
    /// [`decoder_is_bounded`](crate::decoder_is_bounded): unsafe, with the `[patch]` lines
    /// that fix it). [`build`](RedLockBuilder::build) logs each one as a `tracing` warning,
    /// and prints the decoder's on stderr too, once per process, unless
    /// [`decoder_warning`](RedLockBuilder::decoder_warning) is off; `quorumlock doctor`
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

    /// Says what [`findings`](Self::findings) found, when a client is built: each one as a
    /// `tracing` warning, and the unbounded decoder's on stderr as well (once per process,
    /// unless [`decoder_warning`](Self::decoder_warning) is off), since a new application
    /// often has no `tracing` subscriber and would see nothing.
    pub(crate) fn announce_findings(&self) {
        for finding in self.findings() {
            tracing::warn!(severity = %finding.severity, "{}", finding.message);
        }
        if self.decoder_warning {
            let bounded = crate::report::decoder::decoder_is_bounded();
            if let Some(finding) = crate::report::decoder::finding(bounded) {
                crate::report::decoder::print_once(&finding);
            }
        }
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

/// The environment variables read by [`RedLockBuilder::from_env`].
pub const ENV_VARS: [&str; 17] = [
    "QUORUMLOCK_NODES",
    "QUORUMLOCK_TTL",
    "QUORUMLOCK_DRIFT_FACTOR",
    "QUORUMLOCK_NODE_TIMEOUT",
    "QUORUMLOCK_CONNECT_TIMEOUT",
    "QUORUMLOCK_RETRY_ATTEMPTS",
    "QUORUMLOCK_RETRY_WITHIN",
    "QUORUMLOCK_RETRY_DELAY",
    "QUORUMLOCK_RETRY_JITTER",
    "QUORUMLOCK_KEY_PREFIX",
    "QUORUMLOCK_FENCING",
    "QUORUMLOCK_QUARANTINE",
    "QUORUMLOCK_MAX_TTL",
    "QUORUMLOCK_TLS_CA_FILE",
    "QUORUMLOCK_TLS_CERT_FILE",
    "QUORUMLOCK_TLS_KEY_FILE",
    "QUORUMLOCK_DECODER_WARNING",
];

impl RedLockBuilder {
    /// A builder with the defaults and no nodes.
    pub fn new() -> Self {
        Self::default()
    }

    /// A builder from `QUORUMLOCK_*` environment variables (unset ones keep the defaults):
    ///
    /// | variable | meaning | example |
    /// |---|---|---|
    /// | `QUORUMLOCK_NODES` | comma-separated node URLs | `redis://a:6379,redis://b:6379,redis://c:6379` |
    /// | `QUORUMLOCK_TTL` | default ttl | `10s` |
    /// | `QUORUMLOCK_DRIFT_FACTOR` | clock-drift factor | `0.01` |
    /// | `QUORUMLOCK_NODE_TIMEOUT` | per-node command timeout | `100ms` |
    /// | `QUORUMLOCK_CONNECT_TIMEOUT` | per-node connect timeout | `1s` |
    /// | `QUORUMLOCK_RETRY_ATTEMPTS` | attempts in all | `3` |
    /// | `QUORUMLOCK_RETRY_WITHIN` | keep trying this long (instead of a count) | `5s` |
    /// | `QUORUMLOCK_RETRY_DELAY` | fixed pause between attempts | `100ms` |
    /// | `QUORUMLOCK_RETRY_JITTER` | random extra pause, up to | `100ms` |
    /// | `QUORUMLOCK_KEY_PREFIX` | prefix for every Redis key | `locks:` |
    /// | `QUORUMLOCK_FENCING` | fencing tokens on or off | `true`, `false` |
    /// | `QUORUMLOCK_QUARANTINE` | quarantine of restarted nodes on or off | `true`, `false` |
    /// | `QUORUMLOCK_MAX_TTL` | the longest ttl of any lock or extension | `1m` |
    /// | `QUORUMLOCK_TLS_CA_FILE` | PEM CA bundle trusted for `rediss://` nodes, besides the system's | `/etc/redis/ca.pem` |
    /// | `QUORUMLOCK_TLS_CERT_FILE` | PEM client certificate (chain) for `rediss://` nodes | `/etc/redis/client.pem` |
    /// | `QUORUMLOCK_TLS_KEY_FILE` | its PEM private key | `/etc/redis/client-key.pem` |
    /// | `QUORUMLOCK_DECODER_WARNING` | the stderr warning about an unbounded RESP decoder on or off | `true`, `false` |
    ///
    /// Durations are [humantime](https://docs.rs/humantime) strings: `250ms`, `10s`, `2m`.
    ///
    /// # Errors
    /// [`ConfigError::Env`] naming the variable that does not parse or is not valid UTF-8
    /// (its value is not shown then). The values themselves are checked by
    /// [`build`](Self::build).
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_os_vars(|name| std::env::var_os(name))
    }

    /// Like [`from_vars`](Self::from_vars), from values that may not be text, as the
    /// environment's: one that is not valid UTF-8 is an error naming its variable, not an
    /// unset variable.
    pub(crate) fn from_os_vars(
        lookup: impl Fn(&str) -> Option<OsString>,
    ) -> Result<Self, ConfigError> {
        let mut values = Vec::new();
        for var in ENV_VARS {
            if let Some(value) = lookup(var) {
                let value = value.into_string().map_err(|_| not_utf8(var))?;
                values.push((var, value));
            }
        }
        Self::from_vars(|name| {
            values
                .iter()
                .find(|(var, _)| *var == name)
                .map(|(_, value)| value.clone())
        })
    }

    /// Like [`from_env`](Self::from_env), reading variables through `lookup` (for tests and
    /// for configuration held elsewhere).
    ///
    /// # Errors
    /// As [`from_env`](Self::from_env).
    pub fn from_vars(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let mut b = RedLockBuilder::default();
        let [nodes, ttl, drift, node_to, conn_to, attempts, within, delay, jitter, prefix, fencing, quarantine, max_ttl, ca, cert, key, decoder_warning] =
            ENV_VARS;
        if let Some(v) = lookup(nodes) {
            b.nodes = split_nodes(&v)
                .into_iter()
                .map(|url| Given::Url(GivenUrl(url)))
                .collect();
        }
        if let Some(d) = env_duration(&lookup, ttl)? {
            b.ttl = d;
        }
        if let Some(v) = lookup(drift) {
            b.drift_factor = v
                .trim()
                .parse()
                .map_err(|e: std::num::ParseFloatError| env_error(drift, &v, e.to_string()))?;
        }
        if let Some(d) = env_duration(&lookup, node_to)? {
            b.node_timeout = d;
        }
        if let Some(d) = env_duration(&lookup, conn_to)? {
            b.connect_timeout = d;
        }
        let mut retry = b.retry;
        if let Some(v) = lookup(attempts) {
            let n = v
                .trim()
                .parse()
                .map_err(|e: std::num::ParseIntError| env_error(attempts, &v, e.to_string()))?;
            retry.limit = RetryLimit::Attempts(n);
        }
        if let Some(d) = env_duration(&lookup, within)? {
            if lookup(attempts).is_some() {
                return Err(env_error(
                    within,
                    &humantime::format_duration(d).to_string(),
                    format!("set either {attempts} or {within}, not both"),
                ));
            }
            retry.limit = RetryLimit::Within(d);
        }
        if let Some(d) = env_duration(&lookup, delay)? {
            retry.delay = d;
        }
        if let Some(d) = env_duration(&lookup, jitter)? {
            retry.jitter = d;
        }
        b.retry = retry;
        if let Some(v) = lookup(prefix) {
            b.key_prefix = v;
        }
        if let Some(v) = lookup(fencing) {
            b.fencing = env_bool(fencing, &v)?;
        }
        if let Some(v) = lookup(quarantine) {
            b.quarantine = env_bool(quarantine, &v)?;
        }
        if let Some(d) = env_duration(&lookup, max_ttl)? {
            b.max_ttl = Some(d);
        }
        if let Some(v) = lookup(decoder_warning) {
            b.decoder_warning = env_bool(decoder_warning, &v)?;
        }
        let path = |var| lookup(var).filter(|v| !v.is_empty()).map(PathBuf::from);
        b.tls = TlsFiles {
            ca: path(ca),
            cert: path(cert),
            key: path(key),
        };
        Ok(b)
    }

    /// Adds one node URL.
    pub fn node(mut self, url: impl Into<String>) -> Self {
        self.nodes.push(Given::Url(GivenUrl(url.into())));
        self
    }

    /// Adds node URLs: `redis://[[user]:password@]host[:port][/db]`, or `rediss://` for TLS.
    /// Each must be a different, independent Redis master.
    ///
    /// [`build`](Self::build) refuses two URLs that name one server as far as the URLs show
    /// ([`ConfigError::DuplicateNode`]): the same host and port, one address spelled two
    /// ways, or `localhost` with `127.0.0.1` or `[::1]` on one port. It resolves no names:
    /// a host name and its address, or `127.0.0.1` and `[::1]` (which can be two servers),
    /// are refused only by [`connect`](Self::connect), which compares the servers' run_ids.
    ///
    /// With a password and no user name (`redis://:password@host`) the client
    /// authenticates as the `default` user; with both, as that ACL user. A user name
    /// without a password (`redis://app@host`) is refused by [`build`](Self::build) with
    /// [`ConfigError::UserWithoutPassword`]: the client would not authenticate at all (the
    /// connection would quietly run as `default`), and redis-cli reads the same URL as a
    /// password alone.
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
    /// What quorumlock still does and owns:
    /// - every command it sends carries its own options: the
    ///   [`node_timeout`](Self::node_timeout), and no re-send after a reconnect (a replayed
    ///   `SET NX` would report our own lock as taken), whatever the client's defaults;
    /// - each (re)connection is checked before the node's votes count, as for any node
    ///   (`INFO`, the ACL probe, the quarantine of a restarted server);
    /// - its subscriber connection for release messages (opened the first time a caller
    ///   waits for a lock), made from the client's configuration and closed with the
    ///   [`RedLock`](crate::RedLock).
    ///
    /// The connection is shared: the application's commands and the lock's are pipelined
    /// on it in the order they are sent, so a slow command of the application (a large
    /// `KEYS`, a blocking `BLPOP`) delays the lock's commands to that node, which may then
    /// fail on the node timeout. Commands that change the connection's state (`SELECT`,
    /// `CLIENT REPLY OFF`, `MULTI` without `EXEC`, `SUBSCRIBE` on a RESP2 client) break the
    /// lock's commands; give the lock its own client (or a
    /// [`fred_config`](Self::fred_config)) if the application does any of that.
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
    /// the application already has them): quorumlock builds its own client from it, as it
    /// would from a URL, with its own connection settings (timeouts, reconnection forever,
    /// no re-send after a reconnect) and connects it in the background. The configuration's
    /// `fail_fast` is ignored (a node may be down at start). The TLS settings of this
    /// builder ([`tls_ca_file`](Self::tls_ca_file),
    /// [`tls_client_cert`](Self::tls_client_cert)) apply to URLs only: a configuration's TLS
    /// is its own.
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
    /// ([`ConfigError::NodeTimeoutOutlastsLocks`]): a round decided by an answer that needed
    /// the whole timeout would then have no validity left for any lock the client may take,
    /// so the timeout could never let a slow node count, only cost its wait. `ttl(50ms)` with
    /// the default 100 ms, or `node_timeout(10s)` with the default ttl, are refused. Measured
    /// against `max_ttl` rather than the ttl because the timeout serves every lock up to it
    /// ([`RedLock::lock_with`](crate::RedLock::lock_with), [`Lock::extend_for`](crate::Lock::extend_for)) and the
    /// releases, whose late answers still clean up.
    ///
    /// Accepted with a warning ([`Config::findings`], logged by [`build`](Self::build)): a
    /// timeout over a tenth of the validity of a lock of the [`ttl`](Self::ttl) (each round
    /// that waits for a slow node loses that share of the lock's life), and over half of it
    /// (a round that waits it out leaves the holder less than it took, and a kept lock,
    /// extended when half its ttl is left and signalled lost a tenth before the end, is lost
    /// to one slow node). The same warnings name fewer than three nodes (no node may fail)
    /// and an even number of nodes (no more tolerance than one node fewer). docs/design.md,
    /// section 6.1, gives the argument.
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
    /// whose lock has expired. Costs nothing until a token is asked for; the first call on a
    /// lock records it on a majority (two parallel round trips for the client's first token,
    /// then one, the acquisitions reading the counters from then on). Keeps one small counter
    /// key per resource on every node (`quorumlock:fence:` + the lock's key, without expiry).
    /// Defaults to on.
    pub fn fencing(mut self, on: bool) -> Self {
        self.fencing = on;
        self
    }

    /// Whether a node that may have lost data is quarantined: one whose `quorumlock:node`
    /// marker is missing or was written by another server process (a restart, a flush, a
    /// failover), whatever its persistence settings, or that is younger than
    /// [`max_ttl`](Self::max_ttl). Its votes do not count until `max_ttl` has passed since
    /// it may have lost data (design 2.6a). This is the delayed-restart rule of the Redlock
    /// algorithm, enforced by the client: a node that came back empty could otherwise grant a
    /// lock that another client still holds. It costs availability (a restarted node is out
    /// for up to `max_ttl`), never safety. Defaults to on; turn it off only when restarts are
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
        Ttl::new(max_ttl, self.drift_factor)?;
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
        crate::config::checks::check_node_timeout(
            self.node_timeout,
            &Ttl::new(max_ttl, self.drift_factor)?,
        )?;
        self.retry.validate()?;
        // TLS settings are ours for URLs only: a fred configuration or client has its own.
        let urls: Vec<NodeUrl> = (nodes.iter().zip(&sources))
            .filter(|(_, source)| matches!(source, Source::Url))
            .map(|(url, _)| url.clone())
            .collect();
        let tls = self.tls.load(&urls)?;
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

fn env_bool(var: &'static str, v: &str) -> Result<bool, ConfigError> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "on" | "yes" => Ok(true),
        "0" | "false" | "off" | "no" => Ok(false),
        _ => Err(env_error(var, v, "expected true or false".into())),
    }
}

fn split_nodes(v: &str) -> Vec<String> {
    v.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

/// The error for a variable whose value is not valid UTF-8 (and is not shown).
pub(crate) fn not_utf8(var: &'static str) -> ConfigError {
    ConfigError::Env {
        var,
        value: String::new(),
        reason: "not valid UTF-8".into(),
    }
}

fn env_error(var: &'static str, value: &str, reason: String) -> ConfigError {
    // A value that may hold credentials (a URL in the wrong variable) is shown by shape.
    let value = if value.contains([':', '@']) {
        redact(value)
    } else {
        value.to_string()
    };
    ConfigError::Env { var, value, reason }
}

fn env_duration(
    lookup: &impl Fn(&str) -> Option<String>,
    var: &'static str,
) -> Result<Option<Duration>, ConfigError> {
    lookup(var)
        .map(|v| humantime::parse_duration(v.trim()).map_err(|e| env_error(var, &v, e.to_string())))
        .transpose()
}

#[cfg(test)]
mod tests {
    use std::os::unix::ffi::OsStringExt;

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

    #[test]
    fn a_variable_that_is_not_utf8_is_an_error_naming_it() {
        let lookup =
            |name: &str| (name == "QUORUMLOCK_TTL").then(|| OsString::from_vec(b"\xff1s".to_vec()));
        let e = RedLockBuilder::from_os_vars(lookup).unwrap_err();
        assert_eq!(e, not_utf8("QUORUMLOCK_TTL"));
        assert_eq!(
            e.to_string(),
            "environment variable QUORUMLOCK_TTL: not valid UTF-8"
        );
        let text = |name: &str| (name == "QUORUMLOCK_TTL").then(|| OsString::from("2s"));
        let b = RedLockBuilder::from_os_vars(text).unwrap();
        assert_eq!(b.ttl, Duration::from_secs(2));
    }
}
