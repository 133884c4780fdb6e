//! The command run under the lock: spawning it, signalling it (or its process group), and
//! relaying the signals that quorumlock itself receives.
//!
//! By default the command is the leader of a new process group, and every signal goes to the
//! whole group: when the lock is lost, a shell command's pipelines and background jobs are
//! stopped too, not only the shell. The price, as for `timeout(1)`, is that the command is
//! not in the terminal's foreground group: it cannot read from the terminal (SIGTTIN), and
//! the keys typed at the terminal (Ctrl-C, Ctrl-\) reach quorumlock only, which relays them.
//! `--foreground` keeps the command in quorumlock's group for interactive use; then only the
//! command itself is signalled, and processes it started are not stopped when the lock is
//! lost.

use std::ffi::OsString;
use std::future::poll_fn;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::task::Poll;

use nix::errno::Errno;
use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use tokio::signal::unix::{signal as listen, SignalKind};

use super::exit::{Failure, CANNOT_EXECUTE, NOT_FOUND, SOFTWARE};
use super::watchdog::Watched;

/// The variable that carries the locked resource's name to the command.
pub(crate) const RESOURCE_VAR: &str = "QUORUMLOCK_RESOURCE";
/// The variable that carries the fencing token (decimal) to the command, when fencing is on.
pub(crate) const FENCING_VAR: &str = "QUORUMLOCK_FENCING_TOKEN";

/// The variable that carries the slot of the permit held (decimal, 0 to N-1) to the command
/// run by `run --permits N`.
pub(crate) const SLOT_VAR: &str = "QUORUMLOCK_SLOT";

/// The variable that carries the term (decimal) to the command run by `elect`.
pub(crate) const TERM_VAR: &str = "QUORUMLOCK_TERM";

/// The signals quorumlock relays to the command instead of dying from them.
const RELAYED: [Signal; 4] = [
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGQUIT,
];

/// What to spawn.
#[derive(Debug)]
pub(crate) struct Spec<'a> {
    pub(crate) argv: &'a [OsString],
    pub(crate) resource: &'a str,
    pub(crate) fencing_token: Option<u64>,
    /// The term of a leadership (`elect`), exported as [`TERM_VAR`].
    pub(crate) term: Option<u64>,
    /// The slot of a semaphore's permit (`run --permits`), exported as [`SLOT_VAR`].
    pub(crate) slot: Option<u32>,
    /// Keep the command in our process group (and signal it alone).
    pub(crate) foreground: bool,
}

/// A running command and where its signals go.
#[derive(Debug)]
pub(crate) struct Running {
    pub(crate) child: Child,
    target: SignalTarget,
}

#[derive(Debug, Clone, Copy)]
enum SignalTarget {
    /// The command leads its own process group, with this id (its pid).
    Group(Pid),
    /// The command alone.
    Process(Pid),
}

impl Spec<'_> {
    /// Starts the command with stdin, stdout and stderr inherited.
    ///
    /// # Errors
    /// Exit 127 when the program is not found, 126 when it cannot be executed.
    pub(crate) fn spawn(&self) -> Result<Running, Failure> {
        let (program, args) = self
            .argv
            .split_first()
            .ok_or_else(|| Failure::usage("no command to run"))?;
        let mut command = Command::new(program);
        command.args(args).env(RESOURCE_VAR, self.resource);
        match self.fencing_token {
            Some(token) => command.env(FENCING_VAR, token.to_string()),
            // Not one inherited from an outer quorumlock either.
            None => command.env_remove(FENCING_VAR),
        };
        match self.term {
            Some(term) => command.env(TERM_VAR, term.to_string()),
            None => command.env_remove(TERM_VAR),
        };
        match self.slot {
            Some(slot) => command.env(SLOT_VAR, slot.to_string()),
            None => command.env_remove(SLOT_VAR),
        };
        if !self.foreground {
            command.process_group(0);
        }
        let shown = program.to_string_lossy();
        let child = command.spawn().map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => {
                Failure::new(NOT_FOUND, format!("{shown}: command not found"))
            }
            _ => Failure::new(CANNOT_EXECUTE, format!("{shown}: cannot execute: {e}")),
        })?;
        let pid = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .map(Pid::from_raw)
            .ok_or_else(|| Failure::new(SOFTWARE, "the command's process id is unknown"))?;
        let target = if self.foreground {
            SignalTarget::Process(pid)
        } else {
            SignalTarget::Group(pid)
        };
        Ok(Running { child, target })
    }
}

impl Running {
    /// What a watchdog must stop if quorumlock dies.
    pub(crate) fn watched(&self) -> Watched {
        match self.target {
            SignalTarget::Group(pgid) => Watched::Group(pgid),
            SignalTarget::Process(pid) => Watched::Process(pid),
        }
    }

    /// Sends `sig` to the command (its process group by default). Call only before the
    /// command has been reaped (before `child.wait()` returned), so that the id cannot have
    /// been reused; a group that has no process left is not an error.
    pub(crate) fn signal(&self, sig: Signal) {
        let sent = match self.target {
            SignalTarget::Group(pgid) => signal::killpg(pgid, sig),
            SignalTarget::Process(pid) => signal::kill(pid, sig),
        };
        match sent {
            Ok(()) | Err(Errno::ESRCH) => {
                tracing::debug!(?sig, target = ?self.target, "signalled the command")
            }
            Err(e) => {
                tracing::warn!(?sig, target = ?self.target, error = %e, "could not signal the command")
            }
        }
    }

    /// Sends SIGKILL to whatever is left of the command's process group, after the command
    /// itself has exited (in `--foreground` mode there is nothing to do). Call right after
    /// `child.wait()` returned: the group's id is its leader's pid, just reaped, which the
    /// kernel does not reuse while any process of the group is left; with none left, only a
    /// process started since and made a group leader at once could have it.
    pub(crate) fn kill_leftovers(&self) {
        if let SignalTarget::Group(pgid) = self.target {
            match signal::killpg(pgid, Signal::SIGKILL) {
                Ok(()) => tracing::debug!(?pgid, "killed what was left of the process group"),
                Err(Errno::ESRCH) => {}
                Err(e) => tracing::warn!(?pgid, error = %e, "could not kill the process group"),
            }
        }
    }
}

/// The exit code of a finished command, as shells report it: its own code, or 128 + the
/// signal that killed it.
pub(crate) fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(u8::MAX),
        (None, Some(sig)) => u8::try_from(128 + (sig & 0x7f)).unwrap_or(u8::MAX),
        (None, None) => SOFTWARE,
    }
}

/// The signals quorumlock relays, caught from now on (instead of killing quorumlock).
#[derive(Debug)]
pub(crate) struct Relay {
    listeners: Vec<(Signal, tokio::signal::unix::Signal)>,
}

impl Relay {
    /// Installs the handlers, except for the signals that quorumlock was started with
    /// ignored (`nohup`, a background job of a non-interactive shell): those stay ignored,
    /// and the command inherits that.
    ///
    /// # Errors
    /// Exit 70 if the OS refuses a handler.
    pub(crate) fn install() -> Result<Relay, Failure> {
        let ignored = ignored_signals();
        let listeners = RELAYED
            .into_iter()
            .filter(|sig| ignored & (1 << (*sig as i32 - 1)) == 0)
            .map(|sig| {
                listen(SignalKind::from_raw(sig as i32))
                    .map(|listener| (sig, listener))
                    .map_err(|e| Failure::new(SOFTWARE, format!("cannot handle {sig}: {e}")))
            })
            .collect::<Result<_, _>>()?;
        Ok(Relay { listeners })
    }

    /// The next signal received. Cancel-safe.
    pub(crate) async fn recv(&mut self) -> Signal {
        poll_fn(|cx| {
            for (sig, listener) in &mut self.listeners {
                if listener.poll_recv(cx).is_ready() {
                    return Poll::Ready(*sig);
                }
            }
            Poll::Pending
        })
        .await
    }
}

/// The signals this process ignores, as a mask (bit N-1 for signal N), from Linux's
/// /proc/self/status (no unsafe `sigaction` call needed). Elsewhere, none.
fn ignored_signals() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find_map(|l| l.strip_prefix("SigIgn:"))?;
            u64::from_str_radix(line.trim(), 16).ok()
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_are_reported_as_shells_do() {
        assert_eq!(exit_code(ExitStatus::from_raw(0)), 0);
        assert_eq!(exit_code(ExitStatus::from_raw(7 << 8)), 7);
        assert_eq!(exit_code(ExitStatus::from_raw(255 << 8)), 255);
        assert_eq!(exit_code(ExitStatus::from_raw(Signal::SIGTERM as i32)), 143);
        assert_eq!(exit_code(ExitStatus::from_raw(Signal::SIGKILL as i32)), 137);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn reads_the_ignored_signals() {
        // The Rust runtime ignores SIGPIPE.
        assert_ne!(ignored_signals() & (1 << (Signal::SIGPIPE as i32 - 1)), 0);
        assert_eq!(ignored_signals() & (1 << (Signal::SIGTERM as i32 - 1)), 0);
    }
}
