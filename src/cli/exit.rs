//! Exit codes (from sysexits.h where one fits, as shells for commands that cannot run) and
//! the error that carries one to `main`.

use std::fmt;
use std::time::Duration;

use humantime::format_duration;
use quorumlock::{ConfigError, Error, RedLock};

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

impl From<Error> for Failure {
    fn from(error: Error) -> Failure {
        Failure::new(code_of(&error), error)
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
