//! The decisions, pure: quorum and validity arithmetic and the tally of a round, the
//! lineage of a node's data and the floor of its counters, the key namespace and the lock
//! token's form. No I/O, no clock read, no randomness drawn: instants, answers and samples
//! come in as arguments, so every rule here is unit- and property-tested on its own.
//!
//! Imports nothing of the crate but `error`.

pub(crate) mod keys;
pub(crate) mod lineage;
pub(crate) mod quorum;
pub(crate) mod token;
