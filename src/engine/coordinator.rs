//! The coordinator: the client, one per `RedLock`: its machinery (`engine/machinery.rs`: the
//! nodes' fan-out, the registries its held claims share, its counters) and its nodes'
//! fleet; a lock's acquisition ([`Locking`], its claim kind, in the layers of
//! `engine/acquire.rs`) and its break.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use fred::types::Value;

use crate::algo::keys;
use crate::algo::quorum::{quorum, Stake};
use crate::config::KeepAlive;
use crate::config::{Config, Retry, Ttl};
use crate::engine::acquire::{self, Acquiring, ClaimKind, Grant, Resources};
use crate::engine::fanout::{Background, Fanout, Round};
use crate::engine::held::{self, Held, Released, Token};
use crate::engine::kept::KeptHandle;
use crate::engine::machinery::Machinery;
use crate::engine::waiters::Wakeups;
use crate::error::{ConfigError, Error};
use crate::node::admission::Fleet;
use crate::node::probe::KeySpace;
use crate::node::scripts::release_args;
use crate::node::{Acquired, Node, Primitive, SetNx};
use crate::report::facts::Excluded;

#[derive(Debug, Clone)]
pub(crate) struct Coordinator {
    /// The fan-out and the registries, shared with the client's held claims.
    machinery: Arc<Machinery>,
    fleet: Arc<Fleet>,
}

impl Coordinator {
    pub(crate) fn connect(config: Config, preload: bool) -> Result<Coordinator, ConfigError> {
        let (reseed, reseeds) = tokio::sync::mpsc::unbounded_channel();
        let fleet = Arc::new(Fleet::new(
            config.nodes.len(),
            config.quarantine,
            config.max_ttl,
            config.node_timeout,
            KeySpace::of(&config),
            reseed,
        ));
        let nodes = config
            .nodes
            .iter()
            .enumerate()
            .zip(&config.sources)
            .map(|((i, url), source)| {
                Node::connect(i, url, source, &config, Arc::clone(&fleet), preload)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let wakeups = Arc::new(Wakeups::new(config.nodes.len()));
        let background = Arc::new(Background::new(
            config.nodes.len(),
            tokio::runtime::Handle::try_current().ok(),
        ));
        let needed = config.votes_needed.unwrap_or(quorum(nodes.len()));
        let fanout = Fanout::new(nodes, background, needed);
        let machinery = Arc::new(Machinery::new(config, fanout, wakeups));
        // An inspection (`preload` off) writes nothing: it re-seeds no node either. The
        // re-seeds go on while the client or one of its held claims lives.
        if preload {
            crate::engine::seeder::start(Arc::downgrade(&machinery), reseeds);
        }
        Ok(Coordinator { machinery, fleet })
    }

    pub(crate) fn machinery(&self) -> &Arc<Machinery> {
        &self.machinery
    }

    pub(crate) fn config(&self) -> &Config {
        &self.machinery.config
    }

    pub(crate) fn node_list(&self) -> &[Node] {
        self.machinery.node_list()
    }

    pub(crate) fn quorum(&self) -> usize {
        quorum(self.node_list().len())
    }

    pub(crate) fn connected_nodes(&self) -> usize {
        self.node_list().iter().filter(|n| n.is_ready()).count()
    }

    pub(crate) async fn wait_for_nodes(&self, within: Duration) -> usize {
        let all = futures::future::join_all(self.node_list().iter().map(|n| n.connected()));
        let _ = tokio::time::timeout(within, all).await;
        self.connected_nodes()
    }

    pub(crate) async fn wait_for_quorum(&self, within: Duration) -> usize {
        let deadline = tokio::time::Instant::now() + within;
        let needed = self.config().votes_needed.unwrap_or(self.quorum());
        loop {
            // Subscribed before counting, so that a check ending in between is not missed.
            let checked = self.fleet.checked.notified();
            tokio::pin!(checked);
            checked.as_mut().enable();
            let (counted, pending) = self.counted_and_pending();
            if counted >= needed || counted + pending < needed {
                return counted;
            }
            if tokio::time::timeout_at(deadline, checked).await.is_err() {
                return self.counted_and_pending().0;
            }
        }
    }

    /// How long until quarantine lets enough nodes count to decide a lock, as their checks
    /// found: zero when they count now, `None` when the checked nodes cannot, whatever the
    /// wait (too few are connected and checked, or too many do not count for other reasons).
    pub(crate) fn quarantine_left(&self) -> Option<Duration> {
        let needed = self.config().votes_needed.unwrap_or(self.quorum());
        let mut waits: Vec<Duration> = self
            .node_list()
            .iter()
            .filter(|n| n.is_ready())
            .filter_map(|n| match n.admission().excluded() {
                None => Some(Duration::ZERO),
                Some(Excluded::Quarantined { left, .. }) => Some(left),
                Some(_) => None,
            })
            .collect();
        waits.sort_unstable();
        waits.get(needed.checked_sub(1)?).copied()
    }

    /// How many nodes count now, and how many are not checked yet (connecting, being
    /// checked, or down).
    fn counted_and_pending(&self) -> (usize, usize) {
        let nodes = self.node_list();
        let counted = nodes
            .iter()
            .filter(|n| n.is_ready() && n.admission().excluded().is_none())
            .count();
        let pending = nodes.iter().filter(|n| !n.admission().is_checked()).count();
        (counted, pending)
    }

    pub(crate) async fn with_lock<F, Fut, T>(&self, resource: &str, work: F) -> Result<T, Error>
    where
        F: FnOnce(KeptHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        let (keep, config) = (KeepAlive::new(), self.config());
        keep.check(config.ttl)?;
        let lock = self
            .lock_all_with(&[resource], config.ttl, config.retry)
            .await?;
        lock.keep_alive(keep)?.run(work).await
    }

    pub(crate) async fn lock_all_with<S: AsRef<str>>(
        &self,
        resources: &[S],
        ttl: Duration,
        retry: Retry,
    ) -> Result<Held, Error> {
        self.machinery.held.refuse()?;
        let target = Resources::new(self.config(), resources)?;
        let ttl = self.config().check_ttl(ttl)?;
        retry.validate()?;
        // One resource: callers of this client that find it taken wait in line for a release
        // (`engine/waiters.rs`); several: they pause between attempts.
        let key = match target.resources.as_slice() {
            [resource] => Some(keys::lock_key(&self.config().key_prefix, resource)),
            _ => None,
        };
        let client = self.machinery();
        Acquiring::new(client)
            .run(&target.name, (key, None), ttl, retry, || {
                acquire::attempt(client, &target, ttl, Locking::default())
            })
            .await
    }

    /// Deletes `resource`'s key on every node where it holds `token`, with the RELEASE
    /// script (compare-and-delete, announced to the waiters as a release is): an operator
    /// breaking the lock of a holder that is gone (`RedLock::break_lock`, design 3.4b).
    /// Decided as a release is ([`held::confirmed`]).
    pub(crate) async fn break_lock(&self, resource: &str, token: &str) -> Result<Released, Error> {
        if token.is_empty() {
            return Err(ConfigError::EmptyToken.into());
        }
        let target = Resources::new(self.config(), &[resource])?;
        let locks = target.keys.locks().to_vec();
        let args = release_args(&[Value::from(token)]);
        let round = self
            .machinery
            .fanout
            .round_marking(None, Stake::Held, |node| {
                node.release(Primitive::Lock, locks.clone(), args.clone())
            })
            .await;
        held::confirmed(&target.name, round.tally, round.failures)
    }

    pub(crate) async fn settle(&self, within: Duration) -> bool {
        self.machinery.fanout.settle(within).await
    }
}

/// A lock's claim: its keys, set on every node (`SET NX PX`, or the ACQUIRE script when it
/// reads the fencing counters), granted on a majority of yes. With fencing, nothing more:
/// the token is recorded only when the holder asks for it (`engine/fencing.rs`).
#[derive(Debug, Default)]
struct Locking {
    reads_counters: bool,
    /// The fencing token the ACQUIRE script records where it can (0: none).
    hint: u64,
}

impl ClaimKind for Locking {
    type Answer = Acquired;

    fn primitive(&self) -> Primitive {
        Primitive::Lock
    }

    fn noun(&self) -> Option<&'static str> {
        Some("lock")
    }

    async fn send(
        &mut self,
        client: &Machinery,
        target: &Resources,
        token: &Token,
        ttl: Ttl,
    ) -> Round<Acquired> {
        let value = Value::from(token.as_str());
        let keys = &target.keys;
        // Without fencing, or until a token of this client's locks is asked for, one
        // resource is taken with `SET NX PX`: a lock whose token nobody asks for costs what
        // a lock without fencing costs, and asking costs two rounds (read the counters, then
        // record the token). Several resources take the ACQUIRE script, which reads the
        // counters too, for next to nothing; so does one resource once this client's locks
        // have had their token asked for, and it records the next token too if this client
        // guesses it (its hint, `Hints` in `engine/machinery.rs`): then asking sends nothing, and
        // otherwise one round.
        self.reads_counters = client.reads_counters(keys);
        if self.reads_counters && client.tokens_asked() {
            self.hint = client.hints.next(keys.counters());
        }
        if keys.locks == 1 && !self.reads_counters {
            let key = &keys.all[0];
            let set = SetNx::new(key.clone(), value, ttl.px);
            client.fanout.round(|node| node.set_nx(&set)).await
        } else {
            let sent = keys.sent(self.reads_counters);
            let px = (ttl.px, self.hint);
            client
                .fanout
                .round(|node| node.acquire(sent.to_vec(), keys.locks, value.clone(), px))
                .await
        }
    }

    fn granted(
        &mut self,
        client: &Machinery,
        target: &Resources,
        round: &Round<Acquired>,
    ) -> Grant {
        // With the counters, if read: the largest on the majority that said yes.
        let hints = (self.hint, &client.hints);
        Grant {
            fencing: held::granted(&target.keys, self.reads_counters, round, hints),
            member: None,
            handovers: 0,
            room: false,
        }
    }
}
