//! One Redis master and everything said to it. The only user of fred besides the TLS setup
//! in `config`: the engine sends and reads through the items here, never through fred's
//! client.
//!
//! - The node and its votes: [`connection`] (`Node`), [`answers`] (what each script answers),
//!   [`context`] (a reply judged into a vote), [`client`] (the fred client, made with our
//!   settings, and its connection events).
//! - What is sent: [`batch`] (the queue that coalesces concurrent calls into one script
//!   call) and [`scripts`] (every Lua script, and its static, in one folder).
//! - Whether the node's votes count: [`admission`] (the connection check, quarantine,
//!   markers) and [`quarantine`] (the record of a quarantine kept on the node).
//! - Reads and writes outside the votes: [`probe`] (facts, permissions), [`clock`] (the
//!   clock's rate), [`inspect`] (what a node report reads), [`reseed`] (the survey and SEED of
//!   a re-seed), [`subscriber`] (release messages); [`failure`] reads fred's errors.
//!
//! Imports `error`, `stats`, `algo`, `report` and `config`.

pub(crate) mod admission;
pub(crate) mod answers;
pub(crate) mod batch;
pub(crate) mod client;
pub(crate) mod clock;
pub(crate) mod connection;
pub(crate) mod context;
pub(crate) mod failure;
pub(crate) mod inspect;
pub(crate) mod probe;
pub(crate) mod quarantine;
pub(crate) mod reseed;
pub(crate) mod scripts;
pub(crate) mod subscriber;

pub(crate) use answers::*;
pub(crate) use connection::*;
