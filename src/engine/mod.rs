//! The machinery, as a stack: the fan-out of rounds to every node and the background
//! completion of their calls at the bottom ([`fanout`]); one attempt for every kind of claim
//! above it ([`attempt`]), whose kinds are a lock ([`coordinator`]), a permit or a read-write
//! lock's side ([`semaphore`], [`rwlock`]) and a handover ([`handover`]); the fan-out and
//! the registries a held claim uses ([`machinery`]); the client and its acquisition loop
//! ([`coordinator`]); a held claim's extension and release ([`held`]), fencing
//! ([`fencing`]), the line of waiters ([`waiters`]), a kept lock's shared state ([`kept`])
//! and the task that keeps locks ([`keeper`]); election ([`election`]) and
//! who leads ([`observe`]), the census of a semaphore's holders ([`census`]), re-seeding of
//! counters ([`seeder`]), shutdown ([`shutdown`]), node inspection ([`inspect`]) and the
//! drawing of lock tokens from the operating system's CSPRNG ([`token`]).
//!
//! Its only public items are values it hands out, re-exported at the crate root
//! ([`Token`](token::Token), [`Released`](outcome::Released), [`Shutdown`](shutdown::Shutdown),
//! [`Leader`](observe::Leader), [`PermitHolder`](census::PermitHolder)). Imports `error`,
//! `stats`, `algo`, `report`, `config` and `node`; never the public face.

pub(crate) mod acquiring;
pub(crate) mod attempt;
pub(crate) mod census;
pub(crate) mod claim;
pub(crate) mod coordinator;
pub(crate) mod election;
pub(crate) mod extension;
pub(crate) mod fanout;
pub(crate) mod fence_state;
pub(crate) mod fencing;
pub(crate) mod handover;
pub(crate) mod held;
pub(crate) mod holdings;
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
pub(crate) mod shutdown;
pub(crate) mod token;
pub(crate) mod waiters;
