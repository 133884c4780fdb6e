//! What a call runs: one of the scripts, by its number in the batch script.

use crate::node::scripts::{
    Script, ACQUIRE, DISCARD, EXTEND, FENCE, HANDOVER, PEEK, PERMIT_ACQUIRE, PERMIT_DISCARD,
    PERMIT_EXTEND, PERMIT_FENCE, PERMIT_HANDOVER, PERMIT_PEEK, PERMIT_RELEASE, RELEASE, RESTORE,
    RW_ACQUIRE, SET_NX,
};

/// What a call runs: one of the scripts (a vote, even alone, in the batch script).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    /// `SET key token NX PX ttl`; `args = [token, ttl_ms]`. Answers 0 if set, nil if not.
    SetNx,
    Acquire,
    Fence,
    Extend,
    Restore,
    Release,
    Peek,
    /// Sent even after its deadline, as a release is: it only ever replaces our own token,
    /// and the release of whichever token it leaves comes after it.
    Handover,
    /// RELEASE without the announcement, for a failed attempt's cleanup; sent as a release is.
    Discard,
    /// The semaphores' scripts (`scripts::PERMIT`): a permit's acquisition, and the
    /// extension, release, discard, PEEK and FENCE of a permit, in the place of a lock's.
    PermitAcquire,
    PermitExtend,
    PermitRelease,
    PermitDiscard,
    PermitPeek,
    PermitFence,
    /// Sent even after its deadline, as a lock's handover is.
    PermitHandover,
    /// A read-write lock's side (RW_ACQUIRE).
    RwAcquire,
}

impl Op {
    pub(super) fn script(self) -> &'static Script {
        match self {
            Op::SetNx => &SET_NX,
            Op::Acquire => &ACQUIRE,
            Op::Fence => &FENCE,
            Op::Extend => &EXTEND,
            Op::Restore => &RESTORE,
            Op::Release => &RELEASE,
            Op::Peek => &PEEK,
            Op::Handover => &HANDOVER,
            Op::Discard => &DISCARD,
            Op::PermitAcquire => &PERMIT_ACQUIRE,
            Op::PermitExtend => &PERMIT_EXTEND,
            Op::PermitRelease => &PERMIT_RELEASE,
            Op::PermitDiscard => &PERMIT_DISCARD,
            Op::PermitPeek => &PERMIT_PEEK,
            Op::PermitFence => &PERMIT_FENCE,
            Op::PermitHandover => &PERMIT_HANDOVER,
            Op::RwAcquire => &RW_ACQUIRE,
        }
    }

    /// Whether it is a compare-and-delete (RELEASE or DISCARD, of a lock or a permit).
    pub(super) fn deletes(self) -> bool {
        matches!(
            self,
            Op::Release | Op::Discard | Op::PermitRelease | Op::PermitDiscard
        )
    }

    /// Its number in the batch script (`scripts::BATCHED`, 1-based).
    pub(super) fn number(self) -> usize {
        match self {
            Op::SetNx => 1,
            Op::Acquire => 2,
            Op::Fence => 3,
            Op::Extend => 4,
            Op::Restore => 5,
            Op::Release => 6,
            Op::Peek => 7,
            Op::Handover => 8,
            Op::Discard => 9,
            Op::PermitAcquire => 10,
            Op::PermitExtend => 11,
            Op::PermitRelease => 12,
            Op::PermitDiscard => 13,
            Op::PermitPeek => 14,
            Op::PermitFence => 15,
            Op::PermitHandover => 16,
            Op::RwAcquire => 17,
        }
    }
}
