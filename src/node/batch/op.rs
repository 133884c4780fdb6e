//! What a call runs: one of the scripts, by its number in the batch script.

use crate::node::scripts::{Script, BATCHED_SCRIPTS};

/// What a call runs: one of the scripts (a vote, even alone, in the batch script), numbered
/// as in the batch script (`scripts::BATCHED`, 1-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    /// `SET key token NX PX ttl`; `args = [token, ttl_ms]`. Answers 0 if set, nil if not.
    SetNx = 1,
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
        &BATCHED_SCRIPTS[self.number() - 1]
    }

    /// Whether it is a compare-and-delete (RELEASE or DISCARD, of a lock or a permit).
    pub(super) fn deletes(self) -> bool {
        matches!(
            self,
            Op::Release | Op::Discard | Op::PermitRelease | Op::PermitDiscard
        )
    }

    /// Its number in the batch script.
    pub(super) fn number(self) -> usize {
        self as usize
    }
}

#[cfg(test)]
mod tests {
    use super::Op;
    use crate::node::scripts::{lock, permit, BATCHED};

    #[test]
    fn each_op_runs_its_script_by_its_number_in_the_batch() {
        for (op, body) in [
            (Op::SetNx, lock::SET_NX),
            (Op::Discard, lock::DISCARD),
            (Op::PermitAcquire, permit::PERMIT_ACQUIRE),
            (Op::RwAcquire, permit::RW_ACQUIRE),
        ] {
            assert_eq!(op.script().body, body);
            assert_eq!(BATCHED[op.number() - 1], body);
        }
        assert_eq!(Op::RwAcquire.number(), BATCHED.len());
    }
}
