//! `quorumlock run`: take a lock, run a command while keeping the lock alive, stop the
//! command before the lock's validity ends if the lock is lost, release the lock.

use std::time::{Duration, Instant};

use humantime::format_duration;
use quorumlock::{
    Access, ConfigError, Error, KeepAlive, KeptLock, Lock, Permit, RedLock, RwGuard, RwLock,
    Semaphore, MAX_PERMITS,
};

use super::child::{Relay, Spec};
use super::exit::{unavailable_for, Failure, UNAVAILABLE};
use super::options::{var_duration, Vars, MAX_TTL};

mod acquire;
mod after;
mod args;
mod supervise;

use acquire::{acquire, conflict, quarantined, Waiting};
pub(super) use after::shut_down;
use after::{hold, leave, release};
pub(crate) use args::RunArgs;
use args::Wait;
pub(super) use supervise::supervise;

/// The margin and grace period for a lock of `ttl`.
pub(super) fn grace_for(
    ttl: Duration,
    grace: Option<Duration>,
) -> Result<(Duration, KeepAlive), Failure> {
    let grace = grace.unwrap_or(ttl / 10);
    // KeepAlive's defaults extend when half the ttl is left; the loss signal must come
    // before that point, or it would fire while the lock is healthy.
    let margin = grace.saturating_mul(2);
    if grace.is_zero() || margin >= ttl / 2 {
        return Err(Failure::usage(format!(
            "--grace {} does not fit a {} ttl: twice the grace period must be under half the \
             ttl (the lock is extended when half of it is left)",
            format_duration(grace),
            format_duration(ttl)
        )));
    }
    Ok((grace, KeepAlive::new().margin(margin)))
}

pub(crate) async fn run(args: RunArgs) -> Result<u8, Failure> {
    if args.resource.is_empty() {
        return Err(ConfigError::EmptyResource.into());
    }
    if let Some(permits) = args.permits.filter(|n| !(1..=MAX_PERMITS).contains(n)) {
        return Err(ConfigError::InvalidPermits { permits }.into());
    }
    let env = Vars::from_env()?;
    let wait = args.wait(&env);
    let mut vars = args.vars(env);
    let mut builder = vars.builder()?;
    let mut config = builder.validate()?;
    let (grace, keep) = grace_for(config.ttl(), args.grace)?;
    let longer = args.hold_at_least.filter(|hold| *hold > config.max_ttl());
    if let Some(hold) = longer.filter(|_| !vars.is_set(MAX_TTL)) {
        // The longest ttl defaults to the ttl; the lock left for the hold lives longer.
        vars.set(MAX_TTL, var_duration(hold));
        builder = vars.builder()?;
        config = builder.validate()?;
    }
    if let Some(hold) = args.hold_at_least.filter(|hold| *hold > config.max_ttl()) {
        return Err(Failure::usage(format!(
            "--hold-at-least {} is longer than the longest ttl allowed, {} (QUORUMLOCK_MAX_TTL)",
            format_duration(hold),
            format_duration(config.max_ttl())
        )));
    }
    // Caught from now on: a Ctrl-C while waiting for the lock ends quorumlock cleanly.
    let mut relay = Relay::install()?;
    let redlock = builder.build()?;
    let target = match (args.permits, args.shared, args.exclusive) {
        (Some(permits), ..) => Target::Semaphore(redlock.semaphore(&args.resource, permits)?),
        (None, true, _) => Target::ReadWrite(redlock.rw_lock(&args.resource)?, Access::Read),
        (None, _, true) => Target::ReadWrite(redlock.rw_lock(&args.resource)?, Access::Write),
        _ => Target::Lock,
    };
    let mut left = None;
    let waiting = Waiting {
        wait,
        quiet: args.quiet,
        vars,
    };
    let outcome = locked(
        &redlock, &args, &target, &waiting, grace, keep, &mut relay, &mut left,
    )
    .await;
    match left {
        Some(lock) => leave(&redlock, lock).await,
        None => shut_down(&redlock, &args.resource).await,
    }
    outcome
}

/// What `run` takes: RESOURCE's lock, one permit of it as a semaphore (`--permits`), or a
/// side of it as a read-write lock (`--shared`, `--exclusive`).
#[derive(Debug)]
enum Target {
    Lock,
    Semaphore(Semaphore),
    ReadWrite(RwLock, Access),
}

/// What `run` holds before it keeps it alive.
#[derive(Debug)]
enum Taken {
    Lock(Lock),
    Permit(Permit),
    Side(RwGuard),
}

impl Taken {
    /// Kept alive from now on, with the permit's slot if it is one.
    fn keep_alive(self, keep: KeepAlive) -> Result<(KeptLock, Option<u32>), Error> {
        match self {
            Taken::Lock(lock) => Ok((lock.keep_alive(keep)?, None)),
            Taken::Permit(permit) => {
                let slot = permit.slot();
                Ok((permit.keep_alive(keep)?, Some(slot)))
            }
            Taken::Side(side) => Ok((side.keep_alive(keep)?, None)),
        }
    }
}

/// Takes the lock (or a permit), runs COMMAND under it and releases it.
#[allow(clippy::too_many_arguments)]
async fn locked(
    redlock: &RedLock,
    args: &RunArgs,
    target: &Target,
    waiting: &Waiting,
    grace: Duration,
    keep: KeepAlive,
    relay: &mut Relay,
    left: &mut Option<Lock>,
) -> Result<u8, Failure> {
    // A signal while waiting ends the wait at once: the attempt in flight is dropped (the
    // keys it set are released in the background, which `shut_down` waits for).
    let lock = tokio::select! {
        locked = acquire(redlock, &args.resource, target, waiting) => match locked {
            Ok(lock) => lock,
            Err(Error::Taken { .. }) if args.quiet => return Ok(args.conflict_exit_code),
            // Expected and temporary: a first deployment, a restart of a majority.
            Err(Error::NoQuorum { .. }) if args.quiet && quarantined(redlock) => {
                return Ok(UNAVAILABLE)
            }
            Err(e) => return Err(unavailable_for(redlock, conflict(e, args.conflict_exit_code))),
        },
        sig = relay.recv() => return Ok(128 + sig as u8),
    };
    let taken_at = Instant::now();
    let (kept, slot) = lock.keep_alive(keep)?;
    // The command gets the token in its environment, so it is asked for (and recorded on a
    // majority) before the command starts.
    let fencing_token = if redlock.config().fencing() {
        match kept.fencing_token().await {
            Ok(token) => Some(token),
            Err(e) => {
                release(kept).await;
                let message = format!("could not record a fencing token: {e}");
                return Err(Failure::new(UNAVAILABLE, message));
            }
        }
    } else {
        None
    };
    tracing::debug!(resource = %args.resource, ?slot, ?fencing_token, validity = ?kept.validity(), "locked");

    let spec = Spec {
        argv: &args.command,
        resource: &args.resource,
        fencing_token,
        term: None,
        slot,
        foreground: args.foreground,
    };
    let outcome = supervise(&spec, grace, relay, &kept.handle(), kept.lost()).await;
    let hold_until = (args.hold_at_least)
        .and_then(|hold| taken_at.checked_add(hold))
        .filter(|until| outcome.is_ok() && kept.is_held() && *until > Instant::now());
    match hold_until {
        Some(until) => *left = hold(redlock, kept, until).await,
        None => release(kept).await,
    }
    outcome
}
