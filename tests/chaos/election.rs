//! The election scenarios' parts: a candidate that campaigns and records each term it leads
//! (examples/chaos_client.rs `--elect`), the terms of leaders killed before their term
//! ended, and the measures the driver takes on the terms (when each began, how long the
//! election went without a leader after a kill). tests/chaos/checker.rs `check_terms`
//! checks the terms themselves.

use std::time::{Duration, Instant};

use quorumlock::{Candidacy, RedLock};

use super::history::{mono_ns, Hold, Op, Outcome, Record};
use super::workload::Until;

/// One term as the checker reads it: an `Op` whose `hold` spans the time the leader acted.
pub fn term_op(
    client: &str,
    election: &str,
    term: u64,
    start: u64,
    end: u64,
    valid_at_end: bool,
) -> Record {
    Record::Op(Op {
        client: client.to_string(),
        resource: election.to_string(),
        op: "lead".to_string(),
        permits: None,
        side: None,
        outcome: Outcome::Ok,
        start,
        end,
        deadline_ms: u64::MAX / 1_000_000,
        hold: Some(Hold {
            token: Some(term),
            token_asked: None,
            slot: None,
            cs_start: start,
            cs_end: end,
            read: None,
            wrote: None,
            valid_at_end,
            released_at: end,
            release: "ok".to_string(),
        }),
        error: None,
        failed_nodes: Vec::new(),
        quarantined_nodes: Vec::new(),
    })
}

/// Campaigns for `election` until `stop_at` (`CLOCK_MONOTONIC`), or until the file named
/// by `workload::END_FILE_VAR` appears if that is earlier (the driver's schedule has
/// ended), leading whenever it wins and until it loses (stopping at the loss signal, before
/// the validity ends) or the stop comes (then it resigns). Emits a `Lead` record as each
/// term begins and its `Op` as it ends, each at once.
pub async fn candidate(
    redlock: &RedLock,
    client: &str,
    election: &str,
    stop_at: u64,
    emit: impl Fn(Record),
) {
    let candidacy = Candidacy::new().identity(client);
    let until = Until::stop_at_or_end_file(stop_at);
    loop {
        if until.reached() {
            return;
        }
        let leadership = tokio::select! {
            won = redlock.campaign_with(election, candidacy.clone()) => match won {
                Ok(leadership) => leadership,
                Err(e) => {
                    eprintln!("{client}: campaign failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = until.wait() => return,
        };
        let (term, start) = (leadership.term(), mono_ns());
        emit(Record::Lead {
            client: client.to_string(),
            election: election.to_string(),
            term,
            start,
        });
        eprintln!("{client}: leading in term {term}");
        let lost = tokio::select! {
            reason = leadership.lost() => {
                eprintln!("{client}: lost term {term}: {reason}");
                true
            }
            () = until.wait() => false,
        };
        let end = mono_ns();
        let valid_at_end = Instant::now() < leadership.valid_until();
        emit(term_op(
            client,
            election,
            term,
            start,
            end,
            valid_at_end || lost,
        ));
        if let Err(e) = leadership.resign().await {
            if !lost {
                eprintln!("{client}: resigning from term {term} failed: {e}");
            }
        }
    }
}

/// The terms in `records` as `Op`s: those that ended, and for each `Lead` without its `Op`
/// (the candidate was killed), one that ends at the first kill of that candidate after the
/// term began (`kills`: candidate, when the kill returned). Problems go to `problems`.
pub fn terms(
    records: &[Record],
    kills: &[(String, u64)],
    problems: &mut Vec<String>,
) -> Vec<Record> {
    let mut out = Vec::new();
    for r in records {
        match r {
            Record::Op(op) if op.op == "lead" => out.push(r.clone()),
            Record::Lead {
                client,
                election,
                term,
                start,
            } => {
                let ended = records.iter().any(|o| {
                    matches!(o, Record::Op(op) if op.op == "lead" && &op.client == client
                        && op.hold.as_ref().and_then(|h| h.token) == Some(*term))
                });
                if ended {
                    continue;
                }
                let killed = kills
                    .iter()
                    .filter(|(c, at)| c == client && at > start)
                    .map(|(_, at)| *at)
                    .min();
                match killed {
                    Some(end) => out.push(term_op(client, election, *term, *start, end, true)),
                    None => problems.push(format!("{client}: term {term} never ended")),
                }
            }
            _ => {}
        }
    }
    out
}

/// When each term began, in time order: `(time, term)`.
pub fn starts(records: &[Record]) -> Vec<(u64, u64)> {
    let mut starts: Vec<(u64, u64)> = records
        .iter()
        .filter_map(|r| match r {
            Record::Op(op) => Some((op.start, op.hold.as_ref()?.token?)),
            _ => None,
        })
        .collect();
    starts.sort_unstable();
    starts
}

/// Terms that began strictly inside one of the `quiet` windows (`from`, `to`, what):
/// changes of leader while a healthy leader held.
pub fn flaps(starts: &[(u64, u64)], quiet: &[(u64, u64, &str)]) -> Vec<String> {
    let mut found = Vec::new();
    for (from, to, what) in quiet {
        for (at, term) in starts.iter().filter(|(t, _)| from < t && t < to) {
            found.push(format!(
                "term {term} began {} ms into `{what}`",
                (at - from) / 1_000_000
            ));
        }
    }
    found
}

/// For each event (`at`, what), how long until the next term began, in ms (`None`: none
/// did).
pub fn next_leader(starts: &[(u64, u64)], events: &[(u64, &str)]) -> Vec<(String, Option<u64>)> {
    events
        .iter()
        .map(|(at, what)| {
            let next = starts.iter().find(|(t, _)| t > at);
            (what.to_string(), next.map(|(t, _)| (t - at) / 1_000_000))
        })
        .collect()
}
