//! `quorumlock run`: take a lock, run a command while keeping the lock alive, stop the
//! command before the lock's validity ends if the lock is lost, release the lock.

use std::ffi::OsString;
use std::future::Future;
use std::time::{Duration, Instant};

use clap::Args;
use humantime::format_duration;
use nix::sys::signal::Signal;
use quorumlock::{
    Access, ConfigError, Error, KeepAlive, KeptLock, Lock, LockHandle, LostReason, NodeError,
    NodeErrorKind, Permit, RedLock, Retry, RwGuard, RwLock, Semaphore, ENV_VARS, MAX_PERMITS,
};

use super::child::{exit_code, Relay, Running, Spec};
use super::exit::{unavailable_for, whole_secs, Failure, LOST, TAKEN, UNAVAILABLE};
use super::options::{
    flag_duration, positive_duration, var_duration, NodesArg, Vars, MAX_TTL, NODES, RETRY_ATTEMPTS,
    RETRY_DELAY, RETRY_WITHIN, TTL,
};
use super::watchdog::Watchdog;

/// `quorumlock run`.
#[derive(Debug, Args)]
#[command(after_long_help = after_help())]
pub(crate) struct RunArgs {
    #[command(flatten)]
    nodes: NodesArg,

    /// How long the lock's keys live unless extended; while COMMAND runs the lock is
    /// extended, every ttl/2 [default: $QUORUMLOCK_TTL, or 10s as in the library]
    #[arg(long, value_name = "DURATION", value_parser = positive_duration)]
    ttl: Option<Duration>,

    /// How long to keep trying, with random pauses, while the resource is held elsewhere
    /// or no quorum answers; 0 makes one attempt [default: $QUORUMLOCK_RETRY_WITHIN or
    /// $QUORUMLOCK_RETRY_ATTEMPTS, or wait until the lock is free, as flock(1) does]
    #[arg(short, long, value_name = "DURATION", value_parser = flag_duration)]
    wait: Option<Duration>,

    /// Make one attempt and fail at once if the resource is held elsewhere, whatever
    /// $QUORUMLOCK_RETRY_* say (as --wait 0)
    #[arg(short, long, conflicts_with = "wait")]
    nonblock: bool,

    /// The exit status when the resource is held elsewhere (still, after --wait), 0 to 255
    #[arg(short = 'E', long, value_name = "N", default_value_t = TAKEN)]
    conflict_exit_code: u8,

    /// Print nothing when the resource is held elsewhere (with -n, or still after --wait),
    /// or while the nodes' quarantine, whose end they tell, keeps them from a quorum (exit
    /// 69), so that a cron job that skips a run mails nothing; other errors are still printed
    #[arg(short, long)]
    quiet: bool,

    /// Keep other hosts from running COMMAND again until this long after the lock was taken
    /// (ShedLock's lockAtLeastFor): if COMMAND ends sooner, the lock is left to expire then
    /// instead of being released, and quorumlock exits; positive, and at most
    /// $QUORUMLOCK_MAX_TTL if set (else the longest ttl allowed is raised to it) [default:
    /// released when COMMAND ends]
    #[arg(long, value_name = "DURATION", value_parser = positive_duration)]
    hold_at_least: Option<Duration>,

    /// If the lock is lost, COMMAND gets SIGTERM at least 2 x grace before the lock's
    /// validity ends, and SIGKILL grace later; 2 x grace must be under ttl/2 [default: ttl/10]
    #[arg(long, value_name = "DURATION", value_parser = positive_duration)]
    grace: Option<Duration>,

    /// Hold one of N permits of RESOURCE, a semaphore, instead of its lock: at most N
    /// COMMANDs run at once across every host (a distributed `sem`); COMMAND gets its slot,
    /// 0 to N-1, in $QUORUMLOCK_SLOT. Every user of RESOURCE must give the same N
    #[arg(long, value_name = "N", conflicts_with_all = ["shared", "exclusive"])]
    permits: Option<u32>,

    /// Take RESOURCE as a read-write lock, on its shared (read) side: any number of
    /// COMMANDs with --shared run at once, never beside one with --exclusive
    #[arg(long, conflicts_with = "exclusive")]
    shared: bool,

    /// Take RESOURCE as a read-write lock, on its exclusive (write) side: alone, and before
    /// --shared COMMANDs that arrive while it waits (writers first)
    #[arg(long)]
    exclusive: bool,

    /// Run COMMAND in quorumlock's process group, so that it can read from the terminal;
    /// signals then go to COMMAND only, not to the processes it starts
    #[arg(long)]
    foreground: bool,

    /// The resource to lock: its Redis key, after $QUORUMLOCK_KEY_PREFIX
    #[arg(value_name = "RESOURCE")]
    resource: String,

    /// The command to run while holding the lock, and its arguments: from COMMAND on,
    /// everything is COMMAND's, options included (`run job ls -l` runs `ls -l`); a `--`
    /// before COMMAND is optional
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMMAND"
    )]
    command: Vec<OsString>,
}

/// The default wait: until the lock is free. The library has no unbounded retry, so it is a
/// year (humantime's, 365.25 days), which no scheduled job waits out.
const FOREVER: Duration = Duration::from_secs(31_557_600);

/// The pause between attempts of a wait without a bound, unless $QUORUMLOCK_RETRY_DELAY says
/// otherwise: releases wake the waiter at once, so the pause matters only for a lock that
/// expired without a release.
const FOREVER_PAUSE: Duration = Duration::from_secs(1);

/// How `run` tries to take the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// One attempt (`-n`, `-w 0`).
    Once,
    /// Retries for this long (`-w`).
    Within(Duration),
    /// As `QUORUMLOCK_RETRY_WITHIN` or `QUORUMLOCK_RETRY_ATTEMPTS` say.
    FromEnv,
    /// Until the lock is free (the default): the first attempt's errors but "held
    /// elsewhere" end the run at once, so that an unreachable quorum or a TLS mistake is
    /// reported instead of waited out; after that, every error is retried.
    Forever,
}

/// The long help's epilogue, with the library's variables listed from [`ENV_VARS`].
fn after_help() -> String {
    let mut lines = vec![String::new()];
    for (i, var) in ENV_VARS.iter().enumerate() {
        let end = if i + 1 == ENV_VARS.len() { '.' } else { ',' };
        let item = format!("{var}{end}");
        let line = lines.last_mut().filter(|l| l.len() + item.len() < 90);
        match line {
            Some(line) if !line.is_empty() => line.push_str(&format!(" {item}")),
            Some(line) => line.push_str(&item),
            None => lines.push(item),
        }
    }
    let vars = lines.join("\n  ");
    format!(
        "\
Without -n or --wait (nor $QUORUMLOCK_RETRY_WITHIN or $QUORUMLOCK_RETRY_ATTEMPTS), run waits
until the lock is free, as flock(1), etcdctl lock and consul lock do, so that scripts written
for them keep their meaning: it waits for the holder's release message (and tries again after
each retry pause, for a holder that died: 1s unless $QUORUMLOCK_RETRY_DELAY is set). A first attempt that fails for another reason
than the lock being held (no quorum reachable) ends it at once. A scheduled job that must
not pile up behind a long run uses -n (skip, quietly with -q -E 0) or --wait to bound the
wait. SIGINT, SIGTERM or SIGHUP while waiting end the wait at once (exit 128+N), releasing
whatever the attempt in flight had set.

Durations on the command line are humantime strings (500ms, 10s, 2m, 1h 30m) or a bare
number of seconds, as in flock(1): -w 5, -w 0.5, --ttl 30. The QUORUMLOCK_* variables are
the library's and need a unit: QUORUMLOCK_TTL=30s, not 30.

COMMAND runs with stdin, stdout and stderr inherited, and with QUORUMLOCK_RESOURCE and
QUORUMLOCK_FENCING_TOKEN (decimal, greater than every token handed out for the resource
before; unset when fencing is off) added to its environment. The lock is released when COMMAND ends.

With --permits N, RESOURCE is a semaphore: run holds one of its N permits instead of its
lock, waits (or not) as above until one is free, keeps it alive and releases it as a lock,
and adds QUORUMLOCK_SLOT (the permit's slot, 0 to N-1: no two holders have the same) to
COMMAND's environment. The fencing token is the semaphore's, one counter for all its
permits: greater than every token of the semaphore handed out before run asked for it (a
permit taken later may ask first and get a smaller one), increasing per slot, and never the
same as another permit's (its remainder modulo 1024 is the slot). A RESOURCE in use as a
lock, or as a semaphore of another N, is refused (exit 64) and nothing is changed on any
node.

With --shared or --exclusive, RESOURCE is a read-write lock: COMMANDs with --shared run
together, one with --exclusive runs alone, and a waiting --exclusive goes before --shared
COMMANDs that arrive after it. A RESOURCE in use as another kind is refused (exit 64)
and nothing is changed on any node.

COMMAND leads a new process group, and signals go to the whole group: SIGTERM and SIGKILL
when the lock is lost (and then also to whatever is left of the group after COMMAND exits),
and SIGINT, SIGTERM, SIGHUP and SIGQUIT received by quorumlock, which relays them and waits
for COMMAND (signals that quorumlock was started with ignored, as under nohup, stay
ignored). As with timeout(1), COMMAND is then not in the terminal's foreground: use
--foreground for a command that reads from the terminal.

Exit status:
  COMMAND's  COMMAND ran and the lock was held throughout (128+N if killed by signal N)
  64         usage or configuration error; with --permits, RESOURCE in use as a lock or as
             a semaphore of another number of permits
  69         no quorum of nodes could be reached, or it answered too late
  70         internal error
  75         the resource is held elsewhere (with -n, or still after --wait);
             --conflict-exit-code changes it, --quiet prints nothing then
  76         the lock was lost while COMMAND ran; COMMAND was stopped before the lock's
             validity ended
  126, 127   COMMAND cannot be executed, or was not found
  128+N      quorumlock got signal N before COMMAND started

The library's variables apply (see its README); flags override them:
  {vars}

Example:
  QUORUMLOCK_NODES=redis://a:6379,redis://b:6379,redis://c:6379 \\
    quorumlock run --ttl 1m --wait 10 nightly-report ./report.sh --all
  At most 4 exports at once across the fleet (a distributed sem):
    quorumlock run --permits 4 exports ./export.sh
  In a crontab, skipping a run while another host has it, silently:
    quorumlock run -n -q -E 0 nightly-report ./report.sh"
    )
}

impl RunArgs {
    /// How this run waits for the lock, given the environment's variables.
    fn wait(&self, vars: &Vars) -> Wait {
        match (self.nonblock, self.wait) {
            (true, _) => Wait::Once,
            (false, Some(d)) if d.is_zero() => Wait::Once,
            (false, Some(d)) => Wait::Within(d),
            _ if vars.is_set(RETRY_WITHIN) || vars.is_set(RETRY_ATTEMPTS) => Wait::FromEnv,
            _ => Wait::Forever,
        }
    }

    /// The variables this run uses: flags over the environment over the defaults.
    fn vars(&self, mut vars: Vars) -> Vars {
        vars.flag(NODES, self.nodes.nodes.clone());
        vars.flag(TTL, self.ttl.map(var_duration));
        match self.wait(&vars) {
            Wait::Once => {
                vars.unset(RETRY_WITHIN);
                vars.set(RETRY_ATTEMPTS, "1");
            }
            Wait::Within(d) => {
                vars.unset(RETRY_ATTEMPTS);
                vars.set(RETRY_WITHIN, var_duration(d));
            }
            Wait::FromEnv => {}
            Wait::Forever => {
                vars.set(RETRY_WITHIN, var_duration(FOREVER));
                // A waiter is woken by the release message; the pause only bounds how late
                // it notices a holder that vanished without releasing (its key expired).
                if !vars.is_set(RETRY_DELAY) {
                    vars.set(RETRY_DELAY, var_duration(FOREVER_PAUSE));
                }
            }
        }
        vars
    }
}

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

/// The way out when `--hold-at-least` leaves `lock` to expire by its ttl: waits for the
/// commands still in flight (as `shut_down` does), but releases nothing.
async fn leave(redlock: &RedLock, lock: Lock) {
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
pub(super) async fn shut_down(redlock: &RedLock, resource: &str) {
    let shutdown = redlock.shutdown().await;
    if !shutdown.settled {
        tracing::debug!(%resource, "some nodes did not confirm the release in time");
    }
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

/// `--hold-at-least`: COMMAND ended before `until`, and the lock must stay taken until then.
/// Returns the lock to leave to expire at `until`; or `None` once the lock is released: at
/// `until` when only a few node timeouts were left, or at once after a warning if it could
/// not be kept that long.
///
/// The keeper hands the lock back ([`KeptLock::into_lock`]), which is extended one last time
/// to end at `until` and then left to expire ([`Lock::leave`]).
async fn hold(redlock: &RedLock, kept: KeptLock, until: Instant) -> Option<Lock> {
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

/// Runs COMMAND while a kept lock is held: stops it (SIGTERM, then SIGKILL after `grace`)
/// as soon as `lost` resolves, relays the signals quorumlock gets, and has a watchdog stop it
/// if quorumlock dies or stalls past the lease it gives the watchdog (`watchdog.rs`: the
/// lease ends 1.5 x grace before the validity of `lock`, and moves with each extension).
/// Returns COMMAND's exit code, or [`LOST`] when the lock was lost; the lock is left to the
/// caller to release. Shared by `run` and `elect`.
pub(super) async fn supervise(
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
    match outcome {
        Ok(Ok(status)) => {
            if watchdog.dismiss() {
                // This process stalled past its lease (stopped, frozen): the watchdog
                // stopped the command before the validity ended; the lock may be gone.
                return Err(Failure::new(
                    LOST,
                    format!(
                        "quorumlock stalled past the lease it gave its watchdog, which stopped \
                         the command on `{}` before the lock's validity could end (the \
                         command {status})",
                        spec.resource
                    ),
                ));
            }
            Ok(exit_code(status))
        }
        Ok(Err(e)) => {
            // We no longer know whether the command runs: stop it as if the lock was lost.
            watchdog.stopping();
            let stopped = stop(&mut running, relay, grace).await;
            watchdog.dismiss();
            Err(Failure::new(
                LOST,
                format!("waiting for the command failed: {e}; {stopped}"),
            ))
        }
        Err(reason) => {
            watchdog.stopping();
            let stopped = stop(&mut running, relay, grace).await;
            watchdog.dismiss();
            Err(Failure::new(
                LOST,
                format!(
                    "lost the lock on `{}`: {}; {stopped}",
                    spec.resource,
                    crate::cli::exit::lost_line(&reason)
                ),
            ))
        }
    }
}

/// How `run` waits for the lock, and what it needs to wait out a quarantine first.
#[derive(Debug)]
struct Waiting {
    wait: Wait,
    quiet: bool,
    /// The variables the client was built from, for the retries left after a quarantine.
    vars: Vars,
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
fn quarantined(redlock: &RedLock) -> bool {
    redlock
        .quarantine_left()
        .is_some_and(|left| !left.is_zero())
}

/// Takes the lock on `resource`, or a permit of the semaphore, as `waiting` says.
async fn acquire(
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
fn conflict(error: Error, conflict_exit_code: u8) -> Failure {
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

/// Releases the lock (the client's shutdown then waits for the nodes that had not answered).
/// A failure leaves keys that expire by themselves: worth a warning when the lock was still
/// held, not an error.
async fn release(kept: KeptLock) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn args(wait: Option<Duration>) -> RunArgs {
        RunArgs {
            nodes: NodesArg { nodes: None },
            ttl: None,
            wait,
            nonblock: false,
            conflict_exit_code: TAKEN,
            quiet: false,
            hold_at_least: None,
            grace: None,
            permits: None,
            shared: false,
            exclusive: false,
            foreground: false,
            resource: "r".into(),
            command: vec!["true".into()],
        }
    }

    #[derive(Debug, clap::Parser)]
    struct Cli {
        #[command(flatten)]
        run: RunArgs,
    }

    fn parse(argv: &[&str]) -> Result<RunArgs, clap::Error> {
        <Cli as clap::Parser>::try_parse_from(argv).map(|cli| cli.run)
    }

    #[test]
    fn the_command_after_the_separator_keeps_its_own_flags() {
        let run = parse(&["q", "--ttl", "1s", "r", "--", "ls", "--ttl", "--", "x"]);
        let run = run.expect("parses");
        assert_eq!(run.resource, "r");
        assert_eq!(run.ttl, Some(Duration::from_secs(1)));
        assert_eq!(run.command, ["ls", "--ttl", "--", "x"]);
    }

    /// As `flock FILE COMMAND`: no `--` needed, and what follows RESOURCE is COMMAND's.
    #[test]
    fn the_command_needs_no_separator_and_keeps_its_own_flags() {
        let run = parse(&[
            "q", "-w", "5", "--ttl", "2", "r", "ls", "-l", "-n", "--", "x",
        ]);
        let run = run.expect("parses");
        assert_eq!(run.resource, "r");
        assert_eq!(run.wait, Some(Duration::from_secs(5)));
        assert_eq!(run.ttl, Some(Duration::from_secs(2)));
        assert!(!run.nonblock);
        assert_eq!(run.command, ["ls", "-l", "-n", "--", "x"]);
        let run = parse(&["q", "--ttl=30", "-w0.5", "-qE", "0", "r", "--", "-x"]);
        let run = run.expect("parses");
        assert_eq!(run.ttl, Some(Duration::from_secs(30)));
        assert_eq!(run.wait, Some(Duration::from_millis(500)));
        assert!(run.quiet);
        assert_eq!(run.conflict_exit_code, 0);
        assert_eq!(run.command, ["-x"]);
        for missing in [&["q", "r"][..], &["q", "r", "--"], &["q", "-w", "5", "r"]] {
            let e = parse(missing).err().map(|e| e.kind());
            assert_eq!(e, Some(clap::error::ErrorKind::MissingRequiredArgument));
        }
    }

    fn retry_of(vars: &Vars) -> (Option<&str>, Option<&str>) {
        (vars.get(RETRY_ATTEMPTS), vars.get(RETRY_WITHIN))
    }

    #[test]
    fn wait_decides_the_retry_policy_over_the_environment() {
        let env = || {
            let mut v = Vars::from_lookup(|_| None);
            v.set(RETRY_WITHIN, "5s");
            v
        };
        let one = args(Some(Duration::ZERO)).vars(env());
        assert_eq!(retry_of(&one), (Some("1"), None));
        let within = args(Some(Duration::from_millis(1500))).vars(env());
        assert_eq!(retry_of(&within), (None, Some("1s 500ms")));
        let from_env = args(None).vars(env());
        assert_eq!(retry_of(&from_env), (None, Some("5s")));
        let default = args(None).vars(Vars::from_lookup(|_| None));
        assert_eq!(retry_of(&default), (None, Some("1year")));
        assert_eq!(args(None).wait(&Vars::from_lookup(|_| None)), Wait::Forever);
        assert_eq!(args(None).wait(&env()), Wait::FromEnv);
        // The library's default ttl, not one of the command line's own.
        assert_eq!(default.get(TTL), None);
        let mut nonblock = args(None);
        nonblock.nonblock = true;
        assert_eq!(retry_of(&nonblock.vars(env())), (Some("1"), None));
    }

    /// The default the help text names is the library's.
    #[test]
    fn the_help_names_the_librarys_default_ttl() {
        let config = RedLock::builder().nodes(["redis://127.0.0.1:1"]).validate();
        let ttl = config.map(|c| c.ttl()).ok();
        assert_eq!(ttl, Some(Duration::from_secs(10)));
        use clap::CommandFactory;
        let help = Cli::command().render_long_help().to_string();
        assert!(help.contains("or 10s as in the library"), "{help}");
    }

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

    #[test]
    fn grace_defaults_to_a_tenth_of_the_ttl_and_must_fit_it() {
        let ttl = Duration::from_secs(30);
        let (grace, keep) = grace_for(ttl, None).expect("fits");
        assert_eq!(grace, Duration::from_secs(3));
        assert_eq!(keep, KeepAlive::new().margin(Duration::from_secs(6)));
        assert!(grace_for(ttl, Some(Duration::from_millis(7499))).is_ok());
        assert!(grace_for(ttl, Some(Duration::from_millis(7500))).is_err());
        assert!(grace_for(Duration::from_secs(1), Some(Duration::from_millis(300))).is_err());
    }
}
