//! The one error type of the crate, and the per-node failures it carries.

use std::fmt;
use std::time::Duration;

use humantime::format_duration;

/// Everything that can go wrong when locking, extending or releasing.
///
/// The variants tell apart the cases a caller handles differently: someone else holds the
/// resource ([`Taken`](Error::Taken)), too few nodes could be reached
/// ([`NoQuorum`](Error::NoQuorum)), the quorum answered too late to leave any validity
/// ([`ValidityExpired`](Error::ValidityExpired)), the lock was lost before an extend or
/// release ([`NotHeld`](Error::NotHeld)), and bad input ([`Config`](Error::Config)), which is
/// always caught before anything is sent to any node.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Another owner holds the resource: enough nodes answered, but too many of them already
    /// had a key with someone else's token.
    #[error(
        "`{resource}` is held by another owner ({held_elsewhere} of {nodes} nodes refused{})",
        FailedToo(failures)
    )]
    Taken {
        /// The resource that was asked for.
        resource: String,
        /// How many nodes answered that the key was already set.
        held_elsewhere: usize,
        /// How many nodes are configured.
        nodes: usize,
        /// Nodes that failed during the same attempt (a minority).
        failures: Vec<NodeError>,
    },

    /// Too many nodes failed (down, frozen, refusing) for a majority to agree. After an
    /// extension or a release: too few nodes answered to tell whether the lock is still held
    /// (a majority neither confirmed nor answered that our token is gone).
    #[error(
        "no quorum for `{resource}`: {agreed} of {needed} needed nodes agreed; {}",
        NodeErrors(failures)
    )]
    NoQuorum {
        /// The resource that was asked for.
        resource: String,
        /// The majority that was needed.
        needed: usize,
        /// How many nodes did agree.
        agreed: usize,
        /// Every node that did not agree, and why, as far as known when the outcome was
        /// decided: as [`Lock::failures`](crate::Lock::failures) lists them.
        failures: Vec<NodeError>,
    },

    /// A majority agreed, but only after the whole ttl (less the drift allowance) had been
    /// used up. After an acquisition the keys were released again; after an extension they
    /// are left as they are.
    #[error(
        "validity of `{resource}` used up: the quorum answered after {} (ttl {}, drift {})",
        format_duration(*elapsed), format_duration(*ttl), format_duration(*drift)
    )]
    ValidityExpired {
        /// The resource that was asked for.
        resource: String,
        /// Time from the first request to the deciding answer.
        elapsed: Duration,
        /// The ttl that was asked for.
        ttl: Duration,
        /// The clock-drift allowance subtracted from the ttl.
        drift: Duration,
    },

    /// The lock is no longer held: so many nodes answered that our token is not there (the
    /// key expired, or was deleted or taken over) that it is not on a majority. A node that
    /// failed to answer never counts towards it.
    #[error(
        "the lock on `{resource}` is no longer held ({held} of {nodes} nodes still had our token)"
    )]
    NotHeld {
        /// The locked resource.
        resource: String,
        /// How many nodes still had (and acted on) our token.
        held: usize,
        /// How many nodes are configured.
        nodes: usize,
    },

    /// The lock's validity had already run out when it was to be extended; nothing was
    /// sent. Acquire the resource again.
    #[error("the lock on `{resource}` expired {} ago", format_duration(*ago))]
    Expired {
        /// The locked resource.
        resource: String,
        /// How long ago the validity ended.
        ago: Duration,
    },

    /// A kept lock ([`KeptLock`](crate::KeptLock)) was lost before the work under it ended;
    /// the work was stopped before the lock's validity ran out.
    #[error("the lock on `{resource}` was lost: {reason}")]
    Lost {
        /// The locked resource.
        resource: String,
        /// Why it was lost.
        reason: LostReason,
    },

    /// No fencing token can be handed out now: too few nodes whose fencing counters are
    /// known to be complete could be reached. `failures` names each node that could not be
    /// counted and why; those of kind [`NodeErrorKind::LostData`] restarted or lost data and
    /// are re-seeded in the background once their quarantine ends (design 2.6a). The lock
    /// itself is unaffected; a later call may succeed.
    #[error(
        "no fencing token for `{resource}`: {counted} of {needed} needed nodes have fencing \
         counters known to be complete; {}",
        NodeErrors(failures)
    )]
    FencingUnavailable {
        /// The locked resource.
        resource: String,
        /// The majority that was needed.
        needed: usize,
        /// How many nodes were counted.
        counted: usize,
        /// Why each node that was not counted was not.
        failures: Vec<NodeError>,
    },
    /// The client was shut down ([`RedLock::shutdown`](crate::RedLock::shutdown), by this
    /// handle or a clone): it takes no more locks, and the locks it held were released by
    /// the shutdown. Nothing was sent.
    #[error("the client was shut down: it takes no more locks, and it released those it held")]
    ShutDown,

    /// Invalid configuration or arguments. Nothing was sent to any node.
    #[error("invalid configuration: {0}")]
    Config(#[from] ConfigError),

    /// The resource is in use as another kind of primitive: a semaphore was asked of a key
    /// that holds a lock (or another program's value), or of a semaphore with another
    /// number of permits; a lock (one resource) was refused where a semaphore or a
    /// read-write lock of that name is on more nodes than a majority may do without (read
    /// after the call's first refusal: its `SET NX` alone cannot tell). One resource name is one kind of thing, with one number of
    /// permits, for every client (design 2.9). Nothing was changed on any node.
    #[error("`{resource}` is already in use as {found}, on a majority of the nodes that answered: nothing was changed")]
    KindMismatch {
        /// The resource that was asked for.
        resource: String,
        /// What it is in use as.
        found: FoundKind,
    },

    /// The operating system's random number generator failed, so no token could be made.
    #[error("no token could be generated: the OS random number generator failed: {0}")]
    Entropy(String),
}

impl Error {
    /// Whether another attempt later could succeed (contention, unreachable nodes, a slow
    /// quorum), as opposed to bad input or a lost lock.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Error::Taken { .. }
                | Error::NoQuorum { .. }
                | Error::ValidityExpired { .. }
                | Error::FencingUnavailable { .. }
        )
    }

    /// The nodes this error names as failed, each with why: none for an error that names
    /// no node.
    pub(crate) fn node_failures(&self) -> &[NodeError] {
        match self {
            Error::Taken { failures, .. }
            | Error::NoQuorum { failures, .. }
            | Error::FencingUnavailable { failures, .. } => failures,
            _ => &[],
        }
    }
}

/// What a resource was found in use as, when it was asked for as another kind of primitive
/// ([`Error::KindMismatch`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FoundKind {
    /// Not a semaphore: a lock's key (a token), or a value of another program.
    Other,
    /// A semaphore with this number of permits.
    Semaphore {
        /// Its number of permits.
        permits: u32,
    },
    /// A read-write lock.
    ReadWriteLock,
}

impl fmt::Display for FoundKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FoundKind::Other => f.write_str("a lock (or a value of another kind)"),
            FoundKind::ReadWriteLock => f.write_str("a read-write lock"),
            FoundKind::Semaphore { permits } => write!(f, "a semaphore of {permits} permits"),
        }
    }
}

/// Why one node failed during one operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeError {
    /// The node's position in the configured list.
    pub index: usize,
    /// The node's URL, with any password replaced by `***`.
    pub node: String,
    /// What kind of failure it was.
    pub kind: NodeErrorKind,
    /// The client's description of the failure.
    pub message: String,
}

impl fmt::Display for NodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "node {} ({}): {}: {}",
            self.index, self.node, self.kind, self.message
        )
    }
}

impl std::error::Error for NodeError {}

/// The kinds of node failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NodeErrorKind {
    /// No answer within the per-node timeout (frozen, partitioned, overloaded, or not
    /// connected without a connection error known yet).
    Timeout,
    /// The connection failed or was closed (refused, reset), or the node is not connected
    /// and its last connection attempt failed so (or, for a node the round did not wait for,
    /// no connection attempt has failed yet: see [`Lock::failures`](crate::Lock::failures)).
    Io,
    /// Authentication was refused, or the user may not run a command we need.
    Auth,
    /// TLS failed: the server's certificate is not trusted or not valid for its name, the
    /// server refused ours (or wanted one), or the port does not speak TLS.
    Tls,
    /// The peer answered something that is not the expected Redis reply (perhaps it is not
    /// a Redis server).
    Protocol,
    /// Redis answered with an error (out of memory, read-only replica, script error, ...).
    Server,
    /// The node may have lost data (it restarted, is young, was flushed or replaced: told by
    /// its marker, whatever its persistence): its votes do not count until the longest ttl
    /// has passed since (the delayed-restart rule).
    Quarantined,
    /// The node is a replica, not an independent master: its votes never count.
    Replica,
    /// The node is the same server (same run_id) as an earlier node in the list.
    SameServer,
    /// The node's connection is new and has not been checked yet.
    Unchecked,
    /// The node may have lost data since its fencing counters were last trusted (it
    /// restarted, was flushed or replaced: its `quorumlock:node` marker is not its own), and
    /// it has not been re-seeded yet: its fencing counters are neither read nor raised
    /// (design 2.6a). Its lock votes may count.
    LostData,
    /// The node answered no: for an acquisition, a key holds another owner's token there;
    /// for an operation on a lock we hold (extension, release, fencing token), our token is
    /// not, or no longer, on every key there. A [`Lock`](crate::Lock) and
    /// [`Error::NoQuorum`] list these nodes with the failed ones; [`Error::Taken`] counts
    /// them in `held_elsewhere` instead.
    Refused,
    /// The round was decided before the node answered, and its previous command had got no
    /// answer either (the node may be frozen or cut off); its command runs to its end in the
    /// background. A node that is connected, counted and answering is not listed when its
    /// answer was not awaited (see [`Lock::failures`](crate::Lock::failures)).
    NotAwaited,
}

impl fmt::Display for NodeErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NodeErrorKind::Timeout => "timeout",
            NodeErrorKind::Io => "connection error",
            NodeErrorKind::Auth => "not authorized",
            NodeErrorKind::Tls => "TLS error",
            NodeErrorKind::Protocol => "protocol error",
            NodeErrorKind::Server => "server error",
            NodeErrorKind::Quarantined => "quarantined",
            NodeErrorKind::Replica => "not a master",
            NodeErrorKind::SameServer => "same server twice",
            NodeErrorKind::Unchecked => "not checked yet",
            NodeErrorKind::LostData => "may have lost its fencing counters",
            NodeErrorKind::Refused => "answered no",
            NodeErrorKind::NotAwaited => "not awaited",
        })
    }
}

/// The failed nodes of a round, for a tracing field: `index:kind` each, `2:timeout,4:io`.
pub(crate) fn failed_nodes(failures: &[NodeError]) -> String {
    failures
        .iter()
        .map(|f| format!("{}:{:?}", f.index, f.kind).to_ascii_lowercase())
        .collect::<Vec<_>>()
        .join(",")
}

/// Formats a list of node errors on one line.
/// The failures beside a refusal, if any: "; 2 failed: node 3 ...; node 4 ...".
struct FailedToo<'a>(&'a [NodeError]);

impl fmt::Display for FailedToo<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return Ok(());
        }
        write!(f, "; {} failed: {}", self.0.len(), NodeErrors(self.0))
    }
}

struct NodeErrors<'a>(&'a [NodeError]);

impl fmt::Display for NodeErrors<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("no node failed before the outcome was decided");
        }
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

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

/// The most nodes one [`RedLock`](crate::RedLock) accepts. Redlock wants a handful of
/// independent masters; a longer list is almost certainly a cluster's node list pasted by
/// mistake. (Here, beside the error that names it, so that this file imports nothing.)
pub const MAX_NODES: usize = 64;

/// The most permits one [`Semaphore`](crate::Semaphore) has. Each acquisition looks at every
/// claim of the semaphore on every node, so its cost grows with the permits; a resource that
/// more holders than this may use at once hardly needs a limit.
pub const MAX_PERMITS: u32 = 1024;

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
        /// The nodes that failed in that extension, each with why (as
        /// [`Error::NoQuorum`] names them): empty when none did or none returned. A message
        /// of one line names them by index from here.
        failures: Vec<NodeError>,
    },
    /// The hold limit ([`KeepAlive::max_hold`](crate::KeepAlive::max_hold)) was reached.
    HoldLimit {
        /// The limit.
        limit: Duration,
    },
    /// The keeper did not run in time: the lock's validity ended before it could extend the
    /// lock or signal its loss, because no thread of the runtime it runs on was free (blocking
    /// work on the runtime's threads, such as a `std::thread::sleep` or a long computation
    /// outside `spawn_blocking`; or a runtime that stopped). Another client may have taken
    /// the lock meanwhile. Noticed by the first call on the lock (any handle) or by the
    /// keeper, whichever comes first once the runtime runs again; see [`KeptLock`](crate::KeptLock).
    KeeperLate {
        /// How long the validity had been over when the loss was noticed.
        late: Duration,
    },
}

impl fmt::Display for LostReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LostReason::NotHeld { held, nodes } => write!(
                f,
                "a majority no longer holds it ({held} of {nodes} nodes still had our token)"
            ),
            LostReason::NotExtended {
                last_error: None, ..
            } => f.write_str("it could not be extended in time: no quorum answered"),
            LostReason::NotExtended {
                last_error: Some(e),
                ..
            } => write!(f, "it could not be extended in time: {e}"),
            LostReason::HoldLimit { limit } => write!(
                f,
                "the hold limit of {} was reached",
                humantime::format_duration(*limit)
            ),
            LostReason::KeeperLate { late } => write!(
                f,
                "its keeper did not run in time: the validity had ended {} earlier (was the \
                 runtime's thread blocked?)",
                humantime::format_duration(Duration::from_millis(late.as_millis() as u64))
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(index: usize) -> NodeError {
        NodeError {
            index,
            node: format!("redis://10.0.0.{index}:6379"),
            kind: NodeErrorKind::Timeout,
            message: "no answer within 100ms".into(),
        }
    }

    #[test]
    fn taken_names_the_nodes_that_failed_beside_the_refusals() {
        let alone = Error::Taken {
            resource: "job".into(),
            held_elsewhere: 3,
            nodes: 5,
            failures: vec![],
        };
        assert_eq!(
            alone.to_string(),
            "`job` is held by another owner (3 of 5 nodes refused)"
        );
        let with_failures = Error::Taken {
            resource: "job".into(),
            held_elsewhere: 1,
            nodes: 5,
            failures: vec![failed(3), failed(4)],
        };
        let text = with_failures.to_string();
        assert!(
            text.starts_with("`job` is held by another owner (1 of 5 nodes refused; 2 failed: "),
            "{text}"
        );
        assert!(
            text.contains("10.0.0.3") && text.contains("10.0.0.4"),
            "{text}"
        );
    }
}
