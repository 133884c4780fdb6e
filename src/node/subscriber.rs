//! One node's subscriber connection, for the release messages (the line of waiters,
//! `engine::waiters`, receives them through [`Inbox`]), opened the first time this client
//! waits for a release (design 2.4a). Subscriptions and unsubscriptions go through one task
//! per node, in the order they were asked for, so that an unsubscription (the last waiter for
//! a key left) never lands after a later subscription to the same key (a new waiter came).

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use fred::clients::SubscriberClient;
use fred::interfaces::{ClientLike, EventInterface, PubsubInterface};
use fred::types::Value;
use tokio::sync::{mpsc, oneshot};
use tokio::task::AbortHandle;

/// Where a subscriber delivers the messages it receives: the line of waiters
/// (`engine::waiters`), which this layer does not name.
pub(crate) trait Inbox: Send + Sync + 'static {
    /// A message arrived on `channel`.
    fn message(&self, channel: &str, payload: &str);
}

#[derive(Debug)]
enum Order {
    Subscribe(Vec<String>, oneshot::Sender<bool>),
    Unsubscribe(Vec<String>),
}

/// A node's subscriber, started on first use.
#[derive(Debug)]
pub(crate) struct Listener {
    client: SubscriberClient,
    timeout: Duration,
    orders: OnceLock<mpsc::UnboundedSender<Order>>,
    tasks: Mutex<Vec<AbortHandle>>,
}

impl Listener {
    /// A listener over `client` (not connected yet), whose commands may take `timeout`.
    pub(crate) fn new(client: SubscriberClient, timeout: Duration) -> Listener {
        Listener {
            client,
            timeout,
            orders: OnceLock::new(),
            tasks: Mutex::new(Vec::new()),
        }
    }

    /// Subscribes to `channels`: resolves to whether the node confirmed it within the
    /// timeout. Connects first if this is the first use.
    pub(crate) fn subscribe<I: Inbox>(
        &self,
        channels: Vec<String>,
        inbox: &Arc<I>,
    ) -> oneshot::Receiver<bool> {
        let (tx, rx) = oneshot::channel();
        let _ = self.orders(inbox).send(Order::Subscribe(channels, tx));
        rx
    }

    /// Unsubscribes from `channels`, if the listener was ever started.
    pub(crate) fn unsubscribe(&self, channels: Vec<String>) {
        if let Some(orders) = self.orders.get() {
            let _ = orders.send(Order::Unsubscribe(channels));
        }
    }

    fn orders<I: Inbox>(&self, inbox: &Arc<I>) -> &mpsc::UnboundedSender<Order> {
        self.orders.get_or_init(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            let client = self.client.clone();
            let messages = Arc::clone(inbox);
            // Keep every release message: a lagging receiver would lose some.
            let on_message = client.on_message(move |message| {
                if let Value::String(payload) = &message.value {
                    messages.message(&message.channel, payload);
                }
                async { Ok(()) }
            });
            let mut tasks = vec![
                on_message.abort_handle(),
                client.connect().abort_handle(),
                client.manage_subscriptions().abort_handle(),
                tokio::spawn(run(client, rx, self.timeout)).abort_handle(),
            ];
            if let Ok(mut all) = self.tasks.lock() {
                all.append(&mut tasks);
            }
            tx
        })
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Ok(tasks) = self.tasks.lock() {
            for task in tasks.iter() {
                task.abort();
            }
        }
    }
}

/// Carries out the orders one at a time, in order. A subscription asked for while the node
/// is not connected is answered `false` at once (the waiter falls back on its pause) and
/// kept: it is made as soon as the connection is up, unless an unsubscription came first
/// (design 2.4a, Arming: why a line of waiters would otherwise stay deaf to the node).
async fn run(
    client: SubscriberClient,
    mut orders: mpsc::UnboundedReceiver<Order>,
    timeout: Duration,
) {
    let mut ever_connected = false;
    let mut pending: Vec<String> = Vec::new();
    loop {
        let order = if pending.is_empty() {
            orders.recv().await
        } else {
            tokio::select! {
                order = orders.recv() => order,
                connected = client.wait_for_connect() => {
                    if connected.is_ok() {
                        ever_connected = true;
                        let channels = std::mem::take(&mut pending);
                        let done =
                            tokio::time::timeout(timeout, client.subscribe(channels.clone())).await;
                        if !matches!(done, Ok(Ok(()))) {
                            tracing::debug!(?done, "a kept subscription not confirmed yet");
                            pending = channels;
                        }
                    }
                    if !pending.is_empty() {
                        // Not up, or the subscription failed: not again before a timeout.
                        tokio::time::sleep(timeout).await;
                    }
                    continue;
                }
            }
        };
        let Some(order) = order else { return };
        match order {
            Order::Subscribe(channels, confirmed) => {
                // The first order waits (up to the timeout) for the connection it started.
                // Later, a node that is not connected would keep every later order waiting
                // a timeout each: refuse at once (the waiter falls back on its pause), and
                // subscribe once it is connected.
                if !client.is_connected() && !ever_connected {
                    let _ = tokio::time::timeout(timeout, client.wait_for_connect()).await;
                }
                if !client.is_connected() {
                    for channel in channels {
                        if !pending.contains(&channel) {
                            pending.push(channel);
                        }
                    }
                    let _ = confirmed.send(false);
                    continue;
                }
                ever_connected = true;
                let done = tokio::time::timeout(timeout, client.subscribe(channels)).await;
                let ok = matches!(done, Ok(Ok(())));
                if !ok {
                    tracing::debug!(?done, "release channel subscription not confirmed");
                }
                let _ = confirmed.send(ok);
            }
            Order::Unsubscribe(channels) => {
                pending.retain(|c| !channels.contains(c));
                let _ = tokio::time::timeout(timeout, client.unsubscribe(channels)).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![cfg(feature = "testkit")]
    #![allow(clippy::mixed_attributes_style)]

    use super::*;
    use crate::testkit::{LocalQuorum, Reply};
    use fred::types::config::{Config, ReconnectPolicy};
    use fred::types::Builder;

    #[derive(Default)]
    struct Heard(Mutex<Vec<String>>);

    impl Inbox for Heard {
        fn message(&self, channel: &str, _payload: &str) {
            if let Ok(mut heard) = self.0.lock() {
                heard.push(channel.to_string());
            }
        }
    }

    /// A subscription asked for while the node does not take the connection yet is answered
    /// `false`, and made once the node answers: the release messages on the channel then
    /// reach the inbox. (It was dropped: a line of waiters whose first subscription met a
    /// subscriber not connected yet never heard a release from that node.)
    #[tokio::test]
    async fn a_subscription_asked_before_the_node_answers_is_made_once_it_does() {
        let mut q = LocalQuorum::start(1).await.unwrap();
        let url = q.node(0).url();
        q.node_mut(0).kill().await.unwrap();
        let mut config = Config::from_url(&url).unwrap();
        config.fail_fast = false;
        let mut builder = Builder::from_config(config);
        builder.set_policy(ReconnectPolicy::new_constant(0, 50));
        let listener = Listener::new(
            builder.build_subscriber_client().unwrap(),
            Duration::from_millis(100),
        );
        let heard = Arc::new(Heard::default());
        let channel = "quorumlock:released:late".to_string();
        let confirmed = listener.subscribe(vec![channel.clone()], &heard).await;
        assert_eq!(confirmed, Ok(false), "confirmed while the node is down");

        q.node_mut(0).restart().await.unwrap();
        let subscribed = Reply::Array(Some(vec![
            Reply::Bulk(Some(channel.clone().into_bytes())),
            Reply::Integer(1),
        ]));
        let mut tries = 0;
        loop {
            let numsub = q.node(0).command(&["PUBSUB", "NUMSUB", &channel]).await;
            if numsub.as_ref().ok() == Some(&subscribed) {
                break;
            }
            tries += 1;
            assert!(tries < 400, "never subscribed: {numsub:?}");
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        let published = q
            .node(0)
            .command(&["PUBLISH", &channel, "x"])
            .await
            .unwrap();
        assert_eq!(published, Reply::Integer(1));
        let mut tries = 0;
        while heard.0.lock().unwrap().is_empty() {
            tries += 1;
            assert!(tries < 400, "the release message never came");
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        assert_eq!(*heard.0.lock().unwrap(), [channel]);
    }
}
