//! Whether a node still has every write it acknowledged, told by what the node holds rather
//! than by how it says it is configured (design 2.6a). Pure: the facts come from
//! `node/admission.rs` and `engine/seeder.rs`.
//!
//! Each node carries a **marker**, `quorumlock:node` = `RUN_ID:FLOOR` (`RUN_ID:FLOOR:new` when
//! the node was provisioned empty). `RUN_ID` is the server process that the marker was written
//! in: a marker whose run_id is the server's own says that the node has not restarted (nor been
//! flushed, nor replaced by another server's data) since it was written, so it still holds
//! every fencing counter written since. Anything else (no marker, another run_id, a run_id
//! the server does not tell) means that the node may have lost data: its lock votes are held
//! back for the longest ttl, and its fencing counters are not read until the node is
//! **re-seeded**: `FLOOR` is set above every token handed out before, and every counter the
//! node reports is read as at least `FLOOR`.
//!
//! `quorumlock:hwm` is the largest fencing counter a node ever recorded (FENCE and RESTORE
//! raise it beside the counter): what a re-seed reads from the other nodes.
//!
//! Three parts: the marker and the lineage it tells ([`marker`]); the quarantine, how long
//! a node's votes are held back and whether a checked node's votes still count
//! ([`quarantine`]); the floor of a re-seed ([`floor`]).

pub(crate) mod floor;
pub(crate) mod marker;
pub(crate) mod quarantine;

pub(crate) use floor::{floor, Floor, Surveyed};
pub(crate) use marker::{lineage, Lineage, Marker};
pub(crate) use quarantine::{hold_back, record_age, still_checked, Checked, Recorded};
// Named by the model checker's way in (`src/model.rs`) alone.
#[cfg(feature = "model")]
pub(crate) use quarantine::UPTIME_RESOLUTION;
