//! What a run writes next to criterion's results, and the arithmetic for it.

use std::path::{Path, PathBuf};

use crate::{Function, COUNTED_CYCLES};

/// What one cycle costs besides time, counted over [`COUNTED_CYCLES`] cycles.
pub(crate) struct Costs {
    /// CPU time of the bench process (every thread: the runtime, the clients), µs.
    pub(crate) client_cpu_us: f64,
    /// CPU time of the five servers together, µs.
    pub(crate) servers_cpu_us: f64,
    /// Commands run by all nodes together, by name.
    pub(crate) commands: Vec<(String, f64)>,
}

impl Costs {
    pub(crate) fn describe(&self) -> String {
        let commands: Vec<String> = self
            .commands
            .iter()
            .map(|(name, n)| format!("{name} {n:.2}"))
            .collect();
        format!(
            "client CPU {:.1} µs, servers CPU {:.1} µs, commands: {}",
            self.client_cpu_us,
            self.servers_cpu_us,
            commands.join(", ")
        )
    }

    pub(crate) fn to_json(&self) -> String {
        let commands: Vec<String> = self
            .commands
            .iter()
            .map(|(name, n)| format!("\"{name}\": {n:.3}"))
            .collect();
        format!(
            "{{\"cycles\": {COUNTED_CYCLES}, \"client_cpu_us\": {:.3}, \"servers_cpu_us\": {:.3}, \"commands\": {{{}}}}}\n",
            self.client_cpu_us,
            self.servers_cpu_us,
            commands.join(", ")
        )
    }
}

/// CPU time used so far by the threads listed under `tasks` (a `/proc/<pid>/task`
/// directory), in ns, from their schedstat (Linux; 0 elsewhere).
pub(crate) fn cpu_ns(tasks: &str) -> u64 {
    let Ok(threads) = std::fs::read_dir(tasks) else {
        return 0;
    };
    threads
        .filter_map(|thread| {
            let stat = std::fs::read_to_string(thread.ok()?.path().join("schedstat")).ok()?;
            stat.split_whitespace().next()?.parse::<u64>().ok()
        })
        .sum()
}

pub(crate) fn client_cpu() -> u64 {
    cpu_ns("/proc/self/task")
}

/// The baseline this run's results are saved under: `--save-baseline NAME`, or `default`.
pub(crate) fn baseline(default: &str) -> String {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == "--save-baseline")
        .and_then(|i| args.get(i + 1).cloned())
        .or_else(|| {
            args.iter()
                .find_map(|a| a.strip_prefix("--save-baseline=").map(str::to_string))
        })
        .unwrap_or_else(|| default.to_string())
}

/// Where criterion writes a function's results: `<criterion home>/acquire_release/
/// <function>/<baseline>`, found as criterion finds it.
pub(crate) fn results_dir(function: Function, baseline: &str) -> PathBuf {
    let home = std::env::var_os("CRITERION_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("CARGO_TARGET_DIR").map(|d| Path::new(&d).join("criterion")))
        .unwrap_or_else(|| {
            let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
            tmp.parent().unwrap_or(tmp).join("criterion")
        });
    home.join("acquire_release")
        .join(function.name())
        .join(baseline)
}

/// The median of sorted `samples` and a distribution-free 95% confidence interval for it:
/// the order statistics `n/2 ∓ 0.98·√n` (normal approximation of the binomial).
pub(crate) fn median_with_ci(sorted: &[f64]) -> (f64, f64, f64) {
    let n = sorted.len();
    let median = if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    };
    let half = 0.98 * (n as f64).sqrt();
    let low = ((n as f64 / 2.0 - half).floor().max(0.0)) as usize;
    let high = ((n as f64 / 2.0 + half).ceil() as usize).min(n - 1);
    (median, sorted[low], sorted[high])
}

/// A failed cycle (a node timeout on a loaded machine) is measured like any other, but more
/// than a few would make the figure meaningless.
pub(crate) fn check_failures(function: Function, failed: u64, cycles: u64) {
    eprintln!("{}: {failed} failed cycles of {cycles}", function.name());
    assert!(
        failed * 100 <= cycles,
        "{}: too many failed cycles",
        function.name()
    );
}

/// Writes `file` next to criterion's results for `function` (see [`results_dir`]).
pub(crate) fn save(function: Function, baseline: &str, file: &str, contents: &str) {
    let dir = results_dir(function, baseline);
    let written =
        std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(dir.join(file), contents));
    if let Err(e) = written {
        eprintln!("could not write {}: {e}", dir.join(file).display());
    }
}
