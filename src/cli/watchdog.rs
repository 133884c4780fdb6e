//! The watchdog: a second `quorumlock` process that stops the command if `quorumlock run`
//! dies while the command runs.
//!
//! `run` stops the command before the lock's validity ends when the lock is lost, but only
//! while it is alive to do so. Killed (SIGKILL, the OOM killer) or aborted (a crash), it
//! would leave the command running with no one extending the lock, and a rival would take
//! the lock once it expires while the work goes on. So before the command starts, `run`
//! starts `quorumlock __watchdog` with a pipe on its stdin, and tells it the command's process
//! group (or, with `--foreground`, its process id) as soon as it exists. If the pipe reaches
//! its end before `run` has said `done`, its writer is gone: the watchdog sends SIGTERM to
//! the command, then SIGKILL after the grace period, as `run` would have done on a loss.
//!
//! The timing fits: `run` signals a loss at least twice the grace period before the validity
//! ends, so whenever it dies the lock is valid for at least that long, and the watchdog
//! kills the command within one grace period. The watchdog is in a process group of its own,
//! so that the keys typed at the terminal (which `run` relays) do not reach it. Linux's
//! `PR_SET_PDEATHSIG` would reach the command only, not its process group, and needs unsafe
//! code; a pipe's end is seen whatever way its writer died.
//!
//! A `run` that is alive but stalled (stopped with SIGSTOP, frozen by a debugger or a
//! cgroup freezer that spares its command, starved) would not stop the command either, and
//! its pipe stays open. So `run` also gives the watchdog a **lease**: a moment on the
//! machine's monotonic clock (`CLOCK_MONOTONIC`, one clock for every process), which `run`
//! moves forward after each extension of the lock. If the lease runs out before `done`, the
//! watchdog stops the command as on a loss. The lease ends 1.5 grace periods before the
//! lock's validity, half a grace period after `run` itself would have signalled the loss, so
//! a healthy `run` always acts first, and the watchdog's SIGKILL comes half a grace period
//! before the validity ends. Once `run` says `stopping` (it sent SIGTERM itself), an
//! expired lease only brings the SIGKILL, one grace period after the lease's end, if the
//! command has not ended by then.

use std::io::{self, BufRead, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use humantime::format_duration;
use nix::errno::Errno;
use nix::sys::signal::{self, Signal};
use nix::time::{clock_gettime, ClockId};
use nix::unistd::Pid;

use super::exit::{Failure, SOFTWARE};

/// The hidden subcommand that runs the watchdog.
pub(crate) const SUBCOMMAND: &str = "__watchdog";

/// The watchdog's exit status when it stopped the command because its lease ran out.
const STOPPED_ON_LEASE: u8 = 3;

/// Arguments of the hidden `__watchdog` subcommand (not for use by hand).
#[derive(Debug, clap::Args)]
pub(crate) struct WatchdogArgs {
    /// Time between SIGTERM and SIGKILL
    #[arg(long, value_parser = humantime::parse_duration)]
    grace: Duration,
}

/// What the watchdog signals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Watched {
    /// A process group, by its id.
    Group(Pid),
    /// One process.
    Process(Pid),
}

/// `run`'s end of the watchdog.
#[derive(Debug)]
pub(crate) struct Watchdog {
    process: Child,
    pipe: Option<ChildStdin>,
    /// The end of the last lease given.
    leased: Option<Instant>,
}

impl Watchdog {
    /// Starts the watchdog, with `grace` between its SIGTERM and its SIGKILL.
    ///
    /// # Errors
    /// Exit 70 if it cannot be started: the command is then not started either.
    pub(crate) fn start(grace: Duration) -> Result<Watchdog, Failure> {
        let failed =
            |e: io::Error| Failure::new(SOFTWARE, format!("cannot start the watchdog: {e}"));
        // This very binary, even if its file was replaced or removed since it started.
        let exe = if cfg!(target_os = "linux") {
            "/proc/self/exe".into()
        } else {
            std::env::current_exe().map_err(failed)?
        };
        let mut process = Command::new(exe)
            .arg(SUBCOMMAND)
            .arg("--grace")
            .arg(format_duration(grace).to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(failed)?;
        let pipe = process.stdin.take();
        Ok(Watchdog {
            process,
            pipe,
            leased: None,
        })
    }

    /// Tells the watchdog what to stop if `run` dies. Call right after the command started,
    /// with no await in between. A watchdog that has died already is not an error: the
    /// command runs as it would without one.
    pub(crate) fn watch(&mut self, target: Watched) {
        let line = match target {
            Watched::Group(pgid) => format!("group {pgid}\n"),
            Watched::Process(pid) => format!("process {pid}\n"),
        };
        self.say(&line);
    }

    /// Gives the watchdog a lease that ends at `until` (see the module's documentation):
    /// if `run` has not moved it forward nor said `done` by then, the watchdog stops the
    /// command. Only a lease that ends later than the last one is sent.
    pub(crate) fn lease(&mut self, until: Instant) {
        // Forward only: a lost lock's `valid_until` moves back to its loss signal, and `run`
        // then stops the command itself.
        if self.leased.is_some_and(|leased| until <= leased) {
            return;
        }
        let Some(now_ns) = monotonic_ns() else {
            return;
        };
        // Both clocks advance alike; a lease already over is one that ends now.
        let left = until.saturating_duration_since(Instant::now());
        let at = now_ns.saturating_add(u64::try_from(left.as_nanos()).unwrap_or(u64::MAX));
        self.leased = Some(until);
        self.say(&format!("until {at}\n"));
    }

    /// Tells the watchdog that `run` sent the command SIGTERM itself: an expired lease then
    /// only brings the SIGKILL.
    pub(crate) fn stopping(&mut self) {
        self.say("stopping\n");
    }

    /// Ends the watchdog without it signalling anything more: call once the command has
    /// been reaped, and before anything else can fail. Returns whether the watchdog stopped
    /// the command because its lease ran out (`run` was stalled past it).
    pub(crate) fn dismiss(mut self) -> bool {
        self.say("done\n");
        drop(self.pipe.take());
        // It exits as soon as it reads `done`.
        match self.process.wait() {
            Ok(status) => status.code() == Some(i32::from(STOPPED_ON_LEASE)),
            Err(e) => {
                tracing::debug!(error = %e, "waiting for the watchdog");
                false
            }
        }
    }

    fn say(&mut self, line: &str) {
        if let Some(pipe) = self.pipe.as_mut() {
            if let Err(e) = pipe.write_all(line.as_bytes()).and_then(|()| pipe.flush()) {
                tracing::warn!(error = %e, "the watchdog is gone");
            }
        }
    }
}

/// The watchdog process: reads its stdin until `done` (exit quietly), its end (stop the
/// command), or the end of its lease (stop the command, then wait for `done`).
pub(crate) fn watchdog(args: WatchdogArgs) -> Result<u8, Failure> {
    // A thread reads the pipe, so that the lease can run out while no line comes.
    let (lines, orders) = mpsc::channel();
    std::thread::spawn(move || {
        for line in io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let mut watched = None;
    let mut lease: Option<u64> = None;
    let mut stopping = false;
    loop {
        let line = match lease {
            None => orders.recv().map_err(|_| RecvTimeoutError::Disconnected),
            Some(until) => {
                let now = monotonic_ns().unwrap_or(u64::MAX);
                if now >= until {
                    break;
                }
                orders.recv_timeout(Duration::from_nanos(until - now))
            }
        };
        match line {
            Ok(line) => match parse(&line) {
                Some(WatchOrder::Done) => return Ok(0),
                Some(WatchOrder::Watch(target)) => watched = Some(target),
                Some(WatchOrder::Until(until)) => lease = Some(until),
                Some(WatchOrder::Stopping) => stopping = true,
                None => tracing::warn!(%line, "the watchdog ignores an unknown order"),
            },
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                if let Some(target) = watched {
                    eprintln!(
                        "quorumlock: the lock's holder died while the command ran: sending it \
                         SIGTERM, then SIGKILL after {}",
                        format_duration(args.grace)
                    );
                    stop(target, args.grace);
                }
                return Ok(0);
            }
        }
    }
    // The lease ran out: `run` is alive (its pipe is open) but did not renew it in time.
    if let Some(target) = watched {
        if stopping {
            eprintln!(
                "quorumlock: the lock's holder stalled while stopping the command: sending it \
                 SIGKILL after {}",
                format_duration(args.grace)
            );
            kill_after(target, args.grace);
        } else {
            eprintln!(
                "quorumlock: the lock's holder stalled (stopped or frozen?) and did not renew \
                 its lease in time: sending the command SIGTERM, then SIGKILL after {}",
                format_duration(args.grace)
            );
            stop(target, args.grace);
        }
    }
    // Wait for `run`'s `done` (or its end), so that it learns what happened from the status.
    while let Ok(line) = orders.recv() {
        if parse(&line) == Some(WatchOrder::Done) {
            break;
        }
    }
    Ok(STOPPED_ON_LEASE)
}

/// Now on `CLOCK_MONOTONIC`, in nanoseconds.
fn monotonic_ns() -> Option<u64> {
    let now = clock_gettime(ClockId::CLOCK_MONOTONIC).ok()?;
    let secs = u64::try_from(now.tv_sec()).ok()?;
    let nanos = u64::try_from(now.tv_nsec()).ok()?;
    secs.checked_mul(1_000_000_000)?.checked_add(nanos)
}

#[derive(Debug, PartialEq, Eq)]
enum WatchOrder {
    Watch(Watched),
    /// The lease ends at this moment of `CLOCK_MONOTONIC`, in nanoseconds.
    Until(u64),
    Stopping,
    Done,
}

fn parse(line: &str) -> Option<WatchOrder> {
    let pid = |n: &str| n.parse::<i32>().ok().filter(|n| *n > 1).map(Pid::from_raw);
    match line.trim().split_once(' ') {
        Some(("group", n)) => pid(n).map(|p| WatchOrder::Watch(Watched::Group(p))),
        Some(("process", n)) => pid(n).map(|p| WatchOrder::Watch(Watched::Process(p))),
        Some(("until", n)) => n.parse().ok().map(WatchOrder::Until),
        None if line.trim() == "done" => Some(WatchOrder::Done),
        None if line.trim() == "stopping" => Some(WatchOrder::Stopping),
        _ => None,
    }
}

/// SIGTERM, then SIGKILL after `grace` unless every process of the target has ended.
fn stop(target: Watched, grace: Duration) {
    send(target, Signal::SIGTERM);
    kill_after(target, grace);
}

/// SIGKILL after `grace` unless every process of the target has ended by then (it was sent
/// SIGTERM already).
fn kill_after(target: Watched, grace: Duration) {
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if ended(target) {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    send(target, Signal::SIGKILL);
}

fn send(target: Watched, sig: Signal) {
    let sent = match target {
        Watched::Group(pgid) => signal::killpg(pgid, sig),
        Watched::Process(pid) => signal::kill(pid, sig),
    };
    if let Err(e) = sent {
        if e != Errno::ESRCH {
            eprintln!("quorumlock: the watchdog could not send {sig} to the command: {e}");
        }
    }
}

/// Whether no process of the target is left (a zombie that nobody reaped yet has ended).
fn ended(target: Watched) -> bool {
    match target {
        Watched::Group(pgid) => signal::killpg(pgid, None) == Err(Errno::ESRCH),
        Watched::Process(pid) => signal::kill(pid, None) == Err(Errno::ESRCH) || is_zombie(pid),
    }
}

fn is_zombie(pid: Pid) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            stat.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_its_orders() {
        let group = WatchOrder::Watch(Watched::Group(Pid::from_raw(42)));
        assert_eq!(parse("group 42"), Some(group));
        let process = WatchOrder::Watch(Watched::Process(Pid::from_raw(7)));
        assert_eq!(parse("process 7\n"), Some(process));
        assert_eq!(parse("done"), Some(WatchOrder::Done));
        assert_eq!(parse("stopping"), Some(WatchOrder::Stopping));
        assert_eq!(
            parse("until 123456789"),
            Some(WatchOrder::Until(123_456_789))
        );
        // Never every process (-1), nor init, nor garbage.
        for bad in [
            "group -1",
            "group 1",
            "group 0",
            "process x",
            "",
            "kill 9",
            "until -1",
            "until soon",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }
}
