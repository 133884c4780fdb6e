//! What a round's verdict means to its caller, written once: the errors of an acquisition
//! round that was not granted ([`expired`], [`lost`]), and a round on a held claim judged by
//! [`verdict::confirmation`] as a `Result` ([`confirmed`], [`unheld`]), whose success is
//! [`Released`].

use std::time::Duration;

use crate::algo::quorum::Tally;
use crate::algo::verdict::{self, Confirmation};
use crate::config::Ttl;
use crate::error::{Error, NodeError, NodeErrorKind};

/// The outcome of [`Lock::release`](crate::Lock::release).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Released {
    /// How many nodes confirmed that they deleted our key before `release` returned (the
    /// others still get the delete, in the background).
    pub released: usize,
    /// How many nodes are configured.
    pub nodes: usize,
}

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

/// A round on a held claim, judged by [`verdict::confirmation`]: [`Released`] when a majority
/// confirmed it, [`Error::NotHeld`] when the claim is gone, [`Error::NoQuorum`] when failed
/// nodes left it undecided.
pub(crate) fn confirmed(
    resource: &str,
    tally: Tally,
    failures: Vec<NodeError>,
) -> Result<Released, Error> {
    match verdict::confirmation(&tally) {
        Confirmation::Confirmed => Ok(Released {
            released: tally.yes,
            nodes: tally.nodes,
        }),
        confirmation => Err(unheld(
            resource,
            tally,
            failures,
            confirmation == Confirmation::Gone,
        )),
    }
}

/// Why a round on a held claim did not confirm it: [`Error::NotHeld`] when it is `gone`,
/// else [`Error::NoQuorum`].
pub(crate) fn unheld(resource: &str, tally: Tally, failures: Vec<NodeError>, gone: bool) -> Error {
    if gone {
        return Error::NotHeld {
            resource: resource.to_string(),
            held: tally.yes,
            nodes: tally.nodes,
        };
    }
    Error::NoQuorum {
        resource: resource.to_string(),
        needed: tally.quorum(),
        agreed: tally.yes,
        failures,
    }
}
