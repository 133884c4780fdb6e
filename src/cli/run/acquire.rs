//! How `run` acquires: waiting out a quarantine first, then the lock, a permit or a side
//! of a read-write lock; and a conflict said in one line.

use std::time::Duration;

use humantime::format_duration;
use quorumlock::{Error, NodeError, NodeErrorKind, RedLock, Retry};

use super::{Taken, Target, Wait};
use crate::cli::exit::{whole_secs, Failure};
use crate::cli::options::{var_duration, Vars, RETRY_WITHIN};

/// How `run` waits for the lock, and what it needs to wait out a quarantine first.
#[derive(Debug)]
pub(super) struct Waiting {
    pub(super) wait: Wait,
    pub(super) quiet: bool,
    /// The variables the client was built from, for the retries left after a quarantine.
    pub(super) vars: Vars,
}

impl Waiting {
    /// Waits out the nodes' quarantine (design 2.6a), as they tell it, where the wait covers
    /// it: always without a bound, within `--wait` if it ends by then, never with `-n` (nor
    /// with the retries of the environment). Says so once on stderr, unless `quiet`. Returns
    /// how long it waited.
    async fn quarantine(&self, redlock: &RedLock) -> Duration {
        let Some(left) = redlock.quarantine_left().filter(|left| !left.is_zero()) else {
            return Duration::ZERO;
        };
        let covered = match self.wait {
            Wait::Forever => true,
            Wait::Within(within) => left <= within,
            Wait::Once | Wait::FromEnv => false,
        };
        if !covered {
            return Duration::ZERO;
        }
        if !self.quiet {
            eprintln!(
                "quorumlock: waiting {} for the nodes' quarantine to end: they may have lost \
                 data (new, restarted or flushed servers) and count once the longest ttl has \
                 passed; every process waits out the same one",
                format_duration(whole_secs(left))
            );
        }
        tokio::time::sleep(left).await;
        left
    }

    /// The retries of a wait of which a quarantine took `waited`: `--wait`'s bound covers
    /// both.
    fn retry_after(&self, redlock: &RedLock, waited: Duration) -> Result<Retry, Error> {
        match self.wait {
            Wait::Within(within) if !waited.is_zero() => {
                let rest = within.saturating_sub(waited);
                if rest.is_zero() {
                    return Ok(Retry::none());
                }
                let mut vars = self.vars.clone();
                vars.set(RETRY_WITHIN, var_duration(rest));
                let config = vars.builder().ok().map(|b| b.validate()).transpose()?;
                Ok(config.map_or(Retry::within(rest), |c| c.retry()))
            }
            _ => Ok(redlock.config().retry()),
        }
    }
}

/// Whether the nodes' quarantine keeps them from a quorum now, for a time they tell.
pub(super) fn quarantined(redlock: &RedLock) -> bool {
    redlock
        .quarantine_left()
        .is_some_and(|left| !left.is_zero())
}

/// Takes the lock on `resource`, or a permit of the semaphore, as `waiting` says.
pub(super) async fn acquire(
    redlock: &RedLock,
    resource: &str,
    target: &Target,
    waiting: &Waiting,
) -> Result<Taken, Error> {
    // Waits, up to the connect timeout, for a quorum of nodes to connect and be checked, so
    // that the first attempt does not fail only because they are still connecting; not for
    // all of them: one frozen node would cost every call the whole timeout. Refuses two URLs
    // of one server among the nodes checked by then (a repeat found later is never counted
    // either).
    redlock
        .wait_for_quorum(redlock.config().connect_timeout())
        .await;
    redlock.check_distinct()?;
    let waited = waiting.quarantine(redlock).await;
    let ttl = redlock.config().ttl();
    if waiting.wait == Wait::Forever {
        let first = match target {
            Target::Lock => {
                (redlock.lock_with(resource, ttl, Retry::none()).await).map(Taken::Lock)
            }
            Target::Semaphore(semaphore) => {
                (semaphore.acquire_with(ttl, Retry::none()).await).map(Taken::Permit)
            }
            Target::ReadWrite(rw, access) => {
                (rw.acquire(*access, ttl, Retry::none()).await).map(Taken::Side)
            }
        };
        match first {
            Err(Error::Taken { .. }) => {
                tracing::debug!(%resource, "held elsewhere: waiting until it is free");
            }
            first => return first,
        }
    }
    let retry = waiting.retry_after(redlock, waited)?;
    match target {
        Target::Lock => redlock
            .lock_with(resource, ttl, retry)
            .await
            .map(Taken::Lock),
        Target::Semaphore(semaphore) => semaphore.acquire_with(ttl, retry).await.map(Taken::Permit),
        Target::ReadWrite(rw, access) => rw.acquire(*access, ttl, retry).await.map(Taken::Side),
    }
}

/// A lock error as a failure, with `conflict_exit_code` when the resource is held elsewhere.
pub(super) fn conflict(error: Error, conflict_exit_code: u8) -> Failure {
    match error {
        Error::Taken {
            resource,
            held_elsewhere,
            nodes,
            failures,
            ..
        } => Failure::new(
            conflict_exit_code,
            held_elsewhere_line(&resource, held_elsewhere, nodes, &failures),
        ),
        error => Failure::from(error),
    }
}

/// A routine conflict in one line: the library's message for [`Error::Taken`], except that a
/// node still connecting when the refusals decided (its first connection not made, or not
/// checked yet) is named as such, `node 2 still connecting`, rather than as a failed node
/// with a connection error: a node that is coming up, not one that is down.
fn held_elsewhere_line(
    resource: &str,
    held_elsewhere: usize,
    nodes: usize,
    failures: &[NodeError],
) -> String {
    let (connecting, failed): (Vec<&NodeError>, Vec<&NodeError>) =
        failures.iter().partition(|f| still_connecting(f));
    let mut line =
        format!("`{resource}` is held by another owner ({held_elsewhere} of {nodes} nodes refused");
    if !connecting.is_empty() {
        let indexes: Vec<String> = connecting.iter().map(|f| f.index.to_string()).collect();
        let nodes = if indexes.len() == 1 { "node" } else { "nodes" };
        line.push_str(&format!(
            "; {nodes} {} still connecting",
            indexes.join(", ")
        ));
    }
    if !failed.is_empty() {
        let count = failed.len();
        let failed: Vec<NodeError> = failed.into_iter().cloned().collect();
        line.push_str(&format!(
            "; {count} failed: {}",
            crate::cli::exit::nodes_line(&failed)
        ));
    }
    line.push(')');
    line
}

/// Whether a node's failure is only that its connection was not made, or not checked, yet:
/// no connection error known (the library's `not connected yet`), or `Unchecked`.
fn still_connecting(failure: &NodeError) -> bool {
    match failure.kind {
        NodeErrorKind::Unchecked => true,
        NodeErrorKind::Io => failure.message.starts_with("not connected yet"),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quorumlock::NodeErrorKind;

    #[test]
    fn a_conflict_names_a_node_still_connecting_as_such() {
        let node = |index: usize, kind: NodeErrorKind, message: &str| NodeError {
            index,
            node: format!("redis://n{index}"),
            kind,
            message: format!("{message}; decided without its answer"),
        };
        let taken = |failures: Vec<NodeError>| Error::Taken {
            resource: "job".into(),
            held_elsewhere: 2,
            nodes: 5,
            failures,
        };
        let line = |failures| conflict(taken(failures), 3);
        let plain = line(Vec::new());
        assert_eq!(plain.code, 3);
        assert_eq!(
            plain.message,
            "`job` is held by another owner (2 of 5 nodes refused)"
        );
        let connecting = line(vec![
            node(2, NodeErrorKind::Io, "not connected yet"),
            node(3, NodeErrorKind::Unchecked, "connected, not yet checked"),
        ]);
        assert_eq!(
            connecting.message,
            "`job` is held by another owner (2 of 5 nodes refused; nodes 2, 3 still connecting)"
        );
        let down = node(4, NodeErrorKind::Io, "not connected: connection refused");
        let both = line(vec![node(2, NodeErrorKind::Io, "not connected yet"), down]);
        // One line for a cron mail: a failed node by index and kind (its detail with -v,
        // which `exits_69_when_a_majority_of_nodes_is_down` checks end to end).
        assert_eq!(
            both.message,
            "`job` is held by another owner (2 of 5 nodes refused; node 2 still connecting; \
             1 failed: node 4 connection error (-v: each node's detail))"
        );
    }
}
