//! Start-up checks and node reports: `RedLockBuilder::connect` refuses two URLs of one
//! server; `inspect` reports what each node is and which assumptions it breaks.

use std::time::Duration;

use futures::future::join_all;

use crate::config::RedLockBuilder;
use crate::error::ConfigError;
use crate::failure::describe;
use crate::health::Excluded;
use crate::node::Node;
use crate::probe::{self, KeySpace};
use crate::redlock::RedLock;
use crate::report::{self, NodeReport, Observed, Rules};

impl RedLockBuilder {
    /// Like [`build`](Self::build), then waits (up to the connect timeout) for the nodes to
    /// connect and be checked, and refuses a configuration in which two URLs reach the same
    /// server (the same `run_id`: a hostname and its address, say). Nodes that are down are
    /// not waited for beyond the timeout and do not fail the call.
    ///
    /// # Errors
    /// As [`build`](Self::build); [`ConfigError::SameServer`] for two URLs of one server.
    pub async fn connect(&self) -> Result<RedLock, ConfigError> {
        let redlock = self.build()?;
        redlock
            .wait_for_nodes(redlock.config().connect_timeout)
            .await;
        redlock.check_distinct()?;
        Ok(redlock)
    }

    /// Reports on every node without taking any lock and without writing anything to any
    /// node (`INFO`, `CONFIG GET`, `TIME`, and permission probes that change nothing). The
    /// clock rate is measured over `clock_window`. This is what `quorumlock doctor` prints.
    ///
    /// # Errors
    /// [`ConfigError`] for an invalid configuration, as [`validate`](Self::validate).
    pub async fn inspect(&self, clock_window: Duration) -> Result<Vec<NodeReport>, ConfigError> {
        let config = self.validate()?;
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(ConfigError::NoRuntime);
        }
        let timeout = config.connect_timeout;
        let redlock = RedLock::connect(config, false)?;
        redlock.wait_for_nodes(timeout).await;
        Ok(redlock.inspect(clock_window).await)
    }
}

impl RedLock {
    /// Reports on every node, in parallel: reachability, round trip, version, role, run_id,
    /// uptime, persistence, eviction policy, clock rate over `clock_window`, refused
    /// commands, quarantine, and a verdict. Writes nothing to any node.
    pub async fn inspect(&self, clock_window: Duration) -> Vec<NodeReport> {
        let config = self.config();
        let rules = Rules {
            drift_factor: config.drift_factor,
            quarantine: config.quarantine,
            max_ttl: config.max_ttl,
        };
        let keys = KeySpace::of(config);
        join_all(
            self.node_list()
                .iter()
                .map(|node| inspect_node(node, clock_window, rules, &keys)),
        )
        .await
    }

    /// Refuses a configuration in which two URLs reach the same server (the same `run_id`),
    /// among the nodes checked so far: what [`RedLockBuilder::connect`] does after waiting
    /// for every node, for a client that waited only for a quorum
    /// ([`wait_for_quorum`](Self::wait_for_quorum)). Whether or not this is called, the
    /// later of two such nodes never counts.
    ///
    /// # Errors
    /// [`ConfigError::SameServer`] for the first repeat found.
    pub fn check_distinct(&self) -> Result<(), ConfigError> {
        for node in self.node_list() {
            if let Some(Excluded::SameServerAs { index }) = node.excluded() {
                let (facts, _) = node.admission().snapshot();
                return Err(ConfigError::SameServer {
                    url: node.label().to_string(),
                    first: index,
                    second: node.index(),
                    run_id: facts.and_then(|f| f.run_id).unwrap_or_default(),
                });
            }
        }
        Ok(())
    }
}

async fn inspect_node(
    node: &Node,
    clock_window: Duration,
    rules: Rules,
    keys: &KeySpace,
) -> NodeReport {
    let (client, timeout) = (node.client(), node.timeout());
    let mut seen = Observed::default();
    let not_connected = || match node.last_error() {
        Some((kind, e)) => (Some(kind), format!("not connected: {kind}: {e}")),
        None => (None, "not connected".to_string()),
    };
    if !node.is_connected() {
        let (kind, error) = not_connected();
        (seen.error_kind, seen.error) = (kind, Some(error));
        return report::report(node.index(), node.label(), seen, rules);
    }
    match probe::round_trip(client, timeout).await {
        Err(e) => {
            let (kind, error) = if node.is_connected() {
                let (kind, message) = describe(&e);
                (Some(kind), format!("{kind}: {message}"))
            } else {
                not_connected()
            };
            seen.error_kind = kind;
            seen.error = Some(error);
        }
        Ok(rtt) => {
            seen.round_trip = Some(rtt);
            seen.facts = probe::facts(client, timeout).await.ok();
            let (permissions, election) = tokio::join!(
                probe::permissions(client, timeout, keys),
                probe::election_permissions(client, timeout, keys)
            );
            seen.refused = permissions.refused;
            seen.unchecked = permissions.unanswered;
            seen.refused_for_elections = election.refused;
            seen.unchecked.extend(election.unanswered);
            seen.clock_rate = probe::clock_rate(client, clock_window, timeout).await;
            let (_, quarantined_for) = node.admission().snapshot();
            seen.quarantined_for = quarantined_for;
            seen.excluded = node.excluded();
            if let Some(Excluded::SameServerAs { index }) = &seen.excluded {
                seen.same_server_as = Some(*index);
            }
        }
    }
    report::report(node.index(), node.label(), seen, rules)
}
