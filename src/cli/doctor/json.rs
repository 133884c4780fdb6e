//! `doctor --json`: one document, the same facts, findings and verdict as the table.

use quorumlock::{Finding, NodeErrorKind, NodeReport, ReleasePath};
use serde::Serialize;

use super::verdict::Overall;
use super::Client;

/// The JSON document, fields in this order.
#[derive(Debug, Serialize)]
pub(super) struct DoctorDocument<'a> {
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
pub(super) struct DoctorNode<'a> {
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
pub(super) struct JsonClient<'a> {
    /// Whether this binary's RESP decoder refuses deeply nested replies.
    decoder_bounded: bool,
    findings: Vec<JsonFinding<'a>>,
}

#[derive(Debug, Serialize)]
pub(super) struct JsonFinding<'a> {
    severity: String,
    message: &'a str,
}

/// A failure's kind as one lower-case word, for `--json`.
pub(super) fn kind_name(kind: NodeErrorKind) -> &'static str {
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
pub(super) fn to_json<'a>(
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
