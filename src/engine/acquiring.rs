//! The acquisition loop of every claim (a lock, a permit, a read-write lock's side): an
//! attempt (`engine/attempt.rs`) after another until one is granted, retrying with jitter as
//! the caller's [`Retry`] says. Callers of one client that find a resource taken wait in
//! line for its release (`engine/waiters.rs`), and only the head of the line attempts; a
//! release by this client may hand the claim straight to the head (`engine/handover.rs`).

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::stream::{FuturesUnordered, StreamExt};

use crate::algo::keys;
use crate::algo::quorum::quorum;
use crate::config::{Retry, Ttl};
use crate::engine::attempt;
use crate::engine::census::ClaimCensus;
use crate::engine::held::Held;
use crate::engine::machinery::Machinery;
use crate::engine::waiters::{self, Ticket, Woken};
use crate::error::Error;
use crate::stats::{self, Counters, Event};

/// A caller's place in the line for a key (see `engine/waiters.rs`); it leaves the line when dropped,
/// and the last to leave unsubscribes.
#[derive(Debug)]
struct Place {
    client: Arc<Machinery>,
    key: String,
    ticket: Arc<Ticket>,
    /// Whether it leaves with the lock (then the next in line waits for its release).
    acquired: bool,
}

impl Drop for Place {
    fn drop(&mut self) {
        let inner = &self.client;
        let channel = keys::release_channel(&self.key);
        inner
            .wakeups()
            .leave(&self.key, &self.ticket, self.acquired, || {
                for node in inner.fanout().nodes() {
                    node.listener().unsubscribe(vec![channel.clone()]);
                }
            });
    }
}

/// One client's acquisition loop: its machinery, and the counters its calls count in.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Acquiring<'a> {
    client: &'a Arc<Machinery>,
    counters: &'a Counters,
}

impl<'a> Acquiring<'a> {
    pub(crate) fn new(client: &'a Arc<Machinery>, counters: &'a Counters) -> Acquiring<'a> {
        Acquiring { client, counters }
    }

    /// Attempts with `attempt` until it is granted, retrying as `retry` says: callers that
    /// find `key` taken wait in this client's line for its release (`engine/waiters.rs`),
    /// without a key they pause between attempts. A lock's acquisition and a permit's
    /// (`engine/semaphore.rs`) both run this loop; only their attempts differ. `name` names
    /// the resource in traces. An attempt that is granted says whether the resource may have
    /// room for the next caller in line (a semaphore with a slot still free): that caller
    /// then attempts at once instead of waiting for a release. `permits` says what the
    /// callers wait for (a lock: `None`), so that only a release of that kind is handed
    /// over to them.
    pub(crate) async fn run<F, Fut>(
        &self,
        name: &str,
        (key, permits): (Option<String>, Option<u32>),
        ttl: Ttl,
        retry: Retry,
        mut attempt: F,
    ) -> Result<Held, Error>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<(Held, bool), Error>>,
    {
        let started = Instant::now();
        let counters = self.counters;
        let deadline = tokio::time::Instant::from_std(started)
            .checked_add(retry.waiting_budget())
            .unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(86_400 * 365));
        let mut made = 0u32;
        let mut place: Option<Place> = None;
        let mut last: Option<Error> = None;
        // Do not barge in before this client's callers already waiting for the resource.
        let mut attempt_now = true;
        if let Some(key) = key.as_deref().filter(|k| self.client.wakeups().queued(k)) {
            let joined = self.join(key, ttl, permits).await;
            attempt_now = joined.ticket.is_head();
            place = Some(joined);
        }
        loop {
            if !attempt_now {
                let waited = (&retry, started, deadline);
                if let Some(end) = self.wait_in_line(&mut place, waited, &mut last).await {
                    return end;
                }
            }
            self.client.held().refuse()?;
            made += 1;
            counters.count(Event::Attempt);
            let error = match attempt::traced(name, made, attempt()).await {
                Ok((lock, room)) => {
                    counters.count(Event::Acquired);
                    stats::call_ended(started.elapsed(), true);
                    if let Some(mut waiting) = place.take() {
                        // Leaving with the lock, the next in line waits for its release;
                        // where there is room still, it attempts at once.
                        waiting.acquired = !room;
                    }
                    self.client.held().refuse()?;
                    return Ok(lock);
                }
                Err(e) if !e.is_retryable() => return Err(e),
                Err(e) => e,
            };
            let taken = matches!(error, Error::Taken { .. });
            if taken {
                counters.count(Event::Taken);
            } else {
                stats::attempt_failed();
            }
            let first_refusal = (taken, made, permits, key.as_deref());
            if let Some(mismatch) = self.kind_mismatch(name, first_refusal).await {
                stats::call_ended(started.elapsed(), false);
                return Err(mismatch);
            }
            let Some(pause) = retry.next_pause(made, started.elapsed(), jitter(retry.jitter))
            else {
                stats::call_ended(started.elapsed(), false);
                return Err(error);
            };
            tracing::debug!(resource = %name, attempt = made, error = %error, "lock attempt failed");
            last = Some(error);
            let turn = (key.as_deref(), taken, pause);
            attempt_now = self.next_turn(&mut place, turn, (ttl, permits)).await;
        }
    }

    /// After a refused attempt, whether the next comes at once: `taken` and not in line yet,
    /// the caller joins the line for `key` (the head's next attempt comes right after the
    /// subscription, since a release made before it sent no message we could get); in line,
    /// it waits there; without a key, it sleeps `pause` first.
    async fn next_turn(
        &self,
        place: &mut Option<Place>,
        (key, taken, pause): (Option<&str>, bool, Duration),
        (ttl, permits): (Ttl, Option<u32>),
    ) -> bool {
        match (key, &place) {
            (Some(key), None) if taken => {
                let joined = self.join(key, ttl, permits).await;
                let head = joined.ticket.is_head();
                *place = Some(joined);
                head
            }
            (_, Some(_)) => false,
            _ => {
                tokio::time::sleep(pause).await;
                self.counters.count(Event::Paused);
                true
            }
        }
    }

    /// Waits in this client's line at `place` (if it has one) for a release, a handover, or
    /// the pause after the last attempt; `Some` ends the call: with the lock handed over, or
    /// with the last error once the deadline has passed.
    async fn wait_in_line(
        &self,
        place: &mut Option<Place>,
        (retry, started, deadline): (&Retry, Instant, tokio::time::Instant),
        last: &mut Option<Error>,
    ) -> Option<Result<Held, Error>> {
        let counters = self.counters;
        let waiting = place.as_ref()?;
        let pause = retry
            .next_pause(0, started.elapsed(), jitter(retry.jitter))
            .unwrap_or(Duration::ZERO);
        match waiters::wait(&waiting.ticket, pause, Some(deadline)).await {
            Woken::Handed => {
                let lock = waiting.ticket.take_handed()?;
                counters.count(Event::HandedOver);
                stats::call_ended(started.elapsed(), true);
                if let Some(mut waiting) = place.take() {
                    waiting.acquired = true;
                }
                // Unless the client was shut down meanwhile: then the lock is dropped
                // (which releases it, unless the shutdown did).
                return Some(self.client.held().refuse().map(|()| lock));
            }
            Woken::Released => counters.count(Event::Woken),
            Woken::Paused => counters.count(Event::Paused),
            Woken::Deadline => {
                if let Some(error) = last.take() {
                    stats::call_ended(started.elapsed(), false);
                    return Some(Err(error));
                }
                // Never attempted: one attempt before giving up.
            }
        }
        None
    }

    /// On a lock's first refusal (`Taken` at the first attempt, for a lock's `key`): a
    /// semaphore or read-write lock of that name refuses every lock, which its `SET NX`
    /// cannot tell from another lock. Says so rather than wait for it (design 2.9).
    async fn kind_mismatch(
        &self,
        name: &str,
        (taken, made, permits, key): (bool, u32, Option<u32>, Option<&str>),
    ) -> Option<Error> {
        let (true, 1, None, Some(key)) = (taken, made, permits, key) else {
            return None;
        };
        let found = ClaimCensus::of(self.client).kind_in_the_way(key).await?;
        Some(Error::KindMismatch {
            resource: name.to_string(),
            found,
        })
    }

    /// Joins the line of this client's callers waiting for `key`; the first subscribes to the
    /// key's release channel on every node and waits until a majority confirmed it (or every
    /// node answered or timed out).
    async fn join(&self, key: &str, ttl: Ttl, permits: Option<u32>) -> Place {
        let wakeups = self.client.wakeups();
        let channel = keys::release_channel(key);
        let mut confirmations = Vec::new();
        let ticket = wakeups.join(key, Some(ttl), permits, || {
            for node in self.client.node_list() {
                confirmations.push(node.listener().subscribe(vec![channel.clone()], wakeups));
            }
        });
        let place = Place {
            client: Arc::clone(self.client),
            key: key.to_string(),
            ticket,
            acquired: false,
        };
        if !confirmations.is_empty() {
            let mut pending: FuturesUnordered<_> = confirmations.into_iter().collect();
            let mut confirmed = 0;
            // At most one node timeout: with a majority down, waiting longer would only
            // delay the attempt (which the pause then covers).
            let _ = tokio::time::timeout(self.client.config().node_timeout, async {
                while let Some(answer) = pending.next().await {
                    confirmed += usize::from(answer.unwrap_or(false));
                    if confirmed >= quorum(self.client.nodes()) {
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

/// A jitter sample for the pause between attempts: uniform from zero to `max`, drawn from
/// the fast thread-local generator (never the one tokens are drawn from).
fn jitter(max: Duration) -> Duration {
    let micros = u64::try_from(max.as_micros()).unwrap_or(u64::MAX);
    if micros == 0 {
        return Duration::ZERO;
    }
    Duration::from_micros(rand::Rng::random_range(&mut rand::rng(), 0..=micros))
}
