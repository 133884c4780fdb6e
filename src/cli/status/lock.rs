//! What `quorumlock status` says of a lock: one line per node, then the verdict across them,
//! as lines or as JSON.

use quorumlock::quorum;

use super::super::exit::{Failure, SOFTWARE, TAKEN, UNAVAILABLE};
use super::super::holder::holder_id;
use super::counting::Counting;
use super::document::{json_nodes, StatusDocument};
use super::{node_line, Found, Seen};

/// `status` of a lock: the nodes as `found`, then the verdict.
pub(super) fn lock_status(found: &Found<'_>) -> Result<u8, Failure> {
    let summary = summarize(&found.args.resource, found.seen, found.counting);
    if found.args.json {
        let document = StatusDocument {
            resource: &found.args.resource,
            key: found.key,
            kind: "lock",
            nodes: json_nodes(found.nodes, found.seen),
            quorum: summary.quorum,
            quorum_in_s: found.counting.quorum_in_s(),
            held_on: summary.held_on,
            free_on: summary.free_on,
            holder_sha1: summary.holder,
            permits: None,
            holders: None,
            verdict: summary.verdict,
            error: None,
            exit_code: summary.code,
        };
        let text =
            serde_json::to_string_pretty(&document).map_err(|e| Failure::new(SOFTWARE, e))?;
        println!("{text}");
        return Ok(summary.code);
    }
    let mut out = String::new();
    for (i, (node, seen)) in found.nodes.iter().zip(found.seen).enumerate() {
        let _ = node_line(&mut out, i, node, seen, true);
    }
    out.push_str(&summary.line);
    print!("{out}");
    Ok(summary.code)
}

/// The verdict across the nodes.
#[derive(Debug)]
struct Summary {
    /// `free`, `held`, `unknown`, `quarantined` or `no_quorum`.
    verdict: &'static str,
    code: u8,
    quorum: usize,
    held_on: usize,
    free_on: usize,
    /// The holder id of the token held on a quorum, if one is.
    holder: Option<String>,
    /// The summary line, with its newline.
    line: String,
}

/// The summary: what `run` would meet where no quorum counts (`counting`); otherwise held or
/// free when a majority says so.
fn summarize(resource: &str, seen: &[Seen], counting: Counting) -> Summary {
    let nodes = seen.len();
    let needed = quorum(nodes);
    let held: Vec<&str> = seen
        .iter()
        .filter_map(|s| match s {
            Seen::Held { token, .. } => Some(token.as_str()),
            _ => None,
        })
        .collect();
    let free = seen.iter().filter(|s| **s == Seen::Free).count();
    let counts = format!("key on {} of {nodes} nodes, quorum {needed}", held.len());
    let mut summary = Summary {
        verdict: "unknown",
        code: UNAVAILABLE,
        quorum: needed,
        held_on: held.len(),
        free_on: free,
        holder: None,
        line: String::new(),
    };
    let mut top = None;
    for token in &held {
        let n = held.iter().filter(|t| *t == token).count();
        if top.is_none_or(|(_, most)| n > most) {
            top = Some((*token, n));
        }
    }
    summary.holder = top
        .filter(|(_, n)| *n >= needed)
        .map(|(token, _)| holder_id(token));
    if let Some((verdict, code, says)) = counting.unavailable(needed, nodes) {
        summary.line = format!("`{resource}`: {says} ({counts})\n");
        (summary.verdict, summary.code) = (verdict, code);
    } else if held.len() >= needed {
        let by = match &summary.holder {
            Some(id) => format!("by {id}"),
            None => "by several owners, none on a quorum".to_string(),
        };
        summary.line = format!("`{resource}`: held {by} ({counts})\n");
        (summary.verdict, summary.code) = ("held", TAKEN);
    } else if free >= needed {
        summary.line = format!("`{resource}`: free ({counts})\n");
        (summary.verdict, summary.code) = ("free", 0);
    } else {
        let answered = free + held.len();
        summary.line = format!(
            "`{resource}`: unknown: only {answered} of {nodes} nodes answered ({counts})\n"
        );
    }
    summary
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn held(token: &str) -> Seen {
        Seen::Held {
            token: token.into(),
            pttl: 1000,
        }
    }

    #[test]
    fn a_majority_decides_held_or_free() {
        let down = || Seen::Failed("down".into());
        let now = Counting::Now;
        let seen = [held("aaaaaaaaaaaa"), held("aaaaaaaaaaaa"), down()];
        let s = summarize("r", &seen, now);
        assert_eq!((s.code, s.verdict), (TAKEN, "held"));
        let id = holder_id("aaaaaaaaaaaa");
        assert_eq!(s.holder.as_deref(), Some(id.as_str()));
        assert!(s.line.contains(&format!("held by {id} (")), "{}", s.line);
        assert!(
            !s.line.contains("aaaa"),
            "the token stays secret: {}",
            s.line
        );
        let seen = [held("a"), held("b"), Seen::Free];
        let s = summarize("r", &seen, now);
        assert_eq!((s.code, s.verdict, s.holder), (TAKEN, "held", None));
        assert!(s.line.contains("several owners"), "{}", s.line);
        let seen = [held("a"), Seen::Free, Seen::Free];
        let s = summarize("r", &seen, now);
        assert_eq!((s.code, s.verdict, s.held_on, s.free_on), (0, "free", 1, 2));
        let seen = [held("a"), Seen::Free, down()];
        let s = summarize("r", &seen, now);
        assert_eq!((s.code, s.verdict), (UNAVAILABLE, "unknown"));
        let seen = [down(), Seen::Free, down()];
        assert_eq!(summarize("r", &seen, now).code, UNAVAILABLE);
    }

    #[test]
    fn keys_that_say_free_or_held_do_not_hide_a_quorum_that_does_not_count() {
        let quarantined = Counting::Quarantined(Duration::from_secs(8));
        let free = [Seen::Free, Seen::Free, Seen::Free];
        let s = summarize("job", &free, quarantined);
        assert_eq!((s.code, s.verdict), (UNAVAILABLE, "quarantined"));
        assert!(
            s.line.starts_with("`job`: quarantined: ") && s.line.ends_with("quorum 2)\n"),
            "{}",
            s.line
        );
        assert_eq!(s.line.lines().count(), 1, "{}", s.line);
        let seen = [held("a"), held("a"), Seen::Free];
        let s = summarize("job", &seen, Counting::NoQuorum);
        assert_eq!((s.code, s.verdict), (UNAVAILABLE, "no_quorum"));
        assert_eq!(s.holder, Some(holder_id("a")));
        assert!(s.line.starts_with("`job`: no quorum: "), "{}", s.line);
    }
}
