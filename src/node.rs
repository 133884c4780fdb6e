//! One Redis master: its client, and the three commands Redlock sends it, each turned into
//! a vote. Every command runs under the per-node timeout and is never re-sent by the client.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use fred::clients::Client;
use fred::error::{Error as FredError, ErrorKind};
use fred::interfaces::{ClientLike, EventInterface, KeysInterface, LuaInterface};
use fred::types::config::{Config as FredConfig, ReconnectPolicy, TcpConfig};
use fred::types::{Builder, Expiration, Key, SetOptions, Value};
use tokio::task::JoinHandle;

use crate::config::{Config, NodeUrl};
use crate::error::{ConfigError, NodeError, NodeErrorKind};
use crate::quorum::Ballot;
use crate::scripts::{self, Script};

static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(scripts::RELEASE));
static EXTEND: LazyLock<Script> = LazyLock::new(|| Script::new(scripts::EXTEND));

/// One node's answer: yes / no, or why it failed.
pub(crate) type Vote = Result<bool, NodeError>;

pub(crate) fn ballot(vote: &Vote) -> Ballot {
    match vote {
        Ok(true) => Ballot::Yes,
        Ok(false) => Ballot::No,
        Err(_) => Ballot::Failed,
    }
}

/// A connection to one Redis master.
#[derive(Debug)]
pub(crate) struct Node {
    index: usize,
    url: Arc<str>,
    client: Client,
    timeout: Duration,
    /// The last connection error reported by the client, shown when a command times out
    /// because the node is not connected.
    last_error: Arc<Mutex<Option<String>>>,
    /// Set when the node's last command failed (timeout, connection), cleared by any answer.
    suspect: Arc<AtomicBool>,
    tasks: Vec<JoinHandle<Result<(), FredError>>>,
}

impl Node {
    /// Creates the client and starts connecting in the background (needs a Tokio runtime).
    pub(crate) fn connect(
        index: usize,
        url: &NodeUrl,
        config: &Config,
    ) -> Result<Node, ConfigError> {
        let invalid = |e: FredError| ConfigError::InvalidUrl {
            url: url.redacted().to_string(),
            reason: e.details().to_string(),
        };
        let mut fred_config = FredConfig::from_url_centralized(url.as_str()).map_err(invalid)?;
        // Start while the node is down and keep trying in the background.
        fred_config.fail_fast = false;
        let connect_timeout = config.connect_timeout;
        let client = Builder::from_config(fred_config)
            .with_connection_config(|c| {
                c.connection_timeout = connect_timeout;
                c.internal_command_timeout = connect_timeout;
                // Never re-send a command after a reconnect: a replayed SET NX would find our
                // own key and report "taken", and a replay after we gave up could leave a
                // key behind that nobody releases.
                c.max_command_attempts = 1;
                c.tcp = TcpConfig {
                    nodelay: Some(true),
                    ..TcpConfig::default()
                };
            })
            .with_performance_config(|p| {
                // fred's default is no timeout at all: a frozen node would hang every call.
                p.default_command_timeout = config.node_timeout;
            })
            // fred's default is no reconnection: one dropped connection would fail the node
            // for good. Retry forever, 50 ms doubling up to 2 s.
            .set_policy(ReconnectPolicy::new_exponential(0, 50, 2_000, 2))
            .build()
            .map_err(invalid)?;

        let last_error = Arc::new(Mutex::new(None));
        let sink = Arc::clone(&last_error);
        let label: Arc<str> = Arc::from(url.redacted());
        let log_label = Arc::clone(&label);
        let errors = client.on_error(move |(error, _server)| {
            tracing::debug!(node = index, url = %log_label, %error, "connection error");
            if let Ok(mut slot) = sink.lock() {
                *slot = Some(error.details().to_string());
            }
            async { Ok(()) }
        });
        let router = client.connect();
        Ok(Node {
            index,
            url: label,
            client,
            timeout: config.node_timeout,
            last_error,
            suspect: Arc::new(AtomicBool::new(false)),
            tasks: vec![router, errors],
        })
    }

    pub(crate) fn index(&self) -> usize {
        self.index
    }

    /// Whether the node's last command failed to get an answer.
    pub(crate) fn is_suspect(&self) -> bool {
        self.suspect.load(Ordering::Relaxed)
    }

    pub(crate) fn is_connected(&self) -> bool {
        self.client.is_connected()
    }

    /// Resolves when the node is connected, or never.
    pub(crate) async fn connected(&self) {
        while !self.client.is_connected() {
            // `wait_for_connect` reports the *next* connection attempt; re-check the state
            // now and then so that a connection made just before subscribing is not missed.
            let _ = tokio::time::timeout(Duration::from_millis(20), self.client.wait_for_connect())
                .await;
        }
    }

    /// `SET key token NX PX ttl`: yes if set, no if the key exists.
    pub(crate) fn set_nx(
        &self,
        key: Key,
        token: Value,
        ttl_ms: i64,
    ) -> impl std::future::Future<Output = Vote> + Send + 'static {
        let client = self.client.clone();
        let ctx = self.context();
        async move {
            let reply: Result<Option<String>, FredError> = client
                .set(
                    key,
                    token,
                    Some(Expiration::PX(ttl_ms)),
                    Some(SetOptions::NX),
                    false,
                )
                .await;
            // `Option<String>`, not `bool`: fred turns the nil reply for an existing key into
            // a parse error when asked for a bool.
            ctx.judge(reply.map(|r| r.is_some()))
        }
    }

    /// Compare-and-delete: yes if our key was deleted, no if it was not ours (or gone).
    pub(crate) fn release(
        &self,
        key: Key,
        token: Value,
    ) -> impl std::future::Future<Output = Vote> + Send + 'static {
        let client = self.client.clone();
        let ctx = self.context();
        async move {
            match run_script(&client, &RELEASE, key.clone(), vec![token.clone()]).await {
                Ok(n) => ctx.judge(Ok(n == 1)),
                Err(e) => {
                    if *e.kind() == ErrorKind::Timeout {
                        // The EVALSHA may still run later, on a node that was frozen, and it
                        // answers NOSCRIPT there if the node never cached the script: nobody
                        // would be waiting to send the fallback then. Queue the script body
                        // right behind it on the same connection, so that the node runs the
                        // delete either way (it is idempotent for our token). A command that
                        // is still queued in the client when this one times out is never
                        // written at all.
                        tokio::spawn(async move {
                            let _: Result<i64, FredError> =
                                client.eval(RELEASE.body, key, vec![token]).await;
                        });
                    }
                    ctx.judge(Err(e))
                }
            }
        }
    }

    /// Compare-and-pexpire: yes if our key's ttl was reset, no if it was not ours (or gone).
    pub(crate) fn extend(
        &self,
        key: Key,
        token: Value,
        ttl_ms: i64,
    ) -> impl std::future::Future<Output = Vote> + Send + 'static {
        let client = self.client.clone();
        let ctx = self.context();
        async move {
            let reply =
                run_script(&client, &EXTEND, key, vec![token, Value::Integer(ttl_ms)]).await;
            ctx.judge(reply.map(|n| n == 1))
        }
    }

    fn context(&self) -> ErrorContext {
        ErrorContext {
            index: self.index,
            url: Arc::clone(&self.url),
            client: self.client.clone(),
            timeout: self.timeout,
            last_error: Arc::clone(&self.last_error),
            suspect: Arc::clone(&self.suspect),
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        // The router task would otherwise reconnect forever.
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// EVALSHA, falling back to EVAL (which caches the script again) on NOSCRIPT.
async fn run_script(
    client: &Client,
    script: &Script,
    key: Key,
    args: Vec<Value>,
) -> Result<i64, FredError> {
    match client
        .evalsha::<i64, _, _, _>(script.sha.as_str(), key.clone(), args.clone())
        .await
    {
        Err(e) if scripts::is_noscript(&e) => client.eval(script.body, key, args).await,
        other => other,
    }
}

/// What is needed to describe a node's failure, owned so that per-node futures are `'static`.
struct ErrorContext {
    index: usize,
    url: Arc<str>,
    client: Client,
    timeout: Duration,
    last_error: Arc<Mutex<Option<String>>>,
    suspect: Arc<AtomicBool>,
}

impl ErrorContext {
    /// Turns a reply into a vote, and keeps the node's suspect flag up to date: an answer
    /// clears it; a timeout or a connection failure sets it. (A server error is an answer.)
    fn judge(&self, reply: Result<bool, FredError>) -> Vote {
        match reply {
            Ok(yes) => {
                self.suspect.store(false, Ordering::Relaxed);
                Ok(yes)
            }
            Err(e) => {
                let error = self.error(&e);
                let unresponsive = matches!(error.kind, NodeErrorKind::Timeout | NodeErrorKind::Io);
                self.suspect.store(unresponsive, Ordering::Relaxed);
                Err(error)
            }
        }
    }

    fn error(&self, e: &FredError) -> NodeError {
        let details = e.details();
        let kind = classify(e);
        let mut message = match kind {
            NodeErrorKind::Timeout => format!(
                "no answer within {}",
                humantime::format_duration(self.timeout)
            ),
            _ if details.is_empty() => e.kind().to_str().to_string(),
            _ => details.to_string(),
        };
        if !self.client.is_connected() {
            let last = self.last_error.lock().ok().and_then(|slot| slot.clone());
            message.push_str("; not connected");
            if let Some(last) = last {
                message.push_str(": ");
                message.push_str(&last);
            }
        }
        let error = NodeError {
            index: self.index,
            node: self.url.to_string(),
            kind,
            message,
        };
        tracing::debug!(node = self.index, url = %self.url, error = %error, "node failed");
        error
    }
}

fn classify(e: &FredError) -> NodeErrorKind {
    let details = e.details();
    let server_says = |prefix: &str| details.starts_with(prefix);
    match e.kind() {
        ErrorKind::Timeout => NodeErrorKind::Timeout,
        ErrorKind::Auth => NodeErrorKind::Auth,
        _ if server_says("NOAUTH") || server_says("WRONGPASS") || server_says("NOPERM") => {
            NodeErrorKind::Auth
        }
        // fred could not hand the command to a connection (it is down): reported as
        // `Unknown` with this message, or as `Routing`.
        _ if server_says("Failed to route command") => NodeErrorKind::Io,
        ErrorKind::IO | ErrorKind::Canceled | ErrorKind::Routing | ErrorKind::Backpressure => {
            NodeErrorKind::Io
        }
        ErrorKind::Protocol | ErrorKind::Parse => NodeErrorKind::Protocol,
        _ => NodeErrorKind::Server,
    }
}
