//! The machinery under the public face, a stack of files from the fan-out of rounds at the
//! bottom to the client (`coordinator`) at the top: ARCHITECTURE.md ("The layers", its
//! `engine/` row) has the stack, what each file owns, and the one circle of files left. Its
//! only public items are values it hands out, re-exported at the crate root. Imports
//! `error`, `stats`, `algo`, `report`, `config` and `node`; never the public face.

pub(crate) mod acquire;
pub(crate) mod census;
pub(crate) mod coordinator;
pub(crate) mod election;
pub(crate) mod extension;
pub(crate) mod fanout;
pub(crate) mod fencing;
pub(crate) mod handover;
pub(crate) mod held;
pub(crate) mod inspect;
pub(crate) mod keep_cycle;
pub(crate) mod keeper;
pub(crate) mod kept;
pub(crate) mod machinery;
pub(crate) mod observe;
pub(crate) mod rwlock;
pub(crate) mod seeder;
pub(crate) mod semaphore;
pub(crate) mod waiters;
