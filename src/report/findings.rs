//! A node judged from what its inspection observed: its report, and the rules that find
//! what is wrong, each finding with its severity, in the order a reader meets them.

use std::time::Duration;

use super::capabilities::{self, ReleasePath};
use super::facts::{ClockRate, Facts};
use super::node_report::{Finding, NodeReport, Observed, Rules, Severity};

/// Turns what was observed into a report with findings.
pub(crate) fn report(index: usize, node: &str, seen: Observed, rules: Rules) -> NodeReport {
    let facts = seen.facts.clone().unwrap_or_default();
    let findings = findings(&seen, &facts, rules);
    NodeReport {
        index,
        node: node.to_string(),
        reachable: seen.error.is_none(),
        error: seen.error,
        error_kind: seen.error_kind,
        round_trip: seen.round_trip,
        version: facts.version.clone(),
        server: capabilities::server(&facts),
        // A script on every server that answered (design 3.3a).
        release_path: seen.facts.as_ref().map(|_| ReleasePath::Script),
        compare_and_delete: capabilities::compare_and_delete(&facts),
        role: facts.role.as_deref().map(|r| match r {
            "slave" => "replica".to_string(),
            other => other.to_string(),
        }),
        run_id: facts.run_id.clone(),
        uptime: facts.uptime,
        aof_enabled: facts.aof_enabled,
        appendfsync: facts.appendfsync.clone(),
        maxmemory: facts.maxmemory,
        maxmemory_policy: facts.maxmemory_policy.clone(),
        clock_rate: seen.clock_rate.map(|c| c.rate),
        drift_factor: rules.drift_factor,
        quarantined_for: seen.quarantined_for,
        same_server_as: seen.same_server_as,
        refused_commands: seen.refused,
        refused_for_elections: seen.refused_for_elections,
        refused_for_semaphores: seen.refused_for_semaphores,
        findings,
    }
}

/// What is wrong with a node, in the order a reader meets it: whether it answered, what
/// server it is, whether it keeps keys, its clock, its permissions, its quarantine.
pub(crate) fn findings(seen: &Observed, facts: &Facts, rules: Rules) -> Vec<Finding> {
    if let Some(e) = &seen.error {
        return vec![Finding::new(Severity::Unsafe, format!("unreachable: {e}"))];
    }
    let mut found = identity(facts, seen.same_server_as);
    found.extend(eviction(facts));
    found.extend(persistence(facts, rules));
    if let Some(why) = &seen.lost_data {
        found.push(Finding::new(
            Severity::Note,
            format!("fencing counters not trusted until it is re-seeded: {why}"),
        ));
    }
    found.extend(clock(seen.clock_rate, rules.drift_factor));
    found.extend(permissions(seen));
    if let Some(left) = seen.quarantined_for {
        found.push(Finding::new(
            Severity::Note,
            format!(
                "quarantined for {} more",
                humantime::format_duration(Duration::from_millis(left.as_millis() as u64))
            ),
        ));
    }
    found
}

/// Whether the node is an independent Redis master of its own, and can tell its restarts.
fn identity(facts: &Facts, same_server_as: Option<usize>) -> Vec<Finding> {
    let mut found = Vec::new();
    if facts.run_id.is_none() {
        found.push(Finding::new(
            Severity::Unknown,
            "INFO server refused: restarts cannot be detected",
        ));
    }
    if facts.not_redis {
        found.push(Finding::new(
            Severity::Unsafe,
            "answered INFO with something that is not INFO output: not a Redis server; \
             its votes never count",
        ));
    }
    if facts.is_replica() {
        found.push(Finding::new(
            Severity::Unsafe,
            "a replica, not an independent master: its votes never count",
        ));
    } else if facts.role.is_none() {
        found.push(Finding::new(
            Severity::Unknown,
            "INFO replication refused: role unknown",
        ));
    }
    if let Some(first) = same_server_as {
        found.push(Finding::new(
            Severity::Unsafe,
            format!("the same server (run_id) as node {first}: one server would vote twice"),
        ));
    }
    found
}

/// Whether the node may evict a lock key before its ttl.
fn eviction(facts: &Facts) -> Option<Finding> {
    match facts.can_evict_lock_keys() {
        Some(true) => Some(Finding::new(
            Severity::Unsafe,
            format!(
                "maxmemory {} with policy {} can evict lock keys: use noeviction",
                facts.maxmemory.unwrap_or(0),
                facts.maxmemory_policy.as_deref().unwrap_or("?")
            ),
        )),
        None => Some(Finding::new(
            Severity::Unknown,
            "CONFIG GET refused: eviction policy unknown",
        )),
        Some(false) => None,
    }
}

/// Whether a restart keeps every write, and what protects the locks if it does not.
fn persistence(facts: &Facts, rules: Rules) -> Option<Finding> {
    let (severity, message) = match (facts.persists_every_write(), rules.quarantine) {
        (Some(true), _) => return None,
        (Some(false), true) => (
            Severity::Note,
            format!(
                "does not persist every write: a restart loses its locks and fencing \
                 counters (told by its marker, whatever its persistence: quarantined for {}, \
                 then re-seeded)",
                humantime::format_duration(rules.max_ttl)
            ),
        ),
        (Some(false), false) => (
            Severity::Unsafe,
            "does not persist every write (appendfsync always) and quarantine is off: a \
             restart can grant a lock twice"
                .into(),
        ),
        (None, true) => (
            Severity::Unknown,
            "persistence unknown (CONFIG GET refused); restarts are quarantined".into(),
        ),
        (None, false) => (
            Severity::Unknown,
            "persistence unknown (CONFIG GET refused) and quarantine is off".into(),
        ),
    };
    Some(Finding::new(severity, message))
}

/// How the node's clock runs against the client's, judged by the drift factor.
fn clock(rate: Option<ClockRate>, drift_factor: f64) -> Option<Finding> {
    let Some(ClockRate { rate, low, high }) = rate else {
        return Some(Finding::new(
            Severity::Unknown,
            "TIME refused or unanswered: clock rate unknown",
        ));
    };
    let skew = (rate - 1.0).abs();
    let (lo, hi) = (1.0 - drift_factor, 1.0 + drift_factor);
    if low > hi || high < lo {
        Some(Finding::new(
            Severity::Unsafe,
            format!(
                "clock runs at {rate:.5}x the client's (skew {:.3}%), beyond the drift factor \
                 {drift_factor}: did it jump?",
                skew * 100.0,
            ),
        ))
    } else if high - low > drift_factor {
        Some(Finding::new(
            Severity::Unknown,
            format!(
                "clock rate imprecise ({low:.4}x to {high:.4}x): the node or the client \
                 stalled during the window; inspect again or with a longer window"
            ),
        ))
    } else if skew > drift_factor / 2.0 {
        Some(Finding::new(
            Severity::Note,
            format!(
                "clock skew {:.3}% uses over half the drift factor {drift_factor}",
                skew * 100.0,
            ),
        ))
    } else {
        None
    }
}

/// The commands the node refuses (ACL), for locks and for the other primitives, and those
/// that could not be checked.
fn permissions(seen: &Observed) -> Vec<Finding> {
    let lists = [
        (
            &seen.refused,
            Severity::Unsafe,
            "refuses commands the client needs (ACL): ",
            "; clients do not count its votes",
        ),
        (
            &seen.refused_for_elections,
            Severity::Note,
            "refuses what leader elections need (ACL): ",
            "; locks are not affected, campaigns and `quorumlock elect` cannot name their \
             leader here",
        ),
        (
            &seen.refused_for_semaphores,
            Severity::Note,
            "refuses what semaphores need (ACL): ",
            "; locks are not affected, semaphores cannot record permits here",
        ),
        (
            &seen.unchecked,
            Severity::Unknown,
            "could not check these commands: ",
            "",
        ),
    ];
    lists
        .into_iter()
        .filter(|(commands, ..)| !commands.is_empty())
        .map(|(commands, severity, before, after)| {
            Finding::new(severity, format!("{before}{}{after}", commands.join(", ")))
        })
        .collect()
}
