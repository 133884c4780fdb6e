//! The machinery: the coordinator's fan-out and
//! background work ([`coordinator`]), a held lock's extension and release ([`held`]),
//! handovers ([`handover`]), fencing ([`fencing`]), the line of waiters ([`waiters`]), a
//! kept lock's shared state ([`kept`]) and the task that keeps locks ([`keeper`]),
//! election ([`election`]) and its observers ([`observe`]), the census of a
//! semaphore's holders ([`census`]), re-seeding of counters
//! ([`seeder`]), shutdown ([`shutdown`]), node inspection ([`inspect`]) and the drawing of
//! lock tokens from the operating system's CSPRNG ([`token`]).
//!
//! Its only public items are values it hands out, re-exported at the crate root
//! ([`Token`](token::Token), [`Released`](held::Released), [`Shutdown`](shutdown::Shutdown),
//! [`Leader`](observe::Leader), [`PermitHolder`](census::PermitHolder)). Imports `error`, `stats`, `algo`, `report`, `config` and `node`; never the public face.

pub(crate) mod attempt;
pub(crate) mod census;
pub(crate) mod coordinator;
pub(crate) mod election;
pub(crate) mod fanout;
pub(crate) mod fencing;
pub(crate) mod handover;
pub(crate) mod held;
pub(crate) mod inspect;
pub(crate) mod keeper;
pub(crate) mod kept;
pub(crate) mod observe;
pub(crate) mod rwlock;
pub(crate) mod seeder;
pub(crate) mod semaphore;
pub(crate) mod shutdown;
pub(crate) mod token;
pub(crate) mod waiters;
