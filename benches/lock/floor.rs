//! The floor: raw fred commands on clients configured as the crate configures its own.

use std::cell::Cell;
use std::future::Future;
use std::time::Duration;

use fred::prelude::{
    Builder, Client, ClientLike, Config, Expiration, Key, KeysInterface, LuaInterface,
    ReconnectPolicy, SetOptions, TcpConfig, Value,
};
use futures::stream::{FuturesUnordered, StreamExt};

use crate::{NODES, NODE_TIMEOUT, TTL};

/// The classic compare-and-delete (single key), as used by the floor.
const DELETE_LUA: &str =
    "if redis.call('get',KEYS[1]) == ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end";

/// Raw fred clients, one per node, configured as the crate configures its own.
pub(crate) struct Floor {
    clients: Vec<Client>,
    delete_sha: String,
    /// Makes the tokens unique; the floor does not pay for a CSPRNG draw.
    next_token: Cell<u64>,
}

impl Floor {
    pub(crate) async fn connect(urls: &[String]) -> Floor {
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
                .with_performance_config(|p| p.default_command_timeout = NODE_TIMEOUT)
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
            next_token: Cell::new(0),
        }
    }

    /// Closes every connection.
    pub(crate) async fn quit(&self) {
        for client in &self.clients {
            let _ = client.quit().await;
        }
    }

    /// A fresh token, as long as the crate's (32 hex digits).
    fn token(&self) -> Value {
        let n = self.next_token.get();
        self.next_token.set(n + 1);
        Value::from(format!("{n:032x}"))
    }

    fn set_nx(
        &self,
        node: usize,
        key: &Key,
        token: &Value,
    ) -> impl Future<Output = bool> + Send + 'static {
        let (client, key, token) = (self.clients[node].clone(), key.clone(), token.clone());
        async move {
            let px = Some(Expiration::PX(TTL.as_millis() as i64));
            let reply: Result<Option<String>, _> = client
                .set(key, token, px, Some(SetOptions::NX), false)
                .await;
            matches!(reply, Ok(Some(_)))
        }
    }

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

    /// SET NX PX on every node, decided at the quorum-th answer either way; then the
    /// compare-and-delete on every node, likewise.
    pub(crate) async fn cycle_quorum(&self, key: &Key) -> bool {
        let token = self.token();
        let set = (0..NODES).map(|i| self.set_nx(i, key, &token));
        let acquired = at_quorum(set.collect()).await;
        let delete = (0..NODES).map(|i| self.delete(i, key, &token));
        let released = at_quorum(delete.collect()).await;
        acquired && released
    }

    /// The same, waiting for every node's answer.
    pub(crate) async fn cycle_all(&self, key: &Key) -> bool {
        let token = self.token();
        let set = (0..NODES).map(|i| self.set_nx(i, key, &token));
        let acquired = futures::future::join_all(set).await;
        let delete = (0..NODES).map(|i| self.delete(i, key, &token));
        let released = futures::future::join_all(delete).await;
        acquired.iter().chain(&released).all(|ok| *ok)
    }

    /// SET NX PX and the compare-and-delete on one node only. The delete is sent even when
    /// the SET failed: a SET that timed out may still run, and would block the key for a
    /// whole ttl.
    pub(crate) async fn cycle_single(&self, key: &Key) -> bool {
        let token = self.token();
        let acquired = self.set_nx(0, key, &token).await;
        let released = self.delete(0, key, &token).await;
        acquired && released
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
