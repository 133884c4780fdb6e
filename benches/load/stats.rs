//! Percentiles, medians, fairness and the process's CPU clock.

use std::time::Duration;

/// The value at percentile `p` (0–100) of sorted `samples`, by the nearest-rank method;
/// `None` for no samples.
pub(crate) fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// The median of `values` (in any order); `None` for none.
pub(crate) fn median(values: &[f64]) -> Option<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(sorted[n / 2]),
        _ => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2.0),
    }
}

/// Jain's fairness index of per-task counts: `(Σx)² / (n·Σx²)`, 1 when all are equal, `1/n`
/// when one task got everything.
pub(crate) fn jain(counts: &[u64]) -> f64 {
    let sum: f64 = counts.iter().map(|&c| c as f64).sum();
    let squares: f64 = counts.iter().map(|&c| (c as f64).powi(2)).sum();
    if squares == 0.0 {
        return 0.0;
    }
    sum * sum / (counts.len() as f64 * squares)
}

/// The percentiles kept in the JSON for the distribution charts.
const DISTRIBUTION: [f64; 17] = [
    0.0, 1.0, 5.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 95.0, 99.0, 99.5, 99.9,
    100.0,
];

/// Latencies in ms, sorted, with the figures the tables show.
#[derive(Debug, Clone, Default)]
pub(crate) struct Latencies {
    /// Every sample, sorted, in ms.
    pub(crate) sorted_ms: Vec<f64>,
    /// Calls that returned an error (or hit the cap); not among the samples.
    pub(crate) failed: u64,
}

impl Latencies {
    pub(crate) fn push(&mut self, took: Duration) {
        self.sorted_ms.push(took.as_secs_f64() * 1e3);
    }

    /// Sorts the samples; call once all are in.
    pub(crate) fn finish(&mut self) {
        self.sorted_ms.sort_by(f64::total_cmp);
    }

    pub(crate) fn p(&self, p: f64) -> Option<f64> {
        percentile(&self.sorted_ms, p)
    }

    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "samples": self.sorted_ms.len(),
            "failed": self.failed,
            "p50_ms": self.p(50.0),
            "p99_ms": self.p(99.0),
            "max_ms": self.sorted_ms.last(),
            // The distribution, for the latency charts: (percentile, ms).
            "percentiles_ms": DISTRIBUTION
                .iter()
                .filter_map(|&p| self.p(p).map(|ms| [p, ms]))
                .collect::<Vec<_>>(),
        })
    }
}

/// CPU time used so far by the whole bench process (every thread, finished ones too), in
/// ns: `CLOCK_PROCESS_CPUTIME_ID`. The redis servers are other processes and not counted.
pub(crate) fn process_cpu_ns() -> u64 {
    use nix::time::{clock_gettime, ClockId};
    clock_gettime(ClockId::CLOCK_PROCESS_CPUTIME_ID)
        .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or(0)
}

/// `x` with `digits` decimals, or `–` for none.
pub(crate) fn fmt(x: Option<f64>, digits: usize) -> String {
    x.map_or_else(|| "–".to_string(), |x| format!("{x:.digits$}"))
}
