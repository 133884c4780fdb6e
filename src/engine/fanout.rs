//! The fan-out at the bottom of the engine: one round to every node at once, counted until
//! its outcome is decided ([`Fanout::round`]), the silent discard of an attempt's claims,
//! commands sent without waiting for them, and the background completion of the calls still
//! in flight when a round is decided or dropped ([`Background`]), which
//! [`RedLock::settle`](crate::RedLock::settle) waits for. Each node's command runs under its
//! own timeout (`node/connection.rs`); what it may import: ARCHITECTURE.md.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fred::types::{Key, Value};
use futures::stream::{FuturesUnordered, StreamExt};
use futures::FutureExt;
use tokio::sync::Notify;

use crate::algo::quorum::{Ballot, Decision, Stake, Tally};
use crate::error::NodeError;
use crate::node::scripts::release_args;
use crate::node::{Answer, Node, NodeResult, Primitive};

/// Every node of a client, and the background work of their commands.
#[derive(Debug)]
pub(crate) struct Fanout {
    nodes: Vec<Node>,
    background: Arc<Background>,
    /// The yes votes that decide a round: a majority, or the configured `votes_needed`.
    needed: usize,
}

/// The answers of one round, as far as they were awaited.
#[derive(Debug)]
pub(crate) struct Round<T> {
    pub(crate) tally: Tally,
    /// Every node that did not vote yes, as far as known when the round was decided: those
    /// that failed, those that answered no (`Refused`), and those not awaited that could not
    /// have voted yes (see `Node::not_awaited`).
    pub(crate) failures: Vec<NodeError>,
    /// Bit i is set when node i answered yes or no (not failed) before the round was
    /// decided.
    pub(crate) answered: u64,
    /// The answers counted (node index, answer), in the order they came.
    pub(crate) answers: Vec<(usize, T)>,
}

impl Fanout {
    /// Over `nodes`, counting their commands in `background`, a round decided on `needed`
    /// votes.
    pub(crate) fn new(nodes: Vec<Node>, background: Arc<Background>, needed: usize) -> Fanout {
        Fanout {
            nodes,
            background,
            needed,
        }
    }

    pub(crate) fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// Sends one command to every node at once and counts the answers until the outcome is
    /// decided. Commands still in flight then are driven to their end in a background task:
    /// dropping them instead would let the client send a queued one after a reconnect, long
    /// after we gave up on it; awaiting them to their timeout marks them dead.
    pub(crate) async fn round<T, F, Fut>(&self, op: F) -> Round<T>
    where
        T: Answer,
        F: Fn(&Node) -> Fut,
        Fut: Future<Output = NodeResult<T>> + Send + 'static,
    {
        self.round_marking(None, Stake::Taking, op).await
    }

    /// [`round`](Self::round), setting `decided` once the outcome is decided and before any
    /// undecided command is handed to the background: a per-node future that finds it set
    /// knows that its answer will not be counted, and can act on it itself.
    ///
    /// `stake` says when the round is decided (see [`Stake`]), and whether suspect nodes are
    /// presumed failed once a no has been seen: only where it takes a lock (design 2.2a).
    pub(crate) async fn round_marking<T, F, Fut>(
        &self,
        decided: Option<&AtomicBool>,
        stake: Stake,
        op: F,
    ) -> Round<T>
    where
        T: Answer,
        F: Fn(&Node) -> Fut,
        Fut: Future<Output = NodeResult<T>> + Send + 'static,
    {
        self.round_deciding(decided, stake, op, |tally, _| tally.decision())
            .await
    }

    /// [`round_marking`](Self::round_marking), decided by `decide` from the tally and the
    /// answers heard so far instead of by the tally alone: a permit's round is won by a
    /// majority on one slot, not by a majority of yes (`algo::slots::decision`).
    pub(crate) async fn round_deciding<T, F, Fut, D>(
        &self,
        decided: Option<&AtomicBool>,
        stake: Stake,
        op: F,
        decide: D,
    ) -> Round<T>
    where
        T: Answer,
        F: Fn(&Node) -> Fut,
        Fut: Future<Output = NodeResult<T>> + Send + 'static,
        D: Fn(&Tally, &[(usize, T)]) -> Decision,
    {
        let mut suspects = 0u64;
        let pending: FuturesUnordered<_> = self
            .nodes
            .iter()
            .map(|node| {
                let index = node.index();
                if stake == Stake::Taking && node.is_suspect() {
                    suspects |= 1 << index;
                }
                self.counted(node, op(node)).map(move |vote| (index, vote))
            })
            .collect();
        let tally =
            Tally::presuming(self.nodes.len(), suspects.count_ones() as usize).needing(self.needed);
        let mut round = Round {
            tally: match stake {
                Stake::Taking => tally,
                Stake::Held => tally.holding(),
            },
            failures: Vec::new(),
            answered: 0,
            answers: Vec::with_capacity(self.nodes.len()),
        };
        // Owned by a guard so that the undecided commands are finished in the background
        // however this function ends: decided, or dropped half-way by a cancelled caller.
        let mut pending = InBackgroundOnDrop(pending, Arc::clone(&self.background));
        while let Some((index, vote)) = pending.0.next().await {
            let suspect = suspects & (1 << index) != 0;
            match vote {
                Ok(answer) => {
                    round.answered |= 1 << index;
                    let ballot = answer.ballot();
                    if let (Ballot::No, Some(node)) = (ballot, self.nodes.get(index)) {
                        round
                            .failures
                            .push(node.answered_no(stake == Stake::Taking));
                    }
                    round.tally.record_from(ballot, suspect);
                    round.answers.push((index, answer));
                }
                Err(e) => {
                    round.failures.push(e);
                    round.tally.record_from(Ballot::Failed, suspect);
                }
            }
            if decide(&round.tally, &round.answers) != Decision::Pending {
                if let Some(decided) = decided {
                    decided.store(true, Ordering::SeqCst);
                }
                break;
            }
        }
        self.name_not_awaited(&mut round);
        round
    }

    /// A round decided before every node answered: names those not awaited that could not
    /// have voted yes (not connected, not counted, unanswering), so that a node that is down
    /// is reported whether or not the round had to wait for it (design 4.1).
    fn name_not_awaited<T>(&self, round: &mut Round<T>) {
        for node in &self.nodes {
            let index = node.index();
            let heard = round.answered & (1 << index) != 0
                || round.failures.iter().any(|f| f.index == index);
            if !heard {
                round.failures.extend(node.not_awaited());
            }
        }
    }

    /// Compare-and-delete on every node without announcing it (the cleanup of a failed
    /// attempt); waits for the nodes in `wait_for` (a bit mask of node indexes), deletes on
    /// the rest in the background.
    pub(crate) async fn discard_round(
        &self,
        primitive: Primitive,
        keys: &[Key],
        args: &[Value],
        wait_for: u64,
    ) {
        let mut waited = FuturesUnordered::new();
        let background = FuturesUnordered::new();
        let (keys, args): (Arc<[Key]>, Arc<[Value]>) = (keys.into(), args.into());
        for node in &self.nodes {
            let release = self.counted(node, node.discard(primitive, &keys, &args));
            if wait_for & (1 << node.index()) != 0 {
                waited.push(release);
            } else {
                background.push(release);
            }
        }
        drop(InBackgroundOnDrop(background, Arc::clone(&self.background)));
        while waited.next().await.is_some() {}
    }

    /// Runs `op` on the nodes in `mask` (a bit mask of node indexes) in a background task,
    /// without waiting for their answers (needs a runtime; a no-op without one).
    pub(crate) fn detached<F, Fut>(&self, mask: u64, op: F)
    where
        F: Fn(&Node) -> Fut,
        Fut: Future + Send + 'static,
    {
        let pending: FuturesUnordered<_> = self
            .nodes
            .iter()
            .filter(|node| mask & (1 << node.index()) != 0)
            .map(|node| self.counted(node, op(node)))
            .collect();
        drop(InBackgroundOnDrop(pending, Arc::clone(&self.background)));
    }

    /// Starts a release of `key` on every node without waiting for it (needs a runtime; a
    /// no-op without one, the keys then expire after their ttl).
    pub(crate) fn release_detached(&self, primitive: Primitive, keys: Vec<Key>, value: Value) {
        // Made here rather than in the task, so that `settle` counts them from now on.
        let args = release_args(&[value]);
        self.detached(u64::MAX, |node| {
            node.release(primitive, keys.clone(), args.clone())
        });
    }

    /// `future`, for `node`, counted as its node's work until it ends or is dropped (see
    /// [`settle`](Self::settle)).
    fn counted<F: Future>(&self, node: &Node, future: F) -> impl Future<Output = F::Output> {
        let counted = self.background.count(node.index());
        future.map(move |out| {
            drop(counted);
            out
        })
    }

    /// Waits up to `within` until no command of a node that ever connected is under way.
    pub(crate) async fn settle(&self, within: Duration) -> bool {
        let nodes = &self.nodes;
        let never_connected = |i: usize| nodes.get(i).is_some_and(Node::never_connected);
        self.background.settled(within, never_connected).await
    }
}

/// Per-node futures that, when dropped, are driven to completion (answer or timeout) in a
/// background task rather than cancelled.
struct InBackgroundOnDrop<F: Future + Send + 'static>(FuturesUnordered<F>, Arc<Background>);

impl<F: Future + Send + 'static> Drop for InBackgroundOnDrop<F> {
    fn drop(&mut self) {
        // Those already answered end here (inside a runtime, where their timers may be
        // polled): under load the last answers often come with the one that decided, and
        // then no task is spawned for them.
        if tokio::runtime::Handle::try_current().is_ok() {
            while let Some(Some(_)) = self.0.next().now_or_never() {}
        }
        if self.0.is_empty() {
            return;
        }
        let mut pending = std::mem::take(&mut self.0);
        self.1
            .spawn(async move { while pending.next().await.is_some() {} });
    }
}

/// Counts the client's background tasks, and the per-node commands they drive, so that
/// [`RedLock::settle`](crate::RedLock::settle) can wait for them.
#[derive(Debug, Default)]
pub(crate) struct Background {
    /// The runtime the client was built in: background work started where no runtime is
    /// current (a [`Lock`](crate::Lock) dropped on a plain thread, as `blocking` does) goes
    /// there.
    home: Option<tokio::runtime::Handle>,
    pending: AtomicUsize,
    /// Per node index: how many of its commands are under way.
    per_node: Box<[AtomicUsize]>,
    /// Notified when `pending` or a count of `per_node` falls to zero.
    idle: Notify,
}

/// One command of a node, counted until this is dropped.
struct Counted {
    background: Arc<Background>,
    index: usize,
}

impl Drop for Counted {
    fn drop(&mut self) {
        let Some(n) = self.background.per_node.get(self.index) else {
            return;
        };
        if n.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.background.idle.notify_waiters();
        }
    }
}

impl Background {
    /// For a client of `nodes` nodes, built in `home` (see [`spawn`](Self::spawn)).
    pub(crate) fn new(nodes: usize, home: Option<tokio::runtime::Handle>) -> Background {
        Background {
            home,
            pending: AtomicUsize::new(0),
            per_node: (0..nodes).map(|_| AtomicUsize::new(0)).collect(),
            idle: Notify::new(),
        }
    }

    /// Spawns `work` on the current runtime, or else on the one the client was built in (a
    /// no-op if that one is shut down: the keys then expire).
    fn spawn(self: &Arc<Self>, work: impl Future<Output = ()> + Send + 'static) {
        let Some(runtime) = tokio::runtime::Handle::try_current()
            .ok()
            .or_else(|| self.home.clone())
        else {
            return;
        };
        self.pending.fetch_add(1, Ordering::SeqCst);
        let this = Arc::clone(self);
        runtime.spawn(async move {
            work.await;
            if this.pending.fetch_sub(1, Ordering::SeqCst) == 1 {
                this.idle.notify_waiters();
            }
        });
    }

    fn count(self: &Arc<Self>, index: usize) -> Counted {
        if let Some(n) = self.per_node.get(index) {
            n.fetch_add(1, Ordering::SeqCst);
        }
        Counted {
            background: Arc::clone(self),
            index,
        }
    }

    /// Whether nothing is under way, but for nodes for which `ignored` holds.
    fn done(&self, ignored: &impl Fn(usize) -> bool) -> bool {
        self.pending.load(Ordering::SeqCst) == 0
            || self
                .per_node
                .iter()
                .enumerate()
                .all(|(i, n)| n.load(Ordering::SeqCst) == 0 || ignored(i))
    }

    async fn settled(&self, within: Duration, ignored: impl Fn(usize) -> bool) -> bool {
        let now = tokio::time::Instant::now();
        let deadline = now
            .checked_add(within)
            .unwrap_or_else(|| now + crate::config::FAR_FUTURE);
        loop {
            let idle = self.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if self.done(&ignored) {
                return true;
            }
            if tokio::time::timeout_at(deadline, idle).await.is_err() {
                return self.done(&ignored);
            }
        }
    }
}

/// Releases an attempt's keys in the background if the attempt is cancelled half-way.
pub(crate) struct CleanupOnDrop<'a> {
    fanout: &'a Fanout,
    primitive: Primitive,
    keys: &'a [Key],
    /// What the DISCARD script gets (see `Node::discard`).
    args: Vec<Value>,
    armed: bool,
}

impl<'a> CleanupOnDrop<'a> {
    pub(crate) fn new(
        fanout: &'a Fanout,
        primitive: Primitive,
        keys: &'a [Key],
        args: Vec<Value>,
    ) -> Self {
        CleanupOnDrop {
            fanout,
            primitive,
            keys,
            args,
            armed: true,
        }
    }

    pub(crate) fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for CleanupOnDrop<'_> {
    fn drop(&mut self) {
        // A silent delete on every node, not waited for (without a runtime, the keys expire).
        if self.armed {
            self.fanout.detached(u64::MAX, |node| {
                node.discard(self.primitive, self.keys.to_vec(), self.args.clone())
            });
        }
    }
}
