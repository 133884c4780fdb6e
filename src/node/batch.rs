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
//! ([`Admission::clearance`]); the queue waits for one, up to the call's deadline. A vote
//! still waiting when the release of its own token is queued is dropped unsent. A vote goes
//! as the batch script even alone: the script reads back the node's marker and quarantine
//! record after its calls, and the votes count only if the node still holds what its check
//! found ([`Admission::still_checked`]): a flush breaks no connection, and is seen there.
//!
//! Order is kept: calls leave the queue in the order they came, one connection carries them,
//! and the server runs a batch's calls in order, so a release still runs after the
//! acquisition it follows. A call's deadline is the node timeout from when it was queued. A
//! call still queued at its deadline is never sent (as fred never writes a command still
//! queued when it times out), except a release, which is always sent: it only ever deletes
//! our own keys, and a late one cleans up what a late acquisition may have left.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use fred::clients::{Client, WithOptions};
use fred::error::{Error as FredError, ErrorKind};
use fred::interfaces::ClientLike;
use fred::types::config::Options;
use fred::types::{CustomCommand, Key, Value};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::node::admission::{Admission, Clearance};
use crate::node::scripts::{
    self, BatchHeader, Natives, Script, ACQUIRE, BATCH, DISCARD, EXTEND, FENCE, HANDOVER, PEEK,
    PERMIT_ACQUIRE, PERMIT_DISCARD, PERMIT_EXTEND, PERMIT_FENCE, PERMIT_HANDOVER, PERMIT_PEEK,
    PERMIT_RELEASE, RELEASE, RESTORE, RW_ACQUIRE, SET_NX, SET_NX_ALONE,
};
use crate::report::facts::Excluded;

/// Calls sent as one batch, at most (a batch runs atomically: the node serves nothing else
/// meanwhile).
pub(crate) const MAX_CALLS: usize = 256;

/// What a call runs: one of the scripts (a vote, even alone, in the batch script).
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

/// A call's keys or arguments: one list shared by a round's calls to every node (made once
/// per round, not once per node), or a node's own.
#[derive(Debug, Clone)]
pub(crate) enum List<T> {
    Shared(Arc<[T]>),
    Own(Vec<T>),
}

impl<T> std::ops::Deref for List<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        match self {
            List::Shared(list) => list,
            List::Own(list) => list,
        }
    }
}

impl<T> From<Vec<T>> for List<T> {
    fn from(list: Vec<T>) -> Self {
        List::Own(list)
    }
}

impl<T> From<Arc<[T]>> for List<T> {
    fn from(list: Arc<[T]>) -> Self {
        List::Shared(list)
    }
}

impl<T> From<&Arc<[T]>> for List<T> {
    fn from(list: &Arc<[T]>) -> Self {
        List::Shared(Arc::clone(list))
    }
}

#[derive(Debug)]
struct Call {
    op: Op,
    /// Whether the call is a vote, sent only while the node's votes count (see
    /// [`Queue::call`]).
    vote: bool,
    keys: List<Key>,
    args: List<Value>,
    deadline: Instant,
    /// Where the caller waits for the answer; `None` once answered (a release sent after its
    /// deadline has had its timeout already).
    reply: Option<oneshot::Sender<Result<Value, Failure>>>,
}

impl Call {
    /// Whether it is sent even after its caller stopped waiting: a release (or discard) or a
    /// handover.
    fn always_sent(&self) -> bool {
        self.op.deletes() || matches!(self.op, Op::Handover | Op::PermitHandover)
    }

    /// Whether it is still worth sending: one that is always sent is; anything else only
    /// while its caller waits, before its deadline.
    fn wanted(&self, now: Instant) -> bool {
        self.always_sent()
            || (now < self.deadline && self.reply.as_ref().is_some_and(|r| !r.is_closed()))
    }

    /// Answers the caller, if it has not had its answer yet.
    fn answer(&mut self, answer: Result<Value, Failure>) {
        if let Some(reply) = self.reply.take() {
            let _ = reply.send(answer);
        }
    }

    /// Answers the caller with a timeout if its deadline has passed at `now`.
    fn time_out_if_due(&mut self, now: Instant) {
        if now >= self.deadline {
            self.answer(Err(Failure::Node(timed_out())));
        }
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
    ///
    /// The sender task answers every call by its deadline (the node timeout from now), within
    /// a tick of Tokio's timer: it sends each command with a timeout that ends at the last
    /// deadline of its calls, and answers earlier deadlines with a timer of its own, one per
    /// command and only when their deadlines differ by more than a tick (see
    /// [`within_deadlines`]). The caller arms no timer.
    pub(crate) fn call(
        &self,
        op: Op,
        vote: bool,
        keys: impl Into<List<Key>>,
        args: impl Into<List<Value>>,
    ) -> impl std::future::Future<Output = Result<Value, Failure>> + Send + 'static {
        let deadline = Instant::now() + self.timeout;
        let (reply, answer) = oneshot::channel();
        let queued = self.queue.send(Call {
            op,
            vote,
            keys: keys.into(),
            args: args.into(),
            deadline,
            reply: Some(reply),
        });
        async move {
            if queued.is_err() {
                return Err(closed());
            }
            answer.await.unwrap_or_else(|_| Err(closed()))
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
///
/// Every call is answered by its deadline: a command is sent only once the one before it
/// has ended, by the last deadline of its own calls, which were all queued before the next
/// command's; so a call waits in the queue at most until a deadline earlier than its own.
async fn send_queued(
    client: Client,
    timeout: Duration,
    mut queue: mpsc::UnboundedReceiver<Call>,
    admission: Admission,
) {
    // One vector for every command, kept between them.
    let mut calls = Vec::with_capacity(8);
    let mut busy = false;
    while let Some(first) = queue.recv().await {
        if busy {
            // The answers just handed out wake their callers, whose next calls (a release
            // after its acquisition) would otherwise wait for the command sent now: let them
            // run and queue first.
            tokio::task::yield_now().await;
        }
        calls.push(first);
        while calls.len() < MAX_CALLS {
            match queue.try_recv() {
                Ok(call) => calls.push(call),
                Err(_) => break,
            }
        }
        admit(&client, &admission, &mut calls, &mut queue).await;
        expire(&mut calls, Instant::now());
        busy = calls.len() > 1;
        match calls.as_slice() {
            [] => {}
            // A vote goes as the batch script even alone (a lone SET NX as its own script
            // that answers alike): it reads back the node's marker and record ([`send_batch`]).
            [call] if !call.vote => send_one(&client, timeout, &mut calls, &admission).await,
            _ => send_batch(&client, timeout, &mut calls, &admission).await,
        }
        calls.clear();
    }
}

/// Holds the queue until the node's votes may be sent ([`Admission::cleared`]: connected,
/// on a checked connection), up to the first vote's deadline, then refuses the votes if they
/// may not: the node's votes do not count, or its connection is not checked (`Unchecked`), or
/// it is not connected (a timeout, described by the connection's last error). Deletes of our
/// own keys queued with them still go (fred sends them once connected).
///
/// Meanwhile it takes in the calls queued behind them: a vote whose token a release or
/// discard queued after it deletes is dropped unsent ([`drop_released`]), so that a node that
/// connects late is never sent the acquisition of a lock released meanwhile.
async fn admit(
    client: &Client,
    admission: &Admission,
    calls: &mut Vec<Call>,
    queue: &mut mpsc::UnboundedReceiver<Call>,
) {
    if admission.clearance(client) == Clearance::Clear {
        return;
    }
    let mut open = true;
    loop {
        drop_released(calls);
        let Some(deadline) = calls.iter().filter(|c| c.vote).map(|c| c.deadline).min() else {
            return;
        };
        let cleared = tokio::select! {
            biased;
            cleared = admission.cleared(client, deadline) => cleared,
            call = queue.recv(), if open && calls.len() < MAX_CALLS => {
                match call {
                    Some(call) => calls.push(call),
                    None => open = false,
                }
                continue;
            }
        };
        let refusal = match cleared {
            Ok(()) => return,
            Err(Some(excluded)) => Failure::Excluded(excluded),
            Err(None) => Failure::Node(timed_out()),
        };
        calls.retain_mut(|call| {
            if call.vote {
                call.answer(Err(refusal.clone()));
            }
            !call.vote
        });
        return;
    }
}

/// Drops, answered as never sent, each vote of `calls` whose token (its first argument) a
/// release or discard queued after it deletes: the lock or attempt it was cast for is over,
/// and a vote not sent is a vote lost, which the protocol tolerates; sent, it would set a key
/// that only the release behind it removes.
fn drop_released(calls: &mut Vec<Call>) {
    if !calls.iter().any(|c| c.op.deletes()) {
        return;
    }
    let mut released: Vec<&Value> = Vec::new();
    let mut dropped = vec![false; calls.len()];
    for (i, call) in calls.iter().enumerate().rev() {
        if call.op.deletes() {
            released.extend(call.args.iter());
        } else if call.vote && call.args.first().is_some_and(|t| released.contains(&t)) {
            dropped[i] = true;
        }
    }
    let mut dropped = dropped.into_iter();
    calls.retain_mut(|call| {
        let drop = dropped.next().unwrap_or(false);
        if drop {
            call.answer(Err(Failure::Node(FredError::new(
                ErrorKind::Canceled,
                "released before the node could be sent it",
            ))));
        }
        !drop
    });
}

/// At `now`: answers with a timeout every caller whose deadline has passed, and drops the
/// calls no longer worth sending ([`Call::wanted`]). A release past its deadline is still
/// sent, its caller answered already.
fn expire(calls: &mut Vec<Call>, now: Instant) {
    calls.retain_mut(|call| {
        let wanted = call.wanted(now);
        call.time_out_if_due(now);
        wanted
    });
}

/// A tick of Tokio's timer: a command's timeout answers every call whose deadline is no
/// earlier than this before its own end.
const TICK: Duration = Duration::from_millis(1);

/// The last deadline of a call whose caller still waits.
fn last_deadline(calls: &[Call]) -> Option<Instant> {
    calls
        .iter()
        .filter(|c| c.reply.is_some())
        .map(|c| c.deadline)
        .max()
}

/// The timeout of a command carrying `calls`: until the last deadline of a call whose caller
/// waits (at least a tick: fred takes zero for none), or the node timeout when no caller
/// waits (releases sent after their deadline).
fn command_timeout(calls: &[Call], node_timeout: Duration) -> Duration {
    match last_deadline(calls) {
        Some(last) => last.saturating_duration_since(Instant::now()).max(TICK),
        None => node_timeout,
    }
}

/// The first deadline that the command's timeout would answer more than a tick late.
fn early_deadline(calls: &[Call]) -> Option<Instant> {
    let last = last_deadline(calls)?;
    calls
        .iter()
        .filter(|c| c.reply.is_some())
        .map(|c| c.deadline)
        .filter(|&d| d + TICK < last)
        .min()
}

/// Awaits `command`, answering with a timeout each caller whose deadline passes before it
/// ends (its own timeout ends at the last deadline). Under load a batch's calls were queued
/// within a command's round trip of one another, and no timer is armed.
async fn within_deadlines<T>(calls: &mut [Call], command: impl Future<Output = T>) -> T {
    tokio::pin!(command);
    while let Some(at) = early_deadline(calls) {
        tokio::select! {
            biased;
            out = &mut command => return out,
            () = tokio::time::sleep_until(at) => {
                let now = Instant::now();
                for call in calls.iter_mut() {
                    call.time_out_if_due(now);
                }
            }
        }
    }
    command.await
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

/// One call alone (`calls` holds it), not a vote: its script.
async fn send_one(
    client: &Client,
    timeout: Duration,
    calls: &mut Vec<Call>,
    admission: &Admission,
) {
    let Some(call) = calls.first() else { return };
    let (op, vote) = (call.op, call.vote);
    let resend = || !vote || admission.clearance(client) == Clearance::Clear;
    let answer = run_calls(client, timeout, calls, op.script(), single_command, resend).await;
    if op.deletes() {
        clean_up_after(client, timeout, &answer, calls.iter());
    }
    if let Some(call) = calls.first_mut() {
        call.answer(answer.map_err(Failure::Node));
    }
}

/// The EVALSHA (or EVAL) of one call: `first` (the script's SHA1 or body), the key count, the
/// keys and the arguments.
fn single_command(calls: &[Call], first: Value) -> Vec<Value> {
    calls
        .first()
        .map_or_else(Vec::new, |call| eval_args(first, &call.keys, &call.args))
}

/// What EVALSHA and EVAL take: `first` (the script's SHA1 or body), the key count, the keys,
/// the arguments.
fn eval_args(first: Value, keys: &[Key], args: &[Value]) -> Vec<Value> {
    let mut all = Vec::with_capacity(2 + keys.len() + args.len());
    all.push(first);
    all.push(Value::Integer(keys.len() as i64));
    all.extend(keys.iter().cloned().map(Value::from));
    all.extend(args.iter().cloned());
    all
}

/// The keys a batch names, as a set of spots (a hash of each key): a key whose spot another
/// key of the batch also takes counts as named twice. Two keys may share a spot, which only
/// keeps a call out of a group (design 4.3), never puts one in; with 4,096 spots, about one
/// `SET NX` call in a hundred is kept out for that in a batch of 48 keys.
struct Named {
    once: [u64; 64],
    twice: [u64; 64],
}

impl Named {
    fn of(calls: &[Call]) -> Named {
        let mut named = Named {
            once: [0; 64],
            twice: [0; 64],
        };
        for key in calls.iter().flat_map(|call| call.keys.iter()) {
            let (word, bit) = Named::spot(key.as_bytes());
            if named.once[word] & bit != 0 {
                named.twice[word] |= bit;
            }
            named.once[word] |= bit;
        }
        named
    }

    /// FNV-1a of `key`, mixed (MurmurHash3's finalizer: FNV leaves a short key's last bytes
    /// out of the top bits), its top 12 bits as a word of 64 and a bit in it.
    fn spot(key: &[u8]) -> (usize, u64) {
        let mut hash = key.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
        });
        hash ^= hash >> 33;
        hash = hash.wrapping_mul(0xff51_afd7_ed55_8ccd);
        hash ^= hash >> 33;
        hash = hash.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        hash ^= hash >> 33;
        ((hash >> 58) as usize, 1 << ((hash >> 52) & 63))
    }

    fn twice(&self, key: &[u8]) -> bool {
        let (word, bit) = Named::spot(key);
        self.twice[word] & bit != 0
    }
}

/// Which calls of a batch the batch script may set together with one `MSETEX`: the `SET NX`
/// calls of one key that share the first one's ttl and whose key no other call names.
struct Together {
    ttl: Value,
    named: Named,
}

impl Together {
    fn of(calls: &[Call]) -> Option<Together> {
        let ttl = calls.iter().find_map(|call| match &call.args[..] {
            [_, ttl] if call.op == Op::SetNx && call.keys.len() == 1 => Some(ttl.clone()),
            _ => None,
        })?;
        Some(Together {
            ttl,
            named: Named::of(calls),
        })
    }

    fn takes(&self, call: &Call) -> bool {
        match (&call.keys[..], &call.args[..]) {
            ([key], [_, ttl]) => {
                call.op == Op::SetNx && *ttl == self.ttl && !self.named.twice(key.as_bytes())
            }
            _ => false,
        }
    }
}

/// For a node that runs `MSETEX`: puts first, in their order, the calls that [`Together`]
/// takes when there are two or more, so that the batch script sets them with one `MSETEX`
/// (see `scripts::batch`), and returns how many; the others keep their order. Calls on
/// different keys answer the same in either order within one script, which runs alone on the
/// node, and every call on a key that another call names keeps its place among them.
fn put_together_first(calls: &mut Vec<Call>) -> usize {
    let Some(together) = Together::of(calls) else {
        return 0;
    };
    if calls
        .iter()
        .filter(|call| together.takes(call))
        .take(2)
        .count()
        < 2
    {
        return 0;
    }
    let (mut head, mut rest) = (Vec::with_capacity(calls.len()), Vec::new());
    for call in calls.drain(..) {
        if together.takes(&call) {
            head.push(call);
        } else {
            rest.push(call);
        }
    }
    let n = head.len();
    calls.append(&mut head);
    calls.append(&mut rest);
    n
}

/// How many calls at the head of `calls` the batch script sets together with one `MSETEX`
/// (none below two): after [`put_together_first`], those it put first, or fewer if some
/// were dropped since.
fn set_together(calls: &[Call]) -> usize {
    let Some(together) = Together::of(calls) else {
        return 0;
    };
    let n = calls.iter().take_while(|call| together.takes(call)).count();
    if n >= 2 {
        n
    } else {
        0
    }
}

/// The EVALSHA (or EVAL) of the batch script for `calls`: `first`, the key count, every
/// call's keys, then the call count and each call's header and arguments; the first
/// `together` calls (`SET NX` calls that [`set_together`] counts, for a node that runs
/// `MSETEX`) go as one group instead: `M`, their count, `key token` for each, `NX PX ttl`.
fn batch_command(calls: &[Call], first: Value, natives: Natives, together: usize) -> Vec<Value> {
    let key_count: usize = calls.iter().map(|call| call.keys.len()).sum();
    let arg_count: usize = calls.iter().map(|call| call.args.len() + 3).sum();
    let mut all = Vec::with_capacity(2 + key_count + 1 + arg_count + 5);
    all.push(first);
    all.push(Value::Integer(key_count as i64));
    for call in calls {
        all.extend(call.keys.iter().cloned().map(Value::from));
    }
    all.push(Value::Integer(calls.len() as i64));
    let (head, calls) = calls.split_at(together);
    if let Some(ttl) = head.first().and_then(|call| call.args.get(1)) {
        all.push(Value::from_static_str("M"));
        all.push(Value::Integer(together as i64));
        for call in head {
            all.extend(call.keys.first().cloned().map(Value::from));
            all.extend(call.args.first().cloned());
        }
        all.extend(["NX", "PX"].map(Value::from_static_str));
        all.push(ttl.clone());
    }
    for call in calls {
        let (number, keys, args) = (call.op.number(), call.keys.len(), call.args.len());
        match scripts::batch_header(number, keys, args, natives) {
            BatchHeader::Inline(letter) => all.push(Value::from_static_str(letter)),
            BatchHeader::Call(numbers) => {
                all.extend(numbers.map(|n| Value::Integer(n as i64)));
            }
        }
        all.extend(call.args.iter().cloned());
    }
    all
}

/// Several calls as one call of the batch script; each gets its own element of the reply.
async fn send_batch(
    client: &Client,
    timeout: Duration,
    calls: &mut Vec<Call>,
    admission: &Admission,
) {
    let votes = calls.iter().any(|call| call.vote);
    let resend = || !votes || admission.clearance(client) == Clearance::Clear;
    let natives = admission.natives();
    let together = if natives.msetex {
        put_together_first(calls)
    } else {
        0
    };
    // The calls sent: these, or fewer if some are dropped before the EVAL fallback.
    let sent = calls.len();
    // A lone SET NX goes as its own script, which answers as the batch of it would.
    let alone = matches!(calls.as_slice(), [call] if call.op == Op::SetNx);
    let command = |calls: &[Call], first| {
        if alone {
            return single_command(calls, first);
        }
        let together = match calls.len() {
            n if n == sent => together,
            _ if natives.msetex => set_together(calls),
            _ => 0,
        };
        batch_command(calls, first, natives, together)
    };
    let script: &Script = if alone { &SET_NX_ALONE } else { &BATCH };
    let reply = run_calls(client, timeout, calls, script, command, resend).await;
    let (answers, marker, record) = match reply {
        Ok(Value::Array(mut answers)) if answers.len() == calls.len() + 2 => {
            let record = answers.pop().and_then(|v| v.into_string());
            let marker = answers.pop().and_then(|v| v.into_string());
            (answers, marker, record)
        }
        Ok(other) => {
            let error = FredError::new(
                ErrorKind::Protocol,
                format!("unexpected reply to the batch script: {other:?}"),
            );
            for call in calls.iter_mut() {
                call.answer(Err(Failure::Node(error.clone())));
            }
            return;
        }
        Err(error) => {
            let reply: Result<Value, FredError> = Err(error.clone());
            clean_up_after(
                client,
                timeout,
                &reply,
                calls.iter().filter(|call| call.op.deletes()),
            );
            for call in calls.iter_mut() {
                call.answer(Err(Failure::Node(error.clone())));
            }
            return;
        }
    };
    // The votes count only if the node still holds what its check found: a flush under
    // this connection is seen here, or by no one (`lineage::still_checked`).
    let lost = if votes {
        admission
            .still_checked(client, marker.as_deref(), record.as_deref())
            .err()
    } else {
        None
    };
    for (call, answer) in calls.iter_mut().zip(answers) {
        if let (Some(excluded), true) = (&lost, call.vote) {
            call.answer(Err(Failure::Excluded(excluded.clone())));
            continue;
        }
        let answer = match answer {
            Value::String(text) if text.starts_with("ERR ") => Err(Failure::Node(FredError::new(
                ErrorKind::Unknown,
                text[4..].to_string(),
            ))),
            answer => Ok(answer),
        };
        call.answer(answer);
    }
}

/// The command of `script` carrying `calls` (built by `command` from the script's SHA1 or
/// body): EVALSHA, then EVAL on NOSCRIPT if `resend` says that it may still be sent (see
/// [`run_script_if`]), each within the calls' deadlines. Before the EVAL, the calls whose
/// callers stopped waiting are dropped (NOSCRIPT means that nothing ran).
async fn run_calls(
    client: &Client,
    timeout: Duration,
    calls: &mut Vec<Call>,
    script: &Script,
    command: impl Fn(&[Call], Value) -> Vec<Value>,
    resend: impl FnOnce() -> bool,
) -> Result<Value, FredError> {
    let options = sender(client, command_timeout(calls, timeout));
    let (name, sha) = Form::Sha.head(script);
    let sent = custom(&options, name, command(calls, sha));
    match within_deadlines(calls, sent).await {
        Err(e) if scripts::is_noscript(&e) && resend() => {
            expire(calls, Instant::now());
            if calls.is_empty() {
                return Err(timed_out());
            }
            let options = sender(client, command_timeout(calls, timeout));
            let (name, body) = Form::Body.head(script);
            let sent = custom(&options, name, command(calls, body));
            within_deadlines(calls, sent).await
        }
        Err(e) if scripts::is_noscript(&e) => Err(not_resent()),
        other => other,
    }
}

/// A NOSCRIPT whose EVAL fallback may not be sent (see [`run_script_if`]).
fn not_resent() -> FredError {
    FredError::new(
        ErrorKind::IO,
        "the connection changed before the script could be sent again",
    )
}

/// `name` (EVALSHA or EVAL) with `args` as a command of `client` itself (see
/// [`script_command`]).
async fn custom<R: fred::types::FromValue, C: ClientLike>(
    client: &C,
    name: &'static str,
    args: Vec<Value>,
) -> Result<R, FredError> {
    client
        .custom(CustomCommand::new_static(name, None, false), args)
        .await
}

/// After a release (or discard) timed out: its EVALSHA may still run later, on a node that was frozen,
/// and it answers NOSCRIPT there if the node never cached the script, when nobody waits to
/// send the fallback. Queue the script body right behind it on the same connection, so that
/// the node runs the delete either way (it is idempotent for our token).
fn clean_up_after<'a>(
    client: &Client,
    timeout: Duration,
    reply: &Result<Value, FredError>,
    releases: impl IntoIterator<Item = &'a Call>,
) {
    if !matches!(reply, Err(e) if *e.kind() == ErrorKind::Timeout) {
        return;
    }
    let client = sender(client, timeout);
    for call in releases {
        let client = client.clone();
        let (op, keys, args) = (call.op, call.keys.clone(), call.args.clone());
        tokio::spawn(async move {
            let _: Result<Value, FredError> =
                script_command(&client, op.script(), Form::Body, &keys, &args).await;
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
    match script_command::<R, _>(client, script, Form::Sha, &keys, &args).await {
        Err(e) if scripts::is_noscript(&e) && resend() => {
            script_command(client, script, Form::Body, &keys, &args).await
        }
        Err(e) if scripts::is_noscript(&e) => Err(not_resent()),
        other => other,
    }
}

/// How a script is named in its command: by SHA1 (EVALSHA) or by its body (EVAL).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Form {
    Sha,
    Body,
}

impl Form {
    /// The command's name and its first argument: EVALSHA and the SHA1, or EVAL and the body.
    fn head(self, script: &Script) -> (&'static str, Value) {
        match self {
            Form::Sha => ("EVALSHA", Value::from(script.sha.as_str())),
            Form::Body => ("EVAL", Value::from(script.body.as_ref())),
        }
    }
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
    keys: &[Key],
    args: &[Value],
) -> Result<R, FredError> {
    let (name, first) = form.head(script);
    custom(client, name, eval_args(first, keys, args)).await
}

#[cfg(test)]
mod tests {
    #![cfg(feature = "testkit")]
    #![allow(clippy::mixed_attributes_style)]

    use super::*;
    use crate::node::admission::Fleet;
    use crate::node::probe::KeySpace;
    use crate::testkit::LocalQuorum;
    use fred::types::config::{Config, ReconnectPolicy};
    use fred::types::Builder;
    use futures::FutureExt;

    /// The queue answers a call at its deadline even when it shares a command with a call
    /// queued much later, whose deadline the command's own timeout keeps: the queue's timer
    /// answers the first while the second still waits. (With a timeout per command alone, the
    /// first would wait for the second's deadline.)
    #[tokio::test]
    async fn a_call_batched_with_a_later_one_is_answered_at_its_own_deadline() {
        let timeout = Duration::from_millis(1500);
        let mut q = LocalQuorum::start(1).await.unwrap();
        let config = Config::from_url(&q.node(0).url()).unwrap();
        let mut builder = Builder::from_config(config);
        builder.set_policy(ReconnectPolicy::new_constant(0, 50));
        let client = builder.build().unwrap();
        client.init().await.unwrap();
        let (reseed, _reseeds) = mpsc::unbounded_channel();
        let keys = KeySpace {
            prefix: String::new(),
            fencing: false,
        };
        let fleet = Arc::new(Fleet::new(1, false, timeout, timeout, keys, reseed));
        let admission = Admission::new(0, Arc::from("node 0"), fleet);
        let batcher = Batcher::start(client, timeout, admission);
        let queue = batcher.handle();
        let peek = |key: &'static str| {
            // Not a vote: sent without the connection check this test has no use for.
            queue.call(
                Op::Peek,
                false,
                vec![Key::from_static_str(key)],
                vec![Value::from("token"), Value::Integer(1)],
            )
        };
        q.node_mut(0).freeze().unwrap();

        // The first goes out alone and waits for its timeout; the next two queue behind it,
        // far apart, and go out together when it ends.
        let first = tokio::spawn(peek("a"));
        tokio::time::sleep(Duration::from_millis(50)).await;
        let early = tokio::spawn(peek("b"));
        tokio::time::sleep(timeout / 2).await;
        let mut late = tokio::spawn(peek("c"));

        let first = first.await.unwrap();
        assert!(
            matches!(&first, Err(Failure::Node(e)) if *e.kind() == ErrorKind::Timeout),
            "{first:?}"
        );
        let early = early.await.unwrap();
        assert!(
            matches!(&early, Err(Failure::Node(e)) if *e.kind() == ErrorKind::Timeout),
            "{early:?}"
        );
        assert!(
            (&mut late).now_or_never().is_none(),
            "the later call was answered with the earlier one, at the later deadline"
        );
        let late = late.await.unwrap();
        assert!(
            matches!(&late, Err(Failure::Node(e)) if *e.kind() == ErrorKind::Timeout),
            "{late:?}"
        );
        q.node_mut(0).resume().unwrap();
    }
}

#[cfg(test)]
mod together_tests {
    use super::*;

    fn call(op: Op, key: &str, args: &[Value]) -> Call {
        Call {
            op,
            vote: true,
            keys: vec![Key::from(key)].into(),
            args: args.to_vec().into(),
            deadline: Instant::now(),
            reply: None,
        }
    }

    fn set(key: &str, ttl: i64) -> Call {
        call(Op::SetNx, key, &[Value::from("t"), Value::Integer(ttl)])
    }

    fn release(key: &str) -> Call {
        call(Op::Release, key, &[Value::from("t"), Value::from("h")])
    }

    /// Puts `calls` together first, and checks their order (each as `op key`) and how many
    /// go together, counted when put and counted again.
    fn assert_put(calls: Vec<Call>, order: &[&str], together: usize) {
        let mut calls = calls;
        let n = put_together_first(&mut calls);
        let seen: Vec<String> = calls
            .iter()
            .map(|c| {
                format!(
                    "{:?} {}",
                    c.op,
                    String::from_utf8_lossy(c.keys[0].as_bytes())
                )
            })
            .collect();
        assert_eq!(
            (seen, n),
            (order.iter().map(|o| o.to_string()).collect(), together)
        );
        assert_eq!(set_together(&calls), n, "counted again");
    }

    #[test]
    fn set_nx_calls_of_one_ttl_on_keys_named_once_go_first_in_their_order() {
        assert_put(
            vec![release("r"), set("a", 100), release("q"), set("b", 100)],
            &["SetNx a", "SetNx b", "Release r", "Release q"],
            2,
        );
    }

    #[test]
    fn a_key_named_twice_keeps_every_call_on_it_in_place() {
        // A release of a, then its next acquisition; c is acquired twice.
        let calls = ["a", "b", "c", "d", "c"].map(|key| set(key, 100));
        assert_put(
            std::iter::once(release("a")).chain(calls).collect(),
            &[
                "SetNx b",
                "SetNx d",
                "Release a",
                "SetNx a",
                "SetNx c",
                "SetNx c",
            ],
            2,
        );
    }

    #[test]
    fn keys_that_share_a_spot_are_kept_out_as_if_named_twice() {
        let first = Named::spot(b"k0");
        let other = (1..100_000)
            .map(|i| format!("k{i}"))
            .find(|key| Named::spot(key.as_bytes()) == first)
            .expect("two keys on one spot");
        let other_set = format!("SetNx {other}");
        assert_put(
            ["k0", &other, "x", "y"].map(|key| set(key, 100)).into(),
            &["SetNx x", "SetNx y", "SetNx k0", &other_set],
            2,
        );
    }

    #[test]
    fn only_the_first_set_nx_calls_ttl_goes_together() {
        assert_put(
            vec![set("a", 100), set("b", 200), set("c", 100)],
            &["SetNx a", "SetNx c", "SetNx b"],
            2,
        );
    }

    #[test]
    fn fewer_than_two_set_nx_calls_change_nothing() {
        assert_put(
            vec![release("r"), set("a", 100), set("a", 100), set("b", 200)],
            &["Release r", "SetNx a", "SetNx a", "SetNx b"],
            0,
        );
        assert_put(vec![], &[], 0);
    }

    #[test]
    fn the_group_goes_as_msetex_arguments_only_where_the_node_runs_it() {
        let mut calls = vec![release("r"), set("a", 100), set("b", 100)];
        let n = put_together_first(&mut calls);
        let text = |natives: Natives| -> Vec<String> {
            let together = if natives.msetex { n } else { 0 };
            batch_command(&calls, Value::from("sha"), natives, together)
                .iter()
                .map(|v| v.as_string().unwrap_or_default())
                .collect()
        };
        let msetex = Natives {
            delifeq: false,
            msetex: true,
        };
        assert_eq!(
            text(msetex),
            [
                "sha", "3", "a", "b", "r", "3", "M", "2", "a", "t", "b", "t", "NX", "PX", "100",
                "r", "t", "h"
            ]
        );
        assert_eq!(
            text(Natives::default()),
            ["sha", "3", "a", "b", "r", "3", "s", "t", "100", "s", "t", "100", "r", "t", "h"]
        );
    }
}

#[cfg(test)]
mod released_tests {
    use super::*;

    /// A call of `op` on `key` whose arguments are `args`, and where its answer comes.
    fn call(
        op: Op,
        vote: bool,
        key: &str,
        args: &[&str],
    ) -> (Call, oneshot::Receiver<Result<Value, Failure>>) {
        let (reply, answer) = oneshot::channel();
        let call = Call {
            op,
            vote,
            keys: vec![Key::from(key)].into(),
            args: args
                .iter()
                .map(|a| Value::from(*a))
                .collect::<Vec<_>>()
                .into(),
            deadline: Instant::now(),
            reply: Some(reply),
        };
        (call, answer)
    }

    fn ops(calls: &[Call]) -> Vec<(Op, String)> {
        let key = |c: &Call| c.keys[0].as_str().unwrap_or_default().to_string();
        calls.iter().map(|c| (c.op, key(c))).collect()
    }

    #[test]
    fn a_vote_followed_by_the_release_of_its_token_is_dropped_unsent() {
        let (set_a, mut a) = call(Op::SetNx, true, "a", &["t1", "100"]);
        let (set_b, mut b) = call(Op::SetNx, true, "b", &["t2", "100"]);
        let (extend, mut e) = call(Op::Extend, true, "c", &["t3", "100", "1"]);
        let (release_a, _) = call(Op::Release, false, "a", &["t1", "h1"]);
        let (release_c, _) = call(Op::Discard, false, "c", &["t3"]);
        let mut calls = vec![set_a, set_b, extend, release_a, release_c];
        drop_released(&mut calls);
        assert_eq!(
            ops(&calls),
            [
                (Op::SetNx, "b".into()),
                (Op::Release, "a".into()),
                (Op::Discard, "c".into())
            ]
        );
        for dropped in [&mut a, &mut e] {
            let answer = dropped.try_recv().expect("answered");
            assert!(
                matches!(&answer, Err(Failure::Node(e)) if *e.kind() == ErrorKind::Canceled),
                "{answer:?}"
            );
        }
        assert!(b.try_recv().is_err(), "the other vote is not answered");
    }

    #[test]
    fn only_votes_queued_before_the_release_of_their_token_are_dropped() {
        let (release, _) = call(Op::PermitDiscard, false, "s", &["t1", ""]);
        let (later, _) = call(Op::PermitAcquire, true, "s", &["t1", "100", "3", "0", "1"]);
        let (earlier, _) = call(Op::PermitAcquire, true, "s", &["t1", "100", "3", "0", "1"]);
        let (restore, _) = call(Op::Restore, false, "s", &["t1", "100", "1", "0"]);
        let mut calls = vec![restore, earlier, release, later];
        drop_released(&mut calls);
        assert_eq!(
            ops(&calls),
            [
                (Op::Restore, "s".into()),
                (Op::PermitDiscard, "s".into()),
                (Op::PermitAcquire, "s".into())
            ]
        );
    }
}
