//! The public face: the handles users hold ([`RedLock`](redlock::RedLock), the builder's
//! last step, [`Lock`](lock::Lock), [`KeptLock`](kept::KeptLock) and its handle,
//! [`Leadership`](election::Leadership)), each a thin layer over the machinery in `engine`,
//! as bb8's `api.rs` is over `inner.rs`. The documentation users read lives here.
//!
//! Imports every layer below; nothing imports it but `lib.rs` (and `testkit`).

pub mod blocking;
pub(crate) mod builder;
pub(crate) mod election;
mod held_face;
pub(crate) mod kept;
pub(crate) mod lock;
pub(crate) mod redlock;
pub(crate) mod rwlock;
pub(crate) mod semaphore;
