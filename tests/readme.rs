//! The README's examples, run: the README shows them with plain URLs (and `no_run`, so that
//! their doctests only compile them); here the same code runs against a local quorum, and a
//! check fails if the texts drift apart.

mod common;

use std::time::Duration;

use quorumlock::testkit::LocalQuorum;
use quorumlock::{Error, RedLock};

/// The README's example, statement for statement, but for its node list.
async fn readme_example(nodes: Vec<String>) -> Result<(), Box<dyn std::error::Error>> {
    let redlock = RedLock::builder()
        .nodes(nodes)
        .ttl(Duration::from_secs(10))
        .build()?;
    // A short-lived process: wait (up to 5 s) until a quorum of nodes is connected.
    redlock.wait_for_quorum(Duration::from_secs(5)).await;

    match redlock.lock("invoice:42").await {
        Ok(mut lock) => {
            // Only one holder at a time runs this, until lock.valid_until().
            lock.extend().await?; // need longer? extend before the validity runs out
            lock.release().await?;
        }
        Err(Error::Taken { .. }) => println!("someone else is on it"),
        Err(e) => return Err(e.into()),
    }
    // The process ends: release what this client still holds, and wait for the nodes.
    redlock.shutdown().await;
    Ok(())
}

// The README's `with_lock` example, verbatim.
async fn nightly_report(redlock: &RedLock) -> Result<String, Error> {
    redlock
        .with_lock("nightly-report", |held| async move {
            // The fencing token goes with every write, and storage refuses an older holder's
            // smaller one. The first call records it on a majority, if the acquisition has not.
            let token = held.fencing_token().await?;
            Ok(format!("report written with fencing token {token}"))
        })
        .await? // Err(Error::Lost { .. }) if the lock was lost and the work cancelled
}

#[tokio::test]
async fn the_readme_with_lock_example_runs() {
    let quorum = LocalQuorum::start(3).await.unwrap();
    let redlock = common::client(&quorum).await;
    let report = nightly_report(&redlock).await.unwrap();
    assert!(
        report.starts_with("report written with fencing token "),
        "{report}"
    );
    common::no_holders(&quorum, "nightly-report").await;
}

#[test]
fn the_readme_shows_the_with_lock_example_that_runs_here() {
    let function = |text: &'static str| {
        let start = text.find("async fn nightly_report(").expect("the function");
        let end = start + text[start..].find("\n}\n").expect("its end") + 3;
        &text[start..end]
    };
    let readme = include_str!("../README.md");
    assert_eq!(
        function(readme),
        function(include_str!("readme.rs")),
        "README.md's with_lock example and tests/readme.rs differ"
    );
    let block = &readme[..readme
        .find("async fn nightly_report(")
        .expect("the function")];
    let block = &block[block.rfind("```").expect("the block")..];
    assert!(block.starts_with("```rust,no_run\n"), "{block}");
    assert!(
        !block.lines().any(|l| l.starts_with("# ")),
        "hidden lines:\n{block}"
    );
}

#[tokio::test]
async fn the_readme_example_runs() {
    let quorum = LocalQuorum::start(3).await.unwrap();
    if let Err(e) = readme_example(quorum.urls()).await {
        panic!("the README's example failed: {e}");
    }
    // It took the lock and released it, and its shutdown waited for every node: no key is
    // left, at once.
    assert_eq!(common::holders(&quorum, "invoice:42").await, 0);
}

/// The statements from the builder to `Ok(())`, trimmed, without the node list.
fn statements(text: &str) -> Vec<&str> {
    let start = text
        .find("let redlock = RedLock::builder()")
        .expect("the builder");
    let end = start + text[start..].find("Ok(())").expect("`Ok(())`") + "Ok(())".len();
    text[start..end]
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with(".nodes("))
        .collect()
}

#[test]
fn the_readme_shows_the_code_that_runs_here() {
    let readme = include_str!("../README.md");
    let section = &readme[readme.find("\n## Example\n").expect("an Example section")..];
    let block = &section[section.find("```rust,no_run\n").expect("a no_run block")..];
    let block = &block[..block[3..].find("```").expect("the block's end") + 3];
    assert!(
        !block
            .lines()
            .any(|l| l.starts_with('#') && !l.starts_with("#[")),
        "the README's example has hidden lines:\n{block}"
    );
    assert!(
        block.contains(".nodes([\"redis://"),
        "plain URLs in the README:\n{block}"
    );
    let this = include_str!("readme.rs");
    let here = &this[this.find("async fn readme_example(").expect("the function")..];
    assert_eq!(
        statements(block),
        statements(here),
        "README.md's example and tests/readme.rs differ"
    );
}

/// The README opens with what the crate is for, then the two commands, exactly as CI runs
/// the second (.ci/run greps for it), then the example within its first 40 lines.
#[test]
fn the_readme_leads_with_the_two_commands_and_the_example() {
    let readme = include_str!("../README.md");
    let first = &readme[readme.find("```").expect("a code block")..];
    assert!(first.starts_with("```sh\n"), "{first}");
    let block = &first[..first[3..].find("```").expect("its end") + 3];
    let commands: Vec<&str> = block
        .lines()
        .skip(1)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with("```"))
        .collect();
    assert_eq!(
        commands,
        [
            "scripts/ensure-redis && cargo run --release --example demo",
            "scripts/ensure-redis && cargo test --all-features",
        ],
        "the README's first block"
    );
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    for file in ["scripts/ensure-redis", "examples/demo.rs"] {
        assert!(root.join(file).is_file(), "{file} is missing");
    }
    let example = readme
        .find("```rust,no_run\n")
        .expect("the example's block");
    let line = readme[..example].lines().count() + 1;
    assert!(
        line <= 40,
        "the example starts at line {line} of the README"
    );
    assert!(
        readme[..example].contains("\n## Example\n"),
        "the first Rust block is the example"
    );
}

/// GitHub's anchor for a heading: lower case, spaces as hyphens, other punctuation dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The lines of a Markdown text outside its code blocks.
fn prose(text: &str) -> Vec<&str> {
    let mut fenced = false;
    let mut lines = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            lines.push(line);
        }
    }
    lines
}

/// The headings of a Markdown text (`## Title`), without their `#`s.
fn headings(text: &str) -> Vec<&str> {
    prose(text)
        .into_iter()
        .filter(|l| l.starts_with('#'))
        .filter_map(|l| l.trim_start_matches('#').strip_prefix(' '))
        .collect()
}

/// The relative links of a Markdown text outside its code blocks: `[text](target)`.
fn relative_links(text: &str) -> Vec<String> {
    let mut links = Vec::new();
    for line in prose(text) {
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let Some(end) = rest.find(')') else { break };
            let target = &rest[..end];
            if !target.contains("://") && !target.is_empty() {
                links.push(target.to_string());
            }
            rest = &rest[end..];
        }
    }
    links
}

/// Every relative link of the README and of the pages it sends readers to leads to a file
/// that exists, and every `#anchor` in it to a heading of that file: the material moved out
/// of the README is found where the README says.
#[test]
fn the_readme_and_its_pages_link_to_what_exists() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let pages = [
        ("README.md", include_str!("../README.md")),
        ("docs/operations.md", include_str!("../docs/operations.md")),
        (
            "docs/troubleshooting.md",
            include_str!("../docs/troubleshooting.md"),
        ),
        (
            "docs/configuration.md",
            include_str!("../docs/configuration.md"),
        ),
    ];
    let mut checked = 0;
    for (page, text) in pages {
        let dir = root.join(page).parent().expect("a directory").to_path_buf();
        for link in relative_links(text) {
            let (file, fragment) = match link.split_once('#') {
                Some((file, fragment)) => (file, Some(fragment)),
                None => (link.as_str(), None),
            };
            let target = if file.is_empty() {
                root.join(page)
            } else {
                dir.join(file)
            };
            assert!(target.exists(), "{page}: `{link}` leads nowhere");
            if let Some(fragment) = fragment {
                let linked = std::fs::read_to_string(&target).expect("a text file");
                assert!(
                    headings(&linked).iter().any(|h| anchor(h) == fragment),
                    "{page}: `{link}`: no such heading in {}",
                    target.display()
                );
            }
            checked += 1;
        }
    }
    assert!(checked > 20, "only {checked} links found");
}
