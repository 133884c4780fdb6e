//! The example service, `examples/scheduled_worker.rs`, run as a user runs it: its binary,
//! configured from `QUORUMLOCK_NODES`, against real servers.

mod common;

use std::process::Stdio;

use quorumlock::testkit::LocalQuorum;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

fn worker(urls: &str) -> Child {
    let mut command = Command::new(common::example("scheduled_worker"));
    for (var, _) in std::env::vars().filter(|(v, _)| v.starts_with("QUORUMLOCK_")) {
        command.env_remove(var);
    }
    command
        .env("QUORUMLOCK_NODES", urls)
        .env("SCHEDULER_EVERY", "100ms")
        .env("SCHEDULER_JOBS", "3")
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the example starts")
}

/// The terms in which `lines` say the worker ran, in order.
fn terms(lines: &[String]) -> Vec<u64> {
    lines
        .iter()
        .filter_map(|l| l.split(" in term ").nth(1))
        .filter_map(|t| t.trim().parse().ok())
        .collect()
}

/// Two instances: the second waits in line while the first leads, and takes over when the
/// first resigns after its three runs, in a greater term.
#[tokio::test]
async fn two_scheduled_workers_take_turns_in_increasing_terms() {
    let quorum = LocalQuorum::start(3).await.expect("quorum");
    let urls = quorum.urls().join(",");

    let mut first = worker(&urls);
    let mut first_out = BufReader::new(first.stdout.take().expect("stdout")).lines();
    let mut first_lines = Vec::new();
    // The first instance leads before the second starts.
    while let Some(line) = first_out.next_line().await.expect("read") {
        let leading = line.contains(": leading in term ");
        first_lines.push(line);
        if leading {
            break;
        }
    }
    let second = worker(&urls);
    while let Some(line) = first_out.next_line().await.expect("read") {
        first_lines.push(line);
    }
    let first_status = first.wait().await.expect("first exits");
    let second = second.wait_with_output().await.expect("second exits");
    let second_lines: Vec<String> = String::from_utf8_lossy(&second.stdout)
        .lines()
        .map(str::to_string)
        .collect();

    assert!(first_status.success(), "{first_lines:?}");
    assert!(second.status.success(), "{second_lines:?}");
    // Each: leading in one term, three runs in it, then resigned.
    for lines in [&first_lines, &second_lines] {
        let terms = terms(lines);
        assert_eq!(terms.len(), 4, "{lines:?}");
        assert!(terms.iter().all(|t| *t == terms[0]), "{lines:?}");
        assert_eq!(
            lines.last().map(|l| l.ends_with("resigned after 3 runs")),
            Some(true),
            "{lines:?}"
        );
    }
    let (first_term, second_term) = (terms(&first_lines)[0], terms(&second_lines)[0]);
    assert!(
        second_term > first_term,
        "terms {first_term} then {second_term}"
    );
}
