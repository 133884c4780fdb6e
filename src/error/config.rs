//! Invalid configuration or arguments ([`ConfigError`]), found before anything is sent.

use std::time::Duration;

use humantime::format_duration;

use super::{MAX_NODES, MAX_PERMITS};

/// Invalid configuration or arguments, found before anything is sent to a node.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// No node URLs were given.
    #[error("no nodes: give at least one node URL (three or five independent masters for failover safety)")]
    NoNodes,
    /// A node URL could not be parsed.
    #[error("invalid node URL `{url}`: {reason}")]
    InvalidUrl {
        /// The URL as given, password hidden.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A node given without a scheme (`127.0.0.1:7701`, `app:pw@host:6379`): it needs
    /// `redis://` (or `rediss://` for TLS) in front.
    #[error("node URL `{url}` has no scheme: write `redis://{url}` (or `rediss://{url}` for TLS)")]
    MissingScheme {
        /// The text given, with anything before an `@` hidden (it holds the credentials).
        url: String,
    },
    /// A URL scheme other than `redis://` or `rediss://`.
    #[error(
        "unsupported scheme{} in `{url}`: use redis:// or rediss://",
        scheme.as_ref().map(|s| format!(" `{s}`")).unwrap_or_default()
    )]
    UnsupportedScheme {
        /// The URL as given, password hidden (and what may be one: see [`NodeUrl`]).
        ///
        /// [`NodeUrl`]: crate::NodeUrl
        url: String,
        /// The scheme found, if it is a known one such as `http` or `redis-cluster`; any
        /// other name is not shown, as it may be a user name or a password that lost its
        /// `//` (`default:secret@host` parses as scheme `default`).
        scheme: Option<String>,
    },
    /// A node URL with a user name but no password (`redis://app@host`). The client would
    /// send no AUTH, so the connection would run as the `default` user; redis-cli, on the
    /// other hand, reads a lone name as a password. Either way it is not what was meant.
    #[error(
        "node URL `{url}` has a user name but no password: the connection would not be \
         authenticated and would run as the `default` user; write \
         redis://user:password@host, or redis://:password@host for a password alone"
    )]
    UserWithoutPassword {
        /// The URL, with the user name hidden (it may be a password).
        url: String,
    },
    /// A `rediss://` URL, but the crate was built without the `tls` feature.
    #[error("`{url}` needs TLS, but quorumlock was built without the `tls` feature")]
    TlsUnavailable {
        /// The URL as given, password hidden.
        url: String,
    },
    /// A TLS file (CA bundle, client certificate or key) that cannot be read or used.
    #[error("TLS file `{}`: {reason}", path.display())]
    TlsFile {
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong with it (never its contents).
        reason: String,
    },
    /// TLS settings that do not go together (a client certificate without its key, a key
    /// that does not match the certificate, TLS files without the `tls` feature).
    #[error("invalid TLS settings: {0}")]
    InvalidTls(String),
    /// Two URLs name one server, which would count it twice: the same host and port, one
    /// address spelled two ways (`[::ffff:127.0.0.1]` and `127.0.0.1`), or `localhost` and
    /// `127.0.0.1` or `[::1]` with the same port. What the URLs alone do not show (a host
    /// name and its address) is [`ConfigError::SameServer`], found by
    /// [`RedLockBuilder::connect`](crate::RedLockBuilder::connect).
    #[error("node {second} (`{url}`) is the same server as node {first}: every node must be a different Redis master")]
    DuplicateNode {
        /// The URL of the repeated node, password hidden.
        url: String,
        /// Position of the first occurrence.
        first: usize,
        /// Position of the repeat.
        second: usize,
    },
    /// A fred client or configuration given as a node
    /// ([`RedLockBuilder::fred_client`](crate::RedLockBuilder::fred_client),
    /// [`fred_config`](crate::RedLockBuilder::fred_config)) that cannot be one: a cluster or
    /// sentinel deployment (not an independent master), or a shared client without a
    /// reconnect policy.
    #[error("node {index} ({node}) cannot be a Redlock node: {reason}")]
    UnsuitableNode {
        /// Position of the node.
        index: usize,
        /// Its address without credentials, or what was given.
        node: String,
        /// Why.
        reason: String,
    },
    /// More nodes than the crate supports.
    #[error("{0} nodes configured; at most {max} are supported", max = MAX_NODES)]
    TooManyNodes(usize),
    /// The ttl is zero.
    #[error("the ttl must be greater than zero")]
    ZeroTtl,
    /// The ttl is not larger than the drift allowance, so no lock could ever be valid.
    #[error(
        "the ttl ({}) must be larger than the clock-drift allowance ({})",
        format_duration(*ttl), format_duration(*drift)
    )]
    TtlNotAboveDrift {
        /// The ttl asked for.
        ttl: Duration,
        /// The drift allowance for that ttl.
        drift: Duration,
    },
    /// A ttl longer than the configured maximum.
    #[error(
        "the ttl ({}) is longer than the maximum ttl ({}); raise max_ttl (QUORUMLOCK_MAX_TTL)",
        format_duration(*ttl), format_duration(*max)
    )]
    TtlAboveMax {
        /// The ttl asked for.
        ttl: Duration,
        /// The configured maximum.
        max: Duration,
    },
    /// Two configured URLs reach the same Redis server (the same run_id).
    #[error("node {second} (`{url}`) is the same server as node {first} (run_id {run_id}): every node must be a different Redis master")]
    SameServer {
        /// The URL of the repeated node, password hidden.
        url: String,
        /// Position of the first URL.
        first: usize,
        /// Position of the repeat.
        second: usize,
        /// The server's run_id.
        run_id: String,
    },
    /// The ttl does not fit Redis's millisecond expiry.
    #[error("the ttl ({}) is too large", format_duration(*ttl))]
    TtlTooLarge {
        /// The ttl asked for.
        ttl: Duration,
    },
    /// The drift factor is not a finite number in `0.0..1.0`.
    #[error(
        "the drift factor must be a finite number from 0.0 up to (not including) 1.0, got {0}"
    )]
    InvalidDriftFactor(f64),
    /// A per-node or connection timeout of zero.
    #[error("the {0} must be greater than zero")]
    ZeroTimeout(&'static str),
    /// A per-node or connection timeout longer than the longest ttl allowed (a year).
    #[error(
        "the {what} ({}) is too large: at most {}",
        format_duration(*timeout), format_duration(*max)
    )]
    TimeoutTooLarge {
        /// Which timeout.
        what: &'static str,
        /// The timeout given.
        timeout: Duration,
        /// The largest allowed.
        max: Duration,
    },
    /// A node timeout at least as long as the validity of the longest lock the client may
    /// take (`max_ttl` less its drift allowance): a round that waits that long for one slow
    /// node could never leave any validity, so the timeout could never let a slow node count.
    /// See [`RedLockBuilder::node_timeout`](crate::RedLockBuilder::node_timeout).
    #[error(
        "the node timeout ({}) is not shorter than the validity of the longest lock ({}: the \
         max ttl {} less the drift allowance): a round that waits it out for one slow node \
         would always end with no validity left; lower the node timeout \
         (QUORUMLOCK_NODE_TIMEOUT) or raise the ttl or max ttl (QUORUMLOCK_TTL, \
         QUORUMLOCK_MAX_TTL)",
        format_duration(*node_timeout), format_duration(*validity), format_duration(*max_ttl)
    )]
    NodeTimeoutOutlastsLocks {
        /// The node timeout.
        node_timeout: Duration,
        /// The longest ttl the client may use (`max_ttl`, which defaults to the ttl).
        max_ttl: Duration,
        /// That ttl less its drift allowance.
        validity: Duration,
    },
    /// A retry policy that could never make an attempt.
    #[error("the retry policy can never make an attempt: {0}")]
    InvalidRetry(&'static str),
    /// Keep-alive settings that do not fit the lock's ttl.
    #[error("invalid keep-alive settings: {0}")]
    InvalidKeepAlive(String),
    /// An empty resource name.
    #[error("the resource name is empty")]
    EmptyResource,
    /// A semaphore asked with no permits, or more than [`MAX_PERMITS`].
    #[error("a semaphore needs 1 to {max} permits, not {permits}", max = MAX_PERMITS)]
    InvalidPermits {
        /// The number asked for.
        permits: u32,
    },
    /// An empty token given to [`RedLock::break_lock`](crate::RedLock::break_lock).
    #[error("the token is empty")]
    EmptyToken,
    /// A multi-resource lock with no resources.
    #[error("no resources to lock")]
    NoResources,
    /// The same resource twice in one multi-resource lock.
    #[error("resource `{0}` is named twice")]
    DuplicateResource(String),
    /// A resource whose key would be a fencing counter's key.
    #[error("resource key `{0}` is reserved: keys starting with `quorumlock:fence:` hold fencing counters, and keys starting with `quorumlock:leader:` leaders' identities")]
    ReservedResource(String),
    /// A fencing token was asked of a lock taken by a client with fencing off
    /// ([`RedLockBuilder::fencing`](crate::RedLockBuilder::fencing)).
    #[error("fencing is off for this client: its locks have no fencing token")]
    FencingOff,
    /// An environment variable that could not be parsed, or is not valid UTF-8.
    #[error(
        "environment variable {var}{}: {reason}",
        if value.is_empty() { String::new() } else { format!("=`{value}`") }
    )]
    Env {
        /// The variable's name.
        var: &'static str,
        /// Its value, with anything that may be a password hidden; empty when it is not
        /// shown at all (not valid UTF-8).
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A leader's identity that cannot be stored: empty, or longer than 1024 bytes.
    #[error("invalid leader identity: {0}")]
    InvalidIdentity(String),
    /// `build()` was called outside a Tokio runtime.
    #[error("RedLockBuilder::build() must be called from within a Tokio runtime")]
    NoRuntime,
    /// A thread of a [`blocking`](crate::blocking) client could not start: its runtime's, or
    /// the helper that runs a call made from a thread of another Tokio runtime. Nothing was
    /// sent.
    #[error("cannot start a thread of the blocking client: {0}")]
    ThreadStart(String),
}
