//! One node's subscriber connection, for the release messages (the line of waiters,
//! `engine::waiters`, receives them through [`Inbox`]).
//!
//! Opened the first time this client waits for a release, never before: a client that never
//! meets contention never opens it. Subscriptions and unsubscriptions go through one task per
//! node, in the order they were asked for, so that an unsubscription (the last waiter for a
//! key left) never lands after a later subscription to the same key (a new waiter came).

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

impl std::fmt::Debug for Order {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Order::Subscribe(c, _) => f.debug_tuple("Subscribe").field(c).finish(),
            Order::Unsubscribe(c) => f.debug_tuple("Unsubscribe").field(c).finish(),
        }
    }
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

/// Carries out the orders one at a time, in order.
async fn run(
    client: SubscriberClient,
    mut orders: mpsc::UnboundedReceiver<Order>,
    timeout: Duration,
) {
    let mut ever_connected = false;
    while let Some(order) = orders.recv().await {
        match order {
            Order::Subscribe(channels, confirmed) => {
                // The first order waits (up to the timeout) for the connection it started.
                // Later, a node that is not connected would keep every later order waiting
                // a timeout each: refuse at once (the waiter falls back on its pause).
                if !client.is_connected() && !ever_connected {
                    let _ = tokio::time::timeout(timeout, client.wait_for_connect()).await;
                }
                if !client.is_connected() {
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
                let _ = tokio::time::timeout(timeout, client.unsubscribe(channels)).await;
            }
        }
    }
}
