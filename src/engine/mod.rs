//! The machinery, as a stack, from the bottom:
//!
//! - at the bottom, what imports nothing of the engine above it: the fan-out of rounds
//!   to every node and the background completion of their calls ([`fanout`]); what an
//!   acquisition claims ([`claim`]); the errors of an acquisition not granted ([`outcome`]); a kept lock's status ([`kept_status`]); the keeper's cycle of one kept lock
//!   ([`keep_cycle`]) and its task ([`keeper`]), generic over what they keep;
//! - the client's machinery ([`machinery`]: the fan-out and the registries a held claim
//!   uses, the registry of held locks and the shutdown that releases them), a held claim ([`held`]: its keys, token, fencing state, and what a round on it says) and the line of waiters ([`waiters`]), which hands a
//!   held claim over: the one circle of files left, since the registries hold the claims
//!   and a claim keeps the machinery it was granted by;
//! - a held claim's extension ([`extension`]), release ([`release`]) and handover
//!   ([`handover`]), its fencing token's rounds ([`fencing`]), and keeping it ([`kept`]);
//! - one attempt for every kind of claim ([`attempt`]), and the acquisition loop that
//!   retries it and waits in line ([`acquiring`]); the kinds: a lock ([`coordinator`]), a
//!   permit or a read-write lock's side ([`semaphore`], [`rwlock`]), a handover
//!   ([`handover`]);
//! - the client ([`coordinator`]); the census of a semaphore's holders ([`census`]),
//!   re-seeding of counters ([`seeder`]), node inspection
//!   ([`inspect`]); election ([`election`]) and who leads ([`observe`]).
//!
//! Its only public items are values it hands out, re-exported at the crate root
//! ([`Token`](held::Token), [`Released`](held::Released), [`Shutdown`](machinery::Shutdown),
//! [`Leader`](observe::Leader), [`PermitHolder`](census::PermitHolder),
//! [`RwHolder`](census::RwHolder), [`Access`](held::Access)). Imports `error`,
//! `stats`, `algo`, `report`, `config` and `node`; never the public face.

pub(crate) mod acquiring;
pub(crate) mod attempt;
pub(crate) mod census;
pub(crate) mod claim;
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
pub(crate) mod kept_status;
pub(crate) mod machinery;
pub(crate) mod observe;
pub(crate) mod outcome;
pub(crate) mod release;
pub(crate) mod rwlock;
pub(crate) mod seeder;
pub(crate) mod semaphore;
pub(crate) mod waiters;
