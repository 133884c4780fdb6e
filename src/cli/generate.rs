//! `quorumlock completions SHELL` and `quorumlock man`: the shell completions and man pages,
//! generated from the same clap definitions as `--help` (what the .deb installs:
//! scripts/package-deb). The man pages are written in `man.rs`.

use std::io::Write;

use clap::{Args, CommandFactory};
use clap_complete::Shell;

use super::exit::{Failure, CANNOT_CREATE};

#[path = "man.rs"]
mod man;
pub(crate) use man::{man, ManArgs};

/// `quorumlock completions`.
#[derive(Debug, Args)]
pub(crate) struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell
    #[arg(value_name = "SHELL")]
    shell: Shell,
}

/// Prints the completion script for `args.shell`.
pub(crate) fn completions(args: &CompletionsArgs) -> Result<u8, Failure> {
    let mut command = super::Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut command, "quorumlock", &mut out);
    std::io::stdout()
        .write_all(&out)
        .map_err(|e| Failure::new(CANNOT_CREATE, format!("cannot write the completions: {e}")))?;
    Ok(0)
}
