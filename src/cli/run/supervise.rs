//! COMMAND under a kept lock: the watchdog's lease, the signals relayed, and the stop
//! (SIGTERM, then SIGKILL) once the lock is lost.

use std::future::Future;
use std::process::ExitStatus;
use std::time::Duration;

use humantime::format_duration;
use nix::sys::signal::Signal;
use quorumlock::{LockHandle, LostReason};

use crate::cli::child::{exit_code, Relay, Running, Spec};
use crate::cli::exit::{lost_line, Failure, LOST};
use crate::cli::watchdog::Watchdog;

/// Runs COMMAND while a kept lock is held: stops it (SIGTERM, then SIGKILL after `grace`)
/// as soon as `lost` resolves, relays the signals quorumlock gets, and has a watchdog stop it
/// if quorumlock dies or stalls past the lease it gives the watchdog (`watchdog.rs`: the
/// lease ends 1.5 x grace before the validity of `lock`, and moves with each extension).
/// Returns COMMAND's exit code, or [`LOST`] when the lock was lost; the lock is left to the
/// caller to release. Shared by `run` and `elect`.
pub(in crate::cli) async fn supervise(
    spec: &Spec<'_>,
    grace: Duration,
    relay: &mut Relay,
    lock: &LockHandle,
    lost: impl Future<Output = LostReason>,
) -> Result<u8, Failure> {
    let lease = || lock.valid_until().checked_sub(grace * 3 / 2);
    // Started before the command, so that the command never runs unwatched.
    let mut watchdog = Watchdog::start(grace)?;
    let mut running = match spec.spawn() {
        Ok(running) => running,
        Err(failure) => {
            watchdog.dismiss();
            return Err(failure);
        }
    };
    // No await since the spawn: nothing else ran on this (single-threaded) runtime.
    watchdog.watch(running.watched());
    if let Some(until) = lease() {
        watchdog.lease(until);
    }
    // The lease moves after each extension: looked at twice per grace period, and the lock
    // is extended while more than half its ttl (over 4 x grace) is left.
    let mut renew = tokio::time::interval((grace / 2).max(Duration::from_millis(1)));
    renew.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);

    tokio::pin!(lost);
    let outcome = loop {
        tokio::select! {
            // A command that ended as the loss was signalled ended while the lock was valid.
            biased;
            status = running.child.wait() => break Ok(status),
            reason = &mut lost => break Err(reason),
            sig = relay.recv() => running.signal(sig),
            _ = renew.tick() => {
                if let Some(until) = lease() {
                    watchdog.lease(until);
                }
            }
        }
    };
    let stopped = match outcome {
        Ok(Ok(status)) => return ended(watchdog, spec, status),
        Ok(Err(e)) => format!("waiting for the command failed: {e}"),
        Err(reason) => format!(
            "lost the lock on `{}`: {}",
            spec.resource,
            lost_line(&reason)
        ),
    };
    // The lock is lost, or we no longer know whether the command runs: stop it.
    watchdog.stopping();
    let how = stop(&mut running, relay, grace).await;
    watchdog.dismiss();
    Err(Failure::new(LOST, format!("{stopped}; {how}")))
}

/// COMMAND ended on its own: its exit code, unless this process stalled past the lease it
/// gave the watchdog, which then stopped the command before the validity ended (the lock
/// may be gone).
fn ended(watchdog: Watchdog, spec: &Spec<'_>, status: ExitStatus) -> Result<u8, Failure> {
    if !watchdog.dismiss() {
        return Ok(exit_code(status));
    }
    Err(Failure::new(
        LOST,
        format!(
            "quorumlock stalled past the lease it gave its watchdog, which stopped the command \
             on `{}` before the lock's validity could end (the command {status})",
            spec.resource
        ),
    ))
}

/// Stops the command after the lock was lost: SIGTERM now, SIGKILL after `grace` if it has
/// not exited; whatever is left of its process group is killed once it has. Says what was
/// done.
async fn stop(running: &mut Running, relay: &mut Relay, grace: Duration) -> String {
    running.signal(Signal::SIGTERM);
    let deadline = tokio::time::sleep(grace);
    tokio::pin!(deadline);
    let exited = loop {
        tokio::select! {
            biased;
            // Exited (or waiting failed: then too, kill whatever is left).
            _ = running.child.wait() => break true,
            _ = &mut deadline => break false,
            sig = relay.recv() => running.signal(sig),
        }
    };
    if exited {
        running.kill_leftovers();
        return "the command was sent SIGTERM".to_string();
    }
    running.signal(Signal::SIGKILL);
    let _ = running.child.wait().await;
    format!(
        "the command was sent SIGTERM, then SIGKILL after {}",
        format_duration(grace)
    )
}
