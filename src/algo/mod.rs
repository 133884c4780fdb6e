//! The decisions, pure: quorum and validity arithmetic, the tally of a round and its
//! verdict, the retry and keep-alive schedules, the lineage of a node's data and the floor of its counters, the key namespace. No I/O, no clock read, no randomness drawn: instants, answers and samples
//! come in as arguments, so every rule here is unit- and property-tested on its own.
//!
//! Imports nothing of the crate but `error`.

pub(crate) mod keys;
pub(crate) mod lineage;
pub(crate) mod quorum;
pub(crate) mod schedule;
pub(crate) mod slots;
pub(crate) mod verdict;
