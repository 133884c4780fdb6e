//! The floor of the benches: raw fred commands on clients configured as the crate configures
//! its own, with no lock logic. The same `SET key token NX PX ttl` and compare-and-delete
//! (`EVALSHA`) that a Redlock round sends, so that the lock's figures read as ratios to it.
//!
//! One file for every bench that measures the floor, each including it with
//! `#[path = "../common/floor.rs"] mod floor;`: benches/lock (criterion, whole cycles:
//! `cycle_quorum`, `cycle_all`, `cycle_single`) and benches/load (the acquisition and the
//! release as separate steps: `acquire`, `release`). Each uses its part only.
#![allow(dead_code)]

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use fred::prelude::{
    Builder, Client, ClientLike, Config, Expiration, Key, KeysInterface, LuaInterface,
    ReconnectPolicy, SetOptions, TcpConfig, Value,
};
use futures::stream::{FuturesUnordered, StreamExt};

/// The classic compare-and-delete (single key).
const DELETE_LUA: &str =
    "if redis.call('get',KEYS[1]) == ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end";

/// Makes the floor's tokens unique across every floor of the process (and every task).
static NEXT_TOKEN: AtomicU64 = AtomicU64::new(0);

/// Raw fred clients, one per node; shareable between tasks.
pub(crate) struct Floor {
    clients: Vec<Client>,
    delete_sha: String,
    ttl: Duration,
}

/// What the floor's release needs: the key and the token it was set with.
pub(crate) struct FloorLock {
    key: Key,
    token: Value,
}

impl Floor {
    /// One client per URL: one connection, one attempt per command, `timeout` per command,
    /// `TCP_NODELAY`, the crate's reconnect policy. The delete script is cached everywhere.
    pub(crate) async fn connect(urls: &[String], timeout: Duration, ttl: Duration) -> Floor {
        let mut clients = Vec::with_capacity(urls.len());
        for url in urls {
            let config = Config::from_url_centralized(url).expect("node URL");
            let client = Builder::from_config(config)
                .with_connection_config(|c| {
                    c.connection_timeout = Duration::from_secs(1);
                    c.internal_command_timeout = Duration::from_secs(1);
                    c.max_command_attempts = 1;
                    c.tcp = TcpConfig {
                        nodelay: Some(true),
                        ..TcpConfig::default()
                    };
                })
                .with_performance_config(|p| p.default_command_timeout = timeout)
                .set_policy(ReconnectPolicy::new_exponential(0, 50, 2_000, 2))
                .build()
                .expect("fred client");
            client.init().await.expect("connect");
            clients.push(client);
        }
        let mut delete_sha = String::new();
        for client in &clients {
            delete_sha = client.script_load(DELETE_LUA).await.expect("SCRIPT LOAD");
        }
        Floor {
            clients,
            delete_sha,
            ttl,
        }
    }

    /// Closes every connection.
    pub(crate) async fn quit(&self) {
        for client in &self.clients {
            let _ = client.quit().await;
        }
    }

    /// A fresh token, as long as the crate's (32 hex digits); no CSPRNG draw.
    fn token() -> Value {
        let n = NEXT_TOKEN.fetch_add(1, Ordering::Relaxed);
        Value::from(format!("{n:032x}"))
    }

    /// `SET key token NX PX ttl` on one node: true if set.
    fn set_nx(
        &self,
        node: usize,
        key: &Key,
        token: &Value,
    ) -> impl Future<Output = bool> + Send + 'static {
        let (client, key, token) = (self.clients[node].clone(), key.clone(), token.clone());
        let px = Some(Expiration::PX(self.ttl.as_millis() as i64));
        async move {
            let reply: Result<Option<String>, _> = client
                .set(key, token, px, Some(SetOptions::NX), false)
                .await;
            matches!(reply, Ok(Some(_)))
        }
    }

    /// The compare-and-delete by `EVALSHA` on one node: true if it deleted the key.
    fn delete(
        &self,
        node: usize,
        key: &Key,
        token: &Value,
    ) -> impl Future<Output = bool> + Send + 'static {
        let (client, key, token) = (self.clients[node].clone(), key.clone(), token.clone());
        let sha = self.delete_sha.clone();
        async move {
            let reply: Result<i64, _> = client.evalsha(sha, key, token).await;
            matches!(reply, Ok(1))
        }
    }

    /// The `SET NX PX` on every node, decided at the quorum-th answer either way.
    async fn set_at_quorum(&self, key: &Key, token: &Value) -> bool {
        let set = (0..self.clients.len()).map(|i| self.set_nx(i, key, token));
        at_quorum(set.collect()).await
    }

    /// The compare-and-delete on every node, decided at the quorum-th answer either way.
    async fn delete_at_quorum(&self, key: &Key, token: &Value) -> bool {
        let delete = (0..self.clients.len()).map(|i| self.delete(i, key, token));
        at_quorum(delete.collect()).await
    }

    /// SET NX PX on every node, decided at the quorum-th answer either way; then the
    /// compare-and-delete on every node, likewise.
    pub(crate) async fn cycle_quorum(&self, key: &Key) -> bool {
        let token = Self::token();
        let acquired = self.set_at_quorum(key, &token).await;
        let released = self.delete_at_quorum(key, &token).await;
        acquired && released
    }

    /// The same, waiting for every node's answer.
    pub(crate) async fn cycle_all(&self, key: &Key) -> bool {
        let token = Self::token();
        let set = (0..self.clients.len()).map(|i| self.set_nx(i, key, &token));
        let acquired = futures::future::join_all(set).await;
        let delete = (0..self.clients.len()).map(|i| self.delete(i, key, &token));
        let released = futures::future::join_all(delete).await;
        acquired.iter().chain(&released).all(|ok| *ok)
    }

    /// SET NX PX and the compare-and-delete on one node only. The delete is sent even when
    /// the SET failed: a SET that timed out may still run, and would block the key for a
    /// whole ttl.
    pub(crate) async fn cycle_single(&self, key: &Key) -> bool {
        let token = Self::token();
        let acquired = self.set_nx(0, key, &token).await;
        let released = self.delete(0, key, &token).await;
        acquired && released
    }

    /// The acquisition of `cycle_quorum` alone. The lock comes back in both cases: release
    /// it even when not acquired, since a `SET` that timed out may still run.
    pub(crate) async fn acquire(&self, resource: &str) -> (bool, FloorLock) {
        let lock = FloorLock {
            key: Key::from(resource),
            token: Self::token(),
        };
        (self.set_at_quorum(&lock.key, &lock.token).await, lock)
    }

    /// The release of `cycle_quorum` alone.
    pub(crate) async fn release(&self, lock: FloorLock) -> bool {
        self.delete_at_quorum(&lock.key, &lock.token).await
    }
}

/// Awaits answers until a majority said yes, or can no longer; the commands still in
/// flight then are driven to their end in a background task, as the crate does with its
/// own (one spawn per round). They are already written to their connections, so the next
/// command to the same node queues behind them.
async fn at_quorum<F>(mut pending: FuturesUnordered<F>) -> bool
where
    F: Future<Output = bool> + Send + 'static,
{
    let nodes = pending.len();
    let needed = nodes / 2 + 1;
    let (mut yes, mut no) = (0, 0);
    while let Some(ok) = pending.next().await {
        if ok {
            yes += 1;
        } else {
            no += 1;
        }
        if yes >= needed || no > nodes - needed {
            break;
        }
    }
    if !pending.is_empty() {
        tokio::spawn(async move { while pending.next().await.is_some() {} });
    }
    yes >= needed
}
