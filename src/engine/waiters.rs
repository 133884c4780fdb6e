//! Waiting for a release instead of polling, in line (design 2.4a: the release messages,
//! the arming that misses no release, one attempt per release): per client and key, a
//! queue of waiters ([`Wakeups`]) whose head alone attempts. A release by this client may
//! hand the lock straight to the waiting head, which it claims first
//! ([`Wakeups::claim_head`], `engine/handover.rs`, design 2.4b).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::algo::keys;
use crate::algo::quorum::quorum;
use crate::config::Ttl;
use crate::engine::held::Held;
use crate::engine::machinery::Machinery;
use crate::node::subscriber::Inbox;

/// How many recent releases of a key are remembered to recognise their other messages.
const RECENT: usize = 8;

/// The queues of one client, by key.
#[derive(Debug, Default)]
pub(crate) struct Wakeups {
    keys: Mutex<HashMap<String, Line>>,
    /// The messages of one release after which a majority of nodes has deleted the key.
    quorum: usize,
}

#[derive(Debug, Default)]
struct Line {
    waiters: VecDeque<Arc<Ticket>>,
    /// The latest releases seen, with how many of their messages came (`usize::MAX` once
    /// this client saw it confirmed by a majority).
    recent: VecDeque<(Box<str>, usize)>,
}

/// One waiter's place in a queue.
#[derive(Debug, Default)]
pub(crate) struct Ticket {
    notify: Notify,
    /// Set with a wake-up that means "released: attempt now" (rather than "you are the head
    /// now").
    released: AtomicBool,
    head: AtomicBool,
    /// [`BUSY`], [`WAITING`] or [`CLAIMED`].
    state: AtomicU8,
    /// The ttl the waiter asked for, which a lock handed over to it gets (`None`: it takes
    /// no handover).
    ttl: Option<Ttl>,
    /// What it waits for: a lock (`None`), or a permit of a semaphore of this many permits.
    /// Only a release of the same kind is handed over to it.
    permits: Option<u32>,
    /// A lock handed over to this waiter, until it takes it.
    handed: Mutex<Option<Held>>,
}

/// The waiter is attempting, or about to (not in [`wait`]).
const BUSY: u8 = 0;
/// The waiter is in [`wait`]: a release may claim it for a handover.
const WAITING: u8 = 1;
/// A release is handing the lock over to this waiter: it makes no attempt and does not give
/// up until the handover ends (with [`Ticket::hand`] or [`Ticket::unclaim`]).
const CLAIMED: u8 = 2;

impl Ticket {
    /// Whether this waiter is the head of its line (the one that makes attempts).
    pub(crate) fn is_head(&self) -> bool {
        self.head.load(Ordering::SeqCst)
    }

    fn wake(&self, released: bool) {
        if released {
            self.released.store(true, Ordering::SeqCst);
        }
        self.notify.notify_one();
    }

    /// Gives the waiter the lock a handover got for it, and wakes it.
    pub(crate) fn hand(&self, lock: Held) {
        if let Ok(mut handed) = self.handed.lock() {
            *handed = Some(lock);
        }
        self.notify.notify_one();
    }

    /// Ends a claim without a lock: the waiter waits (or attempts) as before. A wake-up
    /// follows when the lock was released instead.
    pub(crate) fn unclaim(&self) {
        let _ = self
            .state
            .compare_exchange(CLAIMED, WAITING, Ordering::SeqCst, Ordering::SeqCst);
        self.notify.notify_one();
    }

    pub(crate) fn take_handed(&self) -> Option<Held> {
        self.handed.lock().ok().and_then(|mut handed| handed.take())
    }

    /// Leaves [`wait`], unless a release claimed this waiter.
    fn stop_waiting(&self) -> bool {
        self.state
            .compare_exchange(WAITING, BUSY, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    }
}

/// How a wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Woken {
    /// A release: attempt now.
    Released,
    /// The head's pause ran out: attempt now.
    Paused,
    /// A release handed the lock over: take it with [`Ticket::take_handed`].
    Handed,
    /// The waiter's time is up.
    Deadline,
}

impl Inbox for Wakeups {
    /// A message on a release channel.
    fn message(&self, channel: &str, payload: &str) {
        if let Some(key) = channel.strip_prefix(keys::CHANNEL_PREFIX) {
            self.seen(key, payload, false);
        }
    }
}

impl Wakeups {
    pub(crate) fn new(nodes: usize) -> Wakeups {
        Wakeups {
            keys: Mutex::default(),
            quorum: crate::algo::quorum::quorum(nodes),
        }
    }

    pub(crate) fn queued(&self, key: &str) -> bool {
        self.keys
            .lock()
            .map(|keys| keys.get(key).is_some_and(|q| !q.waiters.is_empty()))
            .unwrap_or(false)
    }

    /// Joins the queue for `key`, for a lock (`permits` is `None`) or a permit of a semaphore
    /// of `permits`, of `ttl` (`None`: no handover to this waiter).
    /// `subscribe` is called, while no other waiter can join or leave, when the queue was
    /// empty: subscriptions and unsubscriptions then reach each node in the order the queue
    /// emptied and filled.
    pub(crate) fn join(
        &self,
        key: &str,
        ttl: Option<Ttl>,
        permits: Option<u32>,
        subscribe: impl FnOnce(),
    ) -> Arc<Ticket> {
        let ticket = Arc::new(Ticket {
            ttl,
            permits,
            ..Ticket::default()
        });
        let Ok(mut keys) = self.keys.lock() else {
            return ticket;
        };
        let queue = keys.entry(key.to_string()).or_default();
        if queue.waiters.is_empty() {
            ticket.head.store(true, Ordering::SeqCst);
            subscribe();
        }
        queue.waiters.push_back(Arc::clone(&ticket));
        ticket
    }

    /// Leaves the queue for `key`. A head that leaves without the lock hands the turn on with
    /// a wake-up (the lock may be free, or a release woke it that it did not use); one that
    /// got it hands on the headship only, and its release will wake the next, unless a
    /// release woke it that it did not use (a semaphore's other permit, released while this
    /// waiter was being handed one): that wake-up goes to the next. `unsubscribe`
    /// is called when the queue is empty.
    pub(crate) fn leave(
        &self,
        key: &str,
        ticket: &Arc<Ticket>,
        acquired: bool,
        unsubscribe: impl FnOnce(),
    ) {
        let Ok(mut keys) = self.keys.lock() else {
            return;
        };
        let Some(queue) = keys.get_mut(key) else {
            return;
        };
        let was_head = queue
            .waiters
            .front()
            .is_some_and(|t| Arc::ptr_eq(t, ticket));
        queue.waiters.retain(|t| !Arc::ptr_eq(t, ticket));
        if let Some(next) = queue.waiters.front() {
            if was_head {
                next.head.store(true, Ordering::SeqCst);
                // A release that woke this waiter and that it did not use (it left with a
                // permit handed over instead, or without one) is the next one's to use.
                next.wake(!acquired || ticket.released.load(Ordering::SeqCst));
            }
        } else {
            keys.remove(key);
            unsubscribe();
        }
    }

    /// Claims the head of the line for `key` for a handover, if it is waiting and takes one
    /// of this kind (a lock, or a permit of a semaphore of `permits`): returns its ticket and
    /// the ttl it asked for. The head then neither attempts nor gives up until
    /// [`Ticket::hand`] or [`Ticket::unclaim`].
    pub(crate) fn claim_head(&self, key: &str, permits: Option<u32>) -> Option<(Arc<Ticket>, Ttl)> {
        let keys = self.keys.lock().ok()?;
        let head = keys.get(key)?.waiters.front()?;
        if head.permits != permits {
            return None;
        }
        let ttl = head.ttl?;
        head.state
            .compare_exchange(WAITING, CLAIMED, Ordering::SeqCst, Ordering::SeqCst)
            .ok()?;
        Some((Arc::clone(head), ttl))
    }

    /// A node announced a release of `key`. The first message of a release wakes the head of
    /// the queue at once (the other nodes delete at about the same time); the message that
    /// shows a majority deleted wakes it again, in case the first attempt came too early.
    /// Other messages wake nobody. `confirmed`: this client saw its release confirmed by a
    /// majority, which wakes the head, and the release's messages wake nobody after that.
    pub(crate) fn seen(&self, key: &str, payload: &str, confirmed: bool) {
        let Ok(mut keys) = self.keys.lock() else {
            return;
        };
        let Some(queue) = keys.get_mut(key) else {
            return;
        };
        let count = match queue.recent.iter_mut().find(|(p, _)| &**p == payload) {
            Some((_, count)) if *count == usize::MAX => return,
            Some((_, count)) => {
                *count = if confirmed { usize::MAX } else { *count + 1 };
                *count
            }
            None => {
                if queue.recent.len() == RECENT {
                    queue.recent.pop_front();
                }
                let count = if confirmed { usize::MAX } else { 1 };
                queue.recent.push_back((payload.into(), count));
                count
            }
        };
        if count == 1 || count == self.quorum || count == usize::MAX {
            if let Some(head) = queue.waiters.front() {
                head.wake(true);
            }
        }
    }

    /// Wakes every waiter of every queue, as a release would (the client is shutting down:
    /// their next attempt fails at once).
    pub(crate) fn wake_all(&self) {
        let Ok(keys) = self.keys.lock() else {
            return;
        };
        for ticket in keys.values().flat_map(|queue| &queue.waiters) {
            ticket.wake(true);
        }
    }
}

/// A caller's place in the line for a key; it leaves the line when dropped, and the last to
/// leave unsubscribes.
#[derive(Debug)]
pub(crate) struct Place {
    client: Arc<Machinery>,
    key: String,
    pub(crate) ticket: Arc<Ticket>,
    /// Whether it leaves with the lock (then the next in line waits for its release).
    pub(crate) acquired: bool,
}

impl Drop for Place {
    fn drop(&mut self) {
        let inner = &self.client;
        let channel = keys::release_channel(&self.key);
        inner
            .wakeups
            .leave(&self.key, &self.ticket, self.acquired, || {
                for node in inner.fanout.nodes() {
                    node.listener().unsubscribe(vec![channel.clone()]);
                }
            });
    }
}

impl Place {
    /// Joins the line of this client's callers waiting for `key`; the first subscribes to the
    /// key's release channel on every node and waits until a majority confirmed it (or every
    /// node answered or timed out).
    pub(crate) async fn join(
        client: &Arc<Machinery>,
        key: &str,
        ttl: Ttl,
        permits: Option<u32>,
    ) -> Place {
        let wakeups = &client.wakeups;
        let channel = keys::release_channel(key);
        let mut confirmations = Vec::new();
        let ticket = wakeups.join(key, Some(ttl), permits, || {
            for node in client.node_list() {
                confirmations.push(node.listener().subscribe(vec![channel.clone()], wakeups));
            }
        });
        let place = Place {
            client: Arc::clone(client),
            key: key.to_string(),
            ticket,
            acquired: false,
        };
        if !confirmations.is_empty() {
            let mut pending: FuturesUnordered<_> = confirmations.into_iter().collect();
            let mut confirmed = 0;
            // At most one node timeout: with a majority down, waiting longer would only
            // delay the attempt (which the pause then covers).
            let _ = tokio::time::timeout(client.config.node_timeout, async {
                while let Some(answer) = pending.next().await {
                    confirmed += usize::from(answer.unwrap_or(false));
                    if confirmed >= quorum(client.nodes()) {
                        break;
                    }
                }
            })
            .await;
            tracing::debug!(key, confirmed, "subscribed to the release channel");
        }
        place
    }
}

/// Waits for this waiter's turn to attempt: a release while it is the head; its `pause` once
/// it is the head; or `deadline`, whichever comes first.
pub(crate) async fn wait(ticket: &Ticket, pause: Duration, deadline: Option<Instant>) -> Woken {
    let far = Instant::now() + Duration::from_secs(3600 * 24 * 365);
    let deadline = deadline.unwrap_or(far);
    let mut paused_at: Option<Instant> = None;
    ticket.state.store(WAITING, Ordering::SeqCst);
    loop {
        let notified = ticket.notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if ticket.handed.lock().is_ok_and(|handed| handed.is_some()) {
            ticket.state.store(BUSY, Ordering::SeqCst);
            return Woken::Handed;
        }
        // Claimed: a handover is under way, which ends with a lock or a release (one node
        // timeout at most); no attempt and no giving up before that.
        let claimed = ticket.state.load(Ordering::SeqCst) == CLAIMED;
        if !claimed && ticket.released.load(Ordering::SeqCst) {
            if ticket.stop_waiting() {
                ticket.released.store(false, Ordering::SeqCst);
                return Woken::Released;
            }
            continue;
        }
        let until = if claimed {
            far
        } else if ticket.head.load(Ordering::SeqCst) {
            let at = *paused_at.get_or_insert_with(|| Instant::now() + pause);
            at.min(deadline)
        } else {
            deadline
        };
        tokio::select! {
            () = &mut notified => continue,
            () = tokio::time::sleep_until(until) => {
                if !ticket.stop_waiting() {
                    continue;
                }
                return if until >= deadline && paused_at.is_none_or(|at| at > deadline) {
                    Woken::Deadline
                } else {
                    Woken::Paused
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LONG: Duration = Duration::from_secs(3600);

    #[tokio::test]
    async fn a_release_wakes_the_head_once_whatever_the_number_of_messages() {
        tokio::time::pause();
        let wakeups = Wakeups::new(5);
        let mut subscribed = 0;
        let a = wakeups.join("k", None, None, || subscribed += 1);
        let b = wakeups.join("k", None, None, || subscribed += 1);
        assert_eq!(subscribed, 1, "one subscription per queue");
        assert!(wakeups.queued("k"));
        // Five nodes publish the same release, before the head waits: one wake-up is kept.
        for _ in 0..5 {
            wakeups.message("quorumlock:released:k", "sha-of-token-1");
        }
        assert_eq!(wait(&a, LONG, None).await, Woken::Released);
        // The second waiter is not the head: it is not woken, and makes no attempt of its own.
        let deadline = Instant::now() + Duration::from_secs(1);
        assert_eq!(wait(&b, LONG, Some(deadline)).await, Woken::Deadline);
        // The head got the lock and leaves: b is the head, and waits for the release.
        wakeups.leave("k", &a, true, || panic!("b still waits"));
        wakeups.message("quorumlock:released:k", "sha-of-token-2");
        assert_eq!(wait(&b, LONG, None).await, Woken::Released);
        let mut unsubscribed = false;
        wakeups.leave("k", &b, true, || unsubscribed = true);
        assert!(unsubscribed && !wakeups.queued("k"));
    }

    #[tokio::test]
    async fn the_head_attempts_after_its_pause_and_the_others_do_not() {
        tokio::time::pause();
        let wakeups = Wakeups::new(5);
        let a = wakeups.join("k", None, None, || {});
        let b = wakeups.join("k", None, None, || {});
        assert_eq!(
            wait(&a, Duration::from_millis(100), None).await,
            Woken::Paused
        );
        let deadline = Instant::now() + LONG;
        // A head that gives up hands the turn on at once: the lock may be free.
        wakeups.leave("k", &a, false, || {});
        assert_eq!(wait(&b, LONG, Some(deadline)).await, Woken::Released);
    }

    #[tokio::test]
    async fn other_channels_and_keys_wake_nobody() {
        tokio::time::pause();
        let wakeups = Wakeups::new(5);
        let a = wakeups.join("k", None, None, || {});
        wakeups.message("quorumlock:released:other", "x");
        wakeups.message("elsewhere:k", "x");
        wakeups.seen("k2", "x", true);
        assert_eq!(wait(&a, Duration::from_secs(1), None).await, Woken::Paused);
    }
}
