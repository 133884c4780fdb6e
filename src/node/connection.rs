//! One Redis master: its client, and the three commands Redlock sends it, each turned into
//! a vote. Every command runs under the per-node timeout and is never re-sent by the client.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fred::clients::Client;
use fred::error::{Error as FredError, ErrorKind};
use fred::interfaces::{ClientLike, EventInterface, LuaInterface};
use fred::types::config::{Config as FredConfig, ReconnectPolicy, TcpConfig, UnresponsiveConfig};
use fred::types::{Builder, Key, Value};
use tokio::task::JoinHandle;

use crate::algo::keys;
use crate::algo::quorum::Ballot;
use crate::config::given::Source;
use crate::config::{Config, NodeUrl};
use crate::error::{ConfigError, FoundKind, NodeError, NodeErrorKind};
use crate::node::admission::{self, Admission, Clearance, Fleet};
use crate::node::batch::{Batcher, Failure, List, Op};
use crate::node::failure::{classify, describe};
use crate::node::scripts;
use crate::node::scripts::{BATCH, SET_NX_ALONE};
use crate::node::subscriber::Listener;
use crate::report::facts::Excluded;

/// One node's answer, or why it failed.
pub(crate) type NodeResult<T> = Result<T, NodeError>;

/// One node's yes / no, or why it failed.
pub(crate) type Vote = NodeResult<bool>;

/// A node's answer as the tally counts it.
pub(crate) trait Answer: Send + 'static {
    fn ballot(&self) -> Ballot;
}

impl Answer for bool {
    fn ballot(&self) -> Ballot {
        if *self {
            Ballot::Yes
        } else {
            Ballot::No
        }
    }
}

/// The keys and arguments of `SET key token NX PX ttl`, made once for a round's calls to
/// every node.
#[derive(Debug)]
pub(crate) struct SetNx {
    keys: Arc<[Key]>,
    args: Arc<[Value]>,
}

impl SetNx {
    pub(crate) fn new(key: Key, token: Value, ttl_ms: i64) -> SetNx {
        SetNx {
            keys: Arc::new([key]),
            args: Arc::new([token, Value::Integer(ttl_ms)]),
        }
    }
}

/// The answer to an acquisition: `Some` when the node set our keys, with what its fencing
/// counters read as; `None` when a key was already there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Acquired(pub(crate) Option<CounterRead>);

/// What a node's fencing counters read as, in a yes vote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CounterRead {
    /// The largest of them and of the node's floor (0 when none was read).
    Read(u64),
    /// The node may have lost counters since it was checked (`algo/lineage.rs`): its vote counts
    /// for the lock, and its counters for nothing.
    Untrusted,
}

impl Answer for Acquired {
    fn ballot(&self) -> Ballot {
        match self.0 {
            Some(_) => Ballot::Yes,
            None => Ballot::No,
        }
    }
}

/// What a call acts on: the keys of a lock, or a permit's claim (`slot:token`) in the sorted
/// set of a semaphore (design 2.9). The engine runs the same rounds on both; only the
/// scripts differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Primitive {
    Lock,
    Permit,
}

impl Primitive {
    /// The script that does for this claim what `op` does for a lock.
    fn op(self, op: Op) -> Op {
        match (self, op) {
            (Primitive::Lock, op) => op,
            (Primitive::Permit, Op::Extend) => Op::PermitExtend,
            (Primitive::Permit, Op::Release) => Op::PermitRelease,
            (Primitive::Permit, Op::Discard) => Op::PermitDiscard,
            (Primitive::Permit, Op::Peek) => Op::PermitPeek,
            (Primitive::Permit, Op::Fence) => Op::PermitFence,
            (Primitive::Permit, Op::Handover) => Op::PermitHandover,
            (Primitive::Permit, op) => op,
        }
    }
}

/// A node's answer to a permit's acquisition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SlotAnswer {
    /// The node recorded our claim of this slot, and another slot was still free there
    /// (`true`) or not.
    Granted(u32, bool),
    /// Every slot is claimed here.
    Full,
    /// The key is not a semaphore of our number of permits; nothing was changed.
    Other(FoundKind),
}

impl Answer for SlotAnswer {
    fn ballot(&self) -> Ballot {
        match self {
            SlotAnswer::Granted(..) => Ballot::Yes,
            SlotAnswer::Full | SlotAnswer::Other(_) => Ballot::No,
        }
    }
}

/// The answer to an extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Extended {
    /// Every key still held our token; its ttl was reset.
    Kept,
    /// No key holds another token, but some are missing (the node restarted empty, or
    /// missed the acquisition): nothing was changed. The node did not hold the lock all
    /// along, so this does not count towards the quorum.
    Missing,
    /// A key holds another token; nothing was changed.
    Refused,
}

impl Answer for Extended {
    fn ballot(&self) -> Ballot {
        match self {
            Extended::Kept => Ballot::Yes,
            Extended::Missing | Extended::Refused => Ballot::No,
        }
    }
}

/// A reply of the wrong shape, reported as a protocol error.
fn unexpected(script: &str, reply: &Value) -> FredError {
    FredError::new(
        ErrorKind::Protocol,
        format!("unexpected reply to the {script} script: {reply:?}"),
    )
}

/// The answer of PERMIT_ACQUIRE or RW_ACQUIRE: `{slot, free}` when recorded, nil when
/// refused, -1 for a key of another kind, -2 for a read-write lock, `-2 - M` for a semaphore
/// of `M` permits.
fn slot_answer(script: &str, value: Value) -> Result<SlotAnswer, FredError> {
    match value {
        Value::Null => Ok(SlotAnswer::Full),
        Value::Integer(-1) => Ok(SlotAnswer::Other(FoundKind::Other)),
        Value::Integer(-2) => Ok(SlotAnswer::Other(FoundKind::ReadWriteLock)),
        Value::Array(ref granted) => match granted.as_slice() {
            [Value::Integer(slot), Value::Integer(free)] => u32::try_from(*slot)
                .map(|slot| SlotAnswer::Granted(slot, *free == 1))
                .map_err(|_| unexpected(script, &value)),
            _ => Err(unexpected(script, &value)),
        },
        Value::Integer(other) if other < -2 => u32::try_from(-2 - other)
            .map(|permits| SlotAnswer::Other(FoundKind::Semaphore { permits }))
            .map_err(|_| unexpected(script, &value)),
        other => Err(unexpected(script, &other)),
    }
}

/// A connection to one Redis master.
#[derive(Debug)]
pub(crate) struct Node {
    index: usize,
    url: Arc<str>,
    client: Client,
    timeout: Duration,
    /// The last connection error reported by the client (kind and message), reported when
    /// a command fails because the node is not connected.
    last_error: LastError,
    /// Set when the node's last command failed (timeout, connection), cleared by any answer.
    suspect: Arc<AtomicBool>,
    /// Whether its votes count now.
    admission: Admission,
    /// Every script call and set goes through it (see `node/batch.rs`), through the handle
    /// in `context`; held here for its task, which ends when it is dropped.
    _batch: Batcher,
    /// The above, as each call's future needs it (see [`context`](Self::context)).
    context: Arc<ErrorContext>,
    /// The subscriber for release messages, started on first use (see `node/subscriber.rs`).
    listener: Listener,
    tasks: Vec<JoinHandle<Result<(), FredError>>>,
}

impl Node {
    /// Creates the client (or takes the application's, see `config/given.rs`) and starts connecting
    /// in the background (needs a Tokio runtime).
    pub(crate) fn connect(
        index: usize,
        url: &NodeUrl,
        source: &Source,
        config: &Config,
        fleet: Arc<Fleet>,
        preload: bool,
    ) -> Result<Node, ConfigError> {
        let invalid = |e: FredError| ConfigError::InvalidUrl {
            url: url.redacted().to_string(),
            reason: e.details().to_string(),
        };
        let (client, builder, shared) = match source {
            Source::Url => {
                let fred_config =
                    crate::config::tls::fred_config(url, config.tls.as_ref()).map_err(invalid)?;
                let builder = our_builder(fred_config, config);
                (builder.build().map_err(invalid)?, builder, false)
            }
            Source::Config(fred_config) => {
                let builder = our_builder((**fred_config).clone(), config);
                (builder.build().map_err(invalid)?, builder, false)
            }
            // The subscriber is ours, made from the client's configuration.
            Source::Client(client) => (
                client.clone(),
                our_builder(client.client_config(), config),
                true,
            ),
        };
        // Connected only when this client first waits for a release (`engine/waiters.rs`).
        let listener = Listener::new(
            builder.build_subscriber_client().map_err(invalid)?,
            config.node_timeout,
        );

        let last_error = Arc::new(Mutex::new(None));
        let sink = Arc::clone(&last_error);
        let label: Arc<str> = Arc::from(url.redacted());
        let log_label = Arc::clone(&label);
        let admission = Admission::new(index, Arc::clone(&label), fleet);
        let (on_error, errors_client) = (admission.clone(), client.clone());
        let errors = client.on_error(move |(error, _server)| {
            tracing::debug!(node = index, url = %log_label, %error, "connection error");
            if let Ok(mut slot) = sink.lock() {
                *slot = Some(describe(&error));
            }
            // The connection broke: the server may come back as a new one.
            on_error.recheck(&errors_client, false);
            async { Ok(()) }
        });
        let (on_connect, loader) = (admission.clone(), client.clone());
        let connected = client.on_reconnect(move |_server| {
            // A new connection is checked before its votes count (a restarted server, a
            // replica, another URL of a server already configured).
            on_connect.recheck(&loader, true);
            let client = loader.clone();
            async move {
                // Cache the scripts on every (re)connection, so that a command that a frozen
                // node runs late finds them too: by then nobody waits to send the EVAL
                // fallback. In this task (the connection events' own), not one of its own:
                // a client's tasks are its events' task and its background work, which
                // `settle` counts.
                if preload {
                    preload_scripts(index, &client).await;
                }
                Ok(())
            }
        });
        let mut tasks = vec![errors, connected];
        if shared {
            // The application connects its client. One that is connected already had its
            // connection event before ours was registered: check it now.
            if client.is_connected() {
                admission.recheck(&client, true);
                if preload {
                    let client = client.clone();
                    tokio::spawn(async move { preload_scripts(index, &client).await });
                }
            }
        } else {
            tasks.push(client.connect());
        }
        let batch = Batcher::start(client.clone(), config.node_timeout, admission.clone());
        let suspect = Arc::new(AtomicBool::new(false));
        let context = Arc::new(ErrorContext {
            index,
            url: Arc::clone(&label),
            client: client.clone(),
            timeout: config.node_timeout,
            last_error: Arc::clone(&last_error),
            suspect: Arc::clone(&suspect),
            admission: admission.clone(),
            batch: batch.handle(),
        });
        Ok(Node {
            _batch: batch,
            listener,
            index,
            url: label,
            client,
            timeout: config.node_timeout,
            last_error,
            suspect,
            admission,
            context,
            tasks,
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

    /// Whether the client has never been connected to the node (so nothing was ever sent).
    pub(crate) fn never_connected(&self) -> bool {
        !self.client.is_connected() && !self.admission.ever_connected()
    }

    /// Connected, and its connection checked (its votes may still not count: see
    /// [`excluded`](Self::excluded)).
    pub(crate) fn is_ready(&self) -> bool {
        self.client.is_connected() && self.admission.is_checked()
    }

    /// Why the node's votes do not count now, if they do not.
    pub(crate) fn excluded(&self) -> Option<Excluded> {
        self.admission.excluded()
    }

    pub(crate) fn admission(&self) -> &Admission {
        &self.admission
    }

    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    pub(crate) fn label(&self) -> &str {
        &self.url
    }

    pub(crate) fn listener(&self) -> &Listener {
        &self.listener
    }

    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The last connection error the client reported.
    pub(crate) fn last_error(&self) -> Option<(NodeErrorKind, String)> {
        self.last_error.lock().ok().and_then(|slot| slot.clone())
    }

    /// How this node's vote is reported when its round was decided before it came (design
    /// 4.1): named if the node is known to be unable to vote yes, `None` if it is connected,
    /// counted and answering (its answer was merely not awaited; the command runs to its
    /// end in the background). Named: not connected (the kind of its last connection error,
    /// `Io` when none is known yet), not counted (its exclusion's kind: `Unchecked` while
    /// its connection is being checked), or its last command unanswered (`NotAwaited`).
    pub(crate) fn not_awaited(&self) -> Option<NodeError> {
        let (kind, message) = if !self.client.is_connected() {
            match self.last_error() {
                Some((kind @ (NodeErrorKind::Tls | NodeErrorKind::Auth), last)) => {
                    (kind, format!("not connected: {last}"))
                }
                Some((_, last)) => (NodeErrorKind::Io, format!("not connected: {last}")),
                None => (NodeErrorKind::Io, "not connected yet".to_string()),
            }
        } else if let Some(excluded) = self.excluded() {
            (admission::kind(&excluded), excluded.to_string())
        } else if self.is_suspect() {
            let waited = humantime::format_duration(self.timeout);
            let message = format!("its last command got no answer within {waited}");
            (NodeErrorKind::NotAwaited, message)
        } else {
            return None;
        };
        Some(NodeError {
            index: self.index,
            node: self.url.to_string(),
            kind,
            message: format!("{message}; decided without its answer"),
        })
    }

    /// A node that answered no, as a failure: `taking` for an acquisition (a key is held by
    /// another owner), otherwise an operation on a lock we hold (our token is not there).
    pub(crate) fn answered_no(&self, taking: bool) -> NodeError {
        let message = if taking {
            "a key is held by another owner here"
        } else {
            "our token is not (or no longer) on every key here"
        };
        NodeError {
            index: self.index,
            node: self.url.to_string(),
            kind: NodeErrorKind::Refused,
            message: message.to_string(),
        }
    }

    /// Resolves when the node is connected and its connection checked, or never.
    pub(crate) async fn connected(&self) {
        while !self.is_ready() {
            if self.client.is_connected() {
                // Connected; the check runs in another task. (`wait_for_connect` would return
                // at once here, and this loop would never yield to it.)
                tokio::time::sleep(Duration::from_millis(5)).await;
                continue;
            }
            // `wait_for_connect` reports the *next* connection attempt; re-check the state
            // now and then so that a connection made just before subscribing is not missed.
            let _ = tokio::time::timeout(Duration::from_millis(20), self.client.wait_for_connect())
                .await;
        }
    }

    /// `SET key token NX PX ttl`: yes if set, no if the key exists. A yes reads fencing
    /// counter 0 (this form is used without fencing only).
    pub(crate) fn set_nx(
        &self,
        set: &SetNx,
    ) -> impl Future<Output = NodeResult<Acquired>> + Send + 'static {
        let ctx = self.context();
        let (keys, args) = (List::from(&set.keys), List::from(&set.args));
        async move {
            ctx.admitted().await?;
            let reply = ctx.sent(ctx.batch.call(Op::SetNx, true, keys, args).await)?;
            ctx.vote(reply.and_then(|value| match value {
                Value::Null => Ok(Acquired(None)),
                Value::Integer(0) => Ok(Acquired(Some(CounterRead::Read(0)))),
                other => Err(unexpected("SET NX", &other)),
            }))
            .await
        }
    }

    /// All-or-nothing `SET NX PX` of every lock key, reading the fencing counters (the
    /// ACQUIRE script): yes with the largest counter, or no if any key exists. A yes whose
    /// counter is below `hint` has recorded the fencing token `hint` (0: none).
    pub(crate) fn acquire(
        &self,
        keys: Vec<Key>,
        locks: usize,
        token: Value,
        (ttl_ms, hint): (i64, u64),
    ) -> impl Future<Output = NodeResult<Acquired>> + Send + 'static {
        let args = vec![
            token,
            Value::Integer(ttl_ms),
            Value::Integer(locks as i64),
            Value::from(hint.to_string()),
        ];
        self.counted_vote(Op::Acquire, "ACQUIRE", keys, locks, args)
    }

    /// Claims the first slot free on this node of the semaphore `key` of `permits` permits, in
    /// the preference order `start`, `start + step`, ... (the PERMIT_ACQUIRE script).
    pub(crate) fn acquire_permit(
        &self,
        key: Key,
        token: Value,
        ttl_ms: i64,
        permits: u32,
        (start, step): (u32, u32),
    ) -> impl Future<Output = NodeResult<SlotAnswer>> + Send + 'static {
        let ctx = self.context();
        let args = vec![
            token,
            Value::Integer(ttl_ms),
            Value::Integer(i64::from(permits)),
            Value::Integer(i64::from(start)),
            Value::Integer(i64::from(step)),
        ];
        async move {
            ctx.admitted().await?;
            let reply = ctx.sent(
                ctx.batch
                    .call(Op::PermitAcquire, true, vec![key], args)
                    .await,
            )?;
            ctx.vote(reply.and_then(|value| slot_answer("PERMIT_ACQUIRE", value)))
                .await
        }
    }

    /// Takes a side of the read-write lock `key` (the RW_ACQUIRE script): `reader` or the
    /// writer, for a waiter `waiter` whose intent, if it is a writer refused, lives for
    /// `intent_ms`. Granted answers slot 0.
    pub(crate) fn acquire_rw(
        &self,
        key: Key,
        token: Value,
        ttl_ms: i64,
        reader: bool,
        (waiter, intent_ms): (Value, i64),
    ) -> impl Future<Output = NodeResult<SlotAnswer>> + Send + 'static {
        let ctx = self.context();
        let side = if reader { "r" } else { "w" };
        let args = vec![
            token,
            Value::Integer(ttl_ms),
            Value::from(side),
            waiter,
            Value::Integer(intent_ms),
        ];
        async move {
            ctx.admitted().await?;
            let reply = ctx.sent(ctx.batch.call(Op::RwAcquire, true, vec![key], args).await)?;
            ctx.vote(reply.and_then(|value| slot_answer("RW_ACQUIRE", value)))
                .await
        }
    }

    /// Reads the fencing counters where our token still holds every lock key (the PEEK
    /// script): yes with the largest counter, or no if the lock is not ours there.
    pub(crate) fn peek(
        &self,
        primitive: Primitive,
        keys: Vec<Key>,
        locks: usize,
        token: Value,
    ) -> impl Future<Output = NodeResult<Acquired>> + Send + 'static {
        let args = vec![token, Value::Integer(locks as i64)];
        self.counted_vote(primitive.op(Op::Peek), "PEEK", keys, locks, args)
    }

    /// Records fencing token `fence` where our token still holds every lock key (the FENCE
    /// script): yes if recorded.
    pub(crate) fn fence(
        &self,
        primitive: Primitive,
        keys: Vec<Key>,
        locks: usize,
        token: Value,
        fence: u64,
    ) -> impl Future<Output = Vote> + Send + 'static {
        let ctx = self.context();
        let mut keys = keys;
        let mut args = vec![
            token,
            Value::from(fence.to_string()),
            Value::Integer(locks as i64),
        ];
        let marker = self.lineage_keys(&mut keys, &mut args, locks);
        async move {
            ctx.admitted().await?;
            ctx.counters_trusted(marker.as_deref())?;
            let reply = ctx.sent(
                ctx.batch
                    .call(primitive.op(Op::Fence), true, keys, args)
                    .await,
            )?;
            let recorded = ctx.vote(integer("FENCE", reply)).await?;
            ctx.counters_still_trusted(marker.as_deref(), recorded == -1)?;
            Ok(recorded == 1)
        }
    }

    /// Compare-and-delete of every lock key, announced: yes if all were ours and are
    /// deleted, no if any was not ours (or gone). A key counts as ours if it holds any of the
    /// tokens in `args` (one, or the two of a handover that failed), which
    /// [`release_args`](crate::node::scripts::release_args) makes once for every node.
    pub(crate) fn release(
        &self,
        primitive: Primitive,
        keys: impl Into<List<Key>>,
        args: impl Into<List<Value>>,
    ) -> impl Future<Output = Vote> + Send + 'static {
        self.compare_and_delete(primitive.op(Op::Release), keys, args)
    }

    /// [`release`](Self::release) without announcing the deletes (the DISCARD script): the
    /// cleanup of an attempt that failed, whose token never held the lock. For a permit,
    /// `tokens` is the attempt's token and the claim to keep (`""` for none), and every other
    /// claim of the token goes, whatever its slot.
    pub(crate) fn discard(
        &self,
        primitive: Primitive,
        keys: impl Into<List<Key>>,
        tokens: impl Into<List<Value>>,
    ) -> impl Future<Output = Vote> + Send + 'static {
        self.compare_and_delete(primitive.op(Op::Discard), keys, tokens)
    }

    fn compare_and_delete(
        &self,
        op: Op,
        keys: impl Into<List<Key>>,
        tokens: impl Into<List<Value>>,
    ) -> impl Future<Output = Vote> + Send + 'static {
        let ctx = self.context();
        let (keys, tokens) = (keys.into(), tokens.into());
        async move {
            // Never held back, and sent even after its deadline (see `node/batch.rs`).
            let expected = keys.len() as i64;
            let reply = ctx.sent(ctx.batch.call(op, false, keys, tokens).await)?;
            ctx.judge(integer("RELEASE", reply).map(|n| n >= expected))
        }
    }

    /// Replaces our token `old` with `new` on every lock key, or sets `new` where no token is
    /// there (the HANDOVER script): yes with the largest fencing counter, or no if a key holds
    /// another token. `keys` are the lock keys, then the fencing counters to read, if any.
    pub(crate) fn handover(
        &self,
        primitive: Primitive,
        keys: Vec<Key>,
        locks: usize,
        old: Value,
        new: Value,
        ttl_ms: i64,
    ) -> impl Future<Output = NodeResult<Acquired>> + Send + 'static {
        let args = vec![
            old,
            new,
            Value::Integer(ttl_ms),
            Value::Integer(locks as i64),
        ];
        self.counted_vote(primitive.op(Op::Handover), "HANDOVER", keys, locks, args)
    }

    /// A vote by a script that answers nil for no, or what the fencing counters read as for
    /// yes (ACQUIRE, PEEK, HANDOVER), sent once the node's votes count. Where the node may
    /// have lost counters (`algo/lineage.rs`), an acquisition still votes, its counters untrusted;
    /// a PEEK, whose only purpose is the counters, fails.
    fn counted_vote(
        &self,
        op: Op,
        script: &'static str,
        keys: Vec<Key>,
        locks: usize,
        args: Vec<Value>,
    ) -> impl Future<Output = NodeResult<Acquired>> + Send + 'static {
        let ctx = self.context();
        let (mut keys, mut args) = (keys, args);
        let marker = self.lineage_keys(&mut keys, &mut args, locks);
        let only_counters = matches!(op, Op::Peek | Op::PermitPeek);
        async move {
            ctx.admitted().await?;
            if only_counters {
                ctx.counters_trusted(marker.as_deref())?;
            }
            let reply = ctx.sent(ctx.batch.call(op, true, keys, args).await)?;
            let answer = ctx
                .vote(reply.and_then(|value| match value {
                    Value::Null => Ok(Acquired(None)),
                    Value::Integer(-1) => Ok(Acquired(Some(CounterRead::Untrusted))),
                    Value::Integer(fence) if fence >= 0 => {
                        Ok(Acquired(Some(CounterRead::Read(fence as u64))))
                    }
                    other => Err(unexpected(script, &other)),
                }))
                .await?;
            let untrusted = answer.0 == Some(CounterRead::Untrusted);
            match ctx.counters_still_trusted(marker.as_deref(), untrusted) {
                Ok(()) => Ok(answer),
                Err(lost) if only_counters => Err(lost),
                Err(_) => Ok(Acquired(answer.0.map(|_| CounterRead::Untrusted))),
            }
        }
    }

    /// Where a call reads or raises fencing counters (`keys` holds more than the `locks` lock
    /// keys), adds the node's marker and largest-counter keys, and the marker the node was
    /// checked with as the last argument (empty if it may have lost data, which no marker
    /// equals): the script compares it with the marker the node holds when it runs. Returns
    /// the marker sent, if any.
    fn lineage_keys(
        &self,
        keys: &mut Vec<Key>,
        args: &mut Vec<Value>,
        locks: usize,
    ) -> Option<Arc<str>> {
        if keys.len() <= locks {
            return None;
        }
        keys.push(Key::from_static_str(keys::NODE_KEY));
        keys.push(Key::from_static_str(keys::HWM_KEY));
        let marker = self.admission.marker().unwrap_or_else(|| Arc::from(""));
        args.push(Value::from(&*marker));
        Some(marker)
    }

    /// Compare-and-pexpire of every lock key (the EXTEND script).
    pub(crate) fn extend(
        &self,
        primitive: Primitive,
        keys: Vec<Key>,
        token: Value,
        ttl_ms: i64,
    ) -> impl Future<Output = NodeResult<Extended>> + Send + 'static {
        let ctx = self.context();
        async move {
            ctx.admitted().await?;
            let locks = keys.len() as i64;
            let args = vec![token, Value::Integer(ttl_ms), Value::Integer(locks)];
            let reply = ctx.sent(
                ctx.batch
                    .call(primitive.op(Op::Extend), true, keys, args)
                    .await,
            )?;
            ctx.vote(integer("EXTEND", reply).and_then(|n| match n {
                0 => Ok(Extended::Refused),
                1 => Ok(Extended::Kept),
                2 => Ok(Extended::Missing),
                other => Err(unexpected("EXTEND", &Value::Integer(other))),
            }))
            .await
        }
    }

    /// Sets the lock keys again where they are missing (the RESTORE script): yes if the
    /// node holds our lock now.
    pub(crate) fn restore(
        &self,
        keys: Vec<Key>,
        locks: usize,
        token: Value,
        ttl_ms: i64,
        fence: u64,
    ) -> impl Future<Output = Vote> + Send + 'static {
        let ctx = self.context();
        let mut keys = keys;
        let mut args = vec![
            token,
            Value::Integer(ttl_ms),
            Value::Integer(locks as i64),
            Value::from(fence.to_string()),
        ];
        self.lineage_keys(&mut keys, &mut args, locks);
        async move {
            let reply = ctx.sent(ctx.batch.call(Op::Restore, false, keys, args).await)?;
            ctx.judge(integer("RESTORE", reply).map(|n| n == 1))
        }
    }

    /// One call of `script` outside the batches, for the rare commands of elections
    /// (`engine/election.rs`): refused at once where the node's votes do not count, sent only on a
    /// checked connection (waiting for one up to the node timeout, as the queue does), and
    /// counted only if the node's votes still count when the answer comes, as every vote.
    pub(crate) fn eval<T, P>(
        &self,
        script: &'static crate::node::scripts::Script,
        keys: Vec<Key>,
        args: Vec<Value>,
        parse: P,
    ) -> impl Future<Output = NodeResult<T>> + Send + 'static
    where
        T: Send + 'static,
        P: FnOnce(Value) -> Result<T, FredError> + Send + 'static,
    {
        let ctx = self.context();
        async move {
            ctx.admitted().await?;
            // Only on a checked connection, as the queue sends its votes (`node/batch.rs`), and
            // within one node timeout in all.
            let deadline = tokio::time::Instant::now() + ctx.timeout;
            ctx.cleared(deadline).await?;
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let sender =
                crate::node::batch::sender(&ctx.client, left.max(Duration::from_millis(1)));
            let resend = || ctx.admission.clearance(&ctx.client) == Clearance::Clear;
            let reply =
                crate::node::batch::run_script_if::<Value>(&sender, script, keys, args, resend)
                    .await;
            ctx.vote(reply.and_then(parse)).await
        }
    }

    /// A reply of the wrong shape to `script`, as a protocol error.
    pub(crate) fn unexpected(script: &str, reply: &Value) -> FredError {
        unexpected(script, reply)
    }

    /// What a call's future needs of its node: one reference-counted copy, shared by every
    /// call (one atomic increment per call, not one per field).
    fn context(&self) -> Arc<ErrorContext> {
        Arc::clone(&self.context)
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

/// The client of a node given by URL or fred configuration, or the subscriber of any node:
/// the node's address, credentials and TLS from `fred_config`, our connection settings.
fn our_builder(mut fred_config: FredConfig, config: &Config) -> Builder {
    // Start while the node is down and keep trying in the background.
    fred_config.fail_fast = false;
    let connect_timeout = config.connect_timeout;
    let mut builder = Builder::from_config(fred_config);
    builder
        .with_connection_config(|c| {
            c.connection_timeout = connect_timeout;
            c.internal_command_timeout = connect_timeout;
            // Never re-send a command after a reconnect: a replayed SET NX would find our
            // own key and report "taken", and a replay after we gave up could leave a key
            // behind that nobody releases.
            c.max_command_attempts = 1;
            c.tcp = TcpConfig {
                nodelay: Some(true),
                ..TcpConfig::default()
            };
            // A connection that answers nothing for this long is closed and made again.
            // Without it, a connection whose packets were silently dropped (a network cut)
            // waits for TCP's retransmission timer after the network heals, which backs off
            // to minutes. A replacement connection is checked before its votes count, like
            // any new one.
            let max_timeout = unresponsive_after(config.node_timeout);
            c.unresponsive = UnresponsiveConfig {
                max_timeout: Some(max_timeout),
                interval: max_timeout / 4,
            };
        })
        .with_performance_config(|p| {
            // fred's default is no timeout at all: a frozen node would hang every call.
            p.default_command_timeout = config.node_timeout;
        })
        // fred's default is no reconnection: one dropped connection would fail the node for
        // good. Retry forever, 50 ms doubling up to 2 s.
        .set_policy(ReconnectPolicy::new_exponential(0, 50, 2_000, 2));
    builder
}

/// Caches the scripts on the node, so that a command that a frozen node runs late finds
/// them too: by then nobody waits to send the EVAL fallback.
async fn preload_scripts(index: usize, client: &Client) {
    let (batch, alone) = (BATCH.body.as_ref(), SET_NX_ALONE.body.as_ref());
    for body in scripts::BATCHED.into_iter().chain([batch, alone]) {
        if let Err(error) = client.script_load::<String, _>(body).await {
            tracing::debug!(node = index, %error, "could not cache a script");
        }
    }
}

/// How long a connection may leave a command unanswered before it is replaced: ten node
/// timeouts, and at least a second, so that a merely slow node is not reconnected over and
/// over (each new connection costs a check).
pub(crate) fn unresponsive_after(node_timeout: Duration) -> Duration {
    (node_timeout * 10).max(Duration::from_secs(1))
}

/// A script's integer reply.
fn integer(script: &str, reply: Result<Value, FredError>) -> Result<i64, FredError> {
    match reply? {
        Value::Integer(n) => Ok(n),
        other => Err(unexpected(script, &other)),
    }
}

/// A node's last connection error, shared with the client's error handler.
type LastError = Arc<Mutex<Option<(NodeErrorKind, String)>>>;

/// What is needed to describe a node's failure, owned so that per-node futures are `'static`.
#[derive(Debug)]
struct ErrorContext {
    index: usize,
    url: Arc<str>,
    client: Client,
    timeout: Duration,
    last_error: LastError,
    suspect: Arc<AtomicBool>,
    admission: Admission,
    batch: crate::node::batch::Queue,
}

impl ErrorContext {
    /// Refuses at once a vote-counting command to a node whose votes do not count. A node
    /// whose new connection is being checked gets it queued: its queue waits for the check
    /// (see `node/batch.rs`), so that nothing queued after it (its release) overtakes it.
    async fn admitted(&self) -> Result<(), NodeError> {
        match self.admission.excluded() {
            None | Some(Excluded::Unchecked) => Ok(()),
            Some(excluded) => Err(self.excluded(&excluded)),
        }
    }

    /// Waits, until `deadline`, until a vote may be written on the node's connection
    /// ([`Admission::cleared`]); fails as the queue fails a vote that may not.
    async fn cleared(&self, deadline: tokio::time::Instant) -> Result<(), NodeError> {
        match self.admission.cleared(&self.client, deadline).await {
            Ok(()) => Ok(()),
            Err(Some(excluded)) => Err(self.excluded(&excluded)),
            Err(None) => self.judge(Err(FredError::new(ErrorKind::Timeout, "not connected"))),
        }
    }

    /// A call's outcome: the node's reply or error, or refused by the queue because the
    /// node's votes do not count.
    fn sent(&self, reply: Result<Value, Failure>) -> Result<Result<Value, FredError>, NodeError> {
        match reply {
            Ok(value) => Ok(Ok(value)),
            Err(Failure::Node(e)) => Ok(Err(e)),
            Err(Failure::Excluded(excluded)) => Err(self.excluded(&excluded)),
        }
    }

    /// After an answer: does the node's vote count? An answer on a connection that is being
    /// checked counts once the check admits the node (up to the node timeout).
    async fn still_admitted(&self) -> Result<(), NodeError> {
        self.wait_for_check().await;
        match self.admission.excluded() {
            Some(excluded) => Err(self.excluded(&excluded)),
            None => Ok(()),
        }
    }

    /// Waits, up to the node timeout, for the check of a connected node's new connection.
    async fn wait_for_check(&self) {
        self.admission
            .wait_for_check(&self.client, self.timeout)
            .await;
    }

    /// Like [`judge`](Self::judge), for a command whose answer is a vote: the answer counts
    /// only if the node's votes count now, after the answer came. (A restart between the
    /// check before sending and the answer is caught here.)
    async fn vote<T>(&self, reply: Result<T, FredError>) -> NodeResult<T> {
        let vote = self.judge(reply)?;
        self.still_admitted().await?;
        Ok(vote)
    }

    /// Refuses at once a call that is only about fencing counters (PEEK, FENCE) on a node
    /// that may have lost them: `marker` is the marker the call carries, empty for such a
    /// node.
    fn counters_trusted(&self, marker: Option<&str>) -> Result<(), NodeError> {
        match marker {
            Some("") => Err(self.lost_data()),
            _ => Ok(()),
        }
    }

    /// After an answer about fencing counters: they count only if the script found the
    /// marker it was given (`refused` says it did not) and the node was not found to have
    /// lost data since the call was made (a check of a new connection clears the marker).
    fn counters_still_trusted(&self, marker: Option<&str>, refused: bool) -> Result<(), NodeError> {
        let Some(sent) = marker else { return Ok(()) };
        if refused && !sent.is_empty() {
            // The node held another marker than the one it was checked with (flushed, or
            // another server's data): check it again, which re-seeds it if it lost data.
            self.admission.recheck(&self.client, false);
        }
        let now = self.admission.marker();
        if refused || now.as_deref() != Some(sent) {
            return Err(self.lost_data());
        }
        Ok(())
    }

    fn lost_data(&self) -> NodeError {
        let kind = NodeErrorKind::LostData;
        crate::stats::node_error(self.index, kind);
        NodeError {
            index: self.index,
            node: self.url.to_string(),
            kind,
            message: self.admission.lineage_why(),
        }
    }

    fn excluded(&self, excluded: &Excluded) -> NodeError {
        let kind = admission::kind(excluded);
        crate::stats::node_error(self.index, kind);
        NodeError {
            index: self.index,
            node: self.url.to_string(),
            kind,
            message: excluded.to_string(),
        }
    }

    /// Turns a reply into a vote, and keeps the node's suspect flag up to date: an answer
    /// clears it; a timeout or a connection failure sets it. (A server error is an answer.)
    fn judge<T>(&self, reply: Result<T, FredError>) -> NodeResult<T> {
        match reply {
            Ok(yes) => {
                self.suspect.store(false, Ordering::Relaxed);
                Ok(yes)
            }
            Err(e) => {
                // As the command saw it (`error` may report why the connection is down).
                let kind = classify(&e);
                let error = self.error(&e);
                let unresponsive = matches!(kind, NodeErrorKind::Timeout | NodeErrorKind::Io);
                self.suspect.store(unresponsive, Ordering::Relaxed);
                if kind == NodeErrorKind::Io {
                    // The connection broke: the server may come back as a new one.
                    self.admission.recheck(&self.client, false);
                }
                Err(error)
            }
        }
    }

    /// The failure of a command. When the node is not connected and the command timed out
    /// or found no connection, the failure is the connection's: its last error's kind
    /// (TLS, authentication, I/O) and message, rather than a bare timeout.
    fn error(&self, e: &FredError) -> NodeError {
        let (mut kind, mut message) = describe(e);
        let waited = humantime::format_duration(self.timeout);
        if kind == NodeErrorKind::Timeout {
            message = format!("no answer within {waited}");
        }
        if !self.client.is_connected() {
            let last = self.last_error.lock().ok().and_then(|slot| slot.clone());
            match last {
                Some((
                    last_kind @ (NodeErrorKind::Tls | NodeErrorKind::Auth | NodeErrorKind::Io),
                    last,
                )) if matches!(kind, NodeErrorKind::Timeout | NodeErrorKind::Io) => {
                    kind = last_kind;
                    message = format!("{last}; not connected (no answer within {waited})");
                }
                Some((_, last)) => message.push_str(&format!("; not connected: {last}")),
                None => message.push_str("; not connected"),
            }
        }
        let error = NodeError {
            index: self.index,
            node: self.url.to_string(),
            kind,
            message,
        };
        tracing::debug!(node = self.index, url = %self.url, error = %error, "node failed");
        crate::stats::node_error(self.index, error.kind);
        error
    }
}
