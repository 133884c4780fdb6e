//! One call in a node's queue: what it runs, its keys and arguments, its deadline and where
//! its caller waits; and why a call got no reply.

use std::sync::Arc;

use fred::error::{Error as FredError, ErrorKind};
use fred::types::{Key, Value};
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::op::Op;
use crate::report::facts::Excluded;

/// Why a call got no reply from the node.
#[derive(Debug, Clone)]
pub(crate) enum Failure {
    /// The command failed or timed out.
    Node(FredError),
    /// The call counts as a vote and the node's votes do not count now: not sent.
    Excluded(Excluded),
}

/// A call's keys or arguments: one list shared by a round's calls to every node (made once
/// per round, not once per node), or a node's own.
#[derive(Debug, Clone)]
pub(crate) enum List<T> {
    Shared(Arc<[T]>),
    Own(Vec<T>),
}

impl<T> std::ops::Deref for List<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        match self {
            List::Shared(list) => list,
            List::Own(list) => list,
        }
    }
}

impl<T> From<Vec<T>> for List<T> {
    fn from(list: Vec<T>) -> Self {
        List::Own(list)
    }
}

impl<T> From<&Arc<[T]>> for List<T> {
    fn from(list: &Arc<[T]>) -> Self {
        List::Shared(Arc::clone(list))
    }
}

#[derive(Debug)]
pub(super) struct Call {
    pub(super) op: Op,
    /// Whether the call is a vote, sent only while the node's votes count (see
    /// [`Queue::call`](super::Queue::call)).
    pub(super) vote: bool,
    pub(super) keys: List<Key>,
    pub(super) args: List<Value>,
    pub(super) deadline: Instant,
    /// Where the caller waits for the answer; `None` once answered (a release sent after its
    /// deadline has had its timeout already).
    pub(super) reply: Option<oneshot::Sender<Result<Value, Failure>>>,
}

impl Call {
    /// Whether it is still worth sending: a release (or discard) or a handover always is, even
    /// after its caller stopped waiting (see [`Op`]); anything else only while its caller
    /// waits, before its deadline.
    pub(super) fn wanted(&self, now: Instant) -> bool {
        self.op.deletes()
            || matches!(self.op, Op::Handover | Op::PermitHandover)
            || (now < self.deadline && self.reply.as_ref().is_some_and(|r| !r.is_closed()))
    }

    /// Answers the caller, if it has not had its answer yet.
    pub(super) fn answer(&mut self, answer: Result<Value, Failure>) {
        if let Some(reply) = self.reply.take() {
            let _ = reply.send(answer);
        }
    }

    /// Answers the caller with a timeout if its deadline has passed at `now`.
    pub(super) fn time_out_if_due(&mut self, now: Instant) {
        if now >= self.deadline {
            self.answer(Err(Failure::Node(timed_out())));
        }
    }
}

pub(super) fn timed_out() -> FredError {
    FredError::new(ErrorKind::Timeout, "Request timed out.")
}

pub(super) fn closed() -> Failure {
    Failure::Node(FredError::new(ErrorKind::Canceled, "the client is closed"))
}
