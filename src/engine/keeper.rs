//! The keeper: one task per client that extends every lock the client keeps alive, from one
//! timer heap, driving the rounds of the extensions due together (design 3.5: why not a task
//! per lock, the coalescing window). It starts with the client's first kept lock and ends
//! when the client keeps none; the kept locks talk to it over a channel.
//!
//! Every timer in the heap is a hint: when it fires, the lock's state decides what is due
//! (`engine/keep_cycle.rs`). A lock has one current timer (its sequence number is in the
//! entry); older ones still in the heap are skipped.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use futures::FutureExt;
use tokio::runtime::Handle;
use tokio::sync::mpsc::{self, UnboundedReceiver, UnboundedSender};
use tokio::sync::oneshot;

use crate::algo::schedule::{KeepSchedule, COALESCE_MAX};
use crate::engine::keep_cycle::{Extendable, KeptEntry, Next, Phase, Publisher};

/// The channel to the running keeper task, if one runs.
type TaskSlot<L> = Arc<Mutex<Option<UnboundedSender<Command<L>>>>>;

fn lock_slot<L>(slot: &TaskSlot<L>) -> MutexGuard<'_, Option<UnboundedSender<Command<L>>>> {
    // The slot holds a sender only: nothing can be left half-written.
    slot.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A client's registry of kept locks (each an `L`): starts its keeper task when needed.
#[derive(Debug)]
pub(crate) struct Keeper<L> {
    slot: TaskSlot<L>,
    ids: AtomicU64,
}

impl<L> Default for Keeper<L> {
    fn default() -> Self {
        Keeper {
            slot: Arc::default(),
            ids: AtomicU64::new(0),
        }
    }
}

/// A kept lock's place in the keeper.
#[derive(Debug)]
pub(crate) struct KeepTicket<L> {
    id: u64,
    keeper: UnboundedSender<Command<L>>,
}

enum Command<L> {
    Keep(u64, Box<KeptEntry<L>>),
    /// Stop keeping a lock: hand it back, or drop it (which releases it in the background).
    Stop {
        id: u64,
        reply: Option<oneshot::Sender<L>>,
    },
    /// Stop keeping every lock and drop them all (the client's shutdown); replies with how
    /// many there were once they are dropped.
    LetGo(oneshot::Sender<usize>),
}

impl<L: Extendable> Keeper<L> {
    /// Hands `lock` to the keeper task, started on `runtime` if none runs.
    pub(crate) fn keep(
        &self,
        runtime: &Handle,
        lock: L,
        schedule: KeepSchedule,
        status: Publisher,
    ) -> KeepTicket<L> {
        let id = self.ids.fetch_add(1, Ordering::Relaxed);
        let mut command = Command::Keep(id, Box::new(KeptEntry::new(lock, schedule, status)));
        // Under the slot's lock: the task decides to end under it too, so a lock is never
        // handed to a task that is ending.
        let mut slot = lock_slot(&self.slot);
        if let Some(keeper) = slot.as_ref() {
            match keeper.send(command) {
                Ok(()) => {
                    return KeepTicket {
                        id,
                        keeper: keeper.clone(),
                    }
                }
                // The task is gone (its runtime shut down): start another.
                Err(mpsc::error::SendError(back)) => command = back,
            }
        }
        let (keeper, commands) = mpsc::unbounded_channel();
        // The receiver is alive: this cannot fail.
        let _ = keeper.send(command);
        runtime.spawn(run(commands, Arc::clone(&self.slot)));
        *slot = Some(keeper.clone());
        KeepTicket { id, keeper }
    }
}

impl<L> Keeper<L> {
    /// Stops keeping every lock and drops them, which starts their releases; their handles
    /// see them no longer kept. Returns how many there were, once they are dropped.
    pub(crate) async fn let_go(&self) -> usize {
        let Some(keeper) = lock_slot(&self.slot).clone() else {
            return 0; // no keeper task: no kept lock
        };
        let (reply, done) = oneshot::channel();
        if keeper.send(Command::LetGo(reply)).is_err() {
            return 0; // its runtime shut down, which dropped the locks
        }
        done.await.unwrap_or(0)
    }
}

impl<L> KeepTicket<L> {
    /// Stops keeping the lock and takes it back; `None` if the keeper is gone.
    ///
    /// # Cancel safety
    /// If the future is dropped, the lock is dropped, which releases it in the background.
    pub(crate) async fn take_back(self) -> Option<L> {
        let (reply, lock) = oneshot::channel();
        let stop = Command::Stop {
            id: self.id,
            reply: Some(reply),
        };
        self.keeper.send(stop).ok()?;
        lock.await.ok()
    }

    /// Stops keeping the lock and drops it; never waits.
    pub(crate) fn drop_lock(self) {
        let _ = self.keeper.send(Command::Stop {
            id: self.id,
            reply: None,
        });
    }
}

struct Landed<E> {
    id: u64,
    seq: u32,
    for_ttl: Duration,
    extension: E,
}

/// The keeper task's state.
struct Keeping<L: Extendable> {
    entries: HashMap<u64, Box<KeptEntry<L>>>,
    /// (when, entry id, timer sequence number), earliest first.
    timers: BinaryHeap<Reverse<(Instant, u64, u32)>>,
    flights: FuturesUnordered<BoxFuture<'static, Landed<L::Extension>>>,
    /// The timers taken from the heap by one wake-up (kept to reuse its allocation).
    fired: Vec<(Instant, u64, u32)>,
}

impl<L: Extendable> Keeping<L> {
    fn command(&mut self, command: Command<L>, now: Instant) {
        match command {
            Command::Keep(id, entry) => {
                let next = entry.first(now);
                self.entries.insert(id, entry);
                self.apply(id, next, now);
            }
            Command::Stop { id, reply } => {
                let Some(entry) = self.entries.remove(&id) else {
                    return;
                };
                let KeptEntry { lock, status, .. } = *entry;
                drop(status); // the handles learn that the lock is no longer kept
                if let Some(reply) = reply {
                    // If nobody waits any more, the lock comes back and is dropped here,
                    // which releases it in the background.
                    let _ = reply.send(lock);
                }
            }
            Command::LetGo(reply) => {
                let kept = self.entries.len();
                // Each lock's drop starts its release; each publisher's, the handles' end.
                self.entries.clear();
                self.timers.clear();
                let _ = reply.send(kept);
            }
        }
    }

    /// Handles every timer due at `now`, and those due within the coalescing window whose
    /// extensions may start early.
    fn wake(&mut self, now: Instant) {
        let horizon = now + COALESCE_MAX;
        while let Some(&Reverse(timer)) = self.timers.peek() {
            if timer.0 > horizon {
                break;
            }
            self.timers.pop();
            self.fired.push(timer);
        }
        let mut fired = std::mem::take(&mut self.fired);
        for (_, id, seq) in fired.drain(..) {
            let Some(entry) = self.entries.get_mut(&id) else {
                continue; // stopped
            };
            if entry.timer != seq {
                continue; // replaced by a later timer
            }
            let next = entry.fire(now);
            self.apply(id, next, now);
        }
        self.fired = fired;
    }

    fn landed(&mut self, landed: Landed<L::Extension>) {
        let Some(entry) = self.entries.get_mut(&landed.id) else {
            return; // stopped while the round was in flight
        };
        let next = entry.landed(landed.seq, landed.for_ttl, landed.extension);
        self.apply(landed.id, next, Instant::now());
    }

    fn apply(&mut self, id: u64, mut next: Next, now: Instant) {
        let Some(entry) = self.entries.get_mut(&id) else {
            return;
        };
        if let Next::Extend(for_ttl) = next {
            next = match entry.lock.extension(for_ttl) {
                Ok(round) => {
                    let seq = entry.next_seq();
                    entry.phase = Phase::Extending(seq);
                    self.flights.push(
                        async move {
                            Landed {
                                id,
                                seq,
                                for_ttl,
                                extension: round.await,
                            }
                        }
                        .boxed(),
                    );
                    // Raced against the loss instant.
                    Next::Wake(entry.lost_at(now))
                }
                Err(e) => entry.failed(now, e),
            };
        }
        if let Next::Wake(at) = next {
            entry.timer = entry.next_seq();
            self.timers.push(Reverse((at, id, entry.timer)));
        }
    }
}

/// The keeper task: runs until the client keeps no lock (or its runtime shuts down, which
/// drops the locks: their handles then report them no longer kept).
async fn run<L: Extendable>(mut commands: UnboundedReceiver<Command<L>>, slot: TaskSlot<L>) {
    let mut keeping = Keeping::<L> {
        entries: HashMap::new(),
        timers: BinaryHeap::new(),
        flights: FuturesUnordered::new(),
        fired: Vec::new(),
    };
    let sleep = tokio::time::sleep(Duration::ZERO);
    tokio::pin!(sleep);
    let mut armed: Option<Instant> = None;
    loop {
        let next = keeping.timers.peek().map(|Reverse((at, ..))| *at);
        if next != armed {
            if let Some(at) = next {
                sleep.as_mut().reset(at.into());
            }
            armed = next;
        }
        let mut rang = false;
        tokio::select! {
            biased;
            () = &mut sleep, if armed.is_some() => rang = true,
            command = commands.recv() => match command {
                Some(command) => keeping.command(command, Instant::now()),
                None => return,
            },
            Some(landed) = keeping.flights.next(), if !keeping.flights.is_empty() => {
                keeping.landed(landed);
            }
        }
        // Then whatever else is ready, from every source, so that none starves another (a
        // stream of new kept locks must not hold up the extensions in flight).
        let now = Instant::now();
        while let Ok(command) = commands.try_recv() {
            keeping.command(command, now);
        }
        while let Some(Some(landed)) = keeping.flights.next().now_or_never() {
            keeping.landed(landed);
        }
        if rang || armed.is_some_and(|at| at <= Instant::now()) {
            keeping.wake(Instant::now());
            armed = None; // re-armed for whatever is first now
        }
        if keeping.entries.is_empty() {
            // End, unless a lock was handed over meanwhile (under the slot's lock, as
            // `Keeper::keep` sends).
            let mut slot = lock_slot(&slot);
            match commands.try_recv() {
                Ok(command) => {
                    drop(slot);
                    keeping.command(command, Instant::now());
                }
                Err(_) => {
                    *slot = None;
                    return; // rounds still in flight finish in the background (round())
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![cfg(feature = "testkit")]
    #![allow(clippy::mixed_attributes_style)]

    use std::time::Duration;

    use crate::testkit::LocalQuorum;
    use crate::{KeepAlive, KeptLock, RedLock, Retry};

    /// Three local nodes and a client connected to all of them.
    async fn connected() -> (LocalQuorum, RedLock) {
        let q = LocalQuorum::start(3).await.unwrap();
        // Without caching the scripts at connection: those tasks would end at any moment and
        // throw off the count of the runtime's tasks.
        let config = RedLock::builder()
            .nodes(q.urls())
            .quarantine(false)
            .validate()
            .unwrap();
        let redlock = RedLock::without_preload(config).unwrap();
        assert_eq!(redlock.wait_for_nodes(Duration::from_secs(5)).await, 3);
        (q, redlock)
    }

    /// `count` locks `prefix:0..` with `ttl`, each kept alive.
    async fn keep(redlock: &RedLock, prefix: &str, count: usize, ttl: Duration) -> Vec<KeptLock> {
        let mut kept = Vec::with_capacity(count);
        for i in 0..count {
            let lock = redlock
                .lock_with(&format!("{prefix}:{i}"), ttl, Retry::attempts(5))
                .await
                .unwrap();
            kept.push(lock.keep_alive(KeepAlive::new()).unwrap());
        }
        kept
    }

    async fn alive_tasks(redlock: &RedLock) -> usize {
        // Rounds finish their last nodes' commands in background tasks: wait for those.
        assert!(redlock.settle(Duration::from_secs(5)).await);
        tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks()
    }

    #[tokio::test]
    async fn one_task_keeps_every_lock_of_a_client_and_ends_with_the_last() {
        let (_q, redlock) = connected().await;
        let before = alive_tasks(&redlock).await;
        let mut kept = keep(&redlock, "kept", 50, Duration::from_secs(10)).await;
        // A 10 s lock is not extended before 4.5 s: nothing is in flight now.
        assert_eq!(alive_tasks(&redlock).await, before + 1, "one keeper task");
        kept.truncate(1);
        assert_eq!(alive_tasks(&redlock).await, before + 1);
        kept.clear();
        tokio::time::timeout(Duration::from_secs(5), async {
            while alive_tasks(&redlock).await > before {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("the keeper ends with the last kept lock");
        // And starts again for the next one.
        let lock = redlock.lock("kept:again").await.unwrap();
        let kept = lock.keep_alive(KeepAlive::new()).unwrap();
        assert_eq!(alive_tasks(&redlock).await, before + 1);
        kept.release().await.unwrap();
    }

    #[tokio::test]
    async fn locks_kept_together_are_all_extended() {
        let (_q, redlock) = connected().await;
        let kept = keep(&redlock, "many", 200, Duration::from_secs(1)).await;
        let handles: Vec<_> = kept.iter().map(|k| k.handle()).collect();
        tokio::time::timeout(Duration::from_secs(20), async {
            while handles.iter().any(|h| h.extensions() < 3) {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await
        .expect("three extensions of every lock");
        assert!(handles
            .iter()
            .all(|h| h.is_held() && h.lost_reason().is_none()));
        for lock in kept {
            lock.release().await.unwrap();
        }
    }
}
