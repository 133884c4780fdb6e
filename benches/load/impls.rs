//! The implementations compared, behind one interface: acquire, release, a whole cycle.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use quorumlock::{Lock, RedLock};

use crate::floor::{Floor, FloorLock};
use crate::{NODE_TIMEOUT, TTL};

/// One implementation of a Redlock acquisition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Impl {
    /// Raw fred, deciding each round at the quorum (benches/lock's `floor_quorum`).
    Floor,
    /// quorumlock with its defaults (fencing on).
    Fenced,
    /// quorumlock with `.fencing(false)`.
    Plain,
    /// rslock 0.10 (`LockManager::new(urls)`), which waits for every node.
    Rslock,
    /// quorumlock with its defaults, asking for the fencing token of every lock before it
    /// counts as acquired (a client of its own, past its first token: its acquisitions
    /// record the token it expects, so asking sends nothing). Workload g only.
    Token,
    /// The same with two clients taking turns on each resource: each acquisition finds the
    /// other client's token above the one it expects, and asking costs a FENCE round.
    /// Workload g only.
    TokenShared,
}

impl Impl {
    pub(crate) const ALL: [Impl; 4] = [Impl::Floor, Impl::Fenced, Impl::Plain, Impl::Rslock];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Impl::Floor => "floor_quorum",
            Impl::Fenced => "quorumlock_fenced",
            Impl::Plain => "quorumlock_plain",
            Impl::Rslock => "rslock",
            Impl::Token => "quorumlock_token",
            Impl::TokenShared => "quorumlock_token_shared",
        }
    }
}

/// A lock held by one of the implementations (or, for the floor, an attempt to release).
pub(crate) enum Held {
    Floor(FloorLock),
    Quorumlock(Lock),
    Rslock(rslock::Lock),
}

/// A client of each implementation, all on the same nodes.
pub(crate) struct Clients {
    pub(crate) floor: Floor,
    pub(crate) fenced: RedLock,
    pub(crate) plain: RedLock,
    pub(crate) rslock: rslock::LockManager,
    /// The client of [`Impl::Token`], and the first of [`Impl::TokenShared`]'s two.
    pub(crate) token: RedLock,
    /// The second client of [`Impl::TokenShared`], and whose turn it is.
    pub(crate) shared: (RedLock, AtomicBool),
}

/// A quorumlock client on `urls`, as the lock bench builds it: the crate's defaults but for
/// quarantine, which would keep the votes of these just-started, non-fsyncing servers from
/// counting for a whole ttl (it decides whether a node counts, not what a lock costs).
pub(crate) fn redlock(urls: &[String], fencing: bool) -> RedLock {
    RedLock::builder()
        .nodes(urls.iter().cloned())
        .ttl(TTL)
        .node_timeout(NODE_TIMEOUT)
        .fencing(fencing)
        .quarantine(false)
        .build()
        .expect("configuration")
}

/// Waits until every node is connected and checked and a lock is granted with no node
/// failing.
pub(crate) async fn ready(redlock: &RedLock) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if redlock.wait_for_nodes(Duration::from_secs(1)).await == redlock.nodes() {
            if let Ok(lock) = redlock.try_lock("load:ready").await {
                let all = lock.failures().is_empty();
                if lock.release().await.is_ok() && all {
                    return;
                }
            }
        }
        assert!(Instant::now() < deadline, "nodes not ready after 10 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

impl Clients {
    /// Connects every implementation to `urls` and waits until quorumlock's clients are
    /// ready.
    pub(crate) async fn connect(urls: &[String]) -> Clients {
        let (fenced, plain, token, shared) = (
            redlock(urls, true),
            redlock(urls, false),
            redlock(urls, true),
            redlock(urls, true),
        );
        ready(&fenced).await;
        ready(&plain).await;
        ready(&token).await;
        ready(&shared).await;
        let floor = Floor::connect(urls, NODE_TIMEOUT, TTL).await;
        let rslock = rslock::LockManager::new(urls.to_vec());
        // rslock connects on first use.
        if let Ok(lock) = rslock.lock("load:ready", TTL).await {
            rslock.unlock(&lock).await;
        }
        Clients {
            floor,
            fenced,
            plain,
            rslock,
            token,
            shared: (shared, AtomicBool::new(false)),
        }
    }

    /// One attempt to acquire `resource`. An error carries what there is to release (the
    /// floor's keys; nothing for the others, which clean up after themselves).
    pub(crate) async fn acquire(&self, imp: Impl, resource: &str) -> Result<Held, Option<Held>> {
        match imp {
            Impl::Floor => match self.floor.acquire(resource).await {
                (true, lock) => Ok(Held::Floor(lock)),
                (false, lock) => Err(Some(Held::Floor(lock))),
            },
            Impl::Fenced => self
                .fenced
                .try_lock(resource)
                .await
                .map(Held::Quorumlock)
                .map_err(|_| None),
            Impl::Plain => self
                .plain
                .try_lock(resource)
                .await
                .map(Held::Quorumlock)
                .map_err(|_| None),
            Impl::Rslock => self
                .rslock
                .lock(resource, TTL)
                .await
                .map(Held::Rslock)
                .map_err(|_| None),
            Impl::Token => Self::fenced_lock(&self.token, resource).await,
            Impl::TokenShared => {
                let (other, turn) = &self.shared;
                let client = if turn.fetch_xor(true, Ordering::Relaxed) {
                    other
                } else {
                    &self.token
                };
                Self::fenced_lock(client, resource).await
            }
        }
    }

    /// A lock of `resource` and its fencing token.
    async fn fenced_lock(client: &RedLock, resource: &str) -> Result<Held, Option<Held>> {
        match client.try_lock(resource).await {
            Ok(lock) => match lock.fencing_token().await {
                Ok(_) => Ok(Held::Quorumlock(lock)),
                Err(_) => Err(Some(Held::Quorumlock(lock))),
            },
            Err(_) => Err(None),
        }
    }

    /// Releases `held`; whether a majority confirmed it (rslock does not say: true).
    pub(crate) async fn release(&self, held: Held) -> bool {
        match held {
            Held::Floor(lock) => self.floor.release(lock).await,
            Held::Quorumlock(lock) => lock.release().await.is_ok(),
            Held::Rslock(lock) => {
                self.rslock.unlock(&lock).await;
                true
            }
        }
    }

    /// Acquire, then release: whether both succeeded.
    pub(crate) async fn cycle(&self, imp: Impl, resource: &str) -> bool {
        match self.acquire(imp, resource).await {
            Ok(held) => self.release(held).await,
            Err(Some(cleanup)) => {
                self.release(cleanup).await;
                false
            }
            Err(None) => false,
        }
    }

    /// Closes the floor's connections (the others close when dropped).
    pub(crate) async fn quit(&self) {
        self.floor.quit().await;
    }
}
