//! The errors of an acquisition round that was not granted, written once ([`expired`],
//! [`lost`]).

use std::time::Duration;

use crate::algo::quorum::Tally;
use crate::config::Ttl;
use crate::error::{Error, NodeError, NodeErrorKind};

/// A round that got its majority too late: [`Error::ValidityExpired`].
pub(crate) fn expired(resource: &str, elapsed: Duration, ttl: Ttl) -> Error {
    Error::ValidityExpired {
        resource: resource.to_string(),
        elapsed,
        ttl: ttl.ttl,
        drift: ttl.drift,
    }
}

/// An acquisition round without a majority: [`Error::Taken`] when refusals decided it,
/// [`Error::NoQuorum`] when failures did.
pub(crate) fn lost(resource: &str, tally: Tally, failures: Vec<NodeError>) -> Error {
    if tally.lost_to_contention() {
        // The refusals are `held_elsewhere`.
        let failures = failures
            .into_iter()
            .filter(|f| f.kind != NodeErrorKind::Refused)
            .collect();
        Error::Taken {
            resource: resource.to_string(),
            held_elsewhere: tally.no,
            nodes: tally.nodes,
            failures,
        }
    } else {
        Error::NoQuorum {
            resource: resource.to_string(),
            needed: tally.quorum(),
            agreed: tally.yes,
            failures,
        }
    }
}
