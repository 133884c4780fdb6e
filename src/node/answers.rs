//! What a node answers, as the engine reads it: the answer types of each script (a vote, an
//! acquisition with its fencing counter, a permit's slot, an extension) and how a reply of
//! the wrong shape is told.

use std::sync::Arc;

use fred::error::{Error as FredError, ErrorKind};
use fred::types::{Key, Value};

use crate::algo::quorum::Ballot;
use crate::error::{FoundKind, NodeError};
use crate::node::batch::Op;

/// One node's answer, or why it failed.
pub(crate) type NodeResult<T> = Result<T, NodeError>;

/// One node's yes / no, or why it failed.
pub(crate) type Vote = NodeResult<bool>;

/// A node's answer as the tally counts it.
pub(crate) trait Answer: Send + 'static {
    fn ballot(&self) -> Ballot;
}

impl Answer for bool {
    fn ballot(&self) -> Ballot {
        if *self {
            Ballot::Yes
        } else {
            Ballot::No
        }
    }
}

/// The keys and arguments of `SET key token NX PX ttl`, made once for a round's calls to
/// every node.
#[derive(Debug)]
pub(crate) struct SetNx {
    pub(super) keys: Arc<[Key]>,
    pub(super) args: Arc<[Value]>,
}

impl SetNx {
    pub(crate) fn new(key: Key, token: Value, ttl_ms: i64) -> SetNx {
        SetNx {
            keys: Arc::new([key]),
            args: Arc::new([token, Value::Integer(ttl_ms)]),
        }
    }
}

/// The answer to an acquisition: `Some` when the node set our keys, with what its fencing
/// counters read as; `None` when a key was already there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Acquired(pub(crate) Option<CounterRead>);

/// What a node's fencing counters read as, in a yes vote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CounterRead {
    /// The largest of them and of the node's floor (0 when none was read).
    Read(u64),
    /// The node may have lost counters since it was checked (`algo/lineage/`): its vote counts
    /// for the lock, and its counters for nothing.
    Untrusted,
}

impl Answer for Acquired {
    fn ballot(&self) -> Ballot {
        self.0.is_some().ballot()
    }
}

/// What a call acts on: the keys of a lock, or a permit's claim (`slot:token`) in the sorted
/// set of a semaphore (design 2.9). The engine runs the same rounds on both; only the
/// scripts differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Primitive {
    Lock,
    Permit,
}

impl Primitive {
    /// The script that does for this claim what `op` does for a lock.
    pub(super) fn op(self, op: Op) -> Op {
        match (self, op) {
            (Primitive::Lock, op) => op,
            (Primitive::Permit, Op::Extend) => Op::PermitExtend,
            (Primitive::Permit, Op::Release) => Op::PermitRelease,
            (Primitive::Permit, Op::Discard) => Op::PermitDiscard,
            (Primitive::Permit, Op::Peek) => Op::PermitPeek,
            (Primitive::Permit, Op::Fence) => Op::PermitFence,
            (Primitive::Permit, Op::Handover) => Op::PermitHandover,
            (Primitive::Permit, op) => op,
        }
    }
}

/// A node's answer to a permit's acquisition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SlotAnswer {
    /// The node recorded our claim of this slot, and another slot was still free there
    /// (`true`) or not.
    Granted(u32, bool),
    /// Every slot is claimed here.
    Full,
    /// The key is not a semaphore of our number of permits; nothing was changed.
    Other(FoundKind),
}

impl Answer for SlotAnswer {
    fn ballot(&self) -> Ballot {
        matches!(self, SlotAnswer::Granted(..)).ballot()
    }
}

/// The answer to an extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Extended {
    /// Every key still held our token; its ttl was reset.
    Kept,
    /// No key holds another token, but some are missing (the node restarted empty, or
    /// missed the acquisition): nothing was changed. The node did not hold the lock all
    /// along, so this does not count towards the quorum.
    Missing,
    /// A key holds another token; nothing was changed.
    Refused,
}

impl Answer for Extended {
    fn ballot(&self) -> Ballot {
        (*self == Extended::Kept).ballot()
    }
}

/// A reply of the wrong shape, reported as a protocol error.
pub(crate) fn unexpected(script: &str, reply: &Value) -> FredError {
    FredError::new(
        ErrorKind::Protocol,
        format!("unexpected reply to the {script} script: {reply:?}"),
    )
}

/// The answer of PERMIT_ACQUIRE or RW_ACQUIRE: `{slot, free}` when recorded, nil when
/// refused, -1 for a key of another kind, -2 for a read-write lock, `-2 - M` for a semaphore
/// of `M` permits.
pub(super) fn slot_answer(script: &str, value: Value) -> Result<SlotAnswer, FredError> {
    match value {
        Value::Null => Ok(SlotAnswer::Full),
        Value::Integer(-1) => Ok(SlotAnswer::Other(FoundKind::Other)),
        Value::Integer(-2) => Ok(SlotAnswer::Other(FoundKind::ReadWriteLock)),
        Value::Array(ref granted) => match granted.as_slice() {
            [Value::Integer(slot), Value::Integer(free)] => u32::try_from(*slot)
                .map(|slot| SlotAnswer::Granted(slot, *free == 1))
                .map_err(|_| unexpected(script, &value)),
            _ => Err(unexpected(script, &value)),
        },
        Value::Integer(other) if other < -2 => u32::try_from(-2 - other)
            .map(|permits| SlotAnswer::Other(FoundKind::Semaphore { permits }))
            .map_err(|_| unexpected(script, &value)),
        other => Err(unexpected(script, &other)),
    }
}

/// A script's integer reply.
pub(super) fn integer(script: &str, reply: Result<Value, FredError>) -> Result<i64, FredError> {
    match reply? {
        Value::Integer(n) => Ok(n),
        other => Err(unexpected(script, &other)),
    }
}
