//! The machinery, as a stack, from the bottom:
//!
//! - at the bottom, what imports nothing of the engine above it: the fan-out of rounds to
//!   every node and the background completion of their calls ([`fanout`]); the keeper's
//!   cycle of one kept lock and its status ([`keep_cycle`]) and its task ([`keeper`]),
//!   generic over what they keep;
//! - the client's machinery ([`machinery`]: the fan-out and the registries a held claim
//!   uses: held locks, fencing hints, the keeper; the shutdown that releases the held
//!   locks), a held claim ([`held`]: its keys, token and fencing state, and what a round on
//!   it says) and the line of waiters ([`waiters`]), which hands a held claim over: the one
//!   circle of files left, since the registries hold the claims and a claim keeps the
//!   machinery it was granted by;
//! - the one acquisition path ([`acquire`]: the loop that retries and waits in line, one
//!   attempt for every kind of claim, its grant tail and its errors written once);
//! - a held claim's extension ([`extension`]), release and handover ([`handover`]), its
//!   fencing token's rounds ([`fencing`]), and keeping it ([`kept`]);
//!   the claim kinds: a lock ([`coordinator`]), a permit or a read-write lock's side
//!   ([`semaphore`], [`rwlock`]), a handover ([`handover`]);
//! - the client ([`coordinator`]); the census of a semaphore's holders ([`census`]),
//!   re-seeding of counters ([`seeder`]), node inspection ([`inspect`]); election
//!   ([`election`]) and who leads ([`observe`]).
//!
//! Its only public items are values it hands out, re-exported at the crate root
//! ([`Token`](held::Token), [`Released`](held::Released), [`Access`](held::Access),
//! [`Shutdown`](machinery::Shutdown), [`Leader`](observe::Leader),
//! [`PermitHolder`](census::PermitHolder), [`RwHolder`](census::RwHolder)). Imports `error`,
//! `stats`, `algo`, `report`, `config` and `node`; never the public face.

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
