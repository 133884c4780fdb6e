//! How long a node's votes are held back after its check found that it may have lost data,
//! or that it started too recently to tell (its quarantine), and whether the votes of a
//! checked node still count.

use std::time::Duration;

use crate::algo::lineage::marker::Lineage;

/// How much later than `uptime_in_seconds` says a server may have started: the figure is
/// the difference of two wall-clock times, each truncated to the second.
pub(crate) const UPTIME_RESOLUTION: Duration = Duration::from_secs(1);

/// A node's quarantine as the node keeps it (`quorumlock:quarantine`, written by the
/// QUARANTINE script of the first client that found the node without a marker of its own),
/// so that every client, one started a moment ago included, waits out the same one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Recorded {
    /// How long ago it started, by the node's clock.
    pub(crate) elapsed: Duration,
    /// How long it lasts: the longest of the longest ttls of the clients that recorded it.
    pub(crate) wait: Duration,
    /// When it started, by the node's clock: with the server's run_id, what names it.
    pub(crate) start_ms: u64,
}

impl Recorded {
    /// Reads a record `RUN_ID:START_MS:WAIT_MS` as the node whose server is `run_id` and
    /// whose clock reads `now_ms` holds it: `None` if it is another server's (it covers no
    /// loss of this one) or not a record. A clock that went back reads as a quarantine just
    /// started.
    pub(crate) fn read(text: &str, run_id: &str, now_ms: u64) -> Option<Recorded> {
        let mut parts = text.split(':');
        let (Some(run), Some(start), Some(wait), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return None;
        };
        let (start, wait): (u64, u64) = (start.parse().ok()?, wait.parse().ok()?);
        (run == run_id).then(|| Recorded::answered(start, wait, now_ms))
    }

    /// The QUARANTINE script's answer `{start_ms, wait_ms, now_ms}` (`node/quarantine.rs`).
    pub(crate) fn answered(start_ms: u64, wait_ms: u64, now_ms: u64) -> Recorded {
        Recorded {
            elapsed: Duration::from_millis(now_ms.saturating_sub(start_ms)),
            wait: Duration::from_millis(wait_ms),
            start_ms,
        }
    }
}

/// How long a just-checked node's votes must wait, and why: `None` if they may count now.
/// The rules, with the node's record of its quarantine (`recorded`, of the running server)
/// and without one (from its start if young, else from when this client first saw the loss,
/// `seen_for` ago): design 2.6a. A node provisioned empty in this very process (a fresh
/// marker of its own run_id) never waits. `uptime` (`uptime_in_seconds`) counts from the
/// latest start it allows ([`UPTIME_RESOLUTION`]): a server started at 100.9 s and asked at
/// 101.1 s says 1 s, and has been up for 0.2 s.
pub(crate) fn hold_back(
    lineage: &Lineage,
    uptime: Option<Duration>,
    (recorded, seen_for): (Option<Recorded>, Duration),
    max_ttl: Duration,
) -> Option<(Duration, String)> {
    let young = young(uptime, max_ttl);
    let up_for = |up: Duration| {
        format!(
            "up for perhaps only {}, less than the longest ttl ({})",
            humantime::format_duration(up),
            humantime::format_duration(max_ttl)
        )
    };
    match (lineage, recorded) {
        (Lineage::Intact { marker, .. }, _) if marker.fresh => None,
        (_, Some(recorded)) => {
            let wait = recorded.wait.max(max_ttl);
            let left = wait.saturating_sub(recorded.elapsed);
            let why = match lineage {
                Lineage::Lost { why } => format!("{why}; "),
                Lineage::Intact { .. } => "re-seeded after a loss of data; ".to_string(),
            };
            let why = format!(
                "{why}its quarantine, kept on the node, started {} ago and lasts {}",
                humantime::format_duration(recorded.elapsed),
                humantime::format_duration(wait)
            );
            (!left.is_zero()).then_some((left, why))
        }
        (Lineage::Intact { .. }, None) => young.map(|up| (max_ttl - up, up_for(up))),
        (Lineage::Lost { why }, None) => match young {
            Some(up) => Some((max_ttl - up, format!("{}, and {why}", up_for(up)))),
            None => {
                let left = max_ttl.saturating_sub(seen_for);
                (!left.is_zero()).then(|| (left, why.clone()))
            }
        },
    }
}

/// How long the server has been up at least, if that is less than the longest ttl.
fn young(uptime: Option<Duration>, max_ttl: Duration) -> Option<Duration> {
    uptime
        .map(|up| up.saturating_sub(UPTIME_RESOLUTION))
        .filter(|up| *up < max_ttl)
}

/// How long before now the quarantine of a node found to have lost data starts, when it is
/// recorded on the node now: never before now (why it is no longer dated back to a young
/// node's start: design 2.6a, "A young node's record is not dated back"). `uptime` and
/// `max_ttl` are kept for the model, which compares this rule with the ones before.
pub(crate) fn record_age(_uptime: Option<Duration>, _max_ttl: Duration) -> Duration {
    Duration::ZERO
}

/// What a check found on a node that a loss of its data would take away: its marker, if the
/// node was intact, and its quarantine record's `RUN_ID:START_MS`, if it had one of the
/// running server; every vote is held against it ([`still_checked`]; design 2.6a, "A flush
/// under a connected client").
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub(crate) struct Checked {
    /// The marker, as stored, of a node found intact.
    pub(crate) marker: Option<std::sync::Arc<str>>,
    /// `RUN_ID:START_MS` of the node's quarantine record of the running server.
    pub(crate) record: Option<std::sync::Arc<str>>,
}

impl Checked {
    /// `RUN_ID:START_MS` of a record `RUN_ID:START_MS:WAIT_MS`: what stays the same while
    /// clients raise its wait, and changes with any loss (a flush erases the record, a
    /// restart makes it another server's). `None` if it is not a record.
    pub(crate) fn record_of(text: &str) -> Option<&str> {
        let (head, wait) = text.rsplit_once(':')?;
        let (run_id, start) = head.split_once(':')?;
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        (!run_id.is_empty() && digits(start) && digits(wait)).then_some(head)
    }

    /// What a check found: the node's marker if it is intact, and its record of the running
    /// server `run_id`, if it has one.
    pub(crate) fn found(
        lineage: &Lineage,
        run_id: Option<&str>,
        recorded: Option<&Recorded>,
    ) -> Checked {
        let record = run_id
            .zip(recorded)
            .map(|(run_id, r)| std::sync::Arc::from(format!("{run_id}:{}", r.start_ms)));
        Checked {
            marker: lineage.intact().map(std::sync::Arc::from),
            record,
        }
    }

    /// Whether the check found anything that a loss would take away.
    pub(crate) fn tells(&self) -> bool {
        self.marker.is_some() || self.record.is_some()
    }
}

/// Whether the votes of a command count, given what the node held right after running them
/// (`marker`, `record`: the values of `quorumlock:node` and `quorumlock:quarantine`, read in
/// the same atomic step) and what its check found (`checked`): if the node still holds the
/// marker, or the record, that its check found, or the check found neither (design 2.6a, "A
/// flush under a connected client").
pub(crate) fn still_checked(checked: &Checked, marker: Option<&str>, record: Option<&str>) -> bool {
    if !checked.tells() {
        return true;
    }
    let same_marker = checked.marker.is_some() && checked.marker.as_deref() == marker;
    let same_record = checked.record.is_some()
        && checked.record.as_deref() == record.and_then(Checked::record_of);
    same_marker || same_record
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algo::lineage::marker::lineage;

    const RUN: &str = "0123456789abcdef0123456789abcdef01234567";
    const OTHER: &str = "ffffffffffffffff0123456789abcdef01234567";

    #[test]
    fn a_node_that_lost_data_waits_the_longest_ttl_whatever_its_uptime() {
        let ttl = Duration::from_secs(30);
        let lost = lineage(None, Some(RUN));
        // Young: from its latest possible start (whole seconds: 12 s may be 11.01 s).
        let (left, why) = hold_back(
            &lost,
            Some(Duration::from_secs(12)),
            (None, Duration::ZERO),
            ttl,
        )
        .expect("held back");
        assert_eq!(left, Duration::from_secs(19));
        assert!(why.contains("up for perhaps only 11s") && why.contains("no quorumlock:node"));
        // Old (flushed, or another server's data): from when the loss was first seen.
        let old = Some(Duration::from_secs(3600));
        let (left, _) =
            hold_back(&lost, old, (None, Duration::from_secs(5)), ttl).expect("held back");
        assert_eq!(left, Duration::from_secs(25));
        assert_eq!(hold_back(&lost, old, (None, ttl), ttl), None);
        // Unknown uptime: from when the loss was first seen.
        let (left, _) = hold_back(&lost, None, (None, Duration::ZERO), ttl).expect("held back");
        assert_eq!(left, ttl);
    }

    #[test]
    fn an_intact_node_waits_only_while_young_and_a_provisioned_one_never() {
        let ttl = Duration::from_secs(30);
        let intact = lineage(Some(&format!("{RUN}:3")), Some(RUN));
        let (left, _) = hold_back(
            &intact,
            Some(Duration::from_secs(10)),
            (None, Duration::ZERO),
            ttl,
        )
        .expect("young");
        assert_eq!(left, Duration::from_secs(21));
        assert_eq!(
            hold_back(
                &intact,
                Some(ttl + UPTIME_RESOLUTION),
                (None, Duration::ZERO),
                ttl
            ),
            None,
            "up for the longest ttl"
        );
        let fresh = lineage(Some(&format!("{RUN}:0:new")), Some(RUN));
        assert_eq!(
            hold_back(&fresh, Some(Duration::ZERO), (None, Duration::ZERO), ttl),
            None
        );
        // A provisioned marker of another process is a restart like any other.
        let restarted = lineage(Some(&format!("{OTHER}:0:new")), Some(RUN));
        assert!(hold_back(
            &restarted,
            Some(Duration::ZERO),
            (None, Duration::ZERO),
            ttl
        )
        .is_some());
    }

    /// `uptime_in_seconds` is a difference of truncated wall-clock seconds: a server that
    /// restarted empty 0.2 s ago may say 1 s. Counting the wait from the second it says let
    /// the votes of a restarted majority count while a lock it had lost was still valid
    /// elsewhere (a double grant in the local chaos suite, 8 overlaps).
    #[test]
    fn an_uptime_in_whole_seconds_never_shortens_the_wait() {
        let ttl = Duration::from_secs(2);
        let lost = lineage(None, Some(RUN));
        for (said, left) in [(0, 2), (1, 2), (2, 1)] {
            let (waited, _) = hold_back(
                &lost,
                Some(Duration::from_secs(said)),
                (None, Duration::ZERO),
                ttl,
            )
            .expect("held back");
            assert_eq!(waited, Duration::from_secs(left), "uptime said {said} s");
        }
        let intact = lineage(Some(&format!("{RUN}:3")), Some(RUN));
        let (waited, _) =
            hold_back(&intact, Some(ttl), (None, Duration::ZERO), ttl).expect("perhaps young");
        assert_eq!(waited, UPTIME_RESOLUTION);
    }

    #[test]
    fn a_quarantine_kept_on_the_node_counts_down_for_every_client() {
        let ttl = Duration::from_secs(10);
        let lost = lineage(None, Some(RUN));
        let old = Some(Duration::from_secs(60));
        let recorded = |elapsed: u64, wait: u64| {
            let record = format!("{RUN}:1000:{wait}");
            (
                Recorded::read(&record, RUN, 1_000 + elapsed),
                Duration::ZERO,
            )
        };
        // A process started now waits what is left of it, not a quarantine of its own.
        let (left, why) = hold_back(&lost, old, recorded(7_250, 10_000), ttl).expect("held");
        assert_eq!(left, Duration::from_millis(2_750));
        assert!(
            why.contains("kept on the node, started 7s 250ms ago"),
            "{why}"
        );
        assert_eq!(hold_back(&lost, old, recorded(10_000, 10_000), ttl), None);
        // The longest wait recorded wins, and so does the client's own longest ttl.
        let (left, _) = hold_back(&lost, old, recorded(10_000, 30_000), ttl).expect("held");
        assert_eq!(left, Duration::from_secs(20));
        let (left, _) = hold_back(&lost, old, recorded(1_000, 2_000), ttl).expect("held");
        assert_eq!(left, Duration::from_secs(9));
        // A young node's record starts when it is written too: a node provisioned empty
        // counts from its start, and a flush of it is a loss now.
        let up = Some(Duration::from_secs(4));
        assert_eq!(record_age(up, ttl), Duration::ZERO);
        assert_eq!(
            record_age(Some(Duration::from_secs(20)), ttl * 3),
            Duration::ZERO
        );
        // An older node's record starts when it is written.
        assert_eq!(
            record_age(Some(ttl + UPTIME_RESOLUTION), ttl),
            Duration::ZERO
        );
        assert_eq!(record_age(None, ttl), Duration::ZERO);
        // A figure a second short of the longest ttl may be a server up for the longest ttl,
        // which a client may count already: dated from now, not from its start.
        assert_eq!(
            record_age(Some(ttl - UPTIME_RESOLUTION), ttl),
            Duration::ZERO
        );
        assert_eq!(record_age(Some(ttl), ttl), Duration::ZERO);
        assert_eq!(
            record_age(Some(ttl - UPTIME_RESOLUTION * 2), ttl),
            Duration::ZERO
        );
    }

    /// The rule that caught it: a record written at the figure's boundary must not end
    /// before the longest ttl has passed since the loss, for a server that a client counted
    /// since it had been up for the longest ttl (its actual uptime is at most the figure
    /// plus the resolution, at least the figure less it).
    #[test]
    fn a_flush_just_after_a_young_nodes_first_quarantine_is_dated_from_the_flush() {
        let ttl = Duration::from_secs(10);
        for figure_ms in (0..=12_000u64).step_by(250) {
            let figure = Duration::from_millis(figure_ms);
            let age = record_age(Some(figure), ttl);
            // The most the server may have been up: if a client may have counted it by then,
            // the record may not reach back before now.
            let most = figure + UPTIME_RESOLUTION;
            if most >= ttl {
                assert_eq!(age, Duration::ZERO, "figure {figure:?}");
            }
            // Never before the latest start the figure allows.
            assert!(
                age <= figure.saturating_sub(UPTIME_RESOLUTION),
                "figure {figure:?}"
            );
        }
    }

    #[test]
    fn a_record_is_named_by_its_server_and_start() {
        assert_eq!(Checked::record_of("abc:1000:10000"), Some("abc:1000"));
        for junk in [
            "",
            "abc",
            "abc:1000",
            ":1000:10000",
            "abc::10000",
            "abc:1000:",
            "abc:x:1",
        ] {
            assert_eq!(Checked::record_of(junk), None, "{junk:?}");
        }
    }

    #[test]
    fn votes_count_while_the_node_holds_what_its_check_found() {
        let marker = format!("{RUN}:7");
        let intact = Checked {
            marker: Some(marker.as_str().into()),
            record: None,
        };
        assert!(still_checked(&intact, Some(&marker), None));
        // Flushed: no marker; or another marker (deleted and re-seeded by hand).
        assert!(!still_checked(&intact, None, None));
        assert!(!still_checked(&intact, Some(&format!("{RUN}:8")), None));
        // A node admitted after its recorded quarantine, not yet re-seeded: the record tells.
        let waited = Checked {
            marker: None,
            record: Some(format!("{RUN}:1000").into()),
        };
        let record = format!("{RUN}:1000:10000");
        assert!(still_checked(&waited, None, Some(&record)));
        // Re-seeded since, and its wait raised by a client with a longer ttl: the same.
        let raised = format!("{RUN}:1000:30000");
        assert!(still_checked(&waited, Some(&marker), Some(&raised)));
        // Flushed (the record gone), or flushed and recorded again (another start).
        assert!(!still_checked(&waited, None, None));
        assert!(!still_checked(
            &waited,
            None,
            Some(&format!("{RUN}:2000:10000"))
        ));
        assert!(!still_checked(&waited, None, Some("junk")));
        // A check that found neither cannot tell a flush.
        assert!(still_checked(&Checked::default(), None, None));
    }

    #[test]
    fn a_node_re_seeded_after_its_recorded_quarantine_counts_though_it_is_young() {
        let ttl = Duration::from_secs(10);
        let mine = format!("{RUN}:7");
        let intact = lineage(Some(&mine), Some(RUN));
        let young = Some(Duration::from_secs(3));
        let record = format!("{RUN}:1000:10000");
        let over = (Recorded::read(&record, RUN, 11_000), Duration::ZERO);
        assert_eq!(hold_back(&intact, young, over, ttl), None);
        // Its uptime alone would hold it back up to a second more.
        assert!(hold_back(&intact, young, (None, Duration::ZERO), ttl).is_some());
        // A longer longest ttl than any recorded still waits its own.
        let (left, _) = hold_back(&intact, young, over, 2 * ttl).expect("held");
        assert_eq!(left, ttl);
        // Another server's record covers nothing of this one.
        assert_eq!(Recorded::read(&record, OTHER, 11_000), None);
        for junk in [
            "",
            "x",
            &format!("{RUN}:1"),
            &format!("{RUN}:a:1"),
            &format!("{RUN}:1:2:3"),
        ] {
            assert_eq!(Recorded::read(junk, RUN, 11_000), None, "{junk:?}");
        }
        let back = Recorded::read(&record, RUN, 500).expect("a record");
        assert!(back.elapsed.is_zero());
    }
}
