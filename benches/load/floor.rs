//! The floor: raw fred commands on clients configured as the crate configures its own,
//! deciding each round at the quorum. Adapted from benches/lock/floor.rs: any number of
//! nodes, shareable between tasks (an atomic token counter), and the acquisition and the
//! release as separate steps so that an acquisition can be timed alone.

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

/// Makes the floor's tokens unique across every floor of the process.
static NEXT_TOKEN: AtomicU64 = AtomicU64::new(0);

/// Raw fred clients, one per node.
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

    /// `SET key token NX PX ttl` on every node, decided at the quorum-th answer either way.
    /// The lock comes back in both cases: release it even when not acquired, since a `SET`
    /// that timed out may still run.
    pub(crate) async fn acquire(&self, resource: &str) -> (bool, FloorLock) {
        // A token as long as the crate's (32 hex digits); no CSPRNG draw.
        let n = NEXT_TOKEN.fetch_add(1, Ordering::Relaxed);
        let lock = FloorLock {
            key: Key::from(resource),
            token: Value::from(format!("{n:032x}")),
        };
        let px = self.ttl.as_millis() as i64;
        let set = self.clients.iter().map(|client| {
            let (client, key, token) = (client.clone(), lock.key.clone(), lock.token.clone());
            async move {
                let reply: Result<Option<String>, _> = client
                    .set(
                        key,
                        token,
                        Some(Expiration::PX(px)),
                        Some(SetOptions::NX),
                        false,
                    )
                    .await;
                matches!(reply, Ok(Some(_)))
            }
        });
        (at_quorum(set.collect()).await, lock)
    }

    /// The compare-and-delete on every node by `EVALSHA`, decided at the quorum.
    pub(crate) async fn release(&self, lock: FloorLock) -> bool {
        let delete = self.clients.iter().map(|client| {
            let (client, key, token) = (client.clone(), lock.key.clone(), lock.token.clone());
            let sha = self.delete_sha.clone();
            async move {
                let reply: Result<i64, _> = client.evalsha(sha, key, token).await;
                matches!(reply, Ok(1))
            }
        });
        at_quorum(delete.collect()).await
    }
}

/// Awaits answers until a majority said yes, or can no longer; the commands still in
/// flight then are driven to their end in a spawned task, as the crate does with its own.
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
