//! `quorumlock man [COMMAND]`: the man pages, one per command, written from the same clap
//! definitions as `--help` (what the .deb installs: scripts/package-deb).
//!
//! clap_mangen writes the NAME, DESCRIPTION, OPTIONS and VERSION sections; the rest is ours:
//! its SYNOPSIS leaves out what options take (`--wait` without `DURATION`), and it puts the
//! whole of a command's long help under `EXTRA`. Here the long help's prose joins the
//! DESCRIPTION, its `Exit status:` block becomes EXIT STATUS (one tagged paragraph per
//! status) and its `Example:` block EXAMPLES, laid out as in `--help`.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::{Command as Process, Stdio};

use clap::{Arg, ArgAction, Args, Command, CommandFactory};
use clap_mangen::roff::{bold, italic, roman, Inline, Roff};
use clap_mangen::Man;

use super::super::exit::{Failure, CANNOT_CREATE};

/// `quorumlock man`.
#[derive(Debug, Args)]
#[command(after_long_help = AFTER_HELP)]
pub(crate) struct ManArgs {
    /// The command whose page to show (run, status, ...); without it, quorumlock's own page
    #[arg(value_name = "COMMAND", conflicts_with = "dir")]
    command: Option<String>,

    /// Write every page into DIR (quorumlock.1, quorumlock-run.1, ...) instead of showing one
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

const AFTER_HELP: &str = "\
At a terminal, the page is shown by man(1) (`man -l -`, with your pager), or as the text of
`quorumlock help COMMAND` where man(1) is missing; otherwise its roff source is printed, to
be saved as a page (`quorumlock man run > quorumlock-run.1`). The pages have the sections of
--help: SYNOPSIS (every option with what it takes), DESCRIPTION, OPTIONS, EXIT STATUS,
EXAMPLES.

Example:
  quorumlock man run
  quorumlock man --dir /usr/local/share/man/man1";

/// Shows one page: through man(1) at a terminal, as roff source otherwise (`quorumlock man
/// run > quorumlock-run.1`); or writes every page into `args.dir`.
pub(crate) fn man(args: &ManArgs) -> Result<u8, Failure> {
    let root = root();
    if let Some(dir) = &args.dir {
        write_all(&root, dir).map_err(|e| {
            Failure::new(
                CANNOT_CREATE,
                format!("cannot write the man pages into {}: {e}", dir.display()),
            )
        })?;
        return Ok(0);
    }
    let command = match &args.command {
        None => root.clone(),
        Some(name) => pages(&root)
            .into_iter()
            .find(|c| c.get_name() == name)
            .ok_or_else(|| {
                let names: Vec<String> = pages(&root)
                    .iter()
                    .map(|c| c.get_name().to_string())
                    .collect();
                Failure::usage(format!(
                    "no man page for `{name}`: the commands are {}",
                    names.join(", ")
                ))
            })?,
    };
    let page = page(&command);
    let stdout = std::io::stdout();
    if stdout.is_terminal() && show(&page) {
        return Ok(0);
    }
    let text = if stdout.is_terminal() {
        // No man(1) to lay the page out: the same text as --help, rather than roff.
        command.clone().render_long_help().to_string().into_bytes()
    } else {
        page
    };
    stdout
        .lock()
        .write_all(&text)
        .map_err(|e| Failure::new(CANNOT_CREATE, format!("cannot write the man page: {e}")))?;
    Ok(0)
}

/// The command line as the pages describe it: built (names and bin names filled in), without
/// the `help` command, which has no page.
fn root() -> Command {
    let mut root = super::super::Cli::command().disable_help_subcommand(true);
    root.build();
    root
}

/// The commands with a page of their own, in the order of `--help`.
fn pages(root: &Command) -> Vec<Command> {
    root.get_subcommands()
        .filter(|c| !c.is_hide_set())
        .cloned()
        .collect()
}

fn write_all(root: &Command, dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    for command in std::iter::once(root.clone()).chain(pages(root)) {
        let name = format!("{}.1", file_name(&command));
        std::fs::write(dir.join(name), page(&command))?;
    }
    Ok(())
}

/// `quorumlock`, `quorumlock-run`, ...: the page's name.
fn file_name(command: &Command) -> String {
    command
        .get_display_name()
        .unwrap_or_else(|| command.get_name())
        .to_string()
}

/// Lays `page` out with `man -l -` (man-db, mandoc) on this terminal, with the user's pager.
/// False if man(1) cannot be started or fails: the caller prints the text itself.
fn show(page: &[u8]) -> bool {
    let Ok(mut man) = Process::new("man")
        .args(["-l", "-"])
        .stdin(Stdio::piped())
        .spawn()
    else {
        return false;
    };
    // A pager quit early closes the pipe: not a failure of ours.
    let _ = man.stdin.take().map(|mut stdin| stdin.write_all(page));
    man.wait().is_ok_and(|status| status.success())
}

/// The page of `command` (the root or one of its subcommands), as roff source.
fn page(command: &Command) -> Vec<u8> {
    let name = file_name(command);
    let man = Man::new(command.clone())
        .title(name.to_uppercase())
        .source(format!("quorumlock {}", env!("CARGO_PKG_VERSION")))
        .manual("quorumlock manual");
    let help = LongHelp::of(command);
    let mut out = Vec::new();
    // Each piece clap_mangen renders starts with the same two-line preamble: keep the first.
    let mut piece = |render: &dyn Fn(&mut Vec<u8>) -> std::io::Result<()>| {
        let mut roff = Vec::new();
        render(&mut roff).expect("writing to memory");
        let text = String::from_utf8(roff).expect("roff from text");
        let text = if out.is_empty() {
            text.as_str()
        } else {
            text.strip_prefix(PREAMBLE).unwrap_or(&text)
        };
        out.extend_from_slice(text.as_bytes());
    };
    piece(&|w| man.render_title(w));
    // Ragged right and no hyphenation, as option names and URLs read best unbroken.
    piece(&|w| {
        let mut roff = Roff::new();
        roff.control("ad", ["l"]).control("nh", []);
        roff.to_writer(w)
    });
    piece(&|w| man.render_name_section(w));
    piece(&|w| synopsis(command).to_writer(w));
    piece(&|w| man.render_description_section(w));
    piece(&|w| help.description.to_writer(w));
    if command.get_arguments().any(|a| !a.is_hide_set()) {
        piece(&|w| man.render_options_section(w));
    }
    if command.has_subcommands() {
        piece(&|w| commands(command).to_writer(w));
    }
    if let Some(status) = &help.exit_status {
        piece(&|w| status.to_writer(w));
    }
    if let Some(examples) = &help.examples {
        piece(&|w| examples.to_writer(w));
    }
    piece(&|w| see_also(command).to_writer(w));
    if command.get_version().is_some() {
        piece(&|w| man.render_version_section(w));
    }
    out
}

/// What the roff crate writes before every document (an apostrophe that stays one).
const PREAMBLE: &str = ".ie \\n(.g .ds Aq \\(aq\n.el .ds Aq '\n";

/// `quorumlock run [--ttl DURATION] [-w|--wait DURATION] ... RESOURCE COMMAND...`: each
/// option with what it takes, as the usage line of `--help` would give it in full.
fn synopsis(command: &Command) -> Roff {
    let mut line = vec![bold(command.get_bin_name().unwrap_or(command.get_name()))];
    let options = command
        .get_arguments()
        .filter(|a| !a.is_positional() && !a.is_hide_set());
    for arg in options {
        let mut option = Vec::new();
        if let Some(short) = arg.get_short() {
            option.push(bold(format!("-{short}")));
        }
        if let Some(long) = arg.get_long() {
            if !option.is_empty() {
                option.push(roman("|"));
            }
            option.push(bold(format!("--{long}")));
        }
        if takes_values(arg) {
            option.push(roman(" "));
            option.push(italic(value_name(arg)));
        }
        line.push(roman(" "));
        line.extend(bracketed(arg.is_required_set(), option));
        if matches!(arg.get_action(), ArgAction::Count | ArgAction::Append) {
            line.push(roman("..."));
        }
    }
    for arg in command.get_positionals().filter(|a| !a.is_hide_set()) {
        line.push(roman(" "));
        if arg.is_last_set() {
            line.push(roman("-- "));
        }
        let mut value = vec![italic(value_name(arg))];
        if arg.get_num_args().is_some_and(|n| n.max_values() > 1) {
            value.push(roman("..."));
        }
        line.extend(bracketed(arg.is_required_set(), value));
    }
    if command.has_subcommands() {
        line.push(roman(" "));
        line.push(italic("COMMAND"));
        line.push(roman(" ..."));
    }
    let mut roff = Roff::new();
    roff.control("SH", ["SYNOPSIS"]);
    roff.text(line);
    roff
}

fn takes_values(arg: &Arg) -> bool {
    arg.get_num_args().is_some_and(|n| n.takes_values())
}

/// What `arg` takes, as `--help` names it: its value name, or its id in capitals.
fn value_name(arg: &Arg) -> String {
    match arg.get_value_names() {
        Some(names) => names
            .iter()
            .map(|n| n.as_str())
            .collect::<Vec<_>>()
            .join(" "),
        None => arg.get_id().as_str().to_uppercase(),
    }
}

fn bracketed(required: bool, inner: Vec<Inline>) -> Vec<Inline> {
    if required {
        return inner;
    }
    let mut out = vec![roman("[")];
    out.extend(inner);
    out.push(roman("]"));
    out
}

/// The main page's list of commands, each with the page that describes it.
fn commands(command: &Command) -> Roff {
    let mut roff = Roff::new();
    roff.control("SH", ["COMMANDS"]);
    for sub in command.get_subcommands().filter(|c| !c.is_hide_set()) {
        roff.control("TP", []);
        roff.text([
            bold(format!("{} {}", command.get_name(), sub.get_name())),
            roman(format!(" ({}(1))", file_name(sub))),
        ]);
        if let Some(about) = sub.get_about() {
            roff.text([roman(about.to_string())]);
        }
    }
    roff
}

/// The main page from a command's page, every command's page from the main page.
fn see_also(command: &Command) -> Roff {
    let mut roff = Roff::new();
    roff.control("SH", ["SEE ALSO"]);
    let pages: Vec<String> = if command.has_subcommands() {
        pages(command)
            .iter()
            .map(|sub| format!("{}(1)", file_name(sub)))
            .collect()
    } else {
        vec!["quorumlock(1)".to_string()]
    };
    let mut line = Vec::new();
    for (i, page) in pages.iter().enumerate() {
        if i > 0 {
            line.push(roman(", "));
        }
        line.push(bold(page.clone()));
    }
    roff.text(line);
    roff
}

/// A command's long help (the text after its options in `--help`), sorted into the sections
/// of a man page: its prose for the DESCRIPTION, its `Exit status:` and `Example:` blocks.
struct LongHelp {
    /// Paragraphs that continue the DESCRIPTION (no heading of their own).
    description: Roff,
    exit_status: Option<Roff>,
    examples: Option<Roff>,
}

impl LongHelp {
    fn of(command: &Command) -> LongHelp {
        let text = command
            .get_after_long_help()
            .or_else(|| command.get_after_help())
            .map(|help| help.to_string())
            .unwrap_or_default();
        let mut help = LongHelp {
            description: Roff::new(),
            exit_status: None,
            examples: None,
        };
        for block in text.split("\n\n").filter(|b| !b.trim().is_empty()) {
            let lines: Vec<&str> = block.lines().collect();
            match heading(&lines) {
                Some(heading) if heading.starts_with("Exit status") => {
                    let roff = help
                        .exit_status
                        .get_or_insert_with(|| section("EXIT STATUS"));
                    exit_status(roff, heading, &lines[1..]);
                }
                Some(heading) if heading.starts_with("Example") => {
                    let roff = help.examples.get_or_insert_with(|| section("EXAMPLES"));
                    preformatted(roff, &lines[1..]);
                }
                _ => {
                    help.description.control("PP", []);
                    prose(&mut help.description, &lines);
                }
            }
        }
        help
    }
}

/// `Exit status (the same with --json)` for a block whose first line is such a heading (no
/// indentation, a colon at the end) over indented lines.
fn heading<'a>(lines: &[&'a str]) -> Option<&'a str> {
    let (first, rest) = lines.split_first()?;
    let indented = |l: &&str| l.starts_with(' ');
    (!indented(first) && first.ends_with(':') && !rest.is_empty() && rest.iter().all(indented))
        .then(|| first.trim_end_matches(':'))
}

fn section(name: &str) -> Roff {
    let mut roff = Roff::new();
    roff.control("SH", [name]);
    roff
}

fn indentation(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

/// Lines as `--help` has them: unindented ones are filled into a paragraph, indented runs
/// (commands, lists) keep their layout.
fn prose(roff: &mut Roff, lines: &[&str]) {
    let mut rest = lines;
    while let Some(first) = rest.first() {
        let indented = indentation(first) > 0;
        let run = rest
            .iter()
            .take_while(|l| (indentation(l) > 0) == indented)
            .count();
        if indented {
            preformatted(roff, &rest[..run]);
        } else {
            for line in &rest[..run] {
                roff.text([roman(*line)]);
            }
        }
        rest = &rest[run..];
    }
}

/// Indented lines, shifted left by their common indentation, laid out as they are.
fn preformatted(roff: &mut Roff, lines: &[&str]) {
    let shift = lines.iter().map(|l| indentation(l)).min().unwrap_or(0);
    roff.control("RS", ["4"]);
    roff.control("nf", []);
    for line in lines {
        roff.text([roman(&line[shift.min(line.len())..])]);
    }
    roff.control("fi", []);
    roff.control("RE", []);
}

/// The exit statuses, one tagged paragraph each: `  64  usage error` (and its indented
/// continuation lines) becomes `.TP`, `64`, `usage error ...`. What the heading says in
/// parentheses (`the same with --json`) comes first, as a sentence.
fn exit_status(roff: &mut Roff, heading: &str, lines: &[&str]) {
    if let Some((_, note)) = heading.split_once(" (") {
        let note = note.trim_end_matches(')');
        let mut sentence = note[..1].to_uppercase();
        sentence.push_str(&note[1..]);
        roff.control("PP", []);
        roff.text([roman(format!("{sentence}."))]);
    }
    let tag_at = lines.iter().map(|l| indentation(l)).min().unwrap_or(0);
    let mut entries: Vec<(String, Vec<String>)> = Vec::new();
    for line in lines {
        match entries.last_mut() {
            Some((_, text)) if indentation(line) > tag_at => text.push(line.trim().to_string()),
            _ => {
                let line = line.trim();
                let (tag, text) = line.split_once("  ").unwrap_or((line, ""));
                entries.push((tag.to_string(), vec![text.trim().to_string()]));
            }
        }
    }
    for (tag, text) in entries {
        roff.control("TP", []);
        roff.text([bold(tag)]);
        roff.text([roman(text.join(" ").trim().to_string())]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(roff: &Roff) -> String {
        roff.to_roff()
    }

    #[test]
    fn a_heading_is_an_unindented_line_with_a_colon_over_indented_ones() {
        assert_eq!(
            heading(&["Exit status:", "  0   ok", "  64  usage"]),
            Some("Exit status")
        );
        assert_eq!(heading(&["Exit status:"]), None);
        assert_eq!(heading(&["Some prose:", "more prose"]), None);
        assert_eq!(heading(&["  indented:", "  x"]), None);
    }

    #[test]
    fn exit_statuses_become_tagged_paragraphs() {
        let mut roff = Roff::new();
        exit_status(
            &mut roff,
            "Exit status (the same with --json)",
            &[
                "  0   listed (possibly nothing)",
                "  69  fewer than a quorum of nodes answered: the list",
                "      may miss locks",
                "  126, 127   COMMAND cannot be executed",
            ],
        );
        assert_eq!(
            text(&roff),
            ".PP\nThe same with \\-\\-json.\n\
             .TP\n\\fB0\\fR\nlisted (possibly nothing)\n\
             .TP\n\\fB69\\fR\nfewer than a quorum of nodes answered: the list may miss locks\n\
             .TP\n\\fB126, 127\\fR\nCOMMAND cannot be executed\n"
        );
    }

    #[test]
    fn prose_is_filled_and_indented_lines_keep_their_layout() {
        let mut roff = Roff::new();
        prose(
            &mut roff,
            &[
                "Nodes come from --nodes, e.g.",
                "  A=b \\",
                "    c",
                "The end.",
            ],
        );
        assert_eq!(
            text(&roff),
            "Nodes come from \\-\\-nodes, e.g.\n.RS 4\n.nf\nA=b \\\\\n  c\n.fi\n.RE\nThe end.\n"
        );
    }
}
