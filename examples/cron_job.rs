//! A job for a crontab, to copy: a process that starts, takes the lock, asks its fencing token,
//! does its work, releases the lock and exits, in well under a second. Run on every host, the
//! job runs on one of them at a time; the others skip it (exit 75).
//!
//! Configured from the environment, as `RedLockBuilder::from_env` reads it:
//!
//! ```sh
//! export QUORUMLOCK_NODES=redis://10.0.0.1,redis://10.0.0.2,redis://10.0.0.3
//! cargo run --example cron_job -- nightly-report
//! ```
//!
//! After a loss of data on the nodes (new servers, a restart of a majority, a flush), the
//! nodes are quarantined for the longest ttl. The quarantine is kept on the nodes, so this
//! process waits what is left of it, as every other process does, rather than a quarantine of
//! its own that it would never see end. It prints the fencing token it ran with.

use std::process::ExitCode;

use quorumlock::{Error, RedLockBuilder};

#[tokio::main]
async fn main() -> ExitCode {
    let job = std::env::args().nth(1).unwrap_or_else(|| "cron-job".into());
    match run(&job).await {
        Ok(token) => {
            println!("ran {job} with fencing token {token}");
            ExitCode::SUCCESS
        }
        Err(Error::Taken { .. }) => ExitCode::from(75),
        Err(e) => {
            eprintln!("cron_job: {e}");
            ExitCode::from(69)
        }
    }
}

async fn run(job: &str) -> Result<u64, Error> {
    let redlock = RedLockBuilder::from_env()?.build()?;
    redlock
        .wait_for_quorum(redlock.config().connect_timeout())
        .await;
    // What is left of the nodes' quarantine, if a loss of data put them in one.
    if let Some(left) = redlock.quarantine_left() {
        tokio::time::sleep(left).await;
    }
    let lock = redlock.try_lock(job).await?;
    let token = lock.fencing_token().await;
    // The job's work goes here, with `token` for the storage it writes to.
    lock.release().await?;
    redlock.shutdown().await;
    token
}
