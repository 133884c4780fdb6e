//! A held claim, in one place: what it claims ([`Keys`], a [`Member`]), its [`Token`], its
//! fencing state ([`Fencing`], [`granted`]), what a round on it says ([`confirmed`],
//! [`unheld`], [`Released`]), and [`Held`] itself (ARCHITECTURE.md, its `engine/` row). The
//! rounds that record a fencing token are in `engine/fencing.rs` (design 2.6).
//!
//! The retry jitter uses a separate fast RNG (`rand::rng()`), so that nothing about a token
//! can be learned from timing and no token draws from a userspace generator.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fred::types::{Key, Value};
use rand::rngs::OsRng;
use rand::TryRngCore;

use crate::algo::quorum::Tally;
use crate::algo::verdict::{self, Confirmation};
use crate::engine::acquire::{Grant, Resources};
use crate::engine::fanout::Round;
use crate::engine::machinery::{Hints, Machinery, Registration};
use crate::error::{Error, NodeError};
use crate::node::{Acquired, CounterRead, Primitive};

const BYTES: usize = 16;

/// The unguessable value stored under a locked key: 32 lowercase hex digits (128 bits).
///
/// Only the holder knows it, so only the holder's compare-and-delete and compare-and-expire
/// scripts can touch the key.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Token([u8; BYTES * 2]);

impl Token {
    /// Draws a fresh token from the operating system's CSPRNG.
    pub(crate) fn generate() -> Result<Token, Error> {
        let mut raw = [0u8; BYTES];
        OsRng
            .try_fill_bytes(&mut raw)
            .map_err(|e| Error::Entropy(e.to_string()))?;
        Ok(Token::from_bytes(raw))
    }

    fn from_bytes(raw: [u8; BYTES]) -> Token {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut hex = [0u8; BYTES * 2];
        for (i, b) in raw.iter().enumerate() {
            hex[2 * i] = HEX[usize::from(b >> 4)];
            hex[2 * i + 1] = HEX[usize::from(b & 0x0f)];
        }
        Token(hex)
    }

    /// The token as stored in Redis.
    pub fn as_str(&self) -> &str {
        // Only ASCII hex digits are ever written into the array.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Shows only a prefix: enough to correlate logs, not enough to forge a release.
impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Token({}…)", &self.as_str()[..8])
    }
}

/// The keys of one lock: the lock keys, then (with fencing) their fencing counters.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    pub(crate) all: Vec<Key>,
    /// How many of `all` are lock keys; the rest are fencing counters.
    pub(crate) locks: usize,
}

impl Keys {
    pub(crate) fn locks(&self) -> &[Key] {
        &self.all[..self.locks]
    }

    pub(crate) fn fencing(&self) -> bool {
        self.all.len() > self.locks
    }

    /// The fencing counters (none without fencing).
    pub(crate) fn counters(&self) -> &[Key] {
        &self.all[self.locks..]
    }

    /// What an acquisition round sends: every key when it reads the fencing counters, the
    /// lock keys alone otherwise.
    pub(crate) fn sent(&self, reads_counters: bool) -> &[Key] {
        if reads_counters {
            &self.all
        } else {
            self.locks()
        }
    }
}

/// A permit's slot, and how many permits its semaphore has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PermitSlot {
    pub(crate) slot: u32,
    pub(crate) permits: u32,
}

/// What a holder's claim is, where it is a member of a sorted set rather than a lock's key:
/// a semaphore's permit (design 2.9), or a read-write lock's reader or writer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Member {
    Permit(PermitSlot),
    Reader,
    Writer,
}

/// Which side of a [`RwLock`](crate::RwLock) an [`RwGuard`](crate::RwGuard) holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Shared with other readers.
    Read,
    /// Alone.
    Write,
}

/// The outcome of [`Lock::release`](crate::Lock::release).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Released {
    /// How many nodes confirmed that they deleted our key before `release` returned (the
    /// others still get the delete, in the background).
    pub released: usize,
    /// How many nodes are configured.
    pub nodes: usize,
}

/// A round on a held claim, judged by [`verdict::confirmation`]: [`Released`] when a majority
/// confirmed it, [`Error::NotHeld`] when the claim is gone, [`Error::NoQuorum`] when failed
/// nodes left it undecided.
pub(crate) fn confirmed(
    resource: &str,
    tally: Tally,
    failures: Vec<NodeError>,
) -> Result<Released, Error> {
    match verdict::confirmation(&tally) {
        Confirmation::Confirmed => Ok(Released {
            released: tally.yes,
            nodes: tally.nodes,
        }),
        confirmation => Err(unheld(
            resource,
            tally,
            failures,
            confirmation == Confirmation::Gone,
        )),
    }
}

/// Why a round on a held claim did not confirm it: [`Error::NotHeld`] when it is `gone`,
/// else [`Error::NoQuorum`].
pub(crate) fn unheld(resource: &str, tally: Tally, failures: Vec<NodeError>, gone: bool) -> Error {
    if gone {
        return Error::NotHeld {
            resource: resource.to_string(),
            held: tally.yes,
            nodes: tally.nodes,
        };
    }
    Error::NoQuorum {
        resource: resource.to_string(),
        needed: tally.quorum(),
        agreed: tally.yes,
        failures,
    }
}

/// A lock's fencing state, shared by the lock and its handles.
#[derive(Debug)]
pub(crate) struct Fencing {
    /// The largest counter the acquisition read on the majority that granted the lock, when
    /// it read them; `None` when it sent a `SET NX`.
    pub(crate) seen: Option<u64>,
    /// The token the acquisition recorded on a majority, if it did (its hint).
    pub(crate) recorded: Option<u64>,
    /// The token handed out; 0 until one is (tokens start at 1).
    handed: AtomicU64,
}

impl Fencing {
    /// The state of a fresh lock whose acquisition read the counters (`Some`) or not, and
    /// recorded a token (`Some`) or not.
    pub(crate) fn new(seen: Option<u64>, recorded: Option<u64>) -> Fencing {
        Fencing {
            seen,
            recorded,
            handed: AtomicU64::new(0),
        }
    }

    pub(crate) fn handed(&self) -> Option<u64> {
        match self.handed.load(Ordering::SeqCst) {
            0 => None,
            token => Some(token),
        }
    }

    /// Hands out `token`, unless a concurrent call handed out one already: then that one,
    /// so that a lock only ever shows one token.
    pub(crate) fn hand_out(&self, token: u64) -> u64 {
        match self
            .handed
            .compare_exchange(0, token, Ordering::SeqCst, Ordering::SeqCst)
        {
            Ok(_) => token,
            Err(first) => first,
        }
    }
}

/// The fencing state of a lock granted by `round` on `keys`: none without fencing; with the
/// counters the round read, if it read them on a majority ([`largest`]), and the token
/// `hint` if the round recorded it on a majority ([`recorded`]). `hints` learns either.
pub(crate) fn granted(
    keys: &Keys,
    reads_counters: bool,
    round: &Round<Acquired>,
    (hint, hints): (u64, &Hints),
) -> Option<Fencing> {
    if !keys.fencing() {
        return None;
    }
    if !reads_counters {
        return Some(Fencing::new(None, None));
    }
    let (seen, recorded) = (largest(round), recorded(round, hint));
    if let Some(known) = recorded.or(seen) {
        hints.note(keys.counters(), known);
    }
    Some(Fencing::new(seen, recorded))
}

/// The largest counter among the answers of a round that read them (the nodes that said
/// yes), if a majority of them could be trusted (`algo/lineage/`): `None` otherwise, and the
/// counters are read again by a PEEK round when the token is asked for.
pub(crate) fn largest(round: &Round<Acquired>) -> Option<u64> {
    let read = || {
        round.answers.iter().filter_map(|(_, a)| match a.0 {
            Some(CounterRead::Read(c)) => Some(c),
            _ => None,
        })
    };
    (read().count() >= round.tally.quorum()).then(|| read().max().unwrap_or(0))
}

/// `hint`, if an ACQUIRE round sent with it recorded it on a majority: a majority of trusted
/// nodes said yes with counters below it, and so raised them to it (`node/scripts/`).
pub(crate) fn recorded(round: &Round<Acquired>, hint: u64) -> Option<u64> {
    let below = round
        .answers
        .iter()
        .filter(|(_, a)| matches!(a.0, Some(CounterRead::Read(c)) if c < hint))
        .count();
    (hint > 0 && below >= round.tally.quorum()).then_some(hint)
}

/// What a successful acquisition hands to [`Held::new`] (its fields as [`Ident`]'s and
/// [`Held`]'s).
#[derive(Debug)]
pub(crate) struct Acquisition {
    pub(crate) machinery: Arc<Machinery>,
    pub(crate) target: Resources,
    pub(crate) token: Token,
    pub(crate) grant: Grant,
    pub(crate) ttl: Duration,
    pub(crate) valid_until: Instant,
    pub(crate) acquired_on: usize,
    pub(crate) failures: Vec<NodeError>,
}

/// What never changes in a lock, stored compactly and shared by the lock and, once it is
/// kept, by its handles: enough to name it and to run a round on it. A service may hold many
/// locks at once (every byte here is multiplied by 100,000 kept locks).
#[derive(Debug)]
pub(crate) struct Ident {
    pub(crate) machinery: Arc<Machinery>,
    /// The resources' names joined by commas, only for several resources (for one, it is
    /// `resources[0]`).
    joined: Option<Box<str>>,
    pub(crate) resources: Box<[String]>,
    /// The lock keys, then (with fencing) their fencing counters.
    pub(crate) keys: Box<[Key]>,
    /// How many of `keys` are lock keys.
    pub(crate) locks: usize,
    /// The token; the value sent to the nodes is made from it when needed.
    pub(crate) token: Token,
    /// `None` when fencing is off.
    pub(crate) fencing: Option<Fencing>,
    /// How many handovers in a row led to this lock (see `engine/handover.rs`).
    pub(crate) handovers: u32,
    /// For a permit (or a read-write lock's side), its claim: the lock key is then the
    /// sorted set's key, and the value the scripts get is the claim `slot:token` (`r:token`,
    /// `w:token`).
    member: Option<Member>,
    /// Set when the lock's release starts (`release`, a drop, or the client's shutdown):
    /// whoever sets it sends the release, once.
    released: AtomicBool,
    /// The lock's place in its client's registry of held locks (`engine/machinery.rs`).
    entry: Registration,
}

impl Ident {
    /// Marks the lock's release as started; true for the one caller that should send it,
    /// which also removes the lock from its client's registry.
    pub(crate) fn start_release(&self) -> bool {
        let first = !self.released.swap(true, Ordering::SeqCst);
        if first {
            self.machinery.held.remove(self.entry);
        }
        first
    }

    pub(crate) fn is_released(&self) -> bool {
        self.released.load(Ordering::SeqCst)
    }

    pub(crate) fn name(&self) -> &str {
        match &self.joined {
            Some(joined) => joined,
            None => self.resources.first().map_or("", String::as_str),
        }
    }

    pub(crate) fn lock_keys(&self) -> &[Key] {
        &self.keys[..self.locks]
    }

    /// The token as the scripts get it: for a permit, its claim `slot:token`.
    pub(crate) fn value(&self) -> Value {
        self.claim_of(&self.token)
    }

    /// What the scripts get for `token` holding what this holds: the token for a lock, the
    /// claim `slot:token` for a permit (a handover's new token holds the same slot).
    pub(crate) fn claim_of(&self, token: &Token) -> Value {
        let token = token.as_str();
        match self.member {
            None => Value::from(token),
            Some(Member::Permit(PermitSlot { slot, .. })) => Value::from(format!("{slot}:{token}")),
            Some(Member::Reader) => Value::from(format!("r:{token}")),
            Some(Member::Writer) => Value::from(format!("w:{token}")),
        }
    }

    pub(crate) fn member(&self) -> Option<Member> {
        self.member
    }

    pub(crate) fn slot(&self) -> Option<u32> {
        self.permit_slot().map(|s| s.slot)
    }

    /// For a permit, its slot and its semaphore's number of permits.
    pub(crate) fn permit_slot(&self) -> Option<PermitSlot> {
        match self.member {
            Some(Member::Permit(slot)) => Some(slot),
            _ => None,
        }
    }

    /// What the rounds on it act on: a lock's keys, or a permit's claim.
    pub(crate) fn primitive(&self) -> Primitive {
        match self.member {
            None => Primitive::Lock,
            Some(_) => Primitive::Permit,
        }
    }

    /// Starts a release of it on every node without waiting for it (needs a runtime; a
    /// no-op without one, the keys then expire after their ttl).
    pub(crate) fn release_detached(&self) {
        self.machinery.fanout.release_detached(
            self.primitive(),
            self.lock_keys().to_vec(),
            self.value(),
        );
    }

    /// `Ok` while `valid_until` has not passed, [`Error::Expired`] after;
    /// [`Error::ShutDown`] once the client's shutdown released the lock.
    pub(crate) fn valid(&self, valid_until: Instant) -> Result<(), Error> {
        if self.is_released() {
            return Err(Error::ShutDown);
        }
        let now = Instant::now();
        if now < valid_until {
            return Ok(());
        }
        Err(Error::Expired {
            resource: self.name().to_string(),
            ago: now - valid_until,
        })
    }
}

#[derive(Debug)]
pub(crate) struct Held {
    ident: Arc<Ident>,
    ttl: Duration,
    valid_until: Instant,
    acquired_on: usize,
    failures: Box<[NodeError]>,
}

impl Held {
    pub(crate) fn new(acquired: Acquisition) -> Held {
        let Acquisition { target, grant, .. } = acquired;
        // One resource's name is the joined name: do not keep it twice.
        let joined = match target.resources.as_slice() {
            [only] if *only == target.name => None,
            _ => Some(target.name.into_boxed_str()),
        };
        // Entered in the client's registry, for its shutdown (a weak pointer: the registry
        // never keeps a lock alive).
        let machinery = acquired.machinery;
        let ident = Arc::new_cyclic(|me| Ident {
            entry: machinery.held.enter(&acquired.token, me.clone()),
            machinery,
            joined,
            resources: target.resources.into_boxed_slice(),
            keys: target.keys.all.into_boxed_slice(),
            locks: target.keys.locks,
            token: acquired.token,
            fencing: grant.fencing,
            handovers: grant.handovers,
            member: grant.member,
            released: AtomicBool::new(false),
        });
        Held {
            ident,
            ttl: acquired.ttl,
            valid_until: acquired.valid_until,
            acquired_on: acquired.acquired_on,
            failures: acquired.failures.into_boxed_slice(),
        }
    }

    pub(crate) fn ident(&self) -> &Arc<Ident> {
        &self.ident
    }

    /// Drops what only the holder of a plain `Lock` can read (the failures of the
    /// acquisition), before the lock is handed to the keeper.
    pub(crate) fn forget_failures(&mut self) {
        self.failures = Box::default();
    }

    pub(crate) fn resource(&self) -> &str {
        self.ident.name()
    }

    pub(crate) fn resources(&self) -> &[String] {
        &self.ident.resources
    }

    pub(crate) fn token(&self) -> &Token {
        &self.ident.token
    }

    pub(crate) async fn fencing_token(&self) -> Result<u64, Error> {
        let valid_until = self.valid_until;
        self.ident
            .fencing_token(|| self.ident.valid(valid_until), valid_until)
            .await
    }

    pub(crate) fn ttl(&self) -> Duration {
        self.ttl
    }

    pub(crate) fn valid_until(&self) -> Instant {
        self.valid_until
    }

    /// An extension stands: the claim is valid until `until`, and its ttl is `ttl` now.
    pub(crate) fn extended(&mut self, ttl: Duration, until: Instant) {
        self.ttl = ttl;
        self.valid_until = until;
    }

    /// A round found the claim valid no later than `until` (its validity never grows here).
    pub(crate) fn shortened(&mut self, until: Instant) {
        self.valid_until = self.valid_until.min(until);
    }

    pub(crate) fn validity(&self) -> Duration {
        if self.ident.is_released() {
            return Duration::ZERO;
        }
        self.valid_until.saturating_duration_since(Instant::now())
    }

    pub(crate) fn is_valid(&self) -> bool {
        !self.validity().is_zero()
    }

    pub(crate) fn acquired_on(&self) -> usize {
        self.acquired_on
    }

    pub(crate) fn failures(&self) -> &[NodeError] {
        &self.failures
    }

    /// Lets go of the lock without releasing it: its keys expire on the nodes at their ttl.
    /// Neither the drop nor the client's shutdown releases it after this.
    pub(crate) fn leave(self) {
        self.ident.start_release();
        // The drop finds the release started, and sends nothing.
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if self.ident.start_release() {
            self.ident.release_detached();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_32_hex_digits_and_distinct() {
        let a = Token::generate().unwrap();
        let b = Token::generate().unwrap();
        assert_eq!(a.as_str().len(), 32);
        assert!(a.as_str().bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }

    #[test]
    fn hex_encoding_is_exact() {
        let t = Token::from_bytes([0x01, 0xab, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10]);
        assert_eq!(t.as_str(), "01abff00000000000000000000000010");
        assert_eq!(format!("{t:?}"), "Token(01abff00…)");
    }
}
