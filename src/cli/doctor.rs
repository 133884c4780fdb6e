//! `quorumlock doctor`: what each node is and which of the algorithm's assumptions it breaks,
//! from [`RedLockBuilder::inspect`](quorumlock::RedLockBuilder::inspect), as a table or as
//! JSON, with an overall verdict across the nodes. The inspection writes nothing to any node
//! but the record of a quarantine on a node that may have lost data (the countdown that every
//! client, and every later `doctor`, shares), and this adds no command of its own.

use std::fmt::Write as _;
use std::time::Duration;

use clap::Args;
use quorumlock::{
    decoder_is_bounded, quorum, Finding, NodeErrorKind, NodeReport, ReleasePath, Severity,
};
use serde::Serialize;

use super::exit::{Failure, SOFTWARE};
use super::options::{positive_duration, NodesArg, Vars, NODES};

/// Something is unsafe.
const UNSAFE: u8 = 1;
/// Nothing is unsafe, but something could not be checked.
const UNKNOWN: u8 = 2;
/// Every node is safe, but quarantine keeps them from a quorum for now: locks fail until then.
const UNAVAILABLE: u8 = 3;

/// `quorumlock doctor`.
#[derive(Debug, Args)]
#[command(after_long_help = AFTER_HELP)]
pub(crate) struct DoctorArgs {
    #[command(flatten)]
    nodes: NodesArg,

    /// How long to watch each node's clock, to compare its rate with this machine's: longer
    /// is more precise
    #[arg(long, value_name = "DURATION", value_parser = positive_duration, default_value = "1s")]
    window: Duration,

    /// Print one JSON document instead of the table (same exit status)
    #[arg(long)]
    json: bool,
}

const AFTER_HELP: &str = "\
Inspects every node without taking a lock and without writing anything: PING, INFO,
CONFIG GET, TIME twice (--window apart, for the node's clock rate), and permission probes
in forms that change nothing, on a random key under $QUORUMLOCK_KEY_PREFIX (EXISTS, GET,
SET XX, DEL and PEXPIRE of an absent key, an EVAL that does not compile, an EVALSHA of a
script cached nowhere). Prints one row per node, then the
findings node by node, then an overall verdict, which also says whether the safe nodes are
still a quorum and, if quarantine keeps them from one, for how long.

The library's QUORUMLOCK_* variables apply, with the library's defaults: nodes are connected
to under $QUORUMLOCK_CONNECT_TIMEOUT (1s) and asked under $QUORUMLOCK_NODE_TIMEOUT (100ms);
clock rates are checked against $QUORUMLOCK_DRIFT_FACTOR (0.01); a node that may have lost
data (a restart, a flush, a failover: told by its quorumlock:node marker, whatever its
persistence) is quarantined unless $QUORUMLOCK_QUARANTINE is false, for
$QUORUMLOCK_MAX_TTL (default: $QUORUMLOCK_TTL, or 10s as in the library and for
`quorumlock run`; set them as your clients do).

A node is unsafe if it is unreachable, a replica, the same server as an earlier node, can
evict keys (maxmemory with a policy other than noeviction), refuses commands the client
needs (or, with a key prefix, keys under it; clients do not count such a node), has a clock rate off by more than the drift factor, or does not persist every write
(appendonly yes with appendfsync always) while quarantine is off. What a server refuses to
tell (ACLs) is printed as `unknown` (null in JSON), never guessed.

Findings about the client rather than a node follow, as `client: ...` (`client` in JSON):
unsafe if this binary's RESP decoder does not bound the nesting of replies (one hostile node
could abort the process; the finding gives the Cargo.toml lines that fix it, and the verdict
names it), and notes about
fragile settings: fewer than three nodes, an even number of nodes, a node timeout large
against the validity of a lock of $QUORUMLOCK_TTL.

Exit status:
  0   every node is safe (with notes at most, such as a young node in quarantine), and a
      quorum of them counts now
  1   something is unsafe
  2   nothing is unsafe, but something could not be checked (unknown)
  3   every node is safe, but quarantine keeps them from a quorum for now: locks fail
      (`quorumlock run` exits 69) until the time printed. Persistence does not shorten
      it; QUORUMLOCK_QUARANTINE=false is only for nodes whose restarts are delayed some
      other way
  64  usage or configuration error

Example:
  QUORUMLOCK_NODES=redis://a:6379,redis://b:6379,redis://c:6379 quorumlock doctor --json";

pub(crate) async fn doctor(args: DoctorArgs) -> Result<u8, Failure> {
    let mut vars = Vars::from_env()?;
    vars.flag(NODES, args.nodes.nodes.clone());
    // The quarantine lasts the longest ttl: by default the library's, as for `quorumlock run`.
    let builder = vars.builder()?;
    let client = Client {
        decoder_bounded: decoder_is_bounded(),
        findings: builder.validate()?.findings(),
    };
    let reports = builder.inspect(args.window).await?;
    let overall = Overall::of(&reports, client.verdict(), client.decoder_bounded);
    if args.json {
        let document = to_json(&reports, &client, &overall);
        let text =
            serde_json::to_string_pretty(&document).map_err(|e| Failure::new(SOFTWARE, e))?;
        println!("{text}");
    } else {
        print!("{}", human(&reports, &client, &overall));
    }
    Ok(overall.code)
}

/// What is found about the client rather than a node: this binary's RESP decoder, and the
/// settings (`Config::findings`).
#[derive(Debug)]
struct Client {
    decoder_bounded: bool,
    findings: Vec<Finding>,
}

impl Client {
    /// The most serious finding, if any.
    fn verdict(&self) -> Option<Severity> {
        self.findings.iter().map(|f| f.severity).max()
    }
}

/// The verdict across the nodes.
#[derive(Debug)]
struct Overall {
    /// `safe`, `unknown`, `unavailable` or `unsafe`.
    verdict: &'static str,
    code: u8,
    quorum: usize,
    /// How long until quarantine lets a quorum of safe nodes count (zero: now); `None` when
    /// there are too few safe nodes for a quorum.
    quorum_in: Option<Duration>,
    /// One line, without its newline.
    summary: String,
}

impl Overall {
    /// The verdict across the nodes' reports and `client`, the most serious finding about the
    /// client itself (its build, its settings), if any; `decoder_bounded` says whether this
    /// binary's RESP decoder bounds nesting (the unsafe finding when it does not).
    fn of(reports: &[NodeReport], client: Option<Severity>, decoder_bounded: bool) -> Overall {
        let nodes = reports.len();
        let quorum = quorum(nodes);
        let with = |wanted: Severity| -> Vec<usize> {
            reports
                .iter()
                .filter(|r| r.verdict() == Some(wanted))
                .map(|r| r.index)
                .collect()
        };
        let (unsafe_nodes, unknown_nodes) = (with(Severity::Unsafe), with(Severity::Unknown));
        let safe = reports.iter().filter(|r| r.is_safe()).count();
        // A quarantined node is safe, but its votes do not count yet.
        let mut waits: Vec<Duration> = reports
            .iter()
            .filter(|r| r.is_safe())
            .map(|r| r.quarantined_for.unwrap_or_default())
            .collect();
        waits.sort();
        // The quorum-th shortest wait: when enough safe nodes count for a lock.
        let quorum_in = waits.get(quorum.saturating_sub(1)).copied();
        let waiting = quorum_in.filter(|wait| !wait.is_zero());
        let counts = format!("{safe} of {nodes} nodes safe, quorum {quorum}");
        let availability = if safe + unknown_nodes.len() < quorum {
            ": too few safe nodes for a quorum, locks need unsafe votes or fail".to_string()
        } else if safe < quorum {
            ": a quorum of safe nodes is not certain".to_string()
        } else {
            match waiting {
                Some(wait) => format!(
                    "; quarantine keeps them from a quorum for {} more",
                    compact(ceil_secs(wait))
                ),
                None => String::new(),
            }
        };
        let counts_and_availability = format!("{counts}{availability}");
        let client_unsafe = client == Some(Severity::Unsafe);
        // What makes the client unsafe, named where a reader who skips the findings looks.
        let client_is = if decoder_bounded {
            "this client is unsafe"
        } else {
            "this binary's RESP decoder is unbounded, so one hostile node can abort it"
        };
        let (verdict, code, summary) = if !unsafe_nodes.is_empty() || client_unsafe {
            let which = match (unsafe_nodes.is_empty(), client_unsafe) {
                (true, _) => client_is.to_string(),
                (false, true) if decoder_bounded => {
                    format!("{}, and so is this client", listed(&unsafe_nodes, "unsafe"))
                }
                (false, true) => format!("{}, and {client_is}", listed(&unsafe_nodes, "unsafe")),
                (false, false) => listed(&unsafe_nodes, "unsafe"),
            };
            let summary = format!("UNSAFE: {which} ({counts_and_availability})");
            ("unsafe", UNSAFE, summary)
        } else if !unknown_nodes.is_empty() {
            let which = listed(&unknown_nodes, "");
            let summary =
                format!("unknown: {which} could not be fully checked ({counts_and_availability})");
            ("unknown", UNKNOWN, summary)
        } else if let Some(wait) = waiting {
            // Safe, but no lock now: `run` exits 69 at this very moment, so this fails too.
            let summary = format!(
                "UNAVAILABLE for {}: quarantine keeps the nodes from a quorum ({counts}); \
                 locks fail until then",
                compact(ceil_secs(wait))
            );
            ("unavailable", UNAVAILABLE, summary)
        } else if client.is_some() || reports.iter().any(|r| r.verdict().is_some()) {
            ("safe", 0, format!("safe, with notes ({counts})"))
        } else {
            ("safe", 0, format!("safe ({counts})"))
        };
        Overall {
            verdict,
            code,
            quorum,
            quorum_in: quorum_in.filter(|_| safe >= quorum),
            summary,
        }
    }
}

/// `node 2 is unsafe`, `nodes 0, 2 are unsafe` (`adjective` empty: without `is/are ...`).
fn listed(indices: &[usize], adjective: &str) -> String {
    let list = indices
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    let (noun, verb) = if indices.len() == 1 {
        ("node", "is")
    } else {
        ("nodes", "are")
    };
    if adjective.is_empty() {
        format!("{noun} {list}")
    } else {
        format!("{noun} {list} {verb} {adjective}")
    }
}

/// The table, the findings (the nodes', then the client's) and the overall verdict.
fn human(reports: &[NodeReport], client: &Client, overall: &Overall) -> String {
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
fn row(r: &NodeReport) -> Vec<String> {
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
fn release(path: ReleasePath, offered: Option<ReleasePath>) -> String {
    match offered {
        Some(other) if other != path => format!("{path} (has {other})"),
        _ => path.to_string(),
    }
}

/// `aof always`, `aof everysec`, `aof off`, `aof, fsync unknown`, `unknown`. RDB snapshots are
/// not asked about: `aof off` says what is known, and for locks a snapshot loses what a
/// missing AOF loses.
fn persistence(aof_enabled: Option<bool>, appendfsync: Option<&str>) -> String {
    match (aof_enabled, appendfsync) {
        (Some(true), Some(fsync)) => format!("aof {fsync}"),
        (Some(true), None) => "aof, fsync unknown".to_string(),
        (Some(false), _) => "aof off".to_string(),
        (None, _) => "unknown".to_string(),
    }
}

/// `noeviction`, `allkeys-lru (maxmemory 100mb)`, `allkeys-lru (no maxmemory)`, `unknown`.
fn eviction(maxmemory: Option<u64>, policy: Option<&str>) -> String {
    match (policy, maxmemory) {
        (None, _) => "unknown".to_string(),
        (Some(policy), Some(0)) if policy == "noeviction" => policy.to_string(),
        (Some(policy), Some(0)) => format!("{policy} (no maxmemory)"),
        (Some(policy), Some(bytes)) => format!("{policy} (maxmemory {})", size(bytes)),
        (Some(policy), None) => format!("{policy} (maxmemory unknown)"),
    }
}

/// Bytes in Redis's units (`100mb` is 100 × 1024 × 1024), exact or in bytes.
fn size(bytes: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "gb"), (1 << 20, "mb"), (1 << 10, "kb")];
    UNITS
        .iter()
        .find(|(unit, _)| bytes % unit == 0)
        .map(|(unit, name)| format!("{}{name}", bytes / unit))
        .unwrap_or_else(|| format!("{bytes} bytes"))
}

/// A clock rate as a signed skew in percent: `+0.002%`.
fn skew(rate: f64) -> String {
    let percent = (rate - 1.0) * 100.0;
    // No `-0.000%`.
    let percent = if percent.abs() < 0.0005 { 0.0 } else { percent };
    format!("{percent:+.3}%")
}

/// A number with at most three decimals and no trailing zeros: `1`, `0.5`.
fn trimmed(x: f64) -> String {
    let s = format!("{x:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// Milliseconds with two decimals: `0.21ms`.
fn millis(d: Duration) -> String {
    format!("{:.2}ms", d.as_secs_f64() * 1000.0)
}

/// Whole seconds, rounded up: a node still quarantined never shows `0s left`.
fn ceil_secs(d: Duration) -> Duration {
    Duration::from_secs(d.as_secs() + u64::from(d.subsec_nanos() > 0))
}

/// A duration in its two largest units, to the second: `42s`, `5m 3s`, `2h 5m`, `3d 2h`.
fn compact(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m {}s", s / 60, s % 60),
        3600..86400 => format!("{}h {}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d {}h", s / 86400, s % 86400 / 3600),
    }
}

/// The JSON document, fields in this order.
#[derive(Debug, Serialize)]
struct DoctorDocument<'a> {
    nodes: Vec<DoctorNode<'a>>,
    client: JsonClient<'a>,
    quorum: usize,
    /// Seconds until quarantine lets a quorum of safe nodes count: 0 when one counts now,
    /// `null` when there are too few safe nodes.
    quorum_in_s: Option<f64>,
    verdict: &'static str,
    exit_code: u8,
}

/// One report, `null` where unknown; durations in (fractional) milliseconds or seconds.
#[derive(Debug, Serialize)]
struct DoctorNode<'a> {
    index: usize,
    node: &'a str,
    reachable: bool,
    error: Option<&'a str>,
    /// `timeout`, `io`, `auth`, `tls`, `protocol`, `server`, ... when known.
    error_kind: Option<&'static str>,
    round_trip_ms: Option<f64>,
    version: Option<&'a str>,
    /// `redis 7.0.15`, `valkey 9.1.2`.
    server: Option<&'a str>,
    /// `script` (or, later, `delifeq`, `delex`).
    release_path: Option<&'static str>,
    /// `delifeq`, `delex`, or `null` when the server offers neither (or did not say).
    compare_and_delete: Option<&'static str>,
    role: Option<&'a str>,
    run_id: Option<&'a str>,
    uptime_s: Option<u64>,
    aof_enabled: Option<bool>,
    appendfsync: Option<&'a str>,
    maxmemory: Option<u64>,
    maxmemory_policy: Option<&'a str>,
    clock_rate: Option<f64>,
    drift_factor: f64,
    quarantined_for_s: Option<f64>,
    same_server_as: Option<usize>,
    refused_commands: &'a [String],
    refused_for_elections: &'a [String],
    refused_for_semaphores: &'a [String],
    /// `ok`, `note`, `unknown` or `unsafe`.
    verdict: String,
    findings: Vec<JsonFinding<'a>>,
}

/// What is found about the client rather than a node.
#[derive(Debug, Serialize)]
struct JsonClient<'a> {
    /// Whether this binary's RESP decoder refuses deeply nested replies.
    decoder_bounded: bool,
    findings: Vec<JsonFinding<'a>>,
}

#[derive(Debug, Serialize)]
struct JsonFinding<'a> {
    severity: String,
    message: &'a str,
}

/// A failure's kind as one lower-case word, for `--json`.
fn kind_name(kind: NodeErrorKind) -> &'static str {
    match kind {
        NodeErrorKind::Timeout => "timeout",
        NodeErrorKind::Io => "io",
        NodeErrorKind::Auth => "auth",
        NodeErrorKind::Tls => "tls",
        NodeErrorKind::Protocol => "protocol",
        NodeErrorKind::Server => "server",
        NodeErrorKind::Quarantined => "quarantined",
        NodeErrorKind::Replica => "replica",
        NodeErrorKind::SameServer => "same_server",
        NodeErrorKind::Unchecked => "unchecked",
        NodeErrorKind::LostData => "lost_data",
        NodeErrorKind::Refused => "refused",
        NodeErrorKind::NotAwaited => "not_awaited",
        _ => "other",
    }
}

/// The JSON document: every report's fields, the quorum, the verdict.
fn to_json<'a>(
    reports: &'a [NodeReport],
    client: &'a Client,
    overall: &Overall,
) -> DoctorDocument<'a> {
    let finding = |f: &'a Finding| JsonFinding {
        severity: f.severity.to_string(),
        message: &f.message,
    };
    let nodes = reports
        .iter()
        .map(|r| DoctorNode {
            index: r.index,
            node: &r.node,
            reachable: r.reachable,
            error: r.error.as_deref(),
            error_kind: r.error_kind.map(kind_name),
            round_trip_ms: r.round_trip.map(|d| d.as_micros() as f64 / 1000.0),
            version: r.version.as_deref(),
            server: r.server.as_deref(),
            release_path: r.release_path.map(ReleasePath::as_str),
            compare_and_delete: r.compare_and_delete.map(ReleasePath::as_str),
            role: r.role.as_deref(),
            run_id: r.run_id.as_deref(),
            uptime_s: r.uptime.map(|d| d.as_secs()),
            aof_enabled: r.aof_enabled,
            appendfsync: r.appendfsync.as_deref(),
            maxmemory: r.maxmemory,
            maxmemory_policy: r.maxmemory_policy.as_deref(),
            clock_rate: r.clock_rate,
            drift_factor: r.drift_factor,
            quarantined_for_s: r.quarantined_for.map(|d| d.as_millis() as f64 / 1000.0),
            same_server_as: r.same_server_as,
            refused_commands: &r.refused_commands,
            refused_for_elections: &r.refused_for_elections,
            refused_for_semaphores: &r.refused_for_semaphores,
            verdict: r.verdict().map_or("ok".to_string(), |v| v.to_string()),
            findings: r.findings.iter().map(finding).collect(),
        })
        .collect();
    DoctorDocument {
        nodes,
        client: JsonClient {
            decoder_bounded: client.decoder_bounded,
            findings: client.findings.iter().map(finding).collect(),
        },
        quorum: overall.quorum,
        quorum_in_s: overall.quorum_in.map(|d| d.as_millis() as f64 / 1000.0),
        verdict: overall.verdict,
        exit_code: overall.code,
    }
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

    #[test]
    fn an_unsafe_client_makes_the_verdict_unsafe_and_a_note_is_a_note() {
        let unsafe_client = Overall::of(&[], Some(Severity::Unsafe), true);
        assert_eq!(
            (unsafe_client.verdict, unsafe_client.code),
            ("unsafe", UNSAFE)
        );
        assert!(
            unsafe_client
                .summary
                .starts_with("UNSAFE: this client is unsafe ("),
            "{}",
            unsafe_client.summary
        );
        let noted = Overall::of(&[], Some(Severity::Note), true);
        assert_eq!((noted.verdict, noted.code), ("safe", 0));
        assert!(
            noted.summary.starts_with("safe, with notes ("),
            "{}",
            noted.summary
        );
        let clean = Overall::of(&[], None, true);
        assert!(clean.summary.starts_with("safe ("), "{}", clean.summary);
    }

    /// The verdict is the line a reader sees last (and a script greps): an unbounded decoder
    /// is named there, not only in its finding above.
    #[test]
    fn an_unbounded_decoder_is_named_in_the_verdict() {
        let unbounded = Overall::of(&[], Some(Severity::Unsafe), false);
        assert_eq!((unbounded.verdict, unbounded.code), ("unsafe", UNSAFE));
        assert_eq!(
            unbounded.summary,
            "UNSAFE: this binary's RESP decoder is unbounded, so one hostile node can abort it \
             (0 of 0 nodes safe, quorum 1: too few safe nodes for a quorum, locks need unsafe \
             votes or fail)"
        );
    }

    #[test]
    fn nodes_are_listed_in_words() {
        assert_eq!(listed(&[2], "unsafe"), "node 2 is unsafe");
        assert_eq!(listed(&[0, 2], "unsafe"), "nodes 0, 2 are unsafe");
        assert_eq!(listed(&[1], ""), "node 1");
    }
}
