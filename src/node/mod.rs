//! One Redis master and everything said to it: the connection and its votes
//! (`connection`), the command queue that coalesces concurrent tasks' commands
//! ([`batch`]), the scripts ([`scripts`]), the connection check and quarantine
//! ([`admission`]), the quarantine's record kept on the node ([`quarantine`]), the probes of facts, permissions and clocks ([`probe`]), the subscriber
//! connection for release messages ([`subscriber`]) and the reading of fred's errors
//! ([`failure`]). The only user of fred besides the TLS setup in `config`.
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
