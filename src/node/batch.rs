//! Coalescing: script calls bound for one node while it is busy are sent together, as one
//! script call, when it is free again.
//!
//! Each node has one [`Batcher`]. A call goes out at once while no command of this node is
//! awaiting its answer, so an idle client adds no delay. While one is in flight, calls wait
//! in a queue; when it is answered, the next command takes the whole queue
//! (up to [`MAX_CALLS`]) and sends it as one call of the [batch script](scripts::batch),
//! which runs each call's script in turn, atomically, and answers each one. Many concurrent
//! locks then cost a node one command instead of one each: the client's CPU per command
//! (fred's, mostly) and the server's are spent once per batch.
//!
//! A call that changes data (a vote) is written only on a connection whose check has passed
//! ([`Admission::clearance`]); the queue waits for one, up to the call's deadline.
//!
//! Order is kept: calls leave the queue in the order they came, one connection carries them,
//! and the server runs a batch's calls in order, so a release still runs after the
//! acquisition it follows. A call's deadline is the node timeout from when it was queued. A
//! call still queued at its deadline is never sent (as fred never writes a command still
//! queued when it times out), except a release, which is always sent: it only ever deletes
//! our own keys, and a late one cleans up what a late acquisition may have left.

use std::sync::LazyLock;
use std::time::Duration;

use fred::clients::{Client, WithOptions};
use fred::error::{Error as FredError, ErrorKind};
use fred::interfaces::{ClientLike, KeysInterface};
use fred::types::config::Options;
use fred::types::{CustomCommand, Expiration, Key, SetOptions, Value};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::node::admission::{Admission, Clearance};
use crate::node::scripts::{self, BatchHeader, Script};
use crate::report::facts::Excluded;

/// Calls sent as one batch, at most (a batch runs atomically: the node serves nothing else
/// meanwhile).
pub(crate) const MAX_CALLS: usize = 256;

static SET_NX: LazyLock<Script> = LazyLock::new(|| Script::new(scripts::SET_NX));
static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(scripts::ACQUIRE));
static FENCE: LazyLock<Script> = LazyLock::new(|| Script::new(scripts::FENCE));
static EXTEND: LazyLock<Script> = LazyLock::new(|| Script::new(scripts::EXTEND));
static RESTORE: LazyLock<Script> = LazyLock::new(|| Script::new(scripts::RESTORE));
static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(scripts::RELEASE));
static PEEK: LazyLock<Script> = LazyLock::new(|| Script::new(scripts::PEEK));
static HANDOVER: LazyLock<Script> = LazyLock::new(|| Script::new(scripts::HANDOVER));
static DISCARD: LazyLock<Script> = LazyLock::new(|| Script::new(scripts::DISCARD));
static PERMIT_ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(scripts::PERMIT_ACQUIRE));
static PERMIT_EXTEND: LazyLock<Script> = LazyLock::new(|| Script::new(scripts::PERMIT_EXTEND));
static PERMIT_RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(scripts::PERMIT_RELEASE));
static PERMIT_DISCARD: LazyLock<Script> = LazyLock::new(|| Script::new(scripts::PERMIT_DISCARD));
static PERMIT_PEEK: LazyLock<Script> = LazyLock::new(|| Script::new(scripts::PERMIT_PEEK));
static PERMIT_FENCE: LazyLock<Script> = LazyLock::new(|| Script::new(scripts::PERMIT_FENCE));
static PERMIT_HANDOVER: LazyLock<Script> = LazyLock::new(|| Script::new(scripts::PERMIT_HANDOVER));
static RW_ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(scripts::RW_ACQUIRE));
pub(crate) static BATCH: LazyLock<Script> = LazyLock::new(|| Script::new(scripts::batch()));

/// What a call runs: one of the scripts (the set is sent as the plain command when alone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    /// `SET key token NX PX ttl`; `args = [token, ttl_ms]`. Answers 0 if set, nil if not.
    SetNx,
    Acquire,
    Fence,
    Extend,
    Restore,
    Release,
    Peek,
    /// Sent even after its deadline, as a release is: it only ever replaces our own token,
    /// and the release of whichever token it leaves comes after it.
    Handover,
    /// RELEASE without the announcement, for a failed attempt's cleanup; sent as a release is.
    Discard,
    /// The semaphores' scripts (`scripts::PERMIT`): a permit's acquisition, and the
    /// extension, release, discard, PEEK and FENCE of a permit, in the place of a lock's.
    PermitAcquire,
    PermitExtend,
    PermitRelease,
    PermitDiscard,
    PermitPeek,
    PermitFence,
    /// Sent even after its deadline, as a lock's handover is.
    PermitHandover,
    /// A read-write lock's side (RW_ACQUIRE).
    RwAcquire,
}

impl Op {
    fn script(self) -> &'static Script {
        match self {
            Op::SetNx => &SET_NX,
            Op::Acquire => &ACQUIRE,
            Op::Fence => &FENCE,
            Op::Extend => &EXTEND,
            Op::Restore => &RESTORE,
            Op::Release => &RELEASE,
            Op::Peek => &PEEK,
            Op::Handover => &HANDOVER,
            Op::Discard => &DISCARD,
            Op::PermitAcquire => &PERMIT_ACQUIRE,
            Op::PermitExtend => &PERMIT_EXTEND,
            Op::PermitRelease => &PERMIT_RELEASE,
            Op::PermitDiscard => &PERMIT_DISCARD,
            Op::PermitPeek => &PERMIT_PEEK,
            Op::PermitFence => &PERMIT_FENCE,
            Op::PermitHandover => &PERMIT_HANDOVER,
            Op::RwAcquire => &RW_ACQUIRE,
        }
    }

    /// Whether it is a compare-and-delete (RELEASE or DISCARD, of a lock or a permit).
    fn deletes(self) -> bool {
        matches!(
            self,
            Op::Release | Op::Discard | Op::PermitRelease | Op::PermitDiscard
        )
    }

    /// Its number in the batch script (`scripts::BATCHED`, 1-based).
    fn number(self) -> usize {
        match self {
            Op::SetNx => 1,
            Op::Acquire => 2,
            Op::Fence => 3,
            Op::Extend => 4,
            Op::Restore => 5,
            Op::Release => 6,
            Op::Peek => 7,
            Op::Handover => 8,
            Op::Discard => 9,
            Op::PermitAcquire => 10,
            Op::PermitExtend => 11,
            Op::PermitRelease => 12,
            Op::PermitDiscard => 13,
            Op::PermitPeek => 14,
            Op::PermitFence => 15,
            Op::PermitHandover => 16,
            Op::RwAcquire => 17,
        }
    }
}

/// Why a call got no reply from the node.
#[derive(Debug, Clone)]
pub(crate) enum Failure {
    /// The command failed or timed out.
    Node(FredError),
    /// The call counts as a vote and the node's votes do not count now: not sent.
    Excluded(Excluded),
}

impl From<FredError> for Failure {
    fn from(e: FredError) -> Self {
        Failure::Node(e)
    }
}

#[derive(Debug)]
struct Call {
    op: Op,
    /// Whether the call is a vote, sent only while the node's votes count (see
    /// [`Queue::call`]).
    vote: bool,
    keys: Vec<Key>,
    args: Vec<Value>,
    deadline: Instant,
    reply: oneshot::Sender<Result<Value, Failure>>,
}

impl Call {
    /// Whether it is still worth sending: a release (or discard) or a handover always is; anything else
    /// only while its caller waits, before its deadline.
    fn wanted(&self, now: Instant) -> bool {
        self.op.deletes()
            || matches!(self.op, Op::Handover | Op::PermitHandover)
            || (now < self.deadline && !self.reply.is_closed())
    }
}

/// The per-node queue of script calls, and the task that sends them.
#[derive(Debug)]
pub(crate) struct Batcher {
    queue: Queue,
    task: JoinHandle<()>,
}

/// Where a node's calls are queued (cheap to clone).
#[derive(Debug, Clone)]
pub(crate) struct Queue {
    queue: mpsc::UnboundedSender<Call>,
    timeout: Duration,
}

impl Batcher {
    /// Starts the node's sender task (needs a Tokio runtime).
    pub(crate) fn start(client: Client, timeout: Duration, admission: Admission) -> Batcher {
        let (queue, calls) = mpsc::unbounded_channel();
        let task = tokio::spawn(send_queued(client, timeout, calls, admission));
        Batcher {
            queue: Queue { queue, timeout },
            task,
        }
    }

    /// A handle to queue calls with.
    pub(crate) fn handle(&self) -> Queue {
        self.queue.clone()
    }
}

impl Queue {
    /// Queues a call at once and returns its answer: the script's reply, or the error of the
    /// command that carried it (a `Timeout` at the node timeout).
    ///
    /// A `vote` (a call that changes data, other than deleting our own keys) is sent only on
    /// a connection whose check has passed, while the node's votes count
    /// ([`Admission::clearance`]); while the node is not connected or its new connection is
    /// being checked, the queue waits (up to the deadline of its first vote), so that what
    /// was queued after a vote (its release) is never sent before it.
    pub(crate) fn call(
        &self,
        op: Op,
        vote: bool,
        keys: Vec<Key>,
        args: Vec<Value>,
    ) -> impl std::future::Future<Output = Result<Value, Failure>> + Send + 'static {
        let deadline = Instant::now() + self.timeout;
        let (reply, answer) = oneshot::channel();
        let queued = self.queue.send(Call {
            op,
            vote,
            keys,
            args,
            deadline,
            reply,
        });
        async move {
            if queued.is_err() {
                return Err(closed());
            }
            match tokio::time::timeout_at(deadline, answer).await {
                Ok(Ok(answer)) => answer,
                Ok(Err(_)) => Err(closed()),
                Err(_) => Err(Failure::Node(timed_out())),
            }
        }
    }
}

impl Drop for Batcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn timed_out() -> FredError {
    FredError::new(ErrorKind::Timeout, "Request timed out.")
}

fn closed() -> Failure {
    Failure::Node(FredError::new(ErrorKind::Canceled, "the client is closed"))
}

/// Takes calls off the queue, one command at a time: the first call that comes, with every
/// call queued behind it, sent and answered before the next.
async fn send_queued(
    client: Client,
    timeout: Duration,
    mut queue: mpsc::UnboundedReceiver<Call>,
    admission: Admission,
) {
    let sender = sender(&client, timeout);
    while let Some(first) = queue.recv().await {
        // The common case, one call alone, takes no vector.
        let calls = match queue.try_recv().ok() {
            None if !first.vote || admission.clearance(&client) == Clearance::Clear => {
                if first.wanted(Instant::now()) {
                    send_one(&sender, first, &client, &admission).await;
                } else {
                    let _ = first.reply.send(Err(Failure::Node(timed_out())));
                }
                continue;
            }
            None => vec![first],
            Some(second) => {
                let mut calls = Vec::with_capacity(8);
                calls.push(first);
                calls.push(second);
                while calls.len() < MAX_CALLS {
                    match queue.try_recv() {
                        Ok(call) => calls.push(call),
                        Err(_) => break,
                    }
                }
                calls
            }
        };
        let calls = admit(&client, &admission, calls).await;
        let now = Instant::now();
        let (calls, stale): (Vec<Call>, Vec<Call>) =
            calls.into_iter().partition(|call| call.wanted(now));
        for call in stale {
            let _ = call.reply.send(Err(Failure::Node(timed_out())));
        }
        match calls.len() {
            0 => {}
            1 => {
                if let Some(call) = calls.into_iter().next() {
                    send_one(&sender, call, &client, &admission).await;
                }
            }
            _ => send_batch(&sender, calls, &client, &admission).await,
        }
    }
}

/// Holds the queue until the node's votes may be sent ([`Admission::cleared`]: connected,
/// on a checked connection), up to the first vote's deadline, then refuses the votes if they
/// may not: the node's votes do not count, or its connection is not checked (`Unchecked`), or
/// it is not connected (a timeout, described by the connection's last error). Deletes of our
/// own keys queued with them still go (fred sends them once connected).
async fn admit(client: &Client, admission: &Admission, calls: Vec<Call>) -> Vec<Call> {
    let Some(deadline) = calls.iter().filter(|c| c.vote).map(|c| c.deadline).min() else {
        return calls;
    };
    let refusal = match admission.cleared(client, deadline).await {
        Ok(()) => return calls,
        Err(Some(excluded)) => Failure::Excluded(excluded),
        Err(None) => Failure::Node(timed_out()),
    };
    let (votes, others): (Vec<Call>, Vec<Call>) = calls.into_iter().partition(|c| c.vote);
    for call in votes {
        let _ = call.reply.send(Err(refusal.clone()));
    }
    others
}

/// A node's client with the options of every command sent for a lock.
pub(crate) type Sender = WithOptions<Client>;

/// `client` with our own options on every command, whatever the client's defaults (an
/// application's shared client may have none, or re-send commands after a reconnect: see
/// `config/given.rs`).
pub(crate) fn sender(client: &Client, timeout: Duration) -> Sender {
    client.with_options(&Options {
        timeout: Some(timeout),
        max_attempts: Some(1),
        ..Options::default()
    })
}

/// One call alone: its script (or the plain `SET NX PX`).
async fn send_one(client: &Sender, call: Call, node: &Client, admission: &Admission) {
    let Call {
        op,
        vote,
        keys,
        args,
        reply,
        ..
    } = call;
    let answer = match op {
        Op::SetNx => set_nx(client, keys, args).await,
        _ => {
            let resend = || !vote || admission.clearance(node) == Clearance::Clear;
            let answer =
                run_script_if::<Value>(client, op.script(), keys.clone(), args.clone(), resend)
                    .await;
            if op.deletes() {
                clean_up_after(client, &answer, [(op, keys, args)]);
            }
            answer
        }
    };
    let _ = reply.send(answer.map_err(Failure::Node));
}

async fn set_nx(client: &Sender, keys: Vec<Key>, args: Vec<Value>) -> Result<Value, FredError> {
    let (Some(key), [token, ttl]) = (keys.into_iter().next(), &args[..]) else {
        return Err(FredError::new(
            ErrorKind::InvalidArgument,
            "SET NX: key, token, ttl",
        ));
    };
    let ttl = ttl.as_i64().unwrap_or_default();
    // `Option<String>`, not `bool`: fred turns the nil reply for an existing key into a
    // parse error when asked for a bool.
    let reply: Option<String> = client
        .set(
            key,
            token.clone(),
            Some(Expiration::PX(ttl)),
            Some(SetOptions::NX),
            false,
        )
        .await?;
    Ok(match reply {
        Some(_) => Value::Integer(0),
        None => Value::Null,
    })
}

/// Several calls as one call of the batch script; each gets its own element of the reply.
async fn send_batch(client: &Sender, calls: Vec<Call>, node: &Client, admission: &Admission) {
    let key_count: usize = calls.iter().map(|call| call.keys.len()).sum();
    let arg_count: usize = calls.iter().map(|call| call.args.len() + 3).sum();
    let mut keys = Vec::with_capacity(key_count);
    let mut args = Vec::with_capacity(arg_count + 1);
    args.push(Value::Integer(calls.len() as i64));
    for call in &calls {
        keys.extend(call.keys.iter().cloned());
        match scripts::batch_header(call.op.number(), call.keys.len(), call.args.len()) {
            BatchHeader::Inline(letter) => args.push(Value::from_static_str(letter)),
            BatchHeader::Call(numbers) => {
                args.extend(numbers.map(|n| Value::Integer(n as i64)));
            }
        }
        args.extend(call.args.iter().cloned());
    }
    let votes = calls.iter().any(|call| call.vote);
    let resend = || !votes || admission.clearance(node) == Clearance::Clear;
    let reply = run_script_if::<Value>(client, &BATCH, keys, args, resend).await;
    let answers = match reply {
        Ok(Value::Array(answers)) if answers.len() == calls.len() => answers,
        Ok(other) => {
            let error = FredError::new(
                ErrorKind::Protocol,
                format!("unexpected reply to the batch script: {other:?}"),
            );
            for call in calls {
                let _ = call.reply.send(Err(Failure::Node(error.clone())));
            }
            return;
        }
        Err(error) => {
            let reply: Result<Value, FredError> = Err(error.clone());
            clean_up_after(
                client,
                &reply,
                calls
                    .iter()
                    .filter(|call| call.op.deletes())
                    .map(|call| (call.op, call.keys.clone(), call.args.clone())),
            );
            for call in calls {
                let _ = call.reply.send(Err(Failure::Node(error.clone())));
            }
            return;
        }
    };
    for (call, answer) in calls.into_iter().zip(answers) {
        let answer = match answer {
            Value::String(text) if text.starts_with("ERR ") => Err(Failure::Node(FredError::new(
                ErrorKind::Unknown,
                text[4..].to_string(),
            ))),
            answer => Ok(answer),
        };
        let _ = call.reply.send(answer);
    }
}

/// After a release (or discard) timed out: its EVALSHA may still run later, on a node that was frozen,
/// and it answers NOSCRIPT there if the node never cached the script, when nobody waits to
/// send the fallback. Queue the script body right behind it on the same connection, so that
/// the node runs the delete either way (it is idempotent for our token).
fn clean_up_after(
    client: &Sender,
    reply: &Result<Value, FredError>,
    releases: impl IntoIterator<Item = (Op, Vec<Key>, Vec<Value>)>,
) {
    if !matches!(reply, Err(e) if *e.kind() == ErrorKind::Timeout) {
        return;
    }
    for (op, keys, args) in releases {
        let client = client.clone();
        tokio::spawn(async move {
            let _: Result<Value, FredError> =
                script_command(&client, op.script(), Form::Body, keys, args).await;
        });
    }
}

/// EVALSHA, falling back to EVAL (which caches the script again) on NOSCRIPT if `resend`
/// says that it may still be sent: a call that changes data is sent only on the checked
/// connection, which may have been replaced while the EVALSHA was out. (NOSCRIPT means that
/// nothing ran.)
pub(crate) async fn run_script_if<R: fred::types::FromValue>(
    client: &Sender,
    script: &Script,
    keys: Vec<Key>,
    args: Vec<Value>,
    resend: impl FnOnce() -> bool,
) -> Result<R, FredError> {
    match script_command::<R, _>(client, script, Form::Sha, keys.clone(), args.clone()).await {
        Err(e) if scripts::is_noscript(&e) && resend() => {
            script_command(client, script, Form::Body, keys, args).await
        }
        Err(e) if scripts::is_noscript(&e) => Err(FredError::new(
            ErrorKind::IO,
            "the connection changed before the script could be sent again",
        )),
        other => other,
    }
}

/// How a script is named in its command: by SHA1 (EVALSHA) or by its body (EVAL).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Form {
    Sha,
    Body,
}

/// EVALSHA or EVAL of `script` as a command of `client` itself, so that it carries
/// `client`'s options (for a [`Sender`]: the node timeout, never re-sent after a reconnect).
///
/// fred implements its `LuaInterface` for `Client` but not for `WithOptions`: its `eval` and
/// `evalsha`, reached on a `Sender` through `Deref`, would run with the inner client's own
/// options. On an application's shared client those are the application's (fred's defaults:
/// no timeout, and a command in flight re-sent on the new connection after a reconnect,
/// before that connection is checked and after the caller gave up).
pub(crate) async fn script_command<R: fred::types::FromValue, C: ClientLike>(
    client: &C,
    script: &Script,
    form: Form,
    keys: Vec<Key>,
    args: Vec<Value>,
) -> Result<R, FredError> {
    let (name, first) = match form {
        Form::Sha => ("EVALSHA", Value::from(script.sha.as_str())),
        Form::Body => ("EVAL", Value::from(script.body.as_ref())),
    };
    let mut all = Vec::with_capacity(2 + keys.len() + args.len());
    all.push(first);
    all.push(Value::Integer(keys.len() as i64));
    all.extend(keys.into_iter().map(Value::from));
    all.extend(args);
    client
        .custom(CustomCommand::new_static(name, None, false), all)
        .await
}
