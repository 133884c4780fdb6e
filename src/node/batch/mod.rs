//! Coalescing: script calls bound for one node while it is busy are sent together, as one
//! script call, when it is free again.
//!
//! Each node has one [`Batcher`]. A call goes out at once while no command of this node is
//! awaiting its answer, so an idle client adds no delay. While one is in flight, calls wait
//! in a queue; when it is answered, the next command takes the whole queue (up to
//! [`MAX_CALLS`](queue::MAX_CALLS)) and sends it as one call of the
//! [batch script](crate::node::scripts::batch), which runs each call's script in turn,
//! atomically, and answers each one. Many concurrent locks then cost a node one command
//! instead of one each: the client's CPU per command (fred's, mostly) and the server's are
//! spent once per batch.
//!
//! A call that changes data (a vote) is written only on a connection whose check has passed
//! ([`Admission::clearance`](crate::node::admission::Admission::clearance)); the queue waits
//! for one, up to the call's deadline. A vote still waiting when the release of its own token
//! is queued is dropped unsent. A vote goes as the batch script even alone: the script reads
//! back the node's marker and quarantine record after its calls, and the votes count only if
//! the node still holds what its check found
//! ([`Admission::still_checked`](crate::node::admission::Admission::still_checked)): a flush
//! breaks no connection, and is seen there.
//!
//! Order is kept: calls leave the queue in the order they came, one connection carries them,
//! and the server runs a batch's calls in order, so a release still runs after the
//! acquisition it follows. A call's deadline is the node timeout from when it was queued. A
//! call still queued at its deadline is never sent (as fred never writes a command still
//! queued when it times out), except a release, which is always sent: it only ever deletes
//! our own keys, and a late one cleans up what a late acquisition may have left.
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
