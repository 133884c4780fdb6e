//! What the client reports about nodes and about itself: the facts a node's `INFO` and
//! `CONFIG` give ([`facts`]), the release path they allow ([`capabilities`]), the per-node
//! report (`node_report`) and the rules that find what is wrong (`findings`), and whether the build's protocol decoder is
//! bounded ([`decoder`]). Data and rules only; the probes that gather the facts are in
//! `node::probe`.
//!
//! Imports nothing of the crate but `error`.

pub(crate) mod capabilities;
pub(crate) mod decoder;
pub(crate) mod facts;
pub(crate) mod findings;
pub(crate) mod node_report;

pub(crate) use findings::report;
pub(crate) use node_report::*;
