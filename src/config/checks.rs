//! Settings that each pass their own check but do not go together: the node timeout against
//! the locks' validity, and the number of nodes. One refusal (a node timeout that no lock of
//! the client can outlast) and the warnings about what is merely fragile, written once for
//! every way a configuration is given (builder, `QUORUMLOCK_*` variables, configuration files,
//! the command line), which all end in [`RedLockBuilder::validate`].
//!
//! The thresholds and the argument for each are in the documentation of
//! [`RedLockBuilder::node_timeout`] and in docs/design.md, section 6.1.
//!
//! [`RedLockBuilder::validate`]: crate::RedLockBuilder::validate
//! [`RedLockBuilder::node_timeout`]: crate::RedLockBuilder::node_timeout

use std::time::Duration;

use humantime::format_duration;

use crate::algo::quorum::quorum;
use crate::config::Ttl;
use crate::error::ConfigError;
use crate::report::{Finding, Severity};

/// Refuses a node timeout that no lock of the client can outlast: why, in
/// [`ConfigError::NodeTimeoutOutlastsLocks`].
pub(crate) fn check_node_timeout(node_timeout: Duration, max_ttl: &Ttl) -> Result<(), ConfigError> {
    if node_timeout >= max_ttl.usable {
        return Err(ConfigError::NodeTimeoutOutlastsLocks {
            node_timeout,
            max_ttl: max_ttl.ttl,
            validity: max_ttl.usable,
        });
    }
    Ok(())
}

/// What is fragile in settings that [`check_node_timeout`] accepted, as notes: too few nodes
/// to lose one, an even number of nodes, and a node timeout that is large against the
/// validity of a lock of the configured `ttl`.
pub(crate) fn warnings(nodes: usize, ttl: &Ttl, node_timeout: Duration) -> Vec<Finding> {
    let mut found = Vec::new();
    let mut note = |message: String| found.push(Finding::new(Severity::Note, message));
    let q = quorum(nodes);
    if nodes < 3 {
        note(format!(
            "{nodes} node{}: no node may fail (a quorum of {nodes} is {q}), so locks fail \
             whenever one node is down, frozen or cut off; use 3 or 5 independent masters",
            if nodes == 1 { "" } else { "s" }
        ));
    } else if nodes % 2 == 0 {
        let spare = nodes - q;
        note(format!(
            "{nodes} nodes: a quorum is {q}, so they can lose {spare} node{}, no more than {} \
             nodes can; an odd number is as tolerant with one node fewer",
            if spare == 1 { "" } else { "s" },
            nodes - 1
        ));
    }
    let usable = ttl.usable;
    let (timeout, shown_ttl) = (format_duration(node_timeout), format_duration(ttl.ttl));
    if node_timeout > usable / 2 {
        let left = usable.saturating_sub(node_timeout);
        note(format!(
            "a round that waits the node timeout ({timeout}) for one slow node leaves a lock of \
             the ttl ({shown_ttl}) {} of validity, under half of the {} a prompt round leaves; \
             a kept lock (extended when half its ttl is left) is lost to one slow node: lower \
             the node timeout or raise the ttl",
            format_duration(left),
            format_duration(usable)
        ));
    } else if node_timeout > usable / 10 {
        note(format!(
            "the node timeout ({timeout}) is over a tenth of a lock's validity ({} for the ttl \
             {shown_ttl}): each round that waits for a slow node loses that much; the Redis \
             documentation suggests 5-50ms for a 10s ttl",
            format_duration(usable)
        ));
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn ttl(millis: u64) -> Ttl {
        Ttl::new(ms(millis), 0.01).unwrap()
    }

    fn messages(nodes: usize, ttl_ms: u64, timeout_ms: u64) -> Vec<String> {
        warnings(nodes, &ttl(ttl_ms), ms(timeout_ms))
            .into_iter()
            .inspect(|f| assert_eq!(f.severity, Severity::Note))
            .map(|f| f.message)
            .collect()
    }

    #[test]
    fn a_node_timeout_no_lock_can_outlast_is_refused() {
        // ttl 50 ms: drift 2.5 ms, validity 47.5 ms, against the default 100 ms.
        assert_eq!(
            check_node_timeout(ms(100), &ttl(50)),
            Err(ConfigError::NodeTimeoutOutlastsLocks {
                node_timeout: ms(100),
                max_ttl: ms(50),
                validity: Duration::from_micros(47_500),
            })
        );
        // 10 s with the default drift: 9.898 s of validity.
        let ten = ttl(10_000);
        assert!(check_node_timeout(ms(10_000), &ten).is_err());
        assert!(check_node_timeout(ms(9_898), &ten).is_err());
        assert_eq!(check_node_timeout(ms(9_897), &ten), Ok(()));
        assert_eq!(check_node_timeout(ms(100), &ten), Ok(()));
    }

    #[test]
    fn the_defaults_raise_no_warning() {
        assert_eq!(messages(3, 10_000, 100), Vec::<String>::new());
        assert_eq!(messages(5, 10_000, 100), Vec::<String>::new());
    }

    #[test]
    fn fewer_than_three_nodes_cannot_lose_one() {
        assert_eq!(
            messages(1, 10_000, 100),
            [
                "1 node: no node may fail (a quorum of 1 is 1), so locks fail whenever one node \
              is down, frozen or cut off; use 3 or 5 independent masters"
            ]
        );
        assert_eq!(
            messages(2, 10_000, 100),
            [
                "2 nodes: no node may fail (a quorum of 2 is 2), so locks fail whenever one node \
              is down, frozen or cut off; use 3 or 5 independent masters"
            ]
        );
    }

    #[test]
    fn an_even_number_of_nodes_tolerates_no_more_than_one_fewer() {
        assert_eq!(
            messages(4, 10_000, 100),
            [
                "4 nodes: a quorum is 3, so they can lose 1 node, no more than 3 nodes can; an \
              odd number is as tolerant with one node fewer"
            ]
        );
        assert_eq!(messages(6, 10_000, 100).len(), 1);
        assert_eq!(messages(7, 10_000, 100).len(), 0);
    }

    #[test]
    fn a_node_timeout_large_against_the_validity_is_a_note() {
        // Validity 9.898 s: over a tenth from 990 ms, over half from 4.95 s.
        assert_eq!(messages(3, 10_000, 989), Vec::<String>::new());
        assert_eq!(
            messages(3, 10_000, 990),
            [
                "the node timeout (990ms) is over a tenth of a lock's validity (9s 898ms for the \
              ttl 10s): each round that waits for a slow node loses that much; the Redis \
              documentation suggests 5-50ms for a 10s ttl"
            ]
        );
        assert_eq!(messages(3, 10_000, 4_949).len(), 1);
        assert_eq!(
            messages(3, 10_000, 5_000),
            [
                "a round that waits the node timeout (5s) for one slow node leaves a lock of the \
              ttl (10s) 4s 898ms of validity, under half of the 9s 898ms a prompt round leaves; \
              a kept lock (extended when half its ttl is left) is lost to one slow node: lower \
              the node timeout or raise the ttl"
            ]
        );
    }
}
