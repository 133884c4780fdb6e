//! A held lock: what it locks, how long it can be relied on, and how to extend or release it.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tracing::Instrument;

use fred::types::{Key, Value};

use crate::algo::quorum::Stake;
use crate::algo::verdict::{self, Timed};
use crate::config::Ttl;
use crate::engine::claim::{Keys, Member, PermitSlot};
use crate::engine::fanout::Round;
use crate::engine::fence_state::Fencing;
use crate::engine::handover::{self, Handover};
use crate::engine::holdings::Registration;
use crate::engine::machinery::Machinery;
use crate::engine::outcome::{self, Released};
use crate::engine::token::Token;
use crate::error::{Error, NodeError};
use crate::node::scripts::release_args;
use crate::node::{Extended, Primitive};

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
    /// The lock's place in its client's registry of held locks (`engine/holdings.rs`).
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

    /// The fencing token handed out so far, 0 if none: what a restore raises the counters
    /// to.
    fn handed_fence(&self) -> u64 {
        self.fencing.as_ref().and_then(Fencing::handed).unwrap_or(0)
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

/// An extension round that has run, detached from its lock (see
/// [`Held::extension`]): what [`Held::settle_extension`] judges.
#[derive(Debug)]
pub(crate) struct Extension {
    ttl: Ttl,
    start: Instant,
    elapsed: Duration,
    round: Round<Extended>,
    /// Tells the nodes that answer after the round was decided whether the extension stands
    /// (see [`Held::restore_missing`]); dropped unsent, it means no.
    stands: watch::Sender<Option<bool>>,
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

    pub(crate) async fn extend(&mut self) -> Result<Duration, Error> {
        self.extend_for(self.ttl).await
    }

    pub(crate) async fn extend_for(&mut self, ttl: Duration) -> Result<Duration, Error> {
        let extension = self.extension(ttl)?.await;
        self.settle_extension(extension)
    }

    /// The checks of [`extend_for`](Self::extend_for), then its round as a future that
    /// does not borrow the lock, so that a keeper can drive many at once while it keeps
    /// the locks; [`settle_extension`](Self::settle_extension) applies its outcome.
    ///
    /// # Errors
    /// [`Error::Config`] for a bad ttl, [`Error::Expired`] if the validity has run out
    /// (nothing is sent then).
    pub(crate) fn extension(
        &self,
        ttl: Duration,
    ) -> Result<impl Future<Output = Extension> + Send + 'static, Error> {
        let ident = Arc::clone(&self.ident);
        let ttl = ident.machinery.config().check_ttl(ttl)?;
        ident.valid(self.valid_until)?;
        let span = tracing::debug_span!(
            "quorumlock.extension",
            resource = %ident.name(),
            yes = tracing::field::Empty,
            refused = tracing::field::Empty,
            failed = tracing::field::Empty,
        );
        let round_span = span.clone();
        Ok(async move {
            let (stands, verdict) = watch::channel(None);
            let decided = Arc::new(AtomicBool::new(false));
            let (keys, value) = (ident.lock_keys().to_vec(), ident.value());
            let primitive = ident.primitive();
            let start = Instant::now();
            let round = ident
                .machinery
                .fanout()
                .round_marking(Some(&decided), Stake::Held, |node| {
                    let extended = node.extend(primitive, keys.clone(), value.clone(), ttl.px);
                    let (index, decided, mut verdict) =
                        (node.index(), Arc::clone(&decided), verdict.clone());
                    let ident = Arc::clone(&ident);
                    async move {
                        let answer = extended.await;
                        if matches!(answer, Ok(Extended::Missing))
                            && decided.load(Ordering::SeqCst)
                            && primitive == Primitive::Lock
                        {
                            // Answered after the round was decided, so not counted: this
                            // node lost our keys, and is restored here if the extension
                            // stands (see `restore_missing`).
                            let stands = verdict.wait_for(Option::is_some).await;
                            if matches!(stands.as_deref(), Ok(Some(true))) {
                                ident.restore(1 << index, ttl.px);
                            }
                        }
                        answer
                    }
                })
                .instrument(round_span)
                .await;
            if !span.is_disabled() {
                span.record("yes", round.tally.yes);
                span.record("refused", round.tally.no);
                span.record("failed", crate::error::failed_nodes(&round.failures));
            }
            Extension {
                ttl,
                start,
                elapsed: start.elapsed(),
                round,
                stands,
            }
        })
    }

    /// Judges an extension round made by [`extension`](Self::extension) of this lock, and
    /// moves the validity as [`extend_for`](Self::extend_for) documents.
    pub(crate) fn settle_extension(&mut self, extension: Extension) -> Result<Duration, Error> {
        let Extension {
            ttl,
            start,
            elapsed,
            round,
            stands,
        } = extension;
        let extended_until = start + ttl.usable;
        let name = self.ident.name();
        match verdict::timed(&round.tally, ttl.ttl, ttl.drift, elapsed) {
            Timed::Valid(left) => {
                stands.send_replace(Some(true));
                self.restore_missing(&round.answers, ttl.px);
                self.ttl = ttl.ttl;
                self.valid_until = extended_until;
                Ok(left)
            }
            Timed::Late => {
                self.valid_until = self.valid_until.min(extended_until);
                Err(outcome::expired(name, elapsed, ttl))
            }
            timed => {
                let gone = timed == Timed::Gone;
                let since = if gone { start } else { extended_until };
                self.valid_until = self.valid_until.min(since);
                Err(outcome::unheld(name, round.tally, round.failures, gone))
            }
        }
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

    pub(crate) async fn release(self) -> Result<Released, Error> {
        let ident = &self.ident;
        if !ident.start_release() {
            return Err(Error::ShutDown);
        }
        ident.machinery.held().remove(ident.entry);
        let (mut tokens, mut claimed) = (vec![ident.value()], None);
        match handover::hand_over(&ident.machinery, ident).await {
            None => {}
            Some(Handover::Done(released)) => return Ok(released),
            Some(Handover::Failed {
                claim,
                tokens: both,
            }) => {
                tokens = both;
                claimed = Some(claim);
            }
        }
        // Made once for every node.
        let args: Arc<[Value]> = release_args(&tokens).into();
        let keys: Arc<[Key]> = ident.lock_keys().into();
        let round = ident
            .machinery
            .fanout()
            .round_marking(None, Stake::Held, |node| {
                node.release(ident.primitive(), &keys, &args)
            });
        tokio::pin!(round);
        // The first poll hands the delete to every node's queue. Whatever this client sends
        // a node after that runs there after the delete (one queue per node, in order): the
        // next waiter in this client's line can attempt now, without waiting for the answers.
        // (If the release fails, so does its attempt: it never gets a lock that is held.)
        let first = futures::poll!(round.as_mut());
        if let Some(claim) = claimed {
            claim.sent();
        }
        // After handovers in a row, this client's next waiter is woken by the nodes' messages
        // alone, as the other clients' waiters are (`engine/handover.rs`).
        if !handover::yields(ident) {
            // The payloads the nodes publish: each token's SHA1, hashed once in `args`.
            for key in ident.lock_keys() {
                let Some(key) = key.as_str() else { continue };
                for hash in args.iter().skip(1).step_by(2) {
                    if let Some(hash) = hash.as_str() {
                        ident.machinery.wakeups().released(key, &hash);
                    }
                }
            }
        }
        let round = match first {
            std::task::Poll::Ready(round) => round,
            std::task::Poll::Pending => round.await,
        };
        outcome::confirmed(ident.name(), round.tally, round.failures)
    }

    /// Sets our keys again, in the background, on the nodes that answered that they lost
    /// them. Those that answer so only after the extension was decided restore themselves
    /// once it stands (in [`extension`](Self::extension)); those that answer that they kept
    /// them get nothing more. Only after a majority that held the lock all along extended
    /// it: restoring strengthens a lock we hold, it never revives one we lost.
    ///
    /// A permit is not restored: a node that lost its claim is one vote fewer until the
    /// permit is taken again.
    fn restore_missing(&self, answers: &[(usize, Extended)], ttl_ms: i64) {
        if self.ident.member.is_some() {
            return;
        }
        let restore = answers
            .iter()
            .filter(|(_, a)| *a == Extended::Missing)
            .fold(0u64, |mask, (i, _)| mask | 1 << i);
        if restore != 0 {
            self.ident.restore(restore, ttl_ms);
        }
    }
}

impl Ident {
    /// Sets our keys again on the nodes in `mask`, in the background (the RESTORE script),
    /// and raises their fencing counters to the fencing token handed out, if one was.
    fn restore(&self, mask: u64, ttl_ms: i64) {
        let (fence, value) = (self.handed_fence(), self.value());
        self.machinery.fanout().detached(mask, |node| {
            node.restore(self.keys.to_vec(), self.locks, value.clone(), ttl_ms, fence)
        });
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
