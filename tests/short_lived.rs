//! Short-lived processes after a loss of data on the nodes (design 2.6a): fresh servers that
//! no client used yet, a majority restarted empty, a majority flushed. Each process lives well
//! under a second (the command line's `run -n`, and `examples/cron_job.rs` on the library), far
//! less than the longest ttl: the quarantine is kept on the nodes, so the processes wait out
//! one quarantine together, and each one that comes after it gets its lock and a fencing token
//! greater than the one before. With quarantine off, the very first process does.

mod common;

use std::process::Stdio;

use common::cli::binary;
use quorumlock::testkit::{LocalQuorum, NodeOptions};
use tokio::process::Command;

/// The longest ttl of every process here: the quarantine lasts that long.
const TTL: &str = "1s";

/// Processes that may fail while the quarantine lasts, at most (a guard against a hang: with
/// a quarantine of 1 s and processes of a tenth of a second, about ten do).
const MAX_REFUSED: usize = 150;

/// Which short-lived program.
#[derive(Debug, Clone, Copy)]
enum Program {
    /// `quorumlock run -n job -- ...`, which prints the fencing token it ran with.
    Cli,
    /// `examples/cron_job.rs`.
    Example,
}

/// What one process did: its exit code, the fencing token it ran with, what it said.
#[derive(Debug)]
struct Ran {
    code: i32,
    token: Option<u64>,
    stderr: String,
}

/// Runs `program` once against `q`, to its end.
async fn once(program: Program, q: &LocalQuorum, quarantine: bool) -> Ran {
    let urls = q.urls();
    let mut command = match program {
        Program::Cli => {
            let mut c = binary(&urls);
            c.args(["run", "-n", "job", "--", "sh", "-c"])
                .arg("echo token=$QUORUMLOCK_FENCING_TOKEN");
            c
        }
        Program::Example => {
            let mut c = Command::new(common::example("cron_job"));
            common::cli::without_our_variables(&mut c);
            c.env("QUORUMLOCK_NODES", urls.join(",")).arg("job");
            c
        }
    };
    // A generous node timeout: the servers write every command to disk before answering.
    command
        .env("QUORUMLOCK_TTL", TTL)
        .env("QUORUMLOCK_MAX_TTL", TTL)
        .env("QUORUMLOCK_NODE_TIMEOUT", "500ms")
        .env("QUORUMLOCK_QUARANTINE", quarantine.to_string())
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let out = common::within("a short-lived process", command.output())
        .await
        .expect("the program starts");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let token = stdout
        .lines()
        .find_map(|l| {
            l.strip_prefix("token=")
                .or_else(|| l.split("fencing token ").nth(1))
        })
        .map(|t| t.trim().parse().expect("a token"));
    Ran {
        code: out.status.code().expect("an exit code"),
        token,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Each node's record of its quarantine, if any.
async fn records(q: &LocalQuorum) -> Vec<Option<String>> {
    let mut records = Vec::new();
    for node in q.nodes() {
        records.push(common::get(node, "quorumlock:quarantine").await);
    }
    records
}

/// Runs `program` in a loop of separate processes, one after the other, until one gets its
/// lock and token, then five more: every one after the first success succeeds, with a token
/// greater than the one before (and than `above`). Until then, each process is refused for
/// the quarantine (exit 69), and the quarantine it waits out is the one recorded on the nodes
/// by the first: a node's record, once written, stays the same until the node is re-seeded
/// (which deletes it). Returns the tokens.
async fn until_served(q: &LocalQuorum, program: Program, above: u64) -> Vec<u64> {
    let mut refused = 0;
    let mut seen: Vec<Option<String>> = vec![None; q.len()];
    let first = loop {
        let ran = once(program, q, true).await;
        if ran.code == 0 {
            break ran;
        }
        assert_eq!(ran.code, 69, "{program:?}: {ran:?}");
        assert!(ran.stderr.contains("quarantine"), "{program:?}: {ran:?}");
        refused += 1;
        assert!(refused < MAX_REFUSED, "{program:?}: no process got through");
        let now = records(q).await;
        let kept = now.iter().filter(|r| r.is_some()).count();
        assert!(
            2 * kept > q.len(),
            "a majority keeps its quarantine: {now:?}"
        );
        for (node, (before, now)) in seen.iter_mut().zip(now).enumerate() {
            if let (Some(before), Some(now)) = (before.as_ref(), now.as_ref()) {
                assert_eq!(before, now, "node {node}'s quarantine started again");
            }
            if now.is_some() {
                *before = now;
            }
        }
    };
    let mut tokens = vec![first.token.expect("the token it ran with")];
    for _ in 0..5 {
        let ran = once(program, q, true).await;
        assert_eq!(ran.code, 0, "{program:?} after the first success: {ran:?}");
        tokens.push(ran.token.expect("the token it ran with"));
    }
    let mut expected_above = above;
    for &token in &tokens {
        assert!(
            token > expected_above,
            "{program:?}: tokens {tokens:?} after {above}"
        );
        expected_above = token;
    }
    tokens
}

/// Servers that no client used yet: no marker (the testkit's removed).
async fn fresh(options: NodeOptions) -> LocalQuorum {
    let q = LocalQuorum::start_with(3, options).await.expect("quorum");
    for node in q.nodes() {
        node.command(&["DEL", "quorumlock:node"])
            .await
            .expect("DEL");
    }
    q
}

#[tokio::test]
async fn cli_calls_on_fresh_servers_wait_out_one_quarantine_together() {
    let q = fresh(NodeOptions::default()).await;
    until_served(&q, Program::Cli, 0).await;
}

#[tokio::test]
async fn library_processes_on_fresh_servers_wait_out_one_quarantine_together() {
    let q = fresh(NodeOptions::default()).await;
    until_served(&q, Program::Example, 0).await;
}

#[tokio::test]
async fn after_a_majority_restarted_empty_short_lived_processes_get_through() {
    let mut q = fresh(NodeOptions::volatile()).await;
    let before = until_served(&q, Program::Cli, 0).await;
    for i in [0, 1] {
        q.node_mut(i).restart().await.expect("restart");
    }
    let after = until_served(&q, Program::Example, *before.last().unwrap()).await;
    until_served(&q, Program::Cli, *after.last().unwrap()).await;
}

#[tokio::test]
async fn after_a_majority_was_flushed_short_lived_processes_get_through() {
    let q = fresh(NodeOptions::default()).await;
    let before = until_served(&q, Program::Example, 0).await;
    for node in &q.nodes()[1..] {
        node.command(&["FLUSHALL"]).await.expect("FLUSHALL");
    }
    until_served(&q, Program::Cli, *before.last().unwrap()).await;
}

#[tokio::test]
async fn with_quarantine_off_the_first_process_on_fresh_servers_gets_through() {
    let q = fresh(NodeOptions::default()).await;
    let mut last = 0;
    for program in [Program::Cli, Program::Example, Program::Cli] {
        let ran = once(program, &q, false).await;
        assert_eq!(ran.code, 0, "{program:?}: {ran:?}");
        let token = ran.token.expect("the token it ran with");
        assert!(token > last, "{program:?}: {token} after {last}");
        last = token;
    }
}

/// Safety across losses, with short-lived processes as the only clients: while volatile
/// nodes restart empty one after another (three rolling restarts of all three nodes),
/// processes start, lock, ask their token and exit, one after the other. Every token handed
/// out is greater than every one before it, and processes get through again after the last
/// restart.
#[tokio::test]
async fn processes_that_come_and_go_while_nodes_restart_never_repeat_a_token() {
    let mut q = fresh(NodeOptions::volatile()).await;
    let mut tokens = until_served(&q, Program::Cli, 0).await;
    let restarts = (0..3).flat_map(|_| 0..q.len()).collect::<Vec<_>>();
    for (n, node) in restarts.into_iter().enumerate() {
        q.node_mut(node).restart().await.expect("restart");
        // A few processes between two restarts, each against whatever the nodes are now.
        let program = if n % 2 == 0 {
            Program::Cli
        } else {
            Program::Example
        };
        for _ in 0..3 {
            let ran = once(program, &q, true).await;
            match ran.code {
                0 => tokens.push(ran.token.expect("the token it ran with")),
                69 => {}
                _ => panic!("{program:?}: {ran:?}"),
            }
        }
    }
    eprintln!("tokens during the restarts: {}", tokens.len() - 6);
    let last = *tokens.last().unwrap();
    tokens.extend(until_served(&q, Program::Example, last).await);
    for pair in tokens.windows(2) {
        assert!(
            pair[0] < pair[1],
            "a token repeated or went back: {tokens:?}"
        );
    }
}

/// In a crontab (`run -n -q -E 0`), a quarantine whose end the nodes tell is expected and
/// temporary: `-q` prints nothing for it (exit 69), so cron mails nothing; without `-q`, the
/// message says when to try again.
#[tokio::test]
async fn quiet_runs_print_nothing_while_the_quarantine_lasts() {
    let q = fresh(NodeOptions::default()).await;
    let run = |quiet: bool| {
        let mut c = binary(&q.urls());
        // Longer than the test: the quarantine lasts throughout.
        c.env("QUORUMLOCK_TTL", "10m")
            .args(["run", "-n", "-E", "0"]);
        if quiet {
            c.arg("-q");
        }
        c.args(["job", "--", "true"]).stdin(Stdio::null());
        c
    };
    for quiet in [false, true, false] {
        let out = common::within("run", run(quiet).output()).await.unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(69), "{stderr}");
        assert!(out.stdout.is_empty());
        if quiet {
            assert_eq!(stderr, "");
        } else {
            assert!(stderr.contains("quarantine ends in"), "{stderr}");
            assert!(stderr.contains("try again then"), "{stderr}");
        }
    }
}
