//! The pure decisions of `algo/`, reachable from the model checker of `tests/model.rs`
//! (docs/verification.md) and from nothing else: compiled only with the feature `model`, hidden from
//! the docs, and not part of the API (no semver promise; it changes with `algo/`).
//!
//! Each item forwards to the crate's own function or type, unchanged, so that the model's
//! steps take the decisions the client takes: no rule is written here. The node scripts
//! that the model writes again are forwarded too, as text, for the refinement checks that
//! run them on a real server against the model's node steps.

use std::time::Duration;

use crate::algo::{lineage, quorum, slots, verdict};

pub use crate::algo::lineage::floor::{Floor, Surveyed};
pub use crate::algo::quorum::{Ballot, Decision};
pub use crate::algo::verdict::{Confirmation, Timed};

/// The tally of a round (`algo::quorum::Tally`).
#[derive(Debug, Clone, Copy)]
pub struct Tally(quorum::Tally);

impl Tally {
    /// A round that takes a lock on `nodes` nodes, with no suspect presumed failed.
    pub const fn taking(nodes: usize) -> Self {
        Tally(quorum::Tally::presuming(nodes, 0))
    }

    /// A round on a lock we hold (PEEK, FENCE, release).
    pub const fn holding(nodes: usize) -> Self {
        Tally(quorum::Tally::presuming(nodes, 0).holding())
    }

    /// The same tally needing `needed` yes votes instead of a majority (only the deliberately
    /// broken clients of the test kit and of the model's controls ask for this).
    pub const fn needing(self, needed: usize) -> Self {
        Tally(self.0.needing(needed))
    }

    /// Counts one node's answer.
    pub fn record(&mut self, ballot: Ballot) -> Decision {
        self.0.record(ballot)
    }

    /// Whether the round is decided.
    pub fn decision(&self) -> Decision {
        self.0.decision()
    }
}

/// `algo::verdict::confirmation`.
pub fn confirmation(tally: &Tally) -> Confirmation {
    verdict::confirmation(&tally.0)
}

/// `algo::verdict::timed`.
pub fn timed(tally: &Tally, ttl: Duration, drift: Duration, elapsed: Duration) -> Timed {
    verdict::timed(&tally.0, ttl, drift, elapsed)
}

/// What a node's marker says of its data (`algo::lineage::Lineage`).
#[derive(Debug, Clone)]
pub struct Lineage(lineage::Lineage);

impl Lineage {
    /// `algo::lineage::lineage`: the marker `marker` read against the server's `run_id`.
    pub fn of(marker: Option<&str>, run_id: Option<&str>) -> Self {
        Lineage(lineage::lineage(marker, run_id))
    }

    /// The marker as stored, if the node is intact.
    pub fn intact(&self) -> Option<&str> {
        self.0.intact()
    }
}

/// `algo::lineage::UPTIME_RESOLUTION`.
pub const UPTIME_RESOLUTION: Duration = lineage::UPTIME_RESOLUTION;

/// A node's quarantine as the node keeps it (`algo::lineage::Recorded`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recorded(lineage::Recorded);

impl Recorded {
    /// `Recorded::read`: a record `RUN_ID:START_MS:WAIT_MS` as the node whose server is
    /// `run_id` and whose clock reads `now_ms` holds it.
    pub fn read(text: &str, run_id: &str, now_ms: u64) -> Option<Self> {
        lineage::Recorded::read(text, run_id, now_ms).map(Recorded)
    }

    /// The QUARANTINE script's answer `{start_ms, wait_ms, now_ms}`, as
    /// `node/quarantine.rs` reads it.
    pub fn answered(start_ms: u64, wait_ms: u64, now_ms: u64) -> Self {
        Recorded(lineage::Recorded::answered(start_ms, wait_ms, now_ms))
    }
}

/// What a check found on a node that a loss of its data takes away
/// (`algo::lineage::Checked`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Checked(lineage::Checked);

impl Checked {
    /// `Checked::found`: the node's marker if `lineage` is intact, and its record of the
    /// running server `run_id`, as the check read or wrote it.
    pub fn found(lineage: &Lineage, run_id: Option<&str>, recorded: Option<&Recorded>) -> Self {
        Checked(lineage::Checked::found(
            &lineage.0,
            run_id,
            recorded.map(|r| &r.0),
        ))
    }

    /// The `RUN_ID:START_MS` of the record the check found, if any (`Checked::record`): what
    /// a re-seed holds the node to (`Admission::lost`, the SEED script).
    pub fn record(&self) -> Option<&str> {
        self.0.record.as_deref()
    }
}

/// `algo::lineage::still_checked`: whether the votes of a command count, given the node's
/// marker and quarantine record (`quorumlock:node`, `quorumlock:quarantine`) read right after
/// them, in the same atomic step.
pub fn still_checked(checked: &Checked, marker: Option<&str>, record: Option<&str>) -> bool {
    lineage::still_checked(&checked.0, marker, record)
}

/// `algo::lineage::hold_back`: how long a just-checked node's votes must wait, if at all.
pub fn hold_back(
    lineage: &Lineage,
    uptime: Option<Duration>,
    since: (Option<Recorded>, Duration),
    max_ttl: Duration,
) -> Option<Duration> {
    let since = (since.0.map(|r| r.0), since.1);
    lineage::hold_back(&lineage.0, uptime, since, max_ttl).map(|(left, _)| left)
}

/// `algo::lineage::record_age`.
pub fn record_age(uptime: Option<Duration>, max_ttl: Duration) -> Duration {
    lineage::record_age(uptime, max_ttl)
}

/// A marker's floor, if `text` is a marker (`algo::lineage::Marker::parse`).
pub fn marker_floor(text: &str) -> Option<u64> {
    lineage::Marker::parse(text).map(|m| m.floor)
}

/// The marker of a node just re-seeded (`algo::lineage::Marker::seeded`), as stored.
pub fn seeded_marker(run_id: &str, floor: u64) -> String {
    lineage::Marker::seeded(run_id, floor).to_string()
}

/// A marker written by whoever started the server empty (`RUN_ID:0:new`), as stored.
pub fn fresh_marker(run_id: &str) -> String {
    let mut marker = lineage::Marker::seeded(run_id, 0);
    marker.fresh = true;
    marker.to_string()
}

/// `algo::lineage::floor`.
pub fn floor(nodes: usize, answers: &[Surveyed]) -> Floor {
    lineage::floor(nodes, answers)
}

/// `algo::slots::next_token`: the fencing token after `seen`, for a lock (`slot` `None`) or
/// a permit's slot.
pub fn next_token(seen: u64, slot: Option<u32>) -> u64 {
    slots::next_token(seen, slot)
}

/// `algo::slots::preference`: an attempt's order of the `permits` slots, `(start, step)`,
/// from two uniform samples.
pub fn preference(permits: u32, start_sample: u32, step_sample: u32) -> (u32, u32) {
    slots::preference(permits, start_sample, step_sample)
}

/// `algo::slots::most_recorded`: the slot recorded by the most nodes among `granted`, with
/// how many recorded it.
pub fn most_recorded(granted: impl IntoIterator<Item = u32>) -> Option<(u32, usize)> {
    slots::most_recorded(granted)
}

/// `algo::slots::narrowed`: the tally of a permit's round as its verdict sees it, only the
/// `on_slot` nodes that recorded the chosen slot saying yes.
pub fn narrowed(tally: &Tally, on_slot: usize) -> Tally {
    Tally(slots::narrowed(&tally.0, on_slot))
}

/// `algo::slots::decision`: whether a permit's (or a read-write lock's side's) round is
/// decided, from its tally and the slot each node that recorded one recorded.
pub fn slot_decision(tally: &Tally, granted: impl IntoIterator<Item = u32>) -> Decision {
    slots::decision(&tally.0, granted)
}

/// The Lua of PERMIT_ACQUIRE (`node::scripts::permit`), `KEYS = [key]`,
/// `ARGV = [token, ttl_ms, N, start, step]`.
pub const PERMIT_ACQUIRE: &str = crate::node::scripts::permit::PERMIT_ACQUIRE;

/// The Lua of RW_ACQUIRE (`node::scripts::permit`), `KEYS = [key]`,
/// `ARGV = [token, ttl_ms, 'r' or 'w', waiter, intent_ttl_ms]`.
pub const RW_ACQUIRE: &str = crate::node::scripts::permit::RW_ACQUIRE;

/// The Lua of SET_NX_ALONE (`node::scripts::batched`), a lone `SET NX PX` vote and its
/// read-back of the node's marker and record: `KEYS = [key]`, `ARGV = [token, ttl_ms]`,
/// answers `{0 or nil, marker, record}`.
pub const SET_NX_ALONE: &str = crate::node::scripts::batched::SET_NX_ALONE;

/// The Lua of PEEK (`node::scripts::lock`), `KEYS = [key, its fencing counter, marker key,
/// largest counter key]`, `ARGV = [token, n, marker]`.
pub const PEEK: &str = crate::node::scripts::lock::PEEK;

/// The Lua of FENCE (`node::scripts::lock`), `KEYS` as PEEK's, `ARGV = [token, fence, n,
/// marker]`.
pub const FENCE: &str = crate::node::scripts::lock::FENCE;

/// The Lua of QUARANTINE (`node::scripts::records`), `KEYS = [marker key, quarantine key]`,
/// `ARGV = [run_id, wait_ms, age_ms]`.
pub const QUARANTINE: &str = crate::node::scripts::records::QUARANTINE;

/// The Lua of SEED (`node::scripts::records`), `KEYS = [marker key, largest counter key,
/// quarantine key]`, `ARGV = [old marker or '', marker, floor, RUN_ID:START_MS or '']`.
pub const SEED: &str = crate::node::scripts::records::SEED;

/// The Lua of EXTEND (`node::scripts::lock`), compare-and-pexpire: `KEYS = [key]`,
/// `ARGV = [token, ttl_ms, n]`, answers 1 kept, 0 another token, 2 missing.
pub const EXTEND: &str = crate::node::scripts::lock::EXTEND;

/// The Lua of RESTORE (`node::scripts::lock`), `KEYS = [key, its fencing counter, marker key,
/// largest counter key]` for a fenced lock, `ARGV = [token, ttl_ms, n, fence, marker]`.
pub const RESTORE: &str = crate::node::scripts::lock::RESTORE;

/// The Lua of RELEASE (`node::scripts::lock`), compare-and-delete with its announcement:
/// `KEYS = [key]`, `ARGV = [token, its SHA1]`.
pub const RELEASE: &str = crate::node::scripts::lock::RELEASE;

/// The Lua of DISCARD (`node::scripts::lock`), compare-and-delete: `KEYS = [key]`,
/// `ARGV = [token]`.
pub const DISCARD: &str = crate::node::scripts::lock::DISCARD;
