//! What operators install: the Debian package (scripts/package-deb) installed into an empty
//! root, and the container image (scripts/build-cli-image) run by Docker; each runs
//! `quorumlock --version` and `doctor` against real servers. The package is also checked by
//! lintian, and the man pages it installs (`quorumlock man`) are checked here.
//!
//! Those need a tool that the README's test command does not provide (dpkg, lintian, a Docker
//! engine), so they are ignored with that reason, as the interop tests are, rather than
//! passing without running where the tool is missing: `cargo test --all-features --test
//! package -- --ignored` runs them (CI does, in .ci/run), and fails where the tool is missing.
//! Whether the tool is there is known only at run time, and `#[ignore]` is decided when the
//! test is compiled (only a build script or a `--cfg` could decide it per machine, for the
//! whole crate and at the cost of a rebuild), so they are ignored everywhere. The binstall
//! archive needs only `tar`, and the man pages only the binary (and `script`, for a
//! terminal), and they run with the rest.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::cli::BIN;
use quorumlock::testkit::{LocalQuorum, NodeOptions};

fn repository() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `command` to its end: exit code, stdout, stderr.
fn run(command: &mut Command) -> (Option<i32>, String, String) {
    let out = command.output().expect("the command starts");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn has(tool: &str, args: &[&str]) -> bool {
    Command::new(tool)
        .args(args)
        .output()
        .is_ok_and(|out| out.status.success())
}

/// Fails, saying what is missing, unless `tool args` succeeds: an ignored test that was
/// asked for fails where its tool is missing, rather than passing without running.
fn require(tool: &str, args: &[&str], what: &str) {
    assert!(
        has(tool, args),
        "`{tool} {}` failed: this test needs {what}",
        args.join(" ")
    );
}

/// The version line `--version` prints.
fn version_line() -> String {
    format!("quorumlock {}\n", env!("CARGO_PKG_VERSION"))
}

/// `doctor` on persistent local nodes (safe, exit 0) through `binary` (a command that runs
/// the installed binary): its table lists each node, and its verdict.
fn doctor_is_safe(mut binary: Command, quorum: &LocalQuorum) {
    binary.args([
        "doctor",
        "--window",
        "1s",
        "--nodes",
        &quorum.urls().join(","),
    ]);
    let (code, stdout, stderr) = run(&mut binary);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    for url in quorum.urls() {
        assert!(stdout.contains(&url), "{url}: {stdout}");
    }
    assert!(
        stdout.contains("safe (3 of 3 nodes safe, quorum 2)"),
        "{stdout}"
    );
}

/// Builds the .deb of [`BIN`] into `out` with scripts/package-deb: its path.
fn debian_package(out: &Path) -> PathBuf {
    let (code, deb, stderr) = run(Command::new(repository().join("scripts/package-deb"))
        .args(["--binary", BIN, "--out"])
        .arg(out));
    assert_eq!(code, Some(0), "{stderr}");
    let deb = PathBuf::from(deb.trim());
    assert!(deb.exists(), "{deb:?}");
    deb
}

#[tokio::test]
#[ignore = "needs dpkg and dpkg-deb; run with --ignored (CI does)"]
async fn the_debian_package_installs_and_runs() {
    require("dpkg-deb", &["--version"], "dpkg-deb");
    require("dpkg", &["--version"], "dpkg");
    let out = tempfile::tempdir().expect("a directory");
    let deb = debian_package(out.path());

    // An empty root with an empty package database: nothing there but what the package puts.
    let root = tempfile::tempdir().expect("a directory");
    let admin = root.path().join("var/lib/dpkg");
    std::fs::create_dir_all(admin.join("info")).unwrap();
    std::fs::create_dir_all(admin.join("updates")).unwrap();
    std::fs::write(admin.join("status"), "").unwrap();
    let (code, stdout, stderr) = run(Command::new("dpkg")
        .arg(format!("--root={}", root.path().display()))
        // Not root; and libc6, its one dependency, is the host's, not in this empty root.
        .args([
            "--force-not-root",
            "--force-depends",
            "--log=/dev/null",
            "-i",
        ])
        .arg(&deb));
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    let (_, status, _) = run(Command::new("dpkg")
        .arg(format!("--root={}", root.path().display()))
        .args(["-s", "quorumlock"]));
    assert!(status.contains("Status: install ok installed"), "{status}");

    let installed = |path: &str| root.path().join(path);
    for file in [
        "usr/share/man/man1/quorumlock.1.gz",
        "usr/share/man/man1/quorumlock-run.1.gz",
        "usr/share/man/man1/quorumlock-ls.1.gz",
        "usr/share/bash-completion/completions/quorumlock",
        "usr/share/zsh/vendor-completions/_quorumlock",
        "usr/share/fish/vendor_completions.d/quorumlock.fish",
        "usr/share/doc/quorumlock/copyright",
        "usr/share/doc/quorumlock/changelog.gz",
    ] {
        assert!(installed(file).exists(), "{file} not installed");
    }
    let binary = installed("usr/bin/quorumlock");
    let (code, stdout, _) = run(Command::new(&binary).arg("--version"));
    assert_eq!((code, stdout), (Some(0), version_line()));
    let quorum = LocalQuorum::start_with(3, NodeOptions::persistent())
        .await
        .unwrap();
    doctor_is_safe(Command::new(&binary), &quorum);
    check_page(&installed("usr/share/man/man1/quorumlock-run.1.gz"));
}

/// The man page of `run` documents its options as --help does, in a man page's sections.
fn check_page(page: &Path) {
    let (code, text, stderr) = run(Command::new("gzip").arg("-dc").arg(page));
    assert_eq!(code, Some(0), "{stderr}");
    for option in ["hold\\-at\\-least", "nonblock", "quiet"] {
        assert!(
            text.contains(option),
            "{option} missing from {}",
            page.display()
        );
    }
    check_run_page(&text);
}

/// lintian, Debian's package checker, finds no error and no warning in the package (its
/// first complaints were the missing copyright file and changelog). Informational tags are
/// shown in the message of a failure, but allowed: `hardening-no-fortify-functions`, which
/// a Rust binary that calls no fortifiable libc function always gets.
#[test]
#[ignore = "needs dpkg-deb and lintian; run with --ignored (CI does)"]
fn the_debian_package_passes_lintian() {
    require("dpkg-deb", &["--version"], "dpkg-deb");
    require("lintian", &["--version"], "lintian");
    let out = tempfile::tempdir().expect("a directory");
    let deb = debian_package(out.path());
    let (code, stdout, stderr) = run(Command::new("lintian")
        .args(["--info", "--display-info", "--pedantic"])
        .arg(&deb));
    let complaints: Vec<&str> = stdout
        .lines()
        .filter(|line| line.starts_with("E: ") || line.starts_with("W: "))
        .collect();
    assert_eq!(complaints, Vec::<&str>::new(), "{stdout}{stderr}");
    assert_eq!(code, Some(0), "{stdout}{stderr}");
}

/// `quorumlock man` with its output in a file or a pipe: the page's roff source.
fn man(args: &[&str]) -> (Option<i32>, String, String) {
    run(Command::new(BIN).arg("man").args(args))
}

/// The lines of section `name` of a page (`.SH NAME` or `.SH "NAME"` up to the next `.SH`).
fn section<'a>(page: &'a str, name: &str) -> Vec<&'a str> {
    let headings = [format!(".SH {name}"), format!(".SH \"{name}\"")];
    page.lines()
        .skip_while(|l| !headings.iter().any(|h| l == h))
        .skip(1)
        .take_while(|l| !l.starts_with(".SH "))
        .collect()
}

/// `run`'s page: every option in the SYNOPSIS with what it takes, the long help's prose in
/// the DESCRIPTION, its exit statuses and examples in sections of their own, nothing under
/// `EXTRA` (where clap_mangen puts all of it).
fn check_run_page(page: &str) {
    let synopsis = section(page, "SYNOPSIS").join("\n");
    for option in [
        "[\\fB\\-\\-ttl\\fR \\fIDURATION\\fR]",
        "[\\fB\\-w\\fR|\\fB\\-\\-wait\\fR \\fIDURATION\\fR]",
        "[\\fB\\-E\\fR|\\fB\\-\\-conflict\\-exit\\-code\\fR \\fIN\\fR]",
        "[\\fB\\-\\-permits\\fR \\fIN\\fR]",
        "[\\fB\\-n\\fR|\\fB\\-\\-nonblock\\fR]",
        " \\fIRESOURCE\\fR \\fICOMMAND\\fR...",
    ] {
        assert!(synopsis.contains(option), "{option} not in {synopsis}");
    }
    assert!(!page.contains("EXTRA"), "{page}");
    let description = section(page, "DESCRIPTION").join("\n");
    assert!(
        description.contains("\n.PP\nWithout \\-n or \\-\\-wait"),
        "{description}"
    );
    let status = section(page, "EXIT STATUS").join("\n");
    assert!(
        status.contains(".TP\n\\fB75\\fR\nthe resource is held elsewhere"),
        "{status}"
    );
    assert!(
        status.contains(".TP\n\\fB126, 127\\fR\nCOMMAND cannot be executed"),
        "{status}"
    );
    let examples = section(page, "EXAMPLES").join("\n");
    assert!(
        examples.contains("\n  quorumlock run \\-\\-permits 4 exports ./export.sh\n"),
        "{examples}"
    );
    assert_eq!(section(page, "SEE ALSO"), ["\\fBquorumlock(1)\\fR"]);
}

/// `quorumlock man COMMAND` prints that command's page; `--dir` writes one page per command
/// (not for `help`, which has none), the same pages.
#[test]
fn every_command_has_a_man_page_in_a_man_pages_sections() {
    let (code, page, stderr) = man(&["run"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(page.contains("\n.TH QUORUMLOCK-RUN 1 "), "{page}");
    check_run_page(&page);

    let dir = tempfile::tempdir().expect("a directory");
    let (code, _, stderr) = man(&["--dir", dir.path().to_str().unwrap()]);
    assert_eq!(code, Some(0), "{stderr}");
    let mut written: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    written.sort();
    let commands = [
        "completions",
        "doctor",
        "elect",
        "leader",
        "ls",
        "man",
        "release",
        "run",
        "status",
    ];
    let mut expected: Vec<String> = commands
        .iter()
        .map(|c| format!("quorumlock-{c}.1"))
        .collect();
    expected.push("quorumlock.1".to_string());
    expected.sort();
    assert_eq!(written, expected);
    let read = |name: &str| std::fs::read_to_string(dir.path().join(name)).unwrap();
    assert_eq!(read("quorumlock-run.1"), page);
    for name in &written {
        let text = read(name);
        assert!(!text.contains("EXTRA"), "{name}: {text}");
        assert!(!section(&text, "SYNOPSIS").is_empty(), "{name}: {text}");
    }
    let main = read("quorumlock.1");
    let (code, printed, _) = man(&[]);
    assert_eq!((code, printed.as_str()), (Some(0), main.as_str()));
    let listed = section(&main, "COMMANDS").join("\n");
    for command in commands {
        assert!(
            listed.contains(&format!(
                "\\fBquorumlock {command}\\fR (quorumlock\\-{command}(1))"
            )),
            "{command}: {listed}"
        );
    }
    assert!(!main.contains("quorumlock\\-help"), "{main}");
    let doctor = section(&read("quorumlock-doctor.1"), "EXIT STATUS").join("\n");
    assert!(
        doctor.contains(".TP\n\\fB3\\fR\nevery node is safe, but quarantine"),
        "{doctor}"
    );

    let (code, _, stderr) = man(&["nosuch"]);
    assert_eq!(code, Some(64), "{stderr}");
    assert!(
        stderr.contains("no man page for `nosuch`: the commands are run, status,"),
        "{stderr}"
    );
}

/// What a terminal shows of `command` (run by `script`, whose pseudo-terminal is the
/// command's stdout), without the bold and underlining a pager would render: no escape
/// sequences, no overstrikes, no carriage returns.
fn at_a_terminal(command: &str, env: &[(&str, &str)]) -> String {
    let (code, shown, stderr) = run(Command::new("script")
        .args(["-q", "-e", "-c", command, "/dev/null"])
        .env("MANPAGER", "cat")
        .env("PAGER", "cat")
        .env("MANWIDTH", "100")
        .envs(env.iter().copied()));
    assert_eq!(code, Some(0), "{shown}{stderr}");
    let mut plain = String::new();
    let mut chars = shown.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\u{8}' => {
                plain.pop();
            }
            '\u{1b}' => {
                // CSI: ESC [ parameters, then a letter.
                for c in chars.by_ref() {
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            '\r' => {}
            c => plain.push(c),
        }
    }
    plain
}

/// At a terminal, `quorumlock man run` (and `quorumlock man`) shows the page laid out by
/// man(1), not its roff source; without man(1), the text of `quorumlock help run`.
#[test]
fn man_at_a_terminal_shows_the_page_not_its_source() {
    require("script", &["--version"], "script(1), from util-linux");
    let shown = at_a_terminal(&format!("'{BIN}' man run"), &[]);
    assert!(
        !shown.contains(".TH ") && !shown.contains("\\fB"),
        "{shown}"
    );
    assert!(shown.contains("--hold-at-least"), "{shown}");
    if has("man", &["--version"]) {
        assert!(shown.contains("EXIT STATUS"), "{shown}");
        assert!(shown.contains("[-w|--wait DURATION]"), "{shown}");
    }
    let main = at_a_terminal(&format!("'{BIN}' man"), &[]);
    assert!(!main.contains(".TH ") && !main.contains("\\fB"), "{main}");
    assert!(main.contains("quorumlock-run(1)"), "{main}");
    let no_man = tempfile::tempdir().expect("a directory");
    // PATH for quorumlock only: script(1) and its shell are found with the test's.
    let command = format!("PATH='{}' '{BIN}' man run", no_man.path().display());
    let shown = at_a_terminal(&command, &[]);
    assert!(
        shown.starts_with("Run a command while holding a lock on RESOURCE"),
        "{shown}"
    );
    assert!(shown.contains("\nExit status:\n"), "{shown}");
}

#[tokio::test]
#[ignore = "needs a Docker engine; run with --ignored (CI does)"]
async fn the_container_image_runs() {
    require("docker", &["info"], "a Docker engine that answers");
    let (code, image, stderr) = run(Command::new(repository().join("scripts/build-cli-image"))
        .args(["--binary", BIN, "quorumlock/quorumlock:test"]));
    assert_eq!(code, Some(0), "{stderr}");
    let image = image.trim().to_string();
    assert_eq!(image, "quorumlock/quorumlock:test");
    let docker = || {
        let mut c = Command::new("docker");
        // The host's network: the nodes listen on 127.0.0.1.
        c.args(["run", "--rm", "--network", "host", &image]);
        c
    };
    let (code, stdout, _) = run(docker().arg("--version"));
    assert_eq!((code, stdout), (Some(0), version_line()));
    let quorum = LocalQuorum::start_with(3, NodeOptions::persistent())
        .await
        .unwrap();
    doctor_is_safe(docker(), &quorum);
}

/// The release archive has the layout `cargo binstall` expects from Cargo.toml's
/// `[package.metadata.binstall]`: the file name of `pkg-url`, the binary at `bin-dir`.
#[test]
fn the_release_archive_matches_the_binstall_metadata() {
    let manifest = std::fs::read_to_string(repository().join("Cargo.toml")).unwrap();
    let setting = |name: &str| {
        manifest
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name} = \"")))
            .and_then(|rest| rest.strip_suffix('"'))
            .unwrap_or_else(|| panic!("{name} in [package.metadata.binstall]"))
            .to_string()
    };
    let out = tempfile::tempdir().expect("a directory");
    let (code, archive, stderr) = run(Command::new(repository().join("scripts/package-tarball"))
        .args([
            "--binary",
            BIN,
            "--target",
            "x86_64-unknown-linux-gnu",
            "--out",
        ])
        .arg(out.path()));
    assert_eq!(code, Some(0), "{stderr}");
    let archive = PathBuf::from(archive.trim());
    let fill = |template: String| {
        template
            .replace("{ repo }", "https://github.com/quorumlock/quorumlock")
            .replace("{ name }", "quorumlock")
            .replace("{ target }", "x86_64-unknown-linux-gnu")
            .replace("{ version }", env!("CARGO_PKG_VERSION"))
            .replace("{ archive-suffix }", ".tar.gz")
            .replace("{ bin }", "quorumlock")
            .replace("{ binary-ext }", "")
    };
    let url = fill(setting("pkg-url"));
    let file = archive.file_name().unwrap().to_string_lossy().into_owned();
    assert_eq!(url.rsplit('/').next(), Some(file.as_str()), "{url}");
    let (code, listing, stderr) = run(Command::new("tar").arg("-tzf").arg(&archive));
    assert_eq!(code, Some(0), "{stderr}");
    let binary = fill(setting("bin-dir"));
    assert!(
        listing.lines().any(|l| l == binary),
        "{binary} not in {listing}"
    );
    assert_eq!(setting("pkg-fmt"), "tgz");
}
