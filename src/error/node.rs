//! Why one node failed ([`NodeError`], [`NodeErrorKind`]), and a round's failures on one line.

use std::fmt;

/// Why one node failed during one operation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("node {index} ({node}): {kind}: {message}")]
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
    /// [`Error::NoQuorum`](crate::Error::NoQuorum) list these nodes with the failed ones; [`Error::Taken`](crate::Error::Taken) counts
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

/// The failures beside a refusal, if any: "; 2 failed: node 3 ...; node 4 ...".
pub(super) struct FailedToo<'a>(pub(super) &'a [NodeError]);

impl fmt::Display for FailedToo<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return Ok(());
        }
        write!(f, "; {} failed: {}", self.0.len(), NodeErrors(self.0))
    }
}

/// A list of node errors on one line.
pub(super) struct NodeErrors<'a>(pub(super) &'a [NodeError]);

impl fmt::Display for NodeErrors<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("no node failed before the outcome was decided");
        }
        let mut separator = "";
        for e in self.0 {
            write!(f, "{separator}{e}")?;
            separator = "; ";
        }
        Ok(())
    }
}
