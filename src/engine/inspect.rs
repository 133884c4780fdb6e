//! Start-up checks and node reports: `check_distinct` refuses two URLs of one server (for
//! `RedLockBuilder::connect`); `inspect` reports what each node is and which assumptions
//! it breaks.

use std::time::Duration;

use futures::future::join_all;

use crate::engine::coordinator::Coordinator;
use crate::error::ConfigError;
use crate::node::failure::describe;
use crate::node::probe::{self, KeySpace};
use crate::node::Node;
use crate::report::facts::Excluded;
use crate::report::{self, NodeReport, Observed, Rules};

impl Coordinator {
    pub(crate) async fn inspect(&self, clock_window: Duration) -> Vec<NodeReport> {
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

    pub(crate) fn check_distinct(&self) -> Result<(), ConfigError> {
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
            let (permissions, election, semaphore) = tokio::join!(
                probe::permissions(client, timeout, keys),
                probe::election_permissions(client, timeout, keys),
                probe::semaphore_permissions(client, timeout, keys)
            );
            seen.refused = permissions.refused;
            seen.unchecked = permissions.unanswered;
            seen.refused_for_elections = election.refused;
            seen.unchecked.extend(election.unanswered);
            seen.refused_for_semaphores = semaphore.refused;
            seen.unchecked.extend(semaphore.unanswered);
            seen.clock_rate = probe::clock_rate(client, clock_window, timeout).await;
            let (_, quarantined_for) = node.admission().snapshot();
            seen.quarantined_for = quarantined_for;
            if node.admission().marker().is_none() && node.admission().is_checked() {
                seen.lost_data = Some(node.admission().lineage_why());
            }
            seen.excluded = node.excluded();
            if let Some(Excluded::SameServerAs { index }) = &seen.excluded {
                seen.same_server_as = Some(*index);
            }
        }
    }
    report::report(node.index(), node.label(), seen, rules)
}
