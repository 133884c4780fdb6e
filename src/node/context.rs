//! What a call's future needs of its node, owned so that per-node futures are `'static`: the
//! node's client, queue and admission, and the judging of a reply into a vote (the suspect
//! flag, the node's error in words, whether its votes and counters still count).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fred::clients::Client;
use fred::error::{Error as FredError, ErrorKind};
use fred::interfaces::ClientLike;
use fred::types::{Key, Value};

use crate::error::{NodeError, NodeErrorKind};
use crate::node::admission::{self, Admission};
use crate::node::answers::NodeResult;
use crate::node::batch::{Failure, List, Op, Queue};
use crate::node::failure::{classify, describe};
use crate::report::facts::Excluded;

/// A node's last connection error, shared with the client's error handler.
pub(super) type LastError = Arc<Mutex<Option<(NodeErrorKind, String)>>>;

/// What is needed to describe a node's failure, owned so that per-node futures are `'static`.
#[derive(Debug)]
pub(super) struct ErrorContext {
    pub(super) index: usize,
    pub(super) url: Arc<str>,
    pub(super) client: Client,
    pub(super) timeout: Duration,
    pub(super) last_error: LastError,
    pub(super) suspect: Arc<AtomicBool>,
    pub(super) admission: Admission,
    pub(super) batch: Queue,
}

impl ErrorContext {
    /// Refuses at once a vote-counting command to a node whose votes do not count. A node
    /// whose new connection is being checked gets it queued: its queue waits for the check
    /// (see `node/batch/`), so that nothing queued after it (its release) overtakes it.
    pub(super) async fn admitted(&self) -> Result<(), NodeError> {
        match self.admission.excluded() {
            None | Some(Excluded::Unchecked) => Ok(()),
            Some(excluded) => Err(self.excluded(&excluded)),
        }
    }

    /// Waits, until `deadline`, until a vote may be written on the node's connection
    /// ([`Admission::cleared`]); fails as the queue fails a vote that may not.
    pub(super) async fn cleared(&self, deadline: tokio::time::Instant) -> Result<(), NodeError> {
        match self.admission.cleared(&self.client, deadline).await {
            Ok(()) => Ok(()),
            Err(Some(excluded)) => Err(self.excluded(&excluded)),
            Err(None) => self.judge(Err(FredError::new(ErrorKind::Timeout, "not connected"))),
        }
    }

    /// A call's outcome: the node's reply or error, or refused by the queue because the
    /// node's votes do not count.
    pub(super) fn sent(
        &self,
        reply: Result<Value, Failure>,
    ) -> Result<Result<Value, FredError>, NodeError> {
        match reply {
            Ok(value) => Ok(Ok(value)),
            Err(Failure::Node(e)) => Ok(Err(e)),
            Err(Failure::Excluded(excluded)) => Err(self.excluded(&excluded)),
        }
    }

    /// Like [`judge`](Self::judge), for a command whose answer is a vote: the answer counts
    /// only if the node's votes count now, after the answer came. (A restart between the
    /// check before sending and the answer is caught here.) An answer on a connection that
    /// is being checked counts once the check admits the node (up to the node timeout).
    pub(super) async fn vote<T>(&self, reply: Result<T, FredError>) -> NodeResult<T> {
        let vote = self.judge(reply)?;
        let (client, timeout) = (&self.client, self.timeout);
        self.admission.wait_for_check(client, timeout).await;
        match self.admission.excluded() {
            Some(excluded) => Err(self.excluded(&excluded)),
            None => Ok(vote),
        }
    }

    /// A vote through the queue: refused at once where the node's votes do not count
    /// ([`admitted`](Self::admitted)), its reply read by `parse`, and counted only if they
    /// still count when it comes ([`vote`](Self::vote)).
    pub(super) async fn voted<T>(
        self: Arc<Self>,
        op: Op,
        keys: impl Into<List<Key>>,
        args: impl Into<List<Value>>,
        parse: impl FnOnce(Value) -> Result<T, FredError>,
    ) -> NodeResult<T> {
        self.admitted().await?;
        let reply = self.sent(self.batch.call(op, true, keys, args).await)?;
        self.vote(reply.and_then(parse)).await
    }

    /// Refuses at once a call that is only about fencing counters (PEEK, FENCE) on a node
    /// that may have lost them: `marker` is the marker the call carries, empty for such a
    /// node.
    pub(super) fn counters_trusted(&self, marker: Option<&str>) -> Result<(), NodeError> {
        match marker {
            Some("") => Err(self.lost_data()),
            _ => Ok(()),
        }
    }

    /// After an answer about fencing counters: they count only if the script found the
    /// marker it was given (`refused` says it did not) and the node was not found to have
    /// lost data since the call was made (a check of a new connection clears the marker).
    pub(super) fn counters_still_trusted(
        &self,
        marker: Option<&str>,
        refused: bool,
    ) -> Result<(), NodeError> {
        let Some(sent) = marker else { return Ok(()) };
        if refused && !sent.is_empty() {
            // The node held another marker than the one it was checked with (flushed, or
            // another server's data): check it again, which re-seeds it if it lost data.
            self.admission.recheck(&self.client, false);
        }
        let now = self.admission.marker();
        if refused || now.as_deref() != Some(sent) {
            return Err(self.lost_data());
        }
        Ok(())
    }

    /// This node's failure of `kind`, in `message`'s words.
    pub(super) fn failure(&self, kind: NodeErrorKind, message: String) -> NodeError {
        NodeError {
            index: self.index,
            node: self.url.to_string(),
            kind,
            message,
        }
    }

    pub(super) fn lost_data(&self) -> NodeError {
        let kind = NodeErrorKind::LostData;
        crate::stats::node_error(self.index, kind);
        self.failure(kind, self.admission.lineage_why())
    }

    pub(super) fn excluded(&self, excluded: &Excluded) -> NodeError {
        let kind = admission::kind(excluded);
        crate::stats::node_error(self.index, kind);
        self.failure(kind, excluded.to_string())
    }

    /// Turns a reply into a vote, and keeps the node's suspect flag up to date: an answer
    /// clears it; a timeout or a connection failure sets it. (A server error is an answer.)
    pub(super) fn judge<T>(&self, reply: Result<T, FredError>) -> NodeResult<T> {
        match reply {
            Ok(yes) => {
                self.suspect.store(false, Ordering::Relaxed);
                Ok(yes)
            }
            Err(e) => {
                // As the command saw it (`error` may report why the connection is down).
                let kind = classify(&e);
                let error = self.error(&e);
                let unresponsive = matches!(kind, NodeErrorKind::Timeout | NodeErrorKind::Io);
                self.suspect.store(unresponsive, Ordering::Relaxed);
                if kind == NodeErrorKind::Io {
                    // The connection broke: the server may come back as a new one.
                    self.admission.recheck(&self.client, false);
                }
                Err(error)
            }
        }
    }

    /// The failure of a command. When the node is not connected and the command timed out
    /// or found no connection, the failure is the connection's: its last error's kind
    /// (TLS, authentication, I/O) and message, rather than a bare timeout.
    pub(super) fn error(&self, e: &FredError) -> NodeError {
        let (mut kind, mut message) = describe(e);
        let waited = humantime::format_duration(self.timeout);
        if kind == NodeErrorKind::Timeout {
            message = format!("no answer within {waited}");
        }
        if !self.client.is_connected() {
            let last = self.last_error.lock().ok().and_then(|slot| slot.clone());
            match last {
                Some((
                    last_kind @ (NodeErrorKind::Tls | NodeErrorKind::Auth | NodeErrorKind::Io),
                    last,
                )) if matches!(kind, NodeErrorKind::Timeout | NodeErrorKind::Io) => {
                    kind = last_kind;
                    message = format!("{last}; not connected (no answer within {waited})");
                }
                Some((_, last)) => message.push_str(&format!("; not connected: {last}")),
                None => message.push_str("; not connected"),
            }
        }
        let error = self.failure(kind, message);
        tracing::debug!(node = self.index, url = %self.url, error = %error, "node failed");
        crate::stats::node_error(self.index, error.kind);
        error
    }
}
