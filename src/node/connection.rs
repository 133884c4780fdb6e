//! One Redis master: its client, and the three commands Redlock sends it, each turned into
//! a vote. Every command runs under the per-node timeout and is never re-sent by the client.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fred::clients::Client;
use fred::error::Error as FredError;
use fred::interfaces::ClientLike;
use fred::types::{Key, Value};
use tokio::task::JoinHandle;

use crate::algo::keys;
use crate::config::given::Source;
use crate::config::{Config, NodeUrl};
use crate::error::{ConfigError, NodeError, NodeErrorKind};
use crate::node::admission::{self, Admission, Clearance, Fleet};
use crate::node::answers::{
    integer, slot_answer, unexpected, Acquired, CounterRead, Extended, NodeResult, Primitive,
    SetNx, SlotAnswer, Vote,
};
use crate::node::batch::eval::{run_script_if, sender};
use crate::node::batch::{Batcher, List, Op};
use crate::node::client;
use crate::node::context::{ErrorContext, LastError};
use crate::node::subscriber::Listener;

/// A connection to one Redis master.
#[derive(Debug)]
pub(crate) struct Node {
    /// Every script call and set goes through it (see `node/batch/`), through the handle
    /// in `context`; held here for its task, which ends when it is dropped.
    _batch: Batcher,
    /// The node's client, admission and state, as each call's future needs them (see
    /// [`context`](Self::context)).
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
        let made = client::make(url, source, config).map_err(invalid)?;
        // Connected only when this client first waits for a release (`engine/waiters.rs`).
        let listener = Listener::new(
            made.builder.build_subscriber_client().map_err(invalid)?,
            config.node_timeout,
        );
        let last_error: LastError = Arc::new(Mutex::new(None));
        let label: Arc<str> = Arc::from(url.redacted());
        let admission = Admission::new(index, Arc::clone(&label), fleet);
        let tasks = client::watch(index, &label, &made, &admission, &last_error, preload);
        let client = made.client;
        let batch = Batcher::start(client.clone(), config.node_timeout, admission.clone());
        let context = Arc::new(ErrorContext {
            index,
            url: label,
            batch: batch.handle(),
            client,
            timeout: config.node_timeout,
            last_error,
            suspect: Arc::new(AtomicBool::new(false)),
            admission,
        });
        Ok(Node {
            _batch: batch,
            listener,
            context,
            tasks,
        })
    }

    pub(crate) fn index(&self) -> usize {
        self.context.index
    }

    /// Whether the node's last command failed to get an answer.
    pub(crate) fn is_suspect(&self) -> bool {
        self.context.suspect.load(Ordering::Relaxed)
    }

    pub(crate) fn is_connected(&self) -> bool {
        self.context.client.is_connected()
    }

    /// Whether the client has never been connected to the node (so nothing was ever sent).
    pub(crate) fn never_connected(&self) -> bool {
        !self.is_connected() && !self.admission().ever_connected()
    }

    /// Connected, and its connection checked (its votes may still not count: see
    /// [`Admission::excluded`]).
    pub(crate) fn is_ready(&self) -> bool {
        self.is_connected() && self.admission().is_checked()
    }

    pub(crate) fn admission(&self) -> &Admission {
        &self.context.admission
    }

    pub(crate) fn client(&self) -> &Client {
        &self.context.client
    }

    pub(crate) fn label(&self) -> &str {
        &self.context.url
    }

    pub(crate) fn listener(&self) -> &Listener {
        &self.listener
    }

    pub(crate) fn timeout(&self) -> Duration {
        self.context.timeout
    }

    /// The last connection error the client reported.
    pub(crate) fn last_error(&self) -> Option<(NodeErrorKind, String)> {
        self.context
            .last_error
            .lock()
            .ok()
            .and_then(|slot| slot.clone())
    }

    /// How this node's vote is reported when its round was decided before it came (design
    /// 4.1): named if the node is known to be unable to vote yes (not connected, not counted,
    /// or its last command unanswered), `None` if it is connected, counted and answering.
    pub(crate) fn not_awaited(&self) -> Option<NodeError> {
        let (kind, message) = if !self.is_connected() {
            match self.last_error() {
                Some((kind @ (NodeErrorKind::Tls | NodeErrorKind::Auth), last)) => {
                    (kind, format!("not connected: {last}"))
                }
                Some((_, last)) => (NodeErrorKind::Io, format!("not connected: {last}")),
                None => (NodeErrorKind::Io, "not connected yet".to_string()),
            }
        } else if let Some(excluded) = self.admission().excluded() {
            (admission::kind(&excluded), excluded.to_string())
        } else if self.is_suspect() {
            let waited = humantime::format_duration(self.context.timeout);
            let message = format!("its last command got no answer within {waited}");
            (NodeErrorKind::NotAwaited, message)
        } else {
            return None;
        };
        Some(
            self.context
                .failure(kind, format!("{message}; decided without its answer")),
        )
    }

    /// A node that answered no, as a failure: `taking` for an acquisition (a key is held by
    /// another owner), otherwise an operation on a lock we hold (our token is not there).
    pub(crate) fn answered_no(&self, taking: bool) -> NodeError {
        let message = if taking {
            "a key is held by another owner here"
        } else {
            "our token is not (or no longer) on every key here"
        };
        self.context
            .failure(NodeErrorKind::Refused, message.to_string())
    }

    /// Resolves when the node is connected and its connection checked, or never.
    pub(crate) async fn connected(&self) {
        while !self.is_ready() {
            if self.is_connected() {
                // Connected; the check runs in another task. (`wait_for_connect` would return
                // at once here, and this loop would never yield to it.)
                tokio::time::sleep(Duration::from_millis(5)).await;
                continue;
            }
            // `wait_for_connect` reports the *next* connection attempt; re-check the state
            // now and then so that a connection made just before subscribing is not missed.
            let _ =
                tokio::time::timeout(Duration::from_millis(20), self.client().wait_for_connect())
                    .await;
        }
    }

    /// `SET key token NX PX ttl`: yes if set, no if the key exists. A yes reads fencing
    /// counter 0 (this form is used without fencing only).
    pub(crate) fn set_nx(
        &self,
        set: &SetNx,
    ) -> impl Future<Output = NodeResult<Acquired>> + Send + 'static {
        let (keys, args) = (List::from(&set.keys), List::from(&set.args));
        let parse = |value| match value {
            Value::Null => Ok(Acquired(None)),
            Value::Integer(0) => Ok(Acquired(Some(CounterRead::Read(0)))),
            other => Err(unexpected("SET NX", &other)),
        };
        self.context().voted(Op::SetNx, keys, args, parse)
    }

    /// The ACQUIRE script: yes with what the fencing counters read as, or no if any key
    /// exists; given a `hint` (0: none), see ACQUIRE.
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
        let args = vec![
            token,
            Value::Integer(ttl_ms),
            Value::Integer(i64::from(permits)),
            Value::Integer(i64::from(start)),
            Value::Integer(i64::from(step)),
        ];
        let parse = |value| slot_answer("PERMIT_ACQUIRE", value);
        self.context()
            .voted(Op::PermitAcquire, vec![key], args, parse)
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
        let side = if reader { "r" } else { "w" };
        let args = vec![
            token,
            Value::Integer(ttl_ms),
            Value::from(side),
            waiter,
            Value::Integer(intent_ms),
        ];
        let parse = |value| slot_answer("RW_ACQUIRE", value);
        self.context().voted(Op::RwAcquire, vec![key], args, parse)
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
        mut keys: Vec<Key>,
        locks: usize,
        token: Value,
        fence: u64,
    ) -> impl Future<Output = Vote> + Send + 'static {
        let ctx = self.context();
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
    /// cleanup of an attempt that failed. For a permit (PERMIT_DISCARD), `tokens` is the
    /// attempt's token and the claim to keep (`""` for none).
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
            // Never held back, and sent even after its deadline (see `node/batch/`).
            let expected = keys.len() as i64;
            let reply = ctx.sent(ctx.batch.call(op, false, keys, tokens).await)?;
            ctx.judge(integer("RELEASE", reply).map(|n| n >= expected))
        }
    }

    /// The HANDOVER script from `old` to `new`: yes with what the fencing counters read as, or
    /// no if a key holds another token. `keys` are the lock keys, then the counters, if any.
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
    /// yes (ACQUIRE, PEEK, HANDOVER), sent once the node's votes count; where the node may
    /// have lost counters, as design 2.6a, "Atomic use", says.
    fn counted_vote(
        &self,
        op: Op,
        script: &'static str,
        mut keys: Vec<Key>,
        locks: usize,
        mut args: Vec<Value>,
    ) -> impl Future<Output = NodeResult<Acquired>> + Send + 'static {
        let ctx = self.context();
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
    /// equals; design 2.6a, "Atomic use"). Returns the marker sent, if any.
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
        let marker = self.admission().marker().unwrap_or_else(|| Arc::from(""));
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
        let locks = keys.len() as i64;
        let args = vec![token, Value::Integer(ttl_ms), Value::Integer(locks)];
        let parse = |value| match integer("EXTEND", Ok(value))? {
            0 => Ok(Extended::Refused),
            1 => Ok(Extended::Kept),
            2 => Ok(Extended::Missing),
            other => Err(unexpected("EXTEND", &Value::Integer(other))),
        };
        self.context()
            .voted(primitive.op(Op::Extend), keys, args, parse)
    }

    /// Sets the lock keys again where they are missing (the RESTORE script): yes if the
    /// node holds our lock now.
    pub(crate) fn restore(
        &self,
        mut keys: Vec<Key>,
        locks: usize,
        token: Value,
        ttl_ms: i64,
        fence: u64,
    ) -> impl Future<Output = Vote> + Send + 'static {
        let ctx = self.context();
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
            let deadline = tokio::time::Instant::now() + ctx.timeout;
            ctx.cleared(deadline).await?;
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let sender = sender(&ctx.client, left.max(Duration::from_millis(1)));
            let resend = || ctx.admission.clearance(&ctx.client) == Clearance::Clear;
            let reply = run_script_if::<Value>(&sender, script, keys, args, resend).await;
            ctx.vote(reply.and_then(parse)).await
        }
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
