//! `quorumlock completions SHELL` and `quorumlock man`: the shell completions and man pages,
//! generated from the same clap definitions as `--help` (what the .deb installs:
//! scripts/package-deb).

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, CommandFactory};
use clap_complete::Shell;

use super::exit::{Failure, CANNOT_CREATE};

/// `quorumlock completions`.
#[derive(Debug, Args)]
pub(crate) struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell
    #[arg(value_name = "SHELL")]
    shell: Shell,
}

/// `quorumlock man`.
#[derive(Debug, Args)]
pub(crate) struct ManArgs {
    /// Write one page per command into DIR (quorumlock.1, quorumlock-run.1, ...) instead of
    /// printing quorumlock.1
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
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

/// Prints the main man page, or writes every page into `args.dir`.
pub(crate) fn man(args: &ManArgs) -> Result<u8, Failure> {
    let command = super::Cli::command();
    let written = match &args.dir {
        None => {
            let mut page = Vec::new();
            clap_mangen::Man::new(command)
                .render(&mut page)
                .and_then(|()| std::io::stdout().write_all(&page))
        }
        Some(dir) => {
            std::fs::create_dir_all(dir).and_then(|()| clap_mangen::generate_to(command, dir))
        }
    };
    written.map_err(|e| Failure::new(CANNOT_CREATE, format!("cannot write the man pages: {e}")))?;
    Ok(0)
}
