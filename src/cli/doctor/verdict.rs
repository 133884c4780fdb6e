//! The verdict across the nodes: safe, unknown, unavailable (quarantine) or unsafe, with
//! its exit code and its one line.

use std::time::Duration;

use quorumlock::{quorum, NodeReport, Severity};

use super::{ceil_secs, compact, UNAVAILABLE, UNKNOWN, UNSAFE};

/// The verdict across the nodes.
#[derive(Debug)]
pub(super) struct Overall {
    /// `safe`, `unknown`, `unavailable` or `unsafe`.
    pub(super) verdict: &'static str,
    pub(super) code: u8,
    pub(super) quorum: usize,
    /// How long until quarantine lets a quorum of safe nodes count (zero: now); `None` when
    /// there are too few safe nodes for a quorum.
    pub(super) quorum_in: Option<Duration>,
    /// One line, without its newline.
    pub(super) summary: String,
}

impl Overall {
    /// The verdict across the nodes' reports and `client`, the most serious finding about the
    /// client itself (its build, its settings), if any; `decoder_bounded` says whether this
    /// binary's RESP decoder bounds nesting (the unsafe finding when it does not).
    pub(super) fn of(
        reports: &[NodeReport],
        client: Option<Severity>,
        decoder_bounded: bool,
    ) -> Overall {
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
        let availability = availability(safe, unknown_nodes.len(), quorum, waiting);
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

/// Whether the safe nodes make a quorum now: nothing to add when they do.
fn availability(safe: usize, unknown: usize, quorum: usize, waiting: Option<Duration>) -> String {
    if safe + unknown < quorum {
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
    }
}

/// `node 2 is unsafe`, `nodes 0, 2 are unsafe` (`adjective` empty: without `is/are ...`).
pub(super) fn listed(indices: &[usize], adjective: &str) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

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
