//! Whether a node still has every write it acknowledged, told by what the node holds rather
//! than by how it says it is configured (design 2.6a). Pure: the facts come from
//! `node/admission.rs` and `engine/seeder.rs`.
//!
//! The marker `quorumlock:node` = `RUN_ID:FLOOR` (`RUN_ID:FLOOR:new` when the node was
//! provisioned empty), what it tells, and `quorumlock:hwm`: design 2.6a, "The marker".
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
