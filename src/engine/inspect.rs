//! Start-up checks and node reports: `check_distinct` refuses two URLs of one server (for
//! `RedLockBuilder::connect`); `inspect` reports what each node is and which assumptions
//! it breaks. What is read of each node is `node/inspect.rs`'s; the rules it is judged by
//! come from the configuration here.

use std::time::Duration;

use futures::future::join_all;

use crate::config::Config;
use crate::error::ConfigError;
use crate::node::inspect::observe;
use crate::node::probe::KeySpace;
use crate::node::Node;
use crate::report::facts::Excluded;
use crate::report::{self, NodeReport, Rules};

/// A report on each of `nodes`, judged by the rules of `config`; each node's clock is
/// watched for `clock_window`.
pub(crate) async fn inspect(
    nodes: &[Node],
    config: &Config,
    clock_window: Duration,
) -> Vec<NodeReport> {
    let rules = Rules {
        drift_factor: config.drift_factor,
        quarantine: config.quarantine,
        max_ttl: config.max_ttl,
    };
    let keys = KeySpace::of(config);
    join_all(nodes.iter().map(|node| async {
        let seen = observe(node, clock_window, &keys).await;
        report::report(node.index(), node.label(), seen, rules)
    }))
    .await
}

/// Refuses two of `nodes` that lead to one server.
pub(crate) fn check_distinct(nodes: &[Node]) -> Result<(), ConfigError> {
    for node in nodes {
        if let Some(Excluded::SameServerAs { index }) = node.admission().excluded() {
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
