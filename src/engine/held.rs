//! A held lock: what it locks, how long it can be relied on, and how to extend or release it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fred::types::{Key, Value};

use crate::engine::claim::{Keys, Member, PermitSlot};
use crate::engine::fence_state::Fencing;
use crate::engine::machinery::{Machinery, Registration};
use crate::engine::token::Token;
use crate::error::{Error, NodeError};
use crate::node::Primitive;

/// What a successful acquisition hands to [`Held::new`].
#[derive(Debug)]
pub(crate) struct Acquisition {
    pub(crate) machinery: Arc<Machinery>,
    pub(crate) name: String,
    pub(crate) resources: Vec<String>,
    pub(crate) keys: Keys,
    pub(crate) token: Token,
    /// `None` when fencing is off.
    pub(crate) fencing: Option<Fencing>,
    pub(crate) ttl: Duration,
    pub(crate) valid_until: Instant,
    pub(crate) acquired_on: usize,
    pub(crate) failures: Vec<NodeError>,
    /// How many handovers in a row led to this lock (0: its holder's own attempt got it).
    pub(crate) handovers: u32,
    /// For a permit or a read-write lock's side, its claim (design 2.9); `None` for a lock.
    pub(crate) member: Option<Member>,
}

/// What never changes in a lock, stored compactly and shared by the lock and, once it is
/// kept, by its handles: enough to name it and to run a round on it. A service may hold many
/// locks at once (every byte here is multiplied by 100,000 kept locks).
#[derive(Debug)]
pub(crate) struct Ident {
    machinery: Arc<Machinery>,
    /// The resources' names joined by commas, only for several resources (for one, it is
    /// `resources[0]`).
    joined: Option<Box<str>>,
    resources: Box<[String]>,
    /// The lock keys, then (with fencing) their fencing counters.
    keys: Box<[Key]>,
    /// How many of `keys` are lock keys.
    locks: usize,
    /// The token; the value sent to the nodes is made from it when needed.
    token: Token,
    /// `None` when fencing is off.
    fencing: Option<Fencing>,
    /// How many handovers in a row led to this lock (see `engine/handover.rs`).
    handovers: u32,
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
    /// Marks the lock's release as started; true for the one caller that should send it.
    pub(crate) fn start_release(&self) -> bool {
        !self.released.swap(true, Ordering::SeqCst)
    }

    /// Whether the lock's release has started.
    fn is_released(&self) -> bool {
        self.released.load(Ordering::SeqCst)
    }

    pub(crate) fn entry(&self) -> Registration {
        self.entry
    }

    pub(crate) fn handovers(&self) -> u32 {
        self.handovers
    }

    pub(crate) fn resources(&self) -> &[String] {
        &self.resources
    }

    pub(crate) fn machinery(&self) -> &Arc<Machinery> {
        &self.machinery
    }

    pub(crate) fn name(&self) -> &str {
        match &self.joined {
            Some(joined) => joined,
            None => self.resources.first().map_or("", String::as_str),
        }
    }

    pub(crate) fn token(&self) -> &Token {
        &self.token
    }

    /// The lock keys, then (with fencing) their fencing counters.
    pub(crate) fn keys(&self) -> &[Key] {
        &self.keys
    }

    /// How many of [`keys`](Self::keys) are lock keys.
    pub(crate) fn locks(&self) -> usize {
        self.locks
    }

    pub(crate) fn lock_keys(&self) -> &[Key] {
        &self.keys[..self.locks]
    }

    pub(crate) fn fencing(&self) -> Option<&Fencing> {
        self.fencing.as_ref()
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

    /// Its claim, if it is a member of a sorted set.
    pub(crate) fn member(&self) -> Option<Member> {
        self.member
    }

    /// For a permit, its slot.
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
        self.machinery.fanout().release_detached(
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
        let Acquisition {
            machinery,
            name,
            resources,
            keys,
            token,
            fencing,
            ttl,
            valid_until,
            acquired_on,
            failures,
            handovers,
            member,
        } = acquired;
        // One resource's name is the joined name: do not keep it twice.
        let joined = match resources.as_slice() {
            [only] if *only == name => None,
            _ => Some(name.into_boxed_str()),
        };
        // Entered in the client's registry, for its shutdown (a weak pointer: the registry
        // never keeps a lock alive).
        let ident = Arc::new_cyclic(|me| {
            let entry = machinery.held().enter(&token, me.clone());
            Ident {
                machinery,
                joined,
                resources: resources.into_boxed_slice(),
                keys: keys.all.into_boxed_slice(),
                locks: keys.locks,
                token,
                fencing,
                handovers,
                member,
                released: AtomicBool::new(false),
                entry,
            }
        });
        Held {
            ident,
            ttl,
            valid_until,
            acquired_on,
            failures: failures.into_boxed_slice(),
        }
    }

    pub(crate) fn machinery(&self) -> &Arc<Machinery> {
        &self.ident.machinery
    }

    /// What never changes in the lock, to share with its handles.
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
        let ident = &self.ident;
        if ident.start_release() {
            ident.machinery.held().remove(ident.entry);
        }
        // The drop finds the release started, and sends nothing.
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let ident = &self.ident;
        if ident.start_release() {
            ident.machinery.held().remove(ident.entry);
            ident.release_detached();
        }
    }
}
