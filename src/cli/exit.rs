//! Exit codes (from sysexits.h where one fits, as shells for commands that cannot run) and
//! the error that carries one to `main`.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use humantime::format_duration;
use quorumlock::{ConfigError, Error, LostReason, NodeError, RedLock};

/// Nothing to report: `leader` found no leader (as grep and pgrep when nothing matches).
pub(crate) const NO_LEADER: u8 = 1;
/// Bad usage or configuration: a flag, a URL, a duration, an empty resource, a resource
/// asked for as the wrong kind (EX_USAGE).
pub(crate) const USAGE: u8 = 64;
/// No quorum of nodes could be reached, or it answered too late (EX_UNAVAILABLE).
pub(crate) const UNAVAILABLE: u8 = 69;
/// Anything unexpected: the OS refused a runtime, a signal handler, ... (EX_SOFTWARE).
pub(crate) const SOFTWARE: u8 = 70;
/// An output file could not be written: man pages, completions (EX_CANTCREAT).
pub(crate) const CANNOT_CREATE: u8 = 73;
/// The resource is held elsewhere (EX_TEMPFAIL: try again later).
pub(crate) const TAKEN: u8 = 75;
/// The lock was lost while the command ran; the command was stopped.
pub(crate) const LOST: u8 = 76;
/// The command was found but could not be executed (as shells do).
pub(crate) const CANNOT_EXECUTE: u8 = 126;
/// The command was not found (as shells do).
pub(crate) const NOT_FOUND: u8 = 127;

/// A failure to report on stderr as one line, `quorumlock: {message}`, with its exit code.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) code: u8,
    pub(crate) message: String,
}

impl Failure {
    pub(crate) fn new(code: u8, message: impl fmt::Display) -> Failure {
        Failure {
            code,
            message: message.to_string(),
        }
    }

    pub(crate) fn usage(message: impl fmt::Display) -> Failure {
        Failure::new(USAGE, message)
    }
}

/// The exit code for a library error.
pub(crate) fn code_of(error: &Error) -> u8 {
    match error {
        Error::Taken { .. } => TAKEN,
        Error::NoQuorum { .. } | Error::ValidityExpired { .. } => UNAVAILABLE,
        Error::Lost { .. } => LOST,
        // A resource asked for as the wrong kind (a lock's name as a semaphore, or another
        // number of permits): the command line's mistake, and nothing was changed.
        Error::Config(_) | Error::KindMismatch { .. } => USAGE,
        _ => SOFTWARE,
    }
}

/// Whether a failure names each node with its URL and the whole reason (`-v`), or only its
/// index and the kind of failure: one line that fits a cron mail.
static DETAIL: AtomicBool = AtomicBool::new(false);

/// Names each failed node in full from now on (`-v`).
pub(crate) fn name_nodes_in_full(detail: bool) {
    DETAIL.store(detail, Ordering::Relaxed);
}

/// The failed nodes of a round on one line: with `-v`, each with its URL and reason, as the
/// library says them; otherwise by index, grouped by the kind of failure, the groups and the
/// indexes in each in ascending order (whatever order the nodes failed in):
/// `nodes 0, 1 quarantined; node 2 timeout (-v: each node's detail)`.
pub(crate) fn nodes_line(failures: &[NodeError]) -> String {
    if DETAIL.load(Ordering::Relaxed) {
        let each: Vec<String> = failures.iter().map(ToString::to_string).collect();
        return each.join("; ");
    }
    let mut sorted: Vec<&NodeError> = failures.iter().collect();
    sorted.sort_by_key(|failure| failure.index);
    let mut kinds: Vec<(String, Vec<usize>)> = Vec::new();
    for failure in sorted {
        let kind = failure.kind.to_string();
        match kinds.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, indexes)) => indexes.push(failure.index),
            None => kinds.push((kind, vec![failure.index])),
        }
    }
    let groups: Vec<String> = kinds
        .into_iter()
        .map(|(kind, indexes)| {
            let nodes = if indexes.len() == 1 { "node" } else { "nodes" };
            let indexes: Vec<String> = indexes.iter().map(usize::to_string).collect();
            format!("{nodes} {} {kind}", indexes.join(", "))
        })
        .collect();
    match groups.is_empty() {
        true => String::new(),
        false => format!("{} (-v: each node's detail)", groups.join("; ")),
    }
}

/// Why a lock was lost, on one line: an extension's failed nodes by index (`-v`: in full,
/// as the library says them).
pub(crate) fn lost_line(reason: &LostReason) -> String {
    match reason {
        LostReason::NotExtended { failures, .. }
            if !failures.is_empty() && !DETAIL.load(Ordering::Relaxed) =>
        {
            format!("it could not be extended in time: {}", nodes_line(failures))
        }
        reason => reason.to_string(),
    }
}

impl From<Error> for Failure {
    fn from(error: Error) -> Failure {
        let code = code_of(&error);
        match error {
            Error::NoQuorum {
                resource,
                needed,
                agreed,
                failures,
                ..
            } => Failure::new(
                code,
                format!(
                    "no quorum for `{resource}`: {agreed} of {needed} needed nodes agreed; {}",
                    nodes_line(&failures)
                ),
            ),
            Error::Lost { resource, reason } => Failure::new(
                code,
                format!("the lock on `{resource}` was lost: {}", lost_line(&reason)),
            ),
            error => Failure::new(code, error),
        }
    }
}

impl From<ConfigError> for Failure {
    fn from(error: ConfigError) -> Failure {
        Failure::usage(error)
    }
}

/// Whole seconds, rounded up, for messages: a wait of 1.2 s says 2s.
pub(crate) fn whole_secs(d: Duration) -> Duration {
    let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    Duration::from_secs(secs)
}

/// A failure to lock while quarantine keeps the nodes from a quorum, with when to try again.
pub(crate) fn unavailable_for(redlock: &RedLock, failure: Failure) -> Failure {
    match redlock.quarantine_left().filter(|left| !left.is_zero()) {
        Some(left) if failure.code == UNAVAILABLE => Failure::new(
            failure.code,
            format!(
                "{}; the nodes' quarantine ends in {}: try again then",
                failure.message,
                format_duration(whole_secs(left))
            ),
        ),
        _ => failure,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quorumlock::NodeErrorKind;

    fn failed(index: usize, kind: NodeErrorKind) -> NodeError {
        NodeError {
            index,
            node: format!("redis://127.0.0.1:{}", 7000 + index),
            kind,
            message: kind.to_string(),
        }
    }

    #[test]
    fn names_the_nodes_in_ascending_order_whatever_order_they_failed_in() {
        let failures = [
            failed(2, NodeErrorKind::Timeout),
            failed(1, NodeErrorKind::Unchecked),
            failed(0, NodeErrorKind::Timeout),
        ];
        assert_eq!(
            nodes_line(&failures),
            "nodes 0, 2 timeout; node 1 not checked yet (-v: each node's detail)"
        );
        assert_eq!(nodes_line(&[]), "");
    }
}
