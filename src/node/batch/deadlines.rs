//! Every call answered by its deadline: a command's timeout ends at the last deadline of its
//! calls, a timer of the queue answers the earlier ones, and a call no longer worth sending
//! is dropped before it goes.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::call::Call;

/// At `now`: answers with a timeout every caller whose deadline has passed, and drops the
/// calls no longer worth sending ([`Call::wanted`]). A release past its deadline is still
/// sent, its caller answered already.
pub(super) fn expire(calls: &mut Vec<Call>, now: Instant) {
    calls.retain_mut(|call| {
        let wanted = call.wanted(now);
        call.time_out_if_due(now);
        wanted
    });
}

/// A tick of Tokio's timer: a command's timeout answers every call whose deadline is no
/// earlier than this before its own end.
const TICK: Duration = Duration::from_millis(1);

/// The deadlines of the calls whose callers still wait.
fn waiting(calls: &[Call]) -> impl Iterator<Item = Instant> + '_ {
    calls
        .iter()
        .filter(|c| c.reply.is_some())
        .map(|c| c.deadline)
}

/// The timeout of a command carrying `calls`: until the last deadline of a call whose caller
/// waits (at least a tick: fred takes zero for none), or the node timeout when no caller
/// waits (releases sent after their deadline).
pub(super) fn command_timeout(calls: &[Call], node_timeout: Duration) -> Duration {
    match waiting(calls).max() {
        Some(last) => last.saturating_duration_since(Instant::now()).max(TICK),
        None => node_timeout,
    }
}

/// The first deadline that the command's timeout would answer more than a tick late.
fn early_deadline(calls: &[Call]) -> Option<Instant> {
    let last = waiting(calls).max()?;
    waiting(calls).filter(|&d| d + TICK < last).min()
}

/// Awaits `command`, answering with a timeout each caller whose deadline passes before it
/// ends (its own timeout ends at the last deadline; design 4.3, Deadlines).
pub(super) async fn within_deadlines<T>(calls: &mut [Call], command: impl Future<Output = T>) -> T {
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

#[cfg(test)]
mod tests {
    #![cfg(feature = "testkit")]
    #![allow(clippy::mixed_attributes_style)]

    use super::super::call::Failure;
    use super::super::op::Op;
    use super::super::queue::Batcher;
    use super::*;
    use crate::node::admission::{Admission, Fleet};
    use crate::node::probe::KeySpace;
    use crate::testkit::LocalQuorum;
    use fred::error::ErrorKind;
    use fred::interfaces::ClientLike;
    use fred::types::config::{Config, ReconnectPolicy};
    use fred::types::Builder;
    use fred::types::{Key, Value};
    use futures::FutureExt;
    use std::sync::Arc;
    use tokio::sync::mpsc;

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
