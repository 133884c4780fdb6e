//! The command line: parsing, logging, the runtime, and one module per subcommand.
//!
//! To add a subcommand: a module with its `clap::Args` struct and an
//! `async fn(args) -> Result<u8, Failure>` returning the exit code, one variant in
//! [`Command`] and one arm in [`dispatch`].

mod child;
mod doctor;
mod elect;
mod exit;
mod generate;
mod holder;
mod leader;
mod ls;
mod options;
mod release;
mod run;
mod status;
mod watchdog;

use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::{Parser, Subcommand};
use tracing_subscriber::filter::LevelFilter;

use exit::{Failure, SOFTWARE, USAGE};

/// Run a command under a lock held on a majority of independent Redis masters (Redlock),
/// or show who holds one.
#[derive(Debug, Parser)]
#[command(name = "quorumlock", version, after_help = AFTER_HELP)]
struct Cli {
    /// Log to stderr: -v for debug, -vv for trace [default: $QUORUMLOCK_LOG, or off]
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,

    #[command(subcommand)]
    command: Command,
}

const AFTER_HELP: &str = "\
Nodes come from --nodes or QUORUMLOCK_NODES, e.g.
  QUORUMLOCK_NODES=redis://a:6379,redis://b:6379,redis://c:6379 quorumlock run job ./job.sh
Duration flags take 500ms, 10s, 2m, or a bare number of seconds (-w 5, --ttl 30); the
QUORUMLOCK_* variables are the library's and need a unit (QUORUMLOCK_TTL=30s).
`quorumlock help run` lists the exit codes and environment variables.";

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a command while holding a lock on RESOURCE (or one of N permits with --permits),
    /// kept alive until the command ends
    Run(run::RunArgs),
    /// Show, node by node, who holds RESOURCE's lock, or its permits if a semaphore (read-only)
    Status(status::StatusArgs),
    /// Run a command only while this instance leads the election NAME, campaigning again
    Elect(elect::ElectArgs),
    /// Show who leads the election NAME, and its term (read-only)
    Leader(leader::LeaderArgs),
    /// Check every node against the algorithm's assumptions, with a verdict (read-only)
    Doctor(doctor::DoctorArgs),
    /// List the locks held on the nodes, with their holders, fencing tokens and ttls (read-only)
    Ls(ls::LsArgs),
    /// Break the lock of a holder that is gone (--force), after showing what it deletes
    Release(release::ReleaseArgs),
    /// Print the shell completion script for SHELL (bash, zsh, fish, elvish, powershell)
    Completions(generate::CompletionsArgs),
    /// Show the man page of quorumlock or of COMMAND, or write every page into --dir
    Man(generate::ManArgs),
    /// Started by `run`: stops the command if `run` dies (not for use by hand)
    #[command(name = watchdog::SUBCOMMAND, hide = true)]
    Watchdog(watchdog::WatchdogArgs),
}

/// Parses the command line, runs the subcommand, and turns its outcome into an exit code.
pub(crate) fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return ExitCode::from(parse_error(&e)),
    };
    exit::name_nodes_in_full(cli.verbose > 0);
    let code = match init_logging(cli.verbose).and_then(|()| runtime(cli.command)) {
        Ok(code) => code,
        Err(failure) => {
            eprintln!("quorumlock: {}", failure.message);
            failure.code
        }
    };
    ExitCode::from(code)
}

fn runtime(command: Command) -> Result<u8, Failure> {
    // No runtime, no connection: nothing in it can fail but a signal.
    let command = match command {
        Command::Watchdog(args) => return watchdog::watchdog(args),
        Command::Completions(args) => return generate::completions(&args),
        Command::Man(args) => return generate::man(&args),
        command => command,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::new(SOFTWARE, format!("cannot start the async runtime: {e}")))?;
    runtime.block_on(dispatch(command))
}

async fn dispatch(command: Command) -> Result<u8, Failure> {
    match command {
        Command::Run(args) => run::run(args).await,
        Command::Status(args) => status::status(args).await,
        Command::Doctor(args) => doctor::doctor(args).await,
        Command::Elect(args) => elect::elect(args).await,
        Command::Leader(args) => leader::leader(args).await,
        Command::Ls(args) => ls::ls(args).await,
        Command::Release(args) => release::release(args).await,
        Command::Watchdog(args) => watchdog::watchdog(args),
        Command::Completions(args) => generate::completions(&args),
        Command::Man(args) => generate::man(&args),
    }
}

/// Help and version go to stdout with exit 0; usage errors are one line on stderr with
/// exit 64 (clap's own code is 2).
fn parse_error(e: &clap::Error) -> u8 {
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = e.print();
            0
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            USAGE
        }
        _ => {
            eprintln!("quorumlock: {}", one_line(&e.render().to_string()));
            USAGE
        }
    }
}

/// clap's error text on one line: without its `error:` prefix and closing hint, with the
/// usage in parentheses.
fn one_line(text: &str) -> String {
    let text = text.trim_start().strip_prefix("error:").unwrap_or(text);
    let mut line = String::new();
    let mut usage = None;
    for l in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if let Some(u) = l.strip_prefix("Usage:") {
            usage = Some(u.trim());
        } else if !l.starts_with("For more information") {
            if !line.is_empty() {
                line.push_str(if l.starts_with("tip:") { "; " } else { " " });
            }
            line.push_str(l);
        }
    }
    if let Some(usage) = usage {
        line.push_str(&format!(" (usage: {usage})"));
    }
    line
}

/// `tracing` events to stderr, at the level of `-v`/`-vv` or `QUORUMLOCK_LOG`
/// (off, error, warn, info, debug, trace), whichever is more verbose.
fn init_logging(verbose: u8) -> Result<(), Failure> {
    let from_env = match options::env_var("QUORUMLOCK_LOG")? {
        Some(v) if !v.trim().is_empty() => v.trim().parse::<LevelFilter>().map_err(|_| {
            Failure::usage(format!(
                "QUORUMLOCK_LOG=`{v}`: expected off, error, warn, info, debug or trace"
            ))
        })?,
        _ => LevelFilter::OFF,
    };
    let from_flags = match verbose {
        0 => LevelFilter::OFF,
        1 => LevelFilter::DEBUG,
        _ => LevelFilter::TRACE,
    };
    let level = from_env.max(from_flags);
    if level == LevelFilter::OFF {
        return Ok(());
    }
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(level)
        .with_ansi(false)
        .try_init()
        .map_err(|e| Failure::new(SOFTWARE, format!("cannot set up logging: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn usage_errors_are_one_line() {
        let e = Cli::try_parse_from(["quorumlock", "run", "r"]).err();
        let text = e.map(|e| one_line(&e.render().to_string()));
        let text = text.unwrap_or_default();
        assert!(text.contains("<COMMAND>"), "{text}");
        assert!(text.ends_with("<RESOURCE> <COMMAND>...)"), "{text}");
        assert!(!text.contains('\n') && !text.starts_with("error"), "{text}");
    }
}
