//! `doctor` as a table: a row a node, each cell saying what is known and nothing more;
//! then the findings and the verdict.

use std::fmt::Write as _;
use std::time::Duration;

use quorumlock::{NodeReport, ReleasePath, Severity};

use super::verdict::Overall;
use super::Client;
use super::{ceil_secs, compact};

/// The table, the findings (the nodes', then the client's) and the overall verdict.
pub(super) fn human(reports: &[NodeReport], client: &Client, overall: &Overall) -> String {
    let header = [
        "node",
        "url",
        "reachable",
        "rtt",
        "version",
        "release",
        "role",
        "run_id",
        "uptime",
        "persistence",
        "eviction",
        "clock",
        "quarantine",
        "verdict",
    ];
    let mut rows = vec![header.map(String::from).to_vec()];
    rows.extend(reports.iter().map(row));
    let widths: Vec<usize> = (0..header.len())
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for r in &rows {
        let mut line = String::new();
        for (c, cell) in r.iter().enumerate() {
            if c + 1 == r.len() {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<width$}  ", width = widths[c]);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    let findings: Vec<String> = reports
        .iter()
        .flat_map(|r| {
            r.findings
                .iter()
                .map(move |f| format!("node {}: {}: {}\n", r.index, f.severity, f.message))
        })
        .chain(
            client
                .findings
                .iter()
                .map(|f| format!("client: {}: {}\n", f.severity, f.message)),
        )
        .collect();
    if !findings.is_empty() {
        out.push('\n');
        findings.iter().for_each(|f| out.push_str(f));
    }
    let _ = writeln!(out, "\n{}", overall.summary);
    out
}

/// One node's row: every field the server did not tell is `unknown`.
pub(super) fn row(r: &NodeReport) -> Vec<String> {
    let unknown = || "unknown".to_string();
    let known = |v: Option<String>| v.unwrap_or_else(unknown);
    let quarantine = match (r.reachable, r.quarantined_for) {
        (false, _) => unknown(),
        (true, None) => "-".to_string(),
        (true, Some(left)) => format!("{} left", compact(ceil_secs(left))),
    };
    vec![
        r.index.to_string(),
        r.node.clone(),
        if r.reachable { "yes" } else { "unreachable" }.to_string(),
        known(r.round_trip.map(millis)),
        known(r.server.clone().or_else(|| r.version.clone())),
        known(
            r.release_path
                .map(|path| release(path, r.compare_and_delete)),
        ),
        known(r.role.clone()),
        known(r.run_id.as_deref().map(|id| id.chars().take(8).collect())),
        known(r.uptime.map(compact)),
        persistence(r.aof_enabled, r.appendfsync.as_deref()),
        eviction(r.maxmemory, r.maxmemory_policy.as_deref()),
        known(r.clock_rate.map(|rate| {
            format!(
                "{} (drift {}%)",
                skew(rate),
                trimmed(r.drift_factor * 100.0)
            )
        })),
        quarantine,
        match r.verdict() {
            None => "ok",
            Some(Severity::Note) => "note",
            Some(Severity::Unknown) => "unknown",
            Some(_) => "UNSAFE",
        }
        .to_string(),
    ]
}

/// `script`, or `script (has delifeq)` where the server offers a Lua-free compare-and-delete
/// that the client does not use (design 2.4b).
pub(super) fn release(path: ReleasePath, offered: Option<ReleasePath>) -> String {
    match offered {
        Some(other) if other != path => format!("{path} (has {other})"),
        _ => path.to_string(),
    }
}

/// `aof always`, `aof everysec`, `aof off`, `aof, fsync unknown`, `unknown`. RDB snapshots are
/// not asked about: `aof off` says what is known, and for locks a snapshot loses what a
/// missing AOF loses.
pub(super) fn persistence(aof_enabled: Option<bool>, appendfsync: Option<&str>) -> String {
    match (aof_enabled, appendfsync) {
        (Some(true), Some(fsync)) => format!("aof {fsync}"),
        (Some(true), None) => "aof, fsync unknown".to_string(),
        (Some(false), _) => "aof off".to_string(),
        (None, _) => "unknown".to_string(),
    }
}

/// `noeviction`, `allkeys-lru (maxmemory 100mb)`, `allkeys-lru (no maxmemory)`, `unknown`.
pub(super) fn eviction(maxmemory: Option<u64>, policy: Option<&str>) -> String {
    match (policy, maxmemory) {
        (None, _) => "unknown".to_string(),
        (Some(policy), Some(0)) if policy == "noeviction" => policy.to_string(),
        (Some(policy), Some(0)) => format!("{policy} (no maxmemory)"),
        (Some(policy), Some(bytes)) => format!("{policy} (maxmemory {})", size(bytes)),
        (Some(policy), None) => format!("{policy} (maxmemory unknown)"),
    }
}

/// Bytes in Redis's units (`100mb` is 100 × 1024 × 1024), exact or in bytes.
pub(super) fn size(bytes: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "gb"), (1 << 20, "mb"), (1 << 10, "kb")];
    UNITS
        .iter()
        .find(|(unit, _)| bytes % unit == 0)
        .map(|(unit, name)| format!("{}{name}", bytes / unit))
        .unwrap_or_else(|| format!("{bytes} bytes"))
}

/// A clock rate as a signed skew in percent: `+0.002%`.
pub(super) fn skew(rate: f64) -> String {
    let percent = (rate - 1.0) * 100.0;
    // No `-0.000%`.
    let percent = if percent.abs() < 0.0005 { 0.0 } else { percent };
    format!("{percent:+.3}%")
}

/// A number with at most three decimals and no trailing zeros: `1`, `0.5`.
pub(super) fn trimmed(x: f64) -> String {
    let s = format!("{x:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// Milliseconds with two decimals: `0.21ms`.
pub(super) fn millis(d: Duration) -> String {
    format!("{:.2}ms", d.as_secs_f64() * 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_say_what_is_known_and_nothing_more() {
        assert_eq!(persistence(Some(true), Some("always")), "aof always");
        assert_eq!(persistence(Some(true), Some("everysec")), "aof everysec");
        assert_eq!(persistence(Some(false), Some("always")), "aof off");
        assert_eq!(persistence(Some(true), None), "aof, fsync unknown");
        assert_eq!(persistence(None, Some("always")), "unknown");
        assert_eq!(eviction(Some(0), Some("noeviction")), "noeviction");
        assert_eq!(
            eviction(Some(100 << 20), Some("allkeys-lru")),
            "allkeys-lru (maxmemory 100mb)"
        );
        assert_eq!(
            eviction(Some(0), Some("allkeys-lru")),
            "allkeys-lru (no maxmemory)"
        );
        assert_eq!(eviction(Some(0), None), "unknown");
        assert_eq!(size(1000), "1000 bytes");
        assert_eq!(size(3 << 30), "3gb");
        assert_eq!(skew(1.00002), "+0.002%");
        assert_eq!(skew(0.99), "-1.000%");
        assert_eq!(skew(0.9999999), "+0.000%");
        assert_eq!(trimmed(1.0), "1");
        assert_eq!(trimmed(0.01 * 100.0), "1");
        assert_eq!(trimmed(0.5), "0.5");
        assert_eq!(release(ReleasePath::Script, None), "script");
        assert_eq!(
            release(ReleasePath::Script, Some(ReleasePath::Delifeq)),
            "script (has delifeq)"
        );
        assert_eq!(compact(Duration::from_secs(42)), "42s");
        assert_eq!(compact(Duration::from_secs(303)), "5m 3s");
        assert_eq!(compact(Duration::from_secs(7500)), "2h 5m");
        assert_eq!(compact(Duration::from_secs(3 * 86400 + 7200)), "3d 2h");
        assert_eq!(
            ceil_secs(Duration::from_millis(11_200)),
            Duration::from_secs(12)
        );
        assert_eq!(ceil_secs(Duration::from_secs(12)), Duration::from_secs(12));
    }
}
