//! A node's fred client: made from its URL, its fred configuration or the application's
//! client, with our settings (`our_builder`), and the handlers of its connection events: a
//! broken or new connection is checked again, and the scripts are cached on each new one.

use std::sync::Arc;
use std::time::Duration;

use fred::clients::Client;
use fred::error::Error as FredError;
use fred::interfaces::{ClientLike, EventInterface, LuaInterface};
use fred::types::config::{Config as FredConfig, ReconnectPolicy, TcpConfig, UnresponsiveConfig};
use fred::types::Builder;
use tokio::task::JoinHandle;

use crate::config::given::Source;
use crate::config::{Config, NodeUrl};
use crate::node::admission::Admission;
use crate::node::context::LastError;
use crate::node::failure::describe;
use crate::node::scripts::{self, BATCH, SET_NX_ALONE};

/// A node's client, the builder it was made with (its subscriber is made with it too), and
/// whether it is the application's (`shared`: the application connects it).
pub(super) struct Made {
    pub(super) client: Client,
    pub(super) builder: Builder,
    pub(super) shared: bool,
}

/// Makes the client of the node at `url` (or takes the application's, see
/// `config/given.rs`).
pub(super) fn make(url: &NodeUrl, source: &Source, config: &Config) -> Result<Made, FredError> {
    let fred_config = match source {
        Source::Url => crate::config::tls::fred_config(url, config.tls.as_ref())?,
        Source::Config(fred_config) => (**fred_config).clone(),
        // The subscriber is ours, made from the client's configuration.
        Source::Client(client) => {
            return Ok(Made {
                client: client.clone(),
                builder: our_builder(client.client_config(), config),
                shared: true,
            })
        }
    };
    let builder = our_builder(fred_config, config);
    Ok(Made {
        client: builder.build()?,
        builder,
        shared: false,
    })
}

/// Follows the connection of node `index` (`label`): each error is kept in `last_error`
/// and a broken connection checked again; each new connection is checked before its votes
/// count, and the scripts are cached on it if `preload`. Connects the client unless it is
/// the application's (`shared`). Returns the tasks that end with the node.
pub(super) fn watch(
    index: usize,
    label: &Arc<str>,
    made: &Made,
    admission: &Admission,
    last_error: &LastError,
    preload: bool,
) -> Vec<JoinHandle<Result<(), FredError>>> {
    let client = &made.client;
    let sink = Arc::clone(last_error);
    let log_label = Arc::clone(label);
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
            // In this task (the connection events' own), not one of its own: a client's
            // tasks are its events' task and its background work, which `settle` counts.
            if preload {
                preload_scripts(index, &client).await;
            }
            Ok(())
        }
    });
    let mut tasks = vec![errors, connected];
    if made.shared {
        // The application connects its client. One that is connected already had its
        // connection event before ours was registered: check it now.
        if client.is_connected() {
            admission.recheck(client, true);
            if preload {
                let client = client.clone();
                tokio::spawn(async move { preload_scripts(index, &client).await });
            }
        }
    } else {
        tasks.push(client.connect());
    }
    tasks
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
