//! The lock once COMMAND ended: kept until `--hold-at-least` and left to expire, or
//! released; and the client shut down on every way out.

use std::time::Instant;

use quorumlock::{KeptLock, Lock, RedLock};

/// The way out when `--hold-at-least` leaves `lock` to expire by its ttl: waits for the
/// commands still in flight (as `shut_down` does), but releases nothing.
pub(super) async fn leave(redlock: &RedLock, lock: Lock) {
    tracing::debug!(resource = %lock.resource(), validity = ?lock.validity(), "left to expire");
    lock.leave();
    if !redlock.settle(redlock.config().node_timeout() * 2).await {
        tracing::debug!("some nodes did not answer in time");
    }
}

/// Every way out once the client is built: releases whatever it still holds (a lock taken
/// as a signal came, the cleanup of a cancelled attempt) and waits for the nodes, all of
/// them (a release returns at a majority and finishes the others in the background, which
/// an exiting process would cut short), so that no key outlives the process.
pub(in crate::cli) async fn shut_down(redlock: &RedLock, resource: &str) {
    let shutdown = redlock.shutdown().await;
    if !shutdown.settled {
        tracing::debug!(%resource, "some nodes did not confirm the release in time");
    }
}

/// `--hold-at-least`: COMMAND ended before `until`, and the lock must stay taken until then.
/// Returns the lock to leave to expire at `until`; or `None` once the lock is released: at
/// `until` when only a few node timeouts were left, or at once after a warning if it could
/// not be kept that long.
///
/// The keeper hands the lock back ([`KeptLock::into_lock`]), which is extended one last time
/// to end at `until` and then left to expire ([`Lock::leave`]).
pub(super) async fn hold(redlock: &RedLock, kept: KeptLock, until: Instant) -> Option<Lock> {
    let resource = kept.resource().to_string();
    let warn = |why: String| {
        eprintln!(
            "quorumlock: warning: could not keep the lock on `{resource}` for --hold-at-least \
             ({why}); released it"
        );
    };
    let config = redlock.config();
    if until.saturating_duration_since(Instant::now()) <= config.node_timeout() * 4 {
        // Too little time left for an extension to be worth it (its validity would be
        // shorter than a few node timeouts): kept until then, then released.
        tokio::time::sleep_until(tokio::time::Instant::from_std(until)).await;
        release(kept).await;
        return None;
    }
    let mut lock = match kept.into_lock().await {
        Ok(lock) => lock,
        Err(e) => {
            warn(e.to_string());
            return None;
        }
    };
    let rest = until.saturating_duration_since(Instant::now());
    match lock.extend_for(rest).await {
        Ok(validity) => {
            tracing::debug!(%resource, ?validity, "held until --hold-at-least ends");
            Some(lock)
        }
        Err(e) => {
            if let Err(e) = lock.release().await {
                tracing::debug!(%resource, error = %e, "release after the failed extension");
            }
            warn(format!("extending it failed: {e}"));
            None
        }
    }
}

/// Releases the lock (the client's shutdown then waits for the nodes that had not answered).
/// A failure leaves keys that expire by themselves: worth a warning when the lock was still
/// held, not an error.
pub(super) async fn release(kept: KeptLock) {
    let resource = kept.resource().to_string();
    let held = kept.is_held();
    match kept.release().await {
        Ok(released) => tracing::debug!(%resource, ?released, "released"),
        Err(e) if held => eprintln!(
            "quorumlock: warning: could not release the lock on `{resource}` ({e}); its keys \
             expire by themselves"
        ),
        Err(e) => tracing::debug!(%resource, error = %e, "release after the loss"),
    }
}
