//! `quorumlock run`'s command line: its arguments, its help, and how it waits.

use std::ffi::OsString;
use std::time::Duration;

use clap::Args;
use quorumlock::ENV_VARS;

use crate::cli::exit::TAKEN;
use crate::cli::options::{
    flag_duration, positive_duration, var_duration, NodesArg, Vars, NODES, RETRY_ATTEMPTS,
    RETRY_DELAY, RETRY_WITHIN, TTL,
};

/// `quorumlock run`.
#[derive(Debug, Args)]
#[command(after_long_help = after_help())]
pub(crate) struct RunArgs {
    #[command(flatten)]
    pub(super) nodes: NodesArg,

    /// How long the lock's keys live unless extended; while COMMAND runs the lock is
    /// extended, every ttl/2 [default: $QUORUMLOCK_TTL, or 10s as in the library]
    #[arg(long, value_name = "DURATION", value_parser = positive_duration)]
    pub(super) ttl: Option<Duration>,

    /// How long to keep trying, with random pauses, while the resource is held elsewhere
    /// or no quorum answers; 0 makes one attempt [default: $QUORUMLOCK_RETRY_WITHIN or
    /// $QUORUMLOCK_RETRY_ATTEMPTS, or wait until the lock is free, as flock(1) does]
    #[arg(short, long, value_name = "DURATION", value_parser = flag_duration)]
    pub(super) wait: Option<Duration>,

    /// Make one attempt and fail at once if the resource is held elsewhere, whatever
    /// $QUORUMLOCK_RETRY_* say (as --wait 0)
    #[arg(short, long, conflicts_with = "wait")]
    pub(super) nonblock: bool,

    /// The exit status when the resource is held elsewhere (still, after --wait), 0 to 255
    #[arg(short = 'E', long, value_name = "N", default_value_t = TAKEN)]
    pub(super) conflict_exit_code: u8,

    /// Print nothing when the resource is held elsewhere (with -n, or still after --wait),
    /// or while the nodes' quarantine, whose end they tell, keeps them from a quorum (exit
    /// 69), so that a cron job that skips a run mails nothing; other errors are still printed
    #[arg(short, long)]
    pub(super) quiet: bool,

    /// Keep other hosts from running COMMAND again until this long after the lock was taken
    /// (ShedLock's lockAtLeastFor): if COMMAND ends sooner, the lock is left to expire then
    /// instead of being released, and quorumlock exits; positive, and at most
    /// $QUORUMLOCK_MAX_TTL if set (else the longest ttl allowed is raised to it) [default:
    /// released when COMMAND ends]
    #[arg(long, value_name = "DURATION", value_parser = positive_duration)]
    pub(super) hold_at_least: Option<Duration>,

    /// If the lock is lost, COMMAND gets SIGTERM at least 2 x grace before the lock's
    /// validity ends, and SIGKILL grace later; 2 x grace must be under ttl/2 [default: ttl/10]
    #[arg(long, value_name = "DURATION", value_parser = positive_duration)]
    pub(super) grace: Option<Duration>,

    /// Hold one of N permits of RESOURCE, a semaphore, instead of its lock: at most N
    /// COMMANDs run at once across every host (a distributed `sem`); COMMAND gets its slot,
    /// 0 to N-1, in $QUORUMLOCK_SLOT. Every user of RESOURCE must give the same N
    #[arg(long, value_name = "N", conflicts_with_all = ["shared", "exclusive"])]
    pub(super) permits: Option<u32>,

    /// Take RESOURCE as a read-write lock, on its shared (read) side: any number of
    /// COMMANDs with --shared run at once, never beside one with --exclusive
    #[arg(long, conflicts_with = "exclusive")]
    pub(super) shared: bool,

    /// Take RESOURCE as a read-write lock, on its exclusive (write) side: alone, and before
    /// --shared COMMANDs that arrive while it waits (writers first)
    #[arg(long)]
    pub(super) exclusive: bool,

    /// Run COMMAND in quorumlock's process group, so that it can read from the terminal;
    /// signals then go to COMMAND only, not to the processes it starts
    #[arg(long)]
    pub(super) foreground: bool,

    /// The resource to lock: its Redis key, after $QUORUMLOCK_KEY_PREFIX
    #[arg(value_name = "RESOURCE")]
    pub(super) resource: String,

    /// The command to run while holding the lock, and its arguments: from COMMAND on,
    /// everything is COMMAND's, options included (`run job ls -l` runs `ls -l`); a `--`
    /// before COMMAND is optional
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMMAND"
    )]
    pub(super) command: Vec<OsString>,
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
pub(super) enum Wait {
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
    pub(super) fn wait(&self, vars: &Vars) -> Wait {
        match (self.nonblock, self.wait) {
            (true, _) => Wait::Once,
            (false, Some(d)) if d.is_zero() => Wait::Once,
            (false, Some(d)) => Wait::Within(d),
            _ if vars.is_set(RETRY_WITHIN) || vars.is_set(RETRY_ATTEMPTS) => Wait::FromEnv,
            _ => Wait::Forever,
        }
    }

    /// The variables this run uses: flags over the environment over the defaults.
    pub(super) fn vars(&self, mut vars: Vars) -> Vars {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::run::grace_for;
    use quorumlock::{KeepAlive, RedLock};

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
