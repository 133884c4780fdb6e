//! The per-node queue: calls wait while a command is in flight, and the next command takes
//! them all; votes wait for a checked connection, and one whose token a later release
//! deletes is dropped unsent.

use std::time::Duration;

use fred::clients::Client;
use fred::error::{Error as FredError, ErrorKind};
use fred::types::{Key, Value};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::call::{closed, timed_out, Call, Failure, List};
use super::deadlines::expire;
use super::op::Op;
use super::send::{send_batch, send_one};
use crate::node::admission::{Admission, Clearance};

/// Calls sent as one batch, at most (a batch runs atomically: the node serves nothing else
/// meanwhile).
pub(crate) const MAX_CALLS: usize = 256;

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
    /// command that carried it (a `Timeout` at the node timeout). A `vote` (a call that changes
    /// data, other than deleting our own keys) is sent only on a checked connection, while the
    /// node's votes count ([`admit`]). The sender task answers every call by its deadline (the
    /// node timeout from now): the caller arms no timer (see
    /// [`within_deadlines`](super::deadlines::within_deadlines)).
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

/// Takes calls off the queue, one command at a time: the first call that comes, with every
/// call queued behind it, sent and answered before the next (why every call is still answered
/// by its deadline: design 4.3, Deadlines).
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

/// Holds the queue until the node's votes may be sent ([`Admission::cleared`]), up to the
/// first vote's deadline, then refuses the votes if they may not (design 4.3). Deletes of our
/// own keys queued with them still go (fred sends them once connected). Meanwhile it takes in
/// the calls queued behind them, for [`drop_released`].
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
/// release or discard queued after it deletes (design 4.3: a vote lost, which the protocol
/// tolerates; sent, it would set a key that only the release behind it removes).
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

#[cfg(test)]
mod tests {
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
