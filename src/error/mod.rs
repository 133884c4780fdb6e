//! The one error type of the crate, and the per-node failures it carries.

use std::fmt;
use std::time::Duration;

use humantime::format_duration;

mod config;
mod node;

pub use config::ConfigError;
pub(crate) use node::failed_nodes;
use node::{FailedToo, NodeErrors};
pub use node::{NodeError, NodeErrorKind};

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
    /// lock or signal its loss, because no thread of its runtime was free (see
    /// [`KeptLock`](crate::KeptLock), "What the keeper needs"). Another client may have taken
    /// the lock meanwhile. Noticed by the first call on the lock (any handle) or by the
    /// keeper, whichever comes first once the runtime runs again.
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
            LostReason::NotExtended { last_error, .. } => write!(
                f,
                "it could not be extended in time: {}",
                last_error.as_deref().unwrap_or("no quorum answered")
            ),
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
