//! `quorumlock elect`: campaign for leadership of an election, run a command while leading,
//! stop it before the leadership can be lost, and campaign again.

use std::ffi::OsString;
use std::time::Duration;

use clap::Args;
use quorumlock::{Candidacy, ConfigError, Leadership, RedLock};

use super::child::Spec;
use super::exit::{Failure, LOST};
use super::options::{
    duration, positive_duration, var_duration, NodesArg, Vars, NODES, RETRY_DELAY, RETRY_JITTER,
    TTL,
};
use super::run::{grace_for, shut_down, supervise};

/// `quorumlock elect`.
#[derive(Debug, Args)]
#[command(after_long_help = AFTER_HELP)]
pub(crate) struct ElectArgs {
    #[command(flatten)]
    nodes: NodesArg,

    /// How long the leadership's lock lives unless extended; while leading it is extended
    /// every ttl/2, and a dead leader is followed within about this long
    /// [default: $QUORUMLOCK_TTL, or 10s as in the library]
    #[arg(long, value_name = "DURATION", value_parser = positive_duration)]
    ttl: Option<Duration>,

    /// If the leadership is lost, COMMAND gets SIGTERM at least 2 x grace before the lock's
    /// validity ends, and SIGKILL grace later; 2 x grace must be under ttl/2 [default: ttl/10]
    #[arg(long, value_name = "DURATION", value_parser = positive_duration)]
    grace: Option<Duration>,

    /// The identity `quorumlock leader` shows while this instance leads [default: PID@HOST]
    #[arg(long, value_name = "ID")]
    identity: Option<String>,

    /// Exit (76) when the leadership is lost, instead of campaigning again
    #[arg(long)]
    once: bool,

    /// Run COMMAND in quorumlock's process group; see `quorumlock help run`
    #[arg(long)]
    foreground: bool,

    /// The election: its lock's Redis key, after $QUORUMLOCK_KEY_PREFIX
    #[arg(value_name = "NAME")]
    name: String,

    /// The command to run while leading, and its arguments
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<OsString>,
}

const AFTER_HELP: &str = "\
Waits until this instance leads NAME (among every `quorumlock elect NAME` and every
library campaign for NAME on the same nodes), then runs COMMAND as `quorumlock run` does,
with QUORUMLOCK_TERM (the leadership's term: a fencing token, greater than every earlier
term of NAME) and QUORUMLOCK_FENCING_TOKEN (the same number) added to its environment.

If the leadership is lost (no quorum keeps it), COMMAND is stopped before the lock's
validity ends (SIGTERM, then SIGKILL after the grace period) and quorumlock campaigns
again, or exits with --once. Between attempts a candidate pauses QUORUMLOCK_RETRY_DELAY
plus up to QUORUMLOCK_RETRY_JITTER (100ms each by default), unless a release wakes it; the
attempt limits (QUORUMLOCK_RETRY_ATTEMPTS, _WITHIN) do not apply. If COMMAND exits by itself, quorumlock resigns (the next
candidate takes over at once) and exits with COMMAND's status. Signals are relayed to
COMMAND as by `quorumlock run`; received while campaigning, they end quorumlock.

Exit status:
  COMMAND's  COMMAND exited while this instance led (128+N if killed by signal N)
  64         usage or configuration error
  70         internal error
  76         --once: the leadership was lost; COMMAND was stopped before its validity ended
  126, 127   COMMAND cannot be executed, or was not found
  128+N      quorumlock got signal N while campaigning

Example:
  QUORUMLOCK_NODES=redis://a:6379,redis://b:6379,redis://c:6379 \\
    quorumlock elect --ttl 10s --identity \"$(hostname)\" scheduler -- ./scheduler";

pub(crate) async fn elect(args: ElectArgs) -> Result<u8, Failure> {
    if args.name.is_empty() {
        return Err(ConfigError::EmptyResource.into());
    }
    let mut vars = Vars::from_env()?;
    vars.flag(NODES, args.nodes.nodes.clone());
    vars.flag(TTL, args.ttl.map(var_duration));
    let builder = vars.builder()?;
    let config = builder.validate()?;
    if !config.fencing() {
        return Err(ConfigError::FencingOff.into());
    }
    let (grace, keep) = grace_for(config.ttl(), args.grace)?;
    let mut candidacy = Candidacy::new().keep(keep);
    if let Some((delay, jitter)) = retry_pause(&vars)? {
        candidacy = candidacy.retry_delay(delay, jitter);
    }
    if let Some(identity) = &args.identity {
        candidacy = candidacy.identity(identity.clone());
    }
    let mut relay = super::child::Relay::install()?;
    let redlock = builder.build()?;
    let outcome = campaign(&redlock, &args, candidacy, grace, &mut relay).await;
    // Every way out: nothing this client holds outlives the process (see `run`).
    shut_down(&redlock, &args.name).await;
    outcome
}

/// Campaigns, leads, and campaigns again, until COMMAND exits by itself or (with --once)
/// the leadership is lost.
async fn campaign(
    redlock: &RedLock,
    args: &ElectArgs,
    candidacy: Candidacy,
    grace: Duration,
    relay: &mut super::child::Relay,
) -> Result<u8, Failure> {
    redlock
        .wait_for_quorum(redlock.config().connect_timeout())
        .await;
    redlock.check_distinct()?;
    loop {
        let leadership = tokio::select! {
            won = redlock.campaign_with(&args.name, candidacy.clone()) => won?,
            sig = relay.recv() => return Ok(128 + sig as u8),
        };
        let term = leadership.term();
        tracing::debug!(election = %args.name, term, "leading");
        let spec = Spec {
            argv: &args.command,
            resource: &args.name,
            fencing_token: Some(term),
            term: Some(term),
            slot: None,
            foreground: args.foreground,
        };
        let handle = leadership.handle();
        let outcome = supervise(&spec, grace, relay, &handle, leadership.lost()).await;
        resign(leadership).await;
        match outcome {
            Err(failure) if failure.code == LOST && !args.once => {
                eprintln!("quorumlock: {}; campaigning again", failure.message);
            }
            outcome => return outcome,
        }
    }
}

/// The pause between a candidate's attempts from `QUORUMLOCK_RETRY_DELAY` and
/// `QUORUMLOCK_RETRY_JITTER`, when either is set (the other then keeps its default, 100 ms).
/// The attempt limits (`QUORUMLOCK_RETRY_ATTEMPTS`, `_WITHIN`) do not apply: a campaign lasts
/// until it wins.
fn retry_pause(vars: &Vars) -> Result<Option<(Duration, Duration)>, Failure> {
    let var = |name: &'static str| -> Result<Option<Duration>, Failure> {
        vars.get(name)
            .map(|value| {
                duration(value).map_err(|reason| {
                    Failure::from(ConfigError::Env {
                        var: name,
                        value: value.to_string(),
                        reason,
                    })
                })
            })
            .transpose()
    };
    let (delay, jitter) = (var(RETRY_DELAY)?, var(RETRY_JITTER)?);
    if delay.is_none() && jitter.is_none() {
        return Ok(None);
    }
    let default = Duration::from_millis(100);
    Ok(Some((delay.unwrap_or(default), jitter.unwrap_or(default))))
}

/// Resigns, as `run` releases: a failure leaves keys that expire by themselves.
async fn resign(leadership: Leadership) {
    let name = leadership.name().to_string();
    let leading = leadership.is_leader();
    match leadership.resign().await {
        Ok(released) => tracing::debug!(election = %name, ?released, "resigned"),
        Err(e) if leading => eprintln!(
            "quorumlock: warning: could not resign from `{name}` ({e}); its keys expire by \
             themselves"
        ),
        Err(e) => tracing::debug!(election = %name, error = %e, "resigned after the loss"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(set: &[(&'static str, &str)]) -> Vars {
        let mut vars = Vars::from_lookup(|_| None);
        for (name, value) in set {
            vars.set(name, *value);
        }
        vars
    }

    #[test]
    fn the_retry_variables_set_the_pause_between_attempts() {
        let ms = Duration::from_millis;
        assert_eq!(retry_pause(&vars(&[])).unwrap(), None);
        let delay = vars(&[(RETRY_DELAY, "250ms")]);
        assert_eq!(retry_pause(&delay).unwrap(), Some((ms(250), ms(100))));
        let both = vars(&[(RETRY_DELAY, "1s"), (RETRY_JITTER, "0s")]);
        assert_eq!(retry_pause(&both).unwrap(), Some((ms(1000), ms(0))));
        // The limits are not the pause.
        let limits = vars(&[("QUORUMLOCK_RETRY_ATTEMPTS", "7")]);
        assert_eq!(retry_pause(&limits).unwrap(), None);
        assert!(retry_pause(&vars(&[(RETRY_JITTER, "soon")])).is_err());
    }
}
