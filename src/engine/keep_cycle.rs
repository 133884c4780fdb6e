//! One kept lock's cycle in the keeper (`engine/keeper.rs`): when its next extension is
//! due, what an extension's outcome changes, when a failed one is retried, and when the lock
//! is given up as lost. What the keeper keeps is [`Extendable`]: a held claim whose rounds
//! run detached from it. Its status is what the keeper publishes through its [`Publisher`],
//! and the handles of the lock (`engine/kept.rs`) read ([`Shared`]).

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::algo::schedule::KeepSchedule;
use crate::error::{Error, LostReason, NodeError};

/// What the keeper keeps: a held claim (a lock, a permit, a read-write lock's side: `Held`,
/// in `engine/extension.rs`), whose extensions run detached from it (below).
pub(crate) trait Extendable: Send + 'static {
    /// An extension round that has run, detached from its claim.
    type Extension: Send + 'static;

    /// The claim's name, for traces and for the report of its loss.
    fn resource(&self) -> &str;

    fn ttl(&self) -> Duration;

    fn valid_until(&self) -> Instant;

    /// How long it can still be relied on (zero once released).
    fn validity(&self) -> Duration;

    /// The checks of an extension for `ttl`, then its round, as a future that does not
    /// borrow the claim.
    ///
    /// # Errors
    /// [`Error::Config`] for a bad ttl, [`Error::Expired`] if the validity has run out
    /// (nothing is sent then).
    fn extension(
        &self,
        ttl: Duration,
    ) -> Result<impl Future<Output = Self::Extension> + Send + 'static, Error>;

    /// Judges an extension round made by [`extension`](Self::extension), and moves the
    /// validity.
    fn settle_extension(&mut self, extension: Self::Extension) -> Result<Duration, Error>;
}

/// Where a kept lock is in its cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Waiting to extend at `next_try` (or to give up at the loss instant).
    Waiting,
    /// The extension with this sequence number is in flight.
    Extending(u32),
    /// Lost and signalled; kept (so that it is released when stopped) but no longer extended.
    Lost,
}

/// One kept lock in the keeper.
pub(crate) struct KeptEntry<L> {
    pub(crate) lock: L,
    pub(crate) status: Publisher,
    schedule: KeepSchedule,
    /// The lock's ttl when it was handed over: the length of every extension.
    ttl: Duration,
    hold_until: Option<Instant>,
    next_try: Instant,
    last_error: Option<String>,
    /// The nodes that failed in that extension.
    last_failures: Vec<NodeError>,
    hold_reached: bool,
    pub(crate) phase: Phase,
    /// The last sequence number handed out (timers and extensions).
    seq: u32,
    /// The sequence number of the entry's current timer.
    pub(crate) timer: u32,
}

/// What an entry needs next.
pub(crate) enum Next {
    /// A wake-up at this instant.
    Wake(Instant),
    /// An extension for this ttl, now.
    Extend(Duration),
    /// Nothing (lost, or an answer that is no longer awaited).
    Idle,
}

impl<L: Extendable> KeptEntry<L> {
    pub(crate) fn new(lock: L, schedule: KeepSchedule, status: Publisher) -> KeptEntry<L> {
        let kept = Instant::now();
        let next_try = schedule.due(lock.valid_until(), lock.validity(), lock.ttl(), lock.ttl());
        KeptEntry {
            ttl: lock.ttl(),
            hold_until: schedule.max_hold.and_then(|limit| kept.checked_add(limit)),
            next_try,
            lock,
            status,
            schedule,
            last_error: None,
            last_failures: Vec::new(),
            hold_reached: false,
            phase: Phase::Waiting,
            seq: 0,
            timer: 0,
        }
    }

    pub(crate) fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1);
        self.seq
    }

    /// When the loss is signalled at the latest if no extension succeeds.
    pub(crate) fn lost_at(&self, now: Instant) -> Instant {
        self.schedule.lost_at(self.lock.valid_until(), now)
    }

    /// The first wake-up, when the lock is handed over.
    pub(crate) fn first(&self, now: Instant) -> Next {
        Next::Wake(self.next_try.min(self.lost_at(now)))
    }

    /// The entry's timer fired (or falls in the coalescing window of a wake-up at `now`).
    pub(crate) fn fire(&mut self, now: Instant) -> Next {
        let lost_at = self.lost_at(now);
        if self.phase != Phase::Lost && self.status.0.status().lost.is_some() {
            // A handle found the validity over before this wake-up (`LostReason::KeeperLate`).
            self.phase = Phase::Lost;
        }
        match self.phase {
            Phase::Lost => return Next::Idle,
            // The extension in flight raced against the loss instant and lost.
            Phase::Extending(_) if now >= lost_at => {
                self.give_up(now);
                return Next::Idle;
            }
            Phase::Extending(_) => return Next::Wake(lost_at),
            Phase::Waiting => {}
        }
        if now >= lost_at {
            self.give_up(now);
            return Next::Idle;
        }
        // An extension may start a little early, to share a wake-up (`KeepSchedule::early`).
        let early = self.schedule.early(self.ttl, self.last_error.is_some());
        if self.hold_reached || now + early < self.next_try {
            return Next::Wake(self.next_try.min(lost_at));
        }
        // How long to extend for: the ttl, cut down to the hold limit.
        match self.schedule.extend_for(self.hold_until, now, self.ttl) {
            Some(for_ttl) => Next::Extend(for_ttl),
            None => {
                // Too little left to be worth an extension: let the lock run out.
                self.hold_reached = true;
                self.next_try = lost_at;
                Next::Wake(lost_at)
            }
        }
    }

    pub(crate) fn landed(&mut self, seq: u32, for_ttl: Duration, extension: L::Extension) -> Next {
        if self.phase != Phase::Extending(seq) {
            return Next::Idle; // lost meanwhile: the loss instant came first
        }
        let now = Instant::now();
        if now >= self.lost_at(now) {
            // The loss instant passed before the answer was seen: the instant wins the race.
            // (Also when the keeper wakes late, after the validity ended: an extension then
            // must not make the lock look held all along.)
            self.give_up(now);
            return Next::Idle;
        }
        self.phase = Phase::Waiting;
        match self.lock.settle_extension(extension) {
            Ok(_) => {
                self.last_error = None;
                self.last_failures.clear();
                if !self.status.extended(self.lock.valid_until()) {
                    // A handle published the loss first: it stays lost.
                    self.phase = Phase::Lost;
                    return Next::Idle;
                }
                self.next_try = self.schedule.due(
                    self.lock.valid_until(),
                    self.lock.validity(),
                    for_ttl,
                    self.ttl,
                );
                Next::Wake(self.next_try.min(self.lost_at(now)))
            }
            Err(Error::NotHeld { held, nodes, .. }) => {
                self.lose(LostReason::NotHeld { held, nodes });
                Next::Idle
            }
            Err(e) => self.failed(now, e),
        }
    }

    /// An extension failed (no quorum, too slow): keep the (possibly shorter) validity and
    /// try again after the retry delay.
    pub(crate) fn failed(&mut self, now: Instant, error: Error) -> Next {
        tracing::debug!(resource = %self.lock.resource(), %error, "extension failed; retrying");
        crate::stats::extension_failed();
        self.phase = Phase::Waiting;
        self.last_error = Some(error.to_string());
        self.last_failures = error.node_failures().to_vec();
        self.status.shortened(self.lock.valid_until());
        // A retry later than any instant is no retry: the loss instant comes first.
        self.next_try = self.schedule.retry_at(now, self.lost_at(now));
        Next::Wake(self.next_try.min(self.lost_at(now)))
    }

    /// No extension succeeded before the loss instant. If the keeper sees it only after the
    /// validity ended, it did not run in time (its runtime had no thread free): that is the
    /// reason, whatever else went wrong.
    fn give_up(&mut self, now: Instant) {
        let valid_until = self.lock.valid_until();
        let reason = match self.schedule.max_hold {
            _ if now >= valid_until => LostReason::KeeperLate {
                late: now - valid_until,
            },
            Some(limit) if self.hold_reached => LostReason::HoldLimit { limit },
            _ => LostReason::NotExtended {
                last_error: self.last_error.take(),
                failures: std::mem::take(&mut self.last_failures),
            },
        };
        self.lose(reason);
    }

    fn lose(&mut self, reason: LostReason) {
        // Logged and counted there, once per lock.
        self.status.lost(self.lock.resource(), reason);
        self.phase = Phase::Lost;
    }
}

/// What the keeper publishes to the holder.
#[derive(Debug)]
pub(crate) struct Status {
    /// Never later than the validity the nodes guarantee.
    pub(crate) valid_until: Instant,
    pub(crate) extensions: u64,
    lost: Option<LostReason>,
}

/// One kept lock's status as its handles see it, shared by them and the keeper. One
/// allocation per kept lock: a `watch` channel would cost about three times as much.
#[derive(Debug)]
pub(crate) struct Shared {
    status: Mutex<Status>,
    /// Woken when the lock is lost, and when the keeper lets go of it.
    pub(crate) changed: Notify,
    /// Set when the keeper let go of the lock (released, dropped, or the keeper's runtime
    /// shut down): what was published last is final.
    closed: AtomicBool,
}

impl Shared {
    pub(crate) fn new(valid_until: Instant) -> Shared {
        Shared {
            status: Mutex::new(Status {
                valid_until,
                extensions: 0,
                lost: None,
            }),
            changed: Notify::new(),
            closed: AtomicBool::new(false),
        }
    }

    pub(crate) fn status(&self) -> MutexGuard<'_, Status> {
        // A panic while the lock was held cannot leave a `Status` half-written.
        self.status.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Why the lock `resource` was lost, if it was. A lock still kept whose validity has
    /// ended without a signal is lost too: its keeper did not run in time. That is published
    /// here as the keeper would have ([`LostReason::KeeperLate`]), so that every handle
    /// reports it from this call on, without waiting for the keeper to run.
    pub(crate) fn lost_reason(&self, resource: &str) -> Option<LostReason> {
        let status = self.status();
        if status.lost.is_none() && !self.closed.load(Ordering::SeqCst) {
            let now = Instant::now();
            if now >= status.valid_until {
                let late = now - status.valid_until;
                self.publish_loss(status, resource, LostReason::KeeperLate { late });
                return self.status().lost.clone();
            }
        }
        status.lost.clone()
    }

    /// Publishes the loss of `resource`, unless one was published already (the first reason
    /// stays), and wakes `lost()`.
    fn publish_loss(&self, mut status: MutexGuard<'_, Status>, resource: &str, reason: LostReason) {
        if status.lost.is_some() {
            return;
        }
        status.valid_until = status.valid_until.min(Instant::now());
        status.lost = Some(reason.clone());
        drop(status);
        self.changed.notify_waiters();
        tracing::warn!(resource = %resource, %reason, "lock lost");
        crate::stats::lock_lost(&reason);
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }
}

/// What the handles of a lock report once the keeper let go of it without losing it.
pub(crate) fn released() -> LostReason {
    LostReason::NotExtended {
        last_error: Some("the lock was released".into()),
        failures: Vec::new(),
    }
}

/// The keeper's end of a kept lock's status. Dropping it tells the handles that the lock is
/// no longer kept (as the end of a channel would).
#[derive(Debug)]
pub(crate) struct Publisher(pub(crate) Arc<Shared>);

impl Publisher {
    /// An extension succeeded: the lock is valid until `valid_until`. Returns false, and
    /// publishes nothing, if the loss was published first (a handle found the validity over
    /// before the keeper ran): a lost lock stays lost, and its validity never grows again.
    pub(crate) fn extended(&self, valid_until: Instant) -> bool {
        let mut status = self.0.status();
        if status.lost.is_some() {
            return false;
        }
        status.valid_until = valid_until;
        status.extensions += 1;
        true
    }

    /// An extension failed: the validity is at most `valid_until` (never moved later).
    pub(crate) fn shortened(&self, valid_until: Instant) {
        let mut status = self.0.status();
        status.valid_until = status.valid_until.min(valid_until);
    }

    /// The lock `resource` is lost: its validity ends now, and `lost()` resolves. A loss
    /// published before (by a handle) keeps its reason.
    pub(crate) fn lost(&self, resource: &str, reason: LostReason) {
        self.0.publish_loss(self.0.status(), resource, reason);
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        self.0.closed.store(true, Ordering::SeqCst);
        self.0.changed.notify_waiters();
    }
}
