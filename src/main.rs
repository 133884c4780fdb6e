//! `quorumlock`: run a command while holding a Redlock lock, or show who holds one.
//!
//! The command-line parsing and each subcommand live in `src/cli/`; this file only hands
//! the process's exit code back.

#![forbid(unsafe_code)]
#![warn(missing_debug_implementations)]

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
