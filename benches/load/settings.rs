//! What to run and for how long: command-line arguments and `QUORUMLOCK_LOAD_*` variables.

use std::str::FromStr;
use std::time::Duration;

use crate::{NODES, NODE_TIMEOUT, TTL};

/// Every workload, by its letter.
const WORKLOADS: &str = "bcdefgiw";

/// The knobs of a run. Each has a full-run default and a smoke-run default (`--smoke` or
/// `QUORUMLOCK_LOAD_SMOKE=1`); a variable overrides either.
#[derive(Debug)]
pub(crate) struct Settings {
    /// The workloads to run (letters of [`WORKLOADS`]): arguments `b c ...` or
    /// `QUORUMLOCK_LOAD=b,c`; all by default.
    pub(crate) workloads: String,
    pub(crate) smoke: bool,
    /// b, c: seconds each implementation runs per round (`QUORUMLOCK_LOAD_SECS`; 3, smoke 0.5).
    pub(crate) secs: f64,
    /// b, c: rounds (`QUORUMLOCK_LOAD_ROUNDS`; 3, smoke 1).
    pub(crate) rounds: usize,
    /// b: concurrent tasks (`QUORUMLOCK_LOAD_TASKS`; 1,4,16,64).
    pub(crate) tasks: Vec<usize>,
    /// b: the implementations to run, by name (`QUORUMLOCK_LOAD_IMPLS`, comma-separated;
    /// all by default): one alone, to profile it.
    pub(crate) impls: Vec<crate::impls::Impl>,
    /// c: tasks on the one resource (`QUORUMLOCK_LOAD_CONTENDERS`; 16).
    pub(crate) contenders: usize,
    /// w: the numbers of contending tasks of the contention curve (`QUORUMLOCK_LOAD_CURVE`;
    /// 1,2,4,8,16,32,64).
    pub(crate) curve: Vec<usize>,
    /// c, w: how long a holder keeps the lock (`QUORUMLOCK_LOAD_HOLD_MS`; 1). 0: it only
    /// yields to the runtime once, so that the handoffs measure the lock alone.
    pub(crate) hold: Duration,
    /// c: the random pause between attempts, uniform from 0 to this
    /// (`QUORUMLOCK_LOAD_JITTER_MS`; 10).
    pub(crate) jitter: Duration,
    /// d, e, g: latency samples per implementation and state (`QUORUMLOCK_LOAD_SAMPLES`;
    /// 1000, smoke 100).
    pub(crate) samples: usize,
    /// d, e, f: rslock's samples with frozen nodes, each up to a few seconds
    /// (`QUORUMLOCK_LOAD_RSLOCK_SAMPLES`; 6, smoke 2).
    pub(crate) rslock_samples: usize,
    /// f: quorumlock's and the floor's time-to-error samples (`QUORUMLOCK_LOAD_ERROR_SAMPLES`;
    /// 10, smoke 3).
    pub(crate) error_samples: usize,
    /// g: quorum sizes (`QUORUMLOCK_LOAD_NODES`; 1,3,5,7).
    pub(crate) nodes: Vec<usize>,
    /// i: counted cycles per implementation (`QUORUMLOCK_LOAD_CYCLES`; 2000, smoke 300).
    pub(crate) cycles: usize,
}

fn var<T: FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(v) => v.trim().parse().unwrap_or_else(|_| {
            eprintln!("load: cannot parse {name}={v}");
            std::process::exit(2);
        }),
        Err(_) => default,
    }
}

fn list(name: &str, default: &[usize]) -> Vec<usize> {
    match std::env::var(name) {
        Ok(v) => v
            .split(',')
            .map(|x| {
                x.trim().parse().unwrap_or_else(|_| {
                    eprintln!("load: cannot parse {name}={v}");
                    std::process::exit(2);
                })
            })
            .collect(),
        Err(_) => default.to_vec(),
    }
}

/// The implementations named in `name` (all of [`Impl::ALL`](crate::impls::Impl::ALL) if unset).
fn impls(name: &str) -> Vec<crate::impls::Impl> {
    use crate::impls::Impl;
    let Ok(v) = std::env::var(name) else {
        return Impl::ALL.to_vec();
    };
    v.split(',')
        .map(|x| {
            let x = x.trim();
            Impl::ALL
                .into_iter()
                .find(|imp| imp.name() == x)
                .unwrap_or_else(|| {
                    eprintln!("load: unknown implementation {x:?} in {name}={v}");
                    std::process::exit(2);
                })
        })
        .collect()
}

/// The full-run or the smoke-run default.
fn pick<T>(smoke: bool, full: T, short: T) -> T {
    if smoke {
        short
    } else {
        full
    }
}

impl Settings {
    /// Reads the arguments (workload letters, `--smoke`; cargo's `--bench` and other flags
    /// are ignored) and the variables.
    pub(crate) fn from_env_and_args() -> Settings {
        let mut workloads = String::new();
        let mut smoke = std::env::var("QUORUMLOCK_LOAD_SMOKE").is_ok_and(|v| v == "1");
        let args = std::env::args().skip(1);
        let env = std::env::var("QUORUMLOCK_LOAD").ok();
        for arg in args.chain(env.iter().flat_map(|v| v.split(',').map(str::to_string))) {
            let arg = arg.trim();
            match arg {
                "--smoke" | "smoke" => smoke = true,
                "all" => workloads.push_str(WORKLOADS),
                _ if arg.starts_with('-') || arg.is_empty() => {}
                _ if arg.chars().all(|c| WORKLOADS.contains(c)) => workloads.push_str(arg),
                _ => {
                    eprintln!("load: unknown workload {arg:?}; choose from {WORKLOADS}");
                    std::process::exit(2);
                }
            }
        }
        if workloads.is_empty() {
            workloads = WORKLOADS.to_string();
        }
        Settings {
            workloads,
            smoke,
            secs: var("QUORUMLOCK_LOAD_SECS", pick(smoke, 3.0, 0.5)),
            rounds: var("QUORUMLOCK_LOAD_ROUNDS", pick(smoke, 3, 1)),
            tasks: list("QUORUMLOCK_LOAD_TASKS", &[1, 4, 16, 64]),
            impls: impls("QUORUMLOCK_LOAD_IMPLS"),
            contenders: var("QUORUMLOCK_LOAD_CONTENDERS", 16),
            curve: list("QUORUMLOCK_LOAD_CURVE", &[1, 2, 4, 8, 16, 32, 64]),
            hold: Duration::from_millis(var("QUORUMLOCK_LOAD_HOLD_MS", 1)),
            jitter: Duration::from_millis(var("QUORUMLOCK_LOAD_JITTER_MS", 10).max(1)),
            samples: var("QUORUMLOCK_LOAD_SAMPLES", pick(smoke, 1000, 100)),
            rslock_samples: var("QUORUMLOCK_LOAD_RSLOCK_SAMPLES", pick(smoke, 6, 2)),
            error_samples: var("QUORUMLOCK_LOAD_ERROR_SAMPLES", pick(smoke, 10, 3)),
            nodes: list("QUORUMLOCK_LOAD_NODES", &[1, 3, 5, 7]),
            cycles: var("QUORUMLOCK_LOAD_CYCLES", pick(smoke, 2000, 300)),
        }
    }

    pub(crate) fn runs(&self, workload: char) -> bool {
        self.workloads.contains(workload)
    }

    pub(crate) fn runs_any(&self, workloads: &str) -> bool {
        workloads.chars().any(|w| self.runs(w))
    }

    pub(crate) fn describe(&self) -> String {
        format!(
            "workloads {}{}; {} s × {} rounds; tasks {:?}; {} samples; nodes {:?}; {} cycles",
            self.workloads,
            if self.smoke { " (smoke)" } else { "" },
            self.secs,
            self.rounds,
            self.tasks,
            self.samples,
            self.nodes,
            self.cycles
        )
    }

    /// The settings, and the constants every workload shares, for results.json.
    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "workloads": self.workloads,
            "smoke": self.smoke,
            "secs": self.secs,
            "rounds": self.rounds,
            "tasks": self.tasks,
            "contenders": self.contenders,
            "curve": self.curve,
            "hold_ms": self.hold.as_secs_f64() * 1e3,
            "jitter_ms": self.jitter.as_secs_f64() * 1e3,
            "samples": self.samples,
            "rslock_samples": self.rslock_samples,
            "error_samples": self.error_samples,
            "nodes": self.nodes,
            "cycles": self.cycles,
            "quorum_nodes": NODES,
            "ttl_ms": TTL.as_millis() as u64,
            "node_timeout_ms": NODE_TIMEOUT.as_millis() as u64,
            "runtime": "tokio multi-thread, 2 workers",
            "cpus": std::thread::available_parallelism().map_or(0, |n| n.get()),
            "unix_time": std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
        })
    }
}
