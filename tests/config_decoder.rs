//! The RESP decoder an application gets, tried as an application gets it: the `[patch]` lines
//! of the README (src/report/decoder.rs writes the same in its warning) and what an
//! application that logs nothing is told while it has not added them.
//!
//! A new crate depends on quorumlock (this checkout, by path: as for a published crate,
//! quorumlock's own `[patch]` does not apply to it) with the README's `tokio`, and builds a
//! client the way the README does, with no `tracing` subscriber. It is built first as is (the
//! unbounded decoder: the warning on stderr, once, unless turned off), then with the README's
//! `[patch]` lines added at its root and `cargo update -p redis-protocol` run, as the README
//! says (the bounded decoder: silence). GitHub cannot be reached from the tests, so the lines'
//! URL is pointed at this checkout (`file://`), and the commit they pin is checked to be in its
//! history with `vendor/redis-protocol` unchanged since; nothing else of the lines is changed.
//!
//! The builds need crates.io (the index, and redis-protocol 6.0.0 as released) and compile
//! fred, tokio and rustls for the new crate the first time (a few minutes); they share a target
//! directory under target/tmp, so that later runs compile only quorumlock and the crate. The
//! new crate starts from this repository's Cargo.lock, so it builds the versions tested here.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repository() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The README's `[patch]` block, without its fences.
fn readme_patch_lines() -> String {
    let readme = std::fs::read_to_string(repository().join("README.md")).unwrap();
    let start = readme
        .find("```toml\n[patch.crates-io]\n")
        .expect("the README's [patch] block")
        + "```toml\n".len();
    let end = start + readme[start..].find("```").expect("the block's end");
    readme[start..end].to_string()
}

/// The value of `key = "..."` in the README's line for redis-protocol.
fn patch_value(key: &str) -> String {
    let lines = readme_patch_lines();
    let at = format!("{key} = \"");
    let start = lines
        .find(&at)
        .unwrap_or_else(|| panic!("no {key} in {lines}"))
        + at.len();
    let end = start + lines[start..].find('"').unwrap();
    lines[start..end].to_string()
}

/// Runs `command` to its end: whether it succeeded, stdout, stderr.
fn run(command: &mut Command) -> (bool, String, String) {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("{command:?} does not start: {e}"));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn git(args: &[&str]) -> (bool, String, String) {
    run(Command::new("git").arg("-C").arg(repository()).args(args))
}

/// The lines pin a commit (no branch, which moves), of this repository, whose
/// `vendor/redis-protocol` is the decoder this checkout builds with: a change to the
/// directory fails here until `DECODER_REV` (src/report/decoder.rs) names a commit with it.
#[test]
fn the_readmes_lines_pin_a_commit_that_holds_this_decoder() {
    let lines = readme_patch_lines();
    assert!(
        lines.starts_with("[patch.crates-io]\nredis-protocol = { git = "),
        "{lines}"
    );
    assert!(!lines.contains("branch"), "{lines}");
    assert_eq!(patch_value("git"), env!("CARGO_PKG_REPOSITORY"));
    let rev = patch_value("rev");
    assert!(
        rev.len() == 40 && rev.bytes().all(|b| b.is_ascii_hexdigit()),
        "a full commit hash: {rev}"
    );
    let (ancestor, _, stderr) = git(&["merge-base", "--is-ancestor", &rev, "HEAD"]);
    assert!(
        ancestor,
        "{rev} is not in this checkout's history: {stderr}"
    );
    let (unchanged, diff, stderr) = git(&["diff", "--stat", &rev, "--", "vendor/redis-protocol"]);
    assert!(
        unchanged && diff.is_empty(),
        "vendor/redis-protocol changed since {rev}:\n{diff}{stderr}"
    );
    let (listed, untracked, stderr) = git(&[
        "ls-files",
        "--others",
        "--exclude-standard",
        "vendor/redis-protocol",
    ]);
    assert!(
        listed && untracked.is_empty(),
        "not in {rev}: {untracked}{stderr}"
    );
}

/// The new crate: builds clients as the README does, with the warning left on (`default`),
/// turned off by the builder (`quiet`) or by `QUORUMLOCK_DECODER_WARNING` (`env`), and prints
/// which decoder it has and what `Config::findings()` says.
const MAIN: &str = r#"use quorumlock::{RedLock, RedLockBuilder};

const NODES: [&str; 3] = ["redis://127.0.0.1:1", "redis://127.0.0.1:2", "redis://127.0.0.1:3"];

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let builder = match std::env::args().nth(1).as_deref() {
        Some("quiet") => RedLock::builder().nodes(NODES).decoder_warning(false),
        Some("env") => RedLockBuilder::from_env()?.nodes(NODES),
        _ => RedLock::builder().nodes(NODES),
    };
    println!("bounded: {}", quorumlock::decoder_is_bounded());
    for finding in builder.validate()?.findings() {
        println!("finding: {}: {}", finding.severity, finding.message);
    }
    // Two clients in one process: the warning is printed once.
    let (first, second) = (builder.build()?, builder.build()?);
    drop((first, second));
    Ok(())
}
"#;

/// Where the new crate and its builds live, kept between runs.
fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("decoder-patch")
}

/// `cargo` (the one running the tests) in `app`, building into the shared target directory.
fn cargo(app: &Path, args: &[&str]) -> (bool, String, String) {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    run(Command::new(cargo)
        .current_dir(app)
        .env_remove("CARGO_TARGET_DIR")
        .env("CARGO_TERM_COLOR", "never")
        .args(args))
}

/// The new crate's Cargo.toml, as an application writes it after the README, without the
/// default feature `tls` (rustls and ring, minutes of a cold build on two cores, and nothing
/// to do with the decoder).
fn manifest(repo: &Path) -> String {
    format!(
        "[package]\nname = \"decoder-patch-app\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\
         publish = false\n\n\
         # Not a member of the workspace of the directories above.\n[workspace]\n\n\
         [dependencies]\nquorumlock = {{ path = {:?}, default-features = false }}\n\
         tokio = {{ version = \"1\", features = [\"macros\", \"rt-multi-thread\"] }}\n",
        repo.display().to_string()
    )
}

/// What one run of the new crate shows: its stdout and stderr.
struct Shown {
    stdout: String,
    stderr: String,
}

impl Shown {
    fn warnings(&self) -> usize {
        self.stderr.matches("quorumlock: warning: ").count()
    }
}

fn run_app(binary: &Path, mode: &str, env: &[(&str, &str)]) -> Shown {
    let mut command = Command::new(binary);
    command.arg(mode);
    for var in quorumlock::ENV_VARS {
        command.env_remove(var);
    }
    command.envs(env.iter().copied());
    let (ok, stdout, stderr) = run(&mut command);
    assert!(ok, "{mode}: {stdout}{stderr}");
    Shown { stdout, stderr }
}

#[test]
fn a_new_crate_gets_the_bounded_decoder_the_readmes_way_and_is_told_until_then() {
    let repo = repository();
    let app = workspace().join("app");
    std::fs::create_dir_all(app.join("src")).unwrap();
    std::fs::write(app.join("Cargo.toml"), manifest(&repo)).unwrap();
    std::fs::write(app.join("src/main.rs"), MAIN).unwrap();
    std::fs::copy(repo.join("Cargo.lock"), app.join("Cargo.lock")).unwrap();
    let target = workspace().join("target");
    let target_arg = format!("--target-dir={}", target.display());
    let binary = target.join("debug/decoder-patch-app");

    // Without the lines: the unbounded decoder, and the application is told on stderr.
    let (built, _, stderr) = cargo(&app, &["build", &target_arg]);
    assert!(built, "the new crate does not build:\n{stderr}");
    let told = run_app(&binary, "default", &[]);
    assert!(
        told.stdout.starts_with("bounded: false\n"),
        "{}",
        told.stdout
    );
    assert!(
        told.stdout.contains(
            "finding: unsafe: this build's RESP decoder (redis-protocol, under fred) does not \
             bound the nesting of replies"
        ),
        "{}",
        told.stdout
    );
    assert_eq!(told.warnings(), 1, "once for two clients: {}", told.stderr);
    assert!(
        told.stderr
            .contains(&format!("\n\n{}\n", readme_patch_lines())),
        "the warning gives the README's lines: {}",
        told.stderr
    );
    for (mode, env) in [
        ("quiet", &[][..]),
        ("env", &[("QUORUMLOCK_DECODER_WARNING", "false")][..]),
    ] {
        let quiet = run_app(&binary, mode, env);
        assert!(
            quiet.stdout.starts_with("bounded: false\n"),
            "{}",
            quiet.stdout
        );
        assert_eq!(quiet.warnings(), 0, "{mode}: {}", quiet.stderr);
    }

    // The README's lines at the root of the crate (with GitHub's URL pointed at this
    // checkout), and the README's command.
    let lines = readme_patch_lines().replace(
        env!("CARGO_PKG_REPOSITORY"),
        &format!("file://{}", repo.display()),
    );
    std::fs::write(
        app.join("Cargo.toml"),
        format!("{}\n{lines}", manifest(&repo)),
    )
    .unwrap();
    let (updated, _, stderr) = cargo(&app, &["update", "-p", "redis-protocol"]);
    assert!(updated, "cargo update -p redis-protocol:\n{stderr}");
    let (built, _, stderr) = cargo(&app, &["build", &target_arg]);
    assert!(
        built,
        "the new crate does not build with the lines:\n{stderr}"
    );
    assert!(
        !stderr.contains("was not used in the crate graph"),
        "{stderr}"
    );
    let bounded = run_app(&binary, "default", &[]);
    assert_eq!(bounded.stdout, "bounded: true\n", "no finding");
    assert_eq!(bounded.stderr, "", "nothing printed");
}
