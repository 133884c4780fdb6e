//! A chaos-suite client for running inside a container: contending workers that lock
//! resources on the given nodes, run a read-sleep-write critical section on a counter in
//! another Redis, and record every attempt. With `--write-one-in N` the workers take a side
//! of a read-write lock named after each resource instead, the write side once in `N`
//! attempts at random (a writer read-sleep-writes the lock's counter, a reader only reads
//! it), as `Settings::read_write` has the local workers do. The history goes to stdout as JSON lines (one
//! record per line, tests/chaos/history.rs); progress and errors go to stderr. The driver
//! (tests/chaos_compose.rs) merges the histories of every client and checks them together: times
//! are `CLOCK_MONOTONIC`, which the host and its containers share.
//!
//! ```text
//! chaos_client --client NAME --nodes URL,URL,... --counter URL --resources R,R,...
//!              --start-at NS --stop-at NS [--workers N] [--ttl-ms MS]
//!              [--node-timeout-ms MS] [--retry-within-ms MS] [--max-ops N]
//!              [--quarantine true|false] [--write-one-in N]
//! chaos_client --elect NAME --client NAME --nodes URL,URL,... --stop-at NS
//!              [--ttl-ms MS] [--node-timeout-ms MS]
//! ```
//!
//! With `--elect`, the client is a candidate of the election NAME instead
//! (tests/chaos/election.rs): it campaigns until `--stop-at`, and writes each term's
//! records as the term begins and ends, one line at a time, so that a candidate killed while
//! leading leaves its term's beginning behind.
//!
//! `--start-at` and `--stop-at` are readings of `CLOCK_MONOTONIC` in nanoseconds, so that
//! clients in several containers start together with the driver's schedule. `--stop-at` is
//! only a bound (the driver sets it an hour out): a run ends when the file named by
//! `QUORUMLOCK_CHAOS_END_FILE` appears, which the driver copies into each container once its
//! schedule's last event has happened, however late a loaded machine made it
//! (docs/chaos.md, "Schedules on a loaded machine"). Without the variable, the run ends at
//! `--stop-at`.
//! scripts/build-client-image puts this binary in a FROM-scratch image.

#[path = "../tests/chaos/mod.rs"]
mod chaos;

use std::collections::HashMap;
use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use chaos::history::{mono_ns, to_jsonl, History};
use chaos::workload::{self, Counter, Ctx, Settings};

const USAGE: &str = "usage: chaos_client --client NAME --nodes URL,URL,... --counter URL \
                     --resources R,R,... --start-at NS --stop-at NS [--workers N] \
                     [--ttl-ms MS] [--node-timeout-ms MS] [--retry-within-ms MS] \
                     [--max-ops N] [--quarantine true|false] [--write-one-in N]\n\
                     or: chaos_client --elect NAME --client NAME --nodes URL,URL,... \
                     --stop-at NS [--ttl-ms MS] [--node-timeout-ms MS]";

fn parse_args() -> Result<HashMap<String, String>, String> {
    let mut args = HashMap::new();
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "-h" || flag == "--help" {
            return Err(USAGE.to_owned());
        }
        let name = flag
            .strip_prefix("--")
            .ok_or_else(|| format!("unexpected argument {flag:?}\n{USAGE}"))?;
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        args.insert(name.to_owned(), value);
    }
    Ok(args)
}

fn required<'a>(args: &'a HashMap<String, String>, name: &str) -> Result<&'a str, String> {
    args.get(name)
        .map(String::as_str)
        .ok_or_else(|| format!("--{name} is required\n{USAGE}"))
}

fn number<T: std::str::FromStr>(
    args: &HashMap<String, String>,
    name: &str,
    default: T,
) -> Result<T, String> {
    match args.get(name) {
        None => Ok(default),
        Some(v) => v
            .parse()
            .map_err(|_| format!("--{name}: not a number: {v}")),
    }
}

fn list(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

/// `--elect`: one candidate, campaigning until `--stop-at`.
async fn elect(args: &HashMap<String, String>, election: &str) -> Result<(), String> {
    let client = required(args, "client")?.to_owned();
    let nodes = list(required(args, "nodes")?);
    let stop_at: u64 = number(args, "stop-at", 0)?;
    let defaults = Settings::fast();
    let ttl = number(args, "ttl-ms", defaults.ttl.as_millis() as u64)?;
    let node_timeout = number(
        args,
        "node-timeout-ms",
        defaults.node_timeout.as_millis() as u64,
    )?;
    let settings = Settings {
        ttl: Duration::from_millis(ttl),
        node_timeout: Duration::from_millis(node_timeout),
        ..defaults
    };
    let redlock = settings
        .builder(&nodes)
        .build()
        .map_err(|e| format!("client: {e}"))?;
    redlock.wait_for_quorum(Duration::from_secs(5)).await;
    eprintln!("chaos_client {client}: campaigning for {election}");
    let emit = |record: chaos::history::Record| {
        let mut out = std::io::stdout().lock();
        let _ = out
            .write_all(to_jsonl(&[record]).as_bytes())
            .and_then(|()| out.flush());
    };
    chaos::election::candidate(&redlock, &client, election, stop_at, emit).await;
    redlock.shutdown().await;
    Ok(())
}

async fn run() -> Result<(), String> {
    let args = parse_args()?;
    if let Some(election) = args.get("elect") {
        return elect(&args, election).await;
    }
    let client = required(&args, "client")?.to_owned();
    let nodes = list(required(&args, "nodes")?);
    let counter_url = required(&args, "counter")?;
    let resources = list(required(&args, "resources")?);
    let start_at: u64 = number(&args, "start-at", 0)?;
    let stop_at: u64 = number(&args, "stop-at", 0)?;
    let workers: usize = number(&args, "workers", 2)?;
    let defaults = Settings::fast();
    let ms = |name: &str, default: Duration| -> Result<Duration, String> {
        let default = u64::try_from(default.as_millis()).unwrap_or(u64::MAX);
        number(&args, name, default).map(Duration::from_millis)
    };
    let settings = Settings {
        ttl: ms("ttl-ms", defaults.ttl)?,
        node_timeout: ms("node-timeout-ms", defaults.node_timeout)?,
        retry_within: ms("retry-within-ms", defaults.retry_within)?,
        max_ops: number(&args, "max-ops", defaults.max_ops)?,
        quarantine: number(&args, "quarantine", defaults.quarantine)?,
        ..defaults
    };
    // Read-write locks, the write side once in N attempts.
    let settings = match args.get("write-one-in") {
        None => settings,
        Some(_) => match number(&args, "write-one-in", 0u32)? {
            0 => return Err(format!("--write-one-in: at least 1\n{USAGE}")),
            n => settings.read_write(n),
        },
    };
    if nodes.is_empty() || resources.is_empty() || stop_at <= start_at {
        return Err(format!(
            "need nodes, resources and --stop-at after --start-at\n{USAGE}"
        ));
    }

    let counter = Counter::connect(counter_url).await?;
    let ctx = Arc::new(Ctx {
        settings,
        counter,
        history: History::default(),
    });
    // Every node must count before the start; a client still quarantining nodes when the
    // schedule begins would blur the results.
    let left = Duration::from_nanos(start_at.saturating_sub(mono_ns()));
    let clients = workload::connect_clients(
        &ctx.settings,
        &nodes,
        &client,
        1,
        left.max(Duration::from_secs(2)),
    )
    .await?;
    let what = match ctx.settings.write_one_in {
        None => "locks".to_owned(),
        Some(n) => format!("read-write locks, the write side 1 attempt in {n}"),
    };
    eprintln!(
        "chaos_client {client}: {} nodes ready, {} workers per resource on {what}, starting in {:?}",
        nodes.len(),
        workers,
        Duration::from_nanos(start_at.saturating_sub(mono_ns()))
    );
    let mut tasks = workload::spawn_workers(&ctx, &clients, &resources, workers, start_at, stop_at);
    for (name, redlock) in &clients {
        tasks.push(tokio::spawn(workload::observe(
            Arc::clone(&ctx),
            redlock.clone(),
            name.clone(),
            start_at,
            stop_at,
        )));
    }
    for task in tasks {
        task.await.map_err(|e| format!("a worker failed: {e}"))?;
    }
    for (_, redlock) in &clients {
        redlock.shutdown().await;
    }
    let records = ctx.history.records();
    let mut out = std::io::stdout().lock();
    out.write_all(to_jsonl(&records).as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| format!("writing the history: {e}"))?;
    eprintln!("chaos_client {client}: {} attempts recorded", records.len());
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("chaos_client: {e}");
            ExitCode::FAILURE
        }
    }
}
