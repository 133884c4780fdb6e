//! A scheduled worker to copy: run it on every host, and the job runs on one of them at a time,
//! the elected leader, each run tagged with the leader's term (a fencing token) for the
//! storage it writes to. When the leader stops (Ctrl-C, a crash, a network cut), another
//! instance takes over: at once after a resignation, within the ttl after a crash.
//!
//! Configured from the environment, as `RedLockBuilder::from_env` reads it:
//!
//! ```sh
//! # the five masters of docker-compose.yml (README, "Five nodes with Docker Compose")
//! export QUORUMLOCK_NODES=redis://127.0.0.1:7001,redis://127.0.0.1:7002,redis://127.0.0.1:7003,redis://127.0.0.1:7004,redis://127.0.0.1:7005
//! cargo run --example scheduled_worker    # in two or three terminals
//! ```
//!
//! `SCHEDULER_EVERY` sets the period (humantime: `5s`, the default; `500ms`), and
//! `SCHEDULER_JOBS`, if set, makes a leader resign and the process exit after that many runs
//! (the tests use it).

use std::time::Duration;

use quorumlock::{Candidacy, Leadership, RedLock, RedLockBuilder};

/// The election every instance campaigns in.
const ELECTION: &str = "scheduled-worker";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let every = match std::env::var("SCHEDULER_EVERY") {
        Ok(text) => humantime::parse_duration(&text)?,
        Err(_) => Duration::from_secs(5),
    };
    let jobs: Option<u64> = match std::env::var("SCHEDULER_JOBS") {
        Ok(text) => Some(text.parse()?),
        Err(_) => None,
    };
    let identity = format!("worker-{}", std::process::id());
    let redlock = RedLockBuilder::from_env()?.connect().await?;

    let outcome = tokio::select! {
        outcome = serve(&redlock, &identity, every, jobs) => outcome,
        _ = tokio::signal::ctrl_c() => {
            println!("{identity}: stopping");
            Ok(())
        }
    };
    // Whatever this process still holds is released now (the next leader takes over at once),
    // rather than left to expire.
    redlock.shutdown().await;
    outcome
}

/// Campaigns, runs the job while leading, and campaigns again after a loss; returns after
/// `jobs` runs if that is set.
async fn serve(
    redlock: &RedLock,
    identity: &str,
    every: Duration,
    jobs: Option<u64>,
) -> Result<(), Box<dyn std::error::Error>> {
    let mut done = 0;
    loop {
        let candidacy = Candidacy::new().identity(identity);
        // Waits in line while another instance leads; woken at once by its resignation.
        let leadership = redlock.campaign_with(ELECTION, candidacy).await?;
        println!("{identity}: leading in term {}", leadership.term());
        loop {
            tokio::select! {
                () = tokio::time::sleep(every) => {}
                reason = leadership.lost() => {
                    // Stop at once: the leadership is lost before its validity ends, so no
                    // run of this leader overlaps the next leader's.
                    println!("{identity}: lost the leadership: {reason}");
                    break;
                }
            }
            done += 1;
            run_job(&leadership, done);
            if jobs.is_some_and(|jobs| done >= jobs) {
                leadership.resign().await?;
                println!("{identity}: resigned after {done} runs");
                return Ok(());
            }
        }
    }
}

/// The job. Its writes carry the term: storage that keeps the greatest term it has seen and
/// refuses smaller ones is safe even from a leader that paused past its validity.
fn run_job(leadership: &Leadership, n: u64) {
    println!(
        "{}: run {n} in term {}",
        leadership.identity(),
        leadership.term()
    );
}
