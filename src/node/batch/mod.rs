//! Coalescing: script calls bound for one node while it is busy are sent together, as one
//! call of the [batch script](crate::node::scripts::batch), when it is free again; one
//! [`Batcher`] per node. Design 4.3 gives the rules (order, the connection check, deadlines)
//! and why each keeps a lock safe.
//!
//! By concept: what a call runs ([`op`]), the call and its answer ([`call`]), the queue and
//! its task ([`queue`]), the deadlines ([`deadlines`]), the `MSETEX` groups ([`groups`]),
//! the commands that carry calls ([`send`]), a script's command with the NOSCRIPT fallback
//! ([`eval`], also for the scripts sent on their own) and the batch script's reply read back
//! ([`reply`]).

mod call;
mod deadlines;
pub(crate) mod eval;
mod groups;
mod op;
mod queue;
mod reply;
mod send;

pub(crate) use call::{Failure, List};
pub(crate) use op::Op;
pub(crate) use queue::{Batcher, Queue};
