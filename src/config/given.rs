//! Nodes the application brings: a fred client it already uses, or a fred configuration.
//! What stays the application's: see `RedLockBuilder::fred_client`. What quorumlock owns for
//! such a node: its command queue (`node/batch/`) and its subscriber for release messages
//! (`node/subscriber.rs`), a connection of its own made from the client's configuration.

use std::fmt;
use std::sync::Arc;

use fred::clients::Client;
use fred::interfaces::ClientLike;
use fred::types::config::{Config as FredConfig, ServerConfig};

use crate::config::url::{GivenUrl, NodeUrl};
use crate::error::ConfigError;

/// A node as given to the builder.
#[derive(Clone)]
pub(crate) enum Given {
    /// A URL, not parsed yet.
    Url(GivenUrl),
    /// A fred configuration: quorumlock builds and owns the client.
    Config(Box<FredConfig>),
    /// The application's own client, shared.
    Client(Client),
}

/// Where a checked node's connection comes from.
#[derive(Clone)]
pub(crate) enum Source {
    /// Built from the node's URL.
    Url,
    /// Built from this fred configuration.
    Config(Arc<FredConfig>),
    /// The application's client.
    Client(Client),
}

impl Given {
    /// The node's address, checked: a URL parsed, a configuration or client accepted only
    /// when it names one centralized server (`index` is the node's position, for errors).
    pub(crate) fn check(&self, index: usize) -> Result<(NodeUrl, Source), ConfigError> {
        match self {
            Given::Url(raw) => Ok((NodeUrl::parse(&raw.0)?, Source::Url)),
            Given::Config(config) => {
                let url = address(index, config, "a fred configuration")?;
                Ok((url, Source::Config(Arc::new((**config).clone()))))
            }
            Given::Client(client) => {
                let config = client.client_config();
                let url = address(index, &config, "a fred client")?;
                if client.client_reconnect_policy().is_none() {
                    return Err(ConfigError::UnsuitableNode {
                        index,
                        node: url.redacted().into(),
                        reason: "the client has no reconnect policy: after one dropped \
                                 connection the node would fail for good; give it one \
                                 (fred's Builder::set_policy)"
                            .into(),
                    });
                }
                Ok((url, Source::Client(client.clone())))
            }
        }
    }
}

/// The one server a fred configuration names, or why it is not a Redlock node.
fn address(index: usize, config: &FredConfig, what: &str) -> Result<NodeUrl, ConfigError> {
    let reason = match &config.server {
        ServerConfig::Centralized { server } => {
            return Ok(NodeUrl::of_server(
                &server.host,
                server.port,
                config.uses_tls(),
                config.database,
            ))
        }
        ServerConfig::Clustered { .. } => {
            "a cluster is one deployment, not independent masters: give each independent \
             master as its own node"
        }
        ServerConfig::Sentinel { .. } => {
            "a sentinel deployment fails over to replicas, which may not have a lock's key: \
             give each independent master as its own node"
        }
        #[allow(unreachable_patterns)]
        _ => "only a TCP server (host and port) can be a node",
    };
    Err(ConfigError::UnsuitableNode {
        index,
        node: what.to_string(),
        reason: reason.into(),
    })
}

impl fmt::Debug for Given {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Given::Url(url) => fmt::Debug::fmt(url, f),
            // Never fred's `Debug`: it shows the password.
            Given::Config(config) => f.debug_tuple("FredConfig").field(&shown(config)).finish(),
            Given::Client(client) => f
                .debug_tuple("FredClient")
                .field(&shown(&client.client_config()))
                .finish(),
        }
    }
}

impl fmt::Debug for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Url => f.write_str("Url"),
            Source::Config(config) => f.debug_tuple("FredConfig").field(&shown(config)).finish(),
            Source::Client(client) => f
                .debug_tuple("FredClient")
                .field(&client.id().to_string())
                .finish(),
        }
    }
}

/// A fred configuration's server, without credentials.
fn shown(config: &FredConfig) -> String {
    match &config.server {
        ServerConfig::Clustered { .. } => "clustered".into(),
        ServerConfig::Sentinel { .. } => "sentinel".into(),
        // A centralized server, shown by its address; anything else is "other".
        _ => address(0, config, "").map_or_else(|_| "other".into(), |url| url.redacted().into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fred_configuration_never_shows_its_password() {
        let config =
            FredConfig::from_url("redis://app:S3CRET@127.0.0.1:7001/2").expect("a valid URL");
        let given = Given::Config(Box::new(config));
        let shown = format!("{given:?}");
        assert!(!shown.contains("S3CRET"), "{shown}");
        assert!(shown.contains("redis://127.0.0.1:7001/2"), "{shown}");
        let (url, source) = given.check(0).expect("one server");
        assert_eq!((url.host(), url.port()), ("127.0.0.1", 7001));
        assert!(!format!("{url:?}{source:?}").contains("S3CRET"));
    }

    #[test]
    fn clustered_and_sentinel_configurations_are_refused() {
        for url in [
            "redis-cluster://127.0.0.1:7001",
            "redis-sentinel://127.0.0.1:26379?sentinelServiceName=mymaster",
        ] {
            let config = FredConfig::from_url(url).expect("a valid URL");
            let e = Given::Config(Box::new(config)).check(3).unwrap_err();
            assert!(
                matches!(e, ConfigError::UnsuitableNode { index: 3, .. }),
                "{url}: {e:?}"
            );
        }
    }
}
