//! Reads a history and reports what went wrong, if anything:
//!
//! - **overlaps**: two critical sections of one resource that overlap in monotonic time
//!   (each one lies inside its holder's validity, so this is two valid locks at once);
//! - **lost updates**: a resource's final counter differs from the number of critical
//!   sections that wrote it; **stale reads**: in critical-section order, a section read
//!   something other than what the one before it wrote;
//! - **token regressions**: in critical-section order, a fencing token not greater than
//!   every token before it;
//! - **stuck calls**: an acquire or release that did not return within its deadline;
//! - **overruns**: a critical section that ended after its lock's validity (the holder broke
//!   assumption 5; the workload never should);
//!
//! and how available the lock was: the share of attempts made while a majority of nodes was
//! healthy (not down, frozen, cut off or quarantined) that got the lock, not counting those
//! refused because someone else held it (that is the lock working).
//!
//! A resource whose attempts took permits of a semaphore of `N` permits (`Op::permits`) is
//! checked as a semaphore instead, each critical section lying inside its permit's validity:
//!
//! - **the holder bound**: at no instant more than `N` of its critical sections at once (a
//!   sweep over the sections' intervals; each section that starts while `N` others are
//!   running counts once in `over_permits`, and `max_holders` is the most seen at once);
//!   a permit whose slot is not below `N` counts there too;
//! - **slots**: each slot is a mutex, so the lock checks above apply per slot: no two
//!   sections of one slot overlap (`overlaps`), and each slot's counter, read and written
//!   only under a permit of that slot, ends at the number of sections that wrote it, with
//!   no stale read in the slot's section order (`lost_updates`, `stale_reads`);
//! - **fencing tokens**, one counter per semaphore: for two sections `E` and `S` with
//!   tokens, if `E`'s token was handed out before `S` asked for its own (`E.cs_start <
//!   S.token_asked`: the worker enters its section once the token is in its hands), then
//!   `token(E) < token(S)` (`regressions`). This is what the FENCE round gives: `E`'s token
//!   is on a majority of the semaphore's counters before `S`'s PEEK reads a majority, and
//!   the two share a node. It is not "in critical-section order", as for a lock: permits
//!   are held at once, and two whose token calls overlap may get their tokens in either
//!   order. They never get **the same** token: a permit's token names its slot
//!   (`algo::slots::next_token`), and permits held at once hold different slots. Equal
//!   tokens of a semaphore are a violation (`shared_tokens`).
//!
//! A resource whose attempts took a side of a read-write lock (`Op::side`) is checked as
//! one: its write sections read-sleep-write the lock's counter, its read sections only read
//! it, each section inside its side's validity:
//!
//! - **exclusion**: no write section overlaps any other section of the lock, read or
//!   write (`overlaps`: each overlapping pair of which one is a writer counts once); read
//!   sections may overlap one another (`max_readers` is the most at once, `read_sections`
//!   and `write_sections` how many ran);
//! - **the counter**: the lock's final counter equals the number of write sections that
//!   wrote it, and each write section read what the write section before it (in
//!   critical-section order) wrote (`lost_updates`, `stale_reads`);
//! - **stale reads**: a read section reads the value written by the last write section
//!   that ended before it began (0 if none did); by exclusion no write section runs beside
//!   it, so any other value is a writer it could not see or a write it should not have seen
//!   (`stale_reads`);
//! - **fencing tokens**, one counter for both sides: the write sections' tokens grow
//!   strictly in critical-section order; and for two sections `E` and `S` with tokens, if
//!   `E` holds the write side and its token was handed out before `S` asked for its own
//!   (`E.cs_start < S.token_asked`), then `token(E) < token(S)`, whichever side `S` holds
//!   (`regressions`). A writer's token is also above every reader's token handed out before
//!   it asked (the library's promise: a writer's token is above every token handed out
//!   before it). Readers may share a token among themselves (`shared_read_tokens`, counted,
//!   not a violation); a writer's token shared with any other section is a regression by
//!   the rules above whenever one was handed out before the other asked.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use super::history::{Fault, Hold, Op, Outcome, Record, Side};

/// What the checker found in one history.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    pub scenario: String,
    pub nodes: usize,
    pub ops: usize,
    pub ok: usize,
    pub taken: usize,
    pub no_quorum: usize,
    pub validity_expired: usize,
    pub other: usize,
    pub stuck: usize,
    pub overlaps: usize,
    pub lost_updates: u64,
    pub stale_reads: usize,
    pub regressions: usize,
    pub overruns: usize,
    pub counter_errors: usize,
    /// Semaphores: critical sections that began while `N` others of their semaphore were
    /// running (or held a slot not below `N`).
    pub over_permits: usize,
    /// Semaphores: the most critical sections of one semaphore at once.
    pub max_holders: usize,
    /// Semaphores: how many critical sections ran under a permit.
    pub permit_sections: usize,
    /// Semaphores: tokens handed out to more than one permit (allowed when their token
    /// calls overlapped; counted, not a violation): the extra holders of each.
    pub shared_tokens: usize,
    /// Read-write locks: read sections, write sections, the most read sections of one lock at
    /// once, and the extra holders of tokens shared by read sections (allowed).
    pub read_sections: usize,
    pub write_sections: usize,
    pub max_readers: usize,
    pub shared_read_tokens: usize,
    /// Attempts made while a majority was healthy, not counting `Taken`.
    pub healthy_attempts: usize,
    /// Of those, the ones that got the lock.
    pub healthy_ok: usize,
    /// Acquire latency of granted locks, in ms: median, 99th percentile, maximum.
    pub latency_ms: Option<(f64, f64, f64)>,
    /// The longest failed acquire call, in ms.
    pub slowest_failure_ms: f64,
    /// How long fewer than a majority of nodes were healthy, for every client, in ms.
    pub majority_down_ms: u64,
    /// For each period without a healthy majority, the time from its end until a lock was
    /// next granted (`None`: none was before the run ended).
    pub recoveries_ms: Vec<Option<u64>>,
    /// A description of each problem found (the first 20).
    pub problems: Vec<String>,
    /// When each critical section that had a fencing token (or term) began, in the order
    /// checked: so that a scenario can tell that tokens were handed out after a fault.
    pub token_starts: Vec<u64>,
}

const MAX_PROBLEMS: usize = 20;

impl Report {
    /// The share of healthy-majority attempts that got the lock.
    pub fn availability(&self) -> Option<f64> {
        (self.healthy_attempts > 0).then(|| self.healthy_ok as f64 / self.healthy_attempts as f64)
    }

    /// Whether two holders ever held one resource at once, as seen by the critical sections
    /// or by the counter.
    pub fn exclusion_violated(&self) -> bool {
        self.overlaps > 0 || self.lost_updates > 0 || self.stale_reads > 0 || self.over_permits > 0
    }

    /// Nothing went wrong: no violation of any kind, no stuck call.
    pub fn is_clean(&self) -> bool {
        !self.exclusion_violated()
            && self.regressions == 0
            && self.shared_tokens == 0
            && self.overruns == 0
            && self.counter_errors == 0
            && self.stuck == 0
    }

    /// The header of [`markdown_row`](Self::markdown_row)'s table.
    pub fn markdown_header() -> &'static str {
        "| scenario | attempts | locked | taken | no quorum | other | overlaps | lost updates | stale reads | token regressions | stuck | availability | acquire p50 / p99 / max (ms) |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    }

    /// One row of a results table.
    pub fn markdown_row(&self) -> String {
        let availability = self
            .availability()
            .map_or("n/a".to_owned(), |a| format!("{:.1}%", a * 100.0));
        let latency = self.latency_ms.map_or("n/a".to_owned(), |(p50, p99, max)| {
            format!("{p50:.1} / {p99:.1} / {max:.0}")
        });
        format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            self.scenario,
            self.ops,
            self.ok,
            self.taken,
            self.no_quorum,
            self.validity_expired + self.other,
            self.overlaps,
            self.lost_updates,
            self.stale_reads,
            self.regressions,
            self.stuck,
            availability,
            latency,
        )
    }

    fn problem(&mut self, what: String) {
        if self.problems.len() < MAX_PROBLEMS {
            self.problems.push(what);
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{}: {} attempts: {} locked, {} taken, {} no quorum, {} validity expired, {} other, {} stuck",
            self.scenario,
            self.ops,
            self.ok,
            self.taken,
            self.no_quorum,
            self.validity_expired,
            self.other,
            self.stuck
        )?;
        writeln!(
            f,
            "  violations: {} overlaps, {} lost updates, {} stale reads, {} token regressions, {} overruns, {} counter errors",
            self.overlaps,
            self.lost_updates,
            self.stale_reads,
            self.regressions,
            self.overruns,
            self.counter_errors
        )?;
        if self.read_sections + self.write_sections > 0 {
            writeln!(
                f,
                "  read-write locks: {} read sections (at most {} at once, {} sharing a token), {} write sections",
                self.read_sections, self.max_readers, self.shared_read_tokens, self.write_sections
            )?;
        }
        if self.permit_sections > 0 {
            writeln!(
                f,
                "  semaphores: {} critical sections under a permit, at most {} at once, {} over the bound, {} shared tokens",
                self.permit_sections, self.max_holders, self.over_permits, self.shared_tokens
            )?;
        }
        let availability = self
            .availability()
            .map_or("n/a".to_owned(), |a| format!("{:.1}%", a * 100.0));
        write!(
            f,
            "  availability with a healthy majority: {availability} ({} of {} attempts)",
            self.healthy_ok, self.healthy_attempts
        )?;
        if let Some((p50, p99, max)) = self.latency_ms {
            write!(
                f,
                "; acquire p50 {p50:.1} ms, p99 {p99:.1} ms, max {max:.0} ms"
            )?;
        }
        write!(f, "; slowest failed call {:.0} ms", self.slowest_failure_ms)?;
        if self.majority_down_ms > 0 {
            let rec: Vec<String> = self
                .recoveries_ms
                .iter()
                .map(|r| r.map_or("never".to_owned(), |ms| format!("{ms} ms")))
                .collect();
            write!(
                f,
                "\n  no healthy majority for {} ms; first lock after: {}",
                self.majority_down_ms,
                rec.join(", ")
            )?;
        }
        for p in &self.problems {
            write!(f, "\n  - {p}")?;
        }
        Ok(())
    }
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// Checks `records` (one scenario's merged history).
pub fn check(records: &[Record]) -> Report {
    let mut report = Report::default();
    let mut faults: Vec<&Fault> = Vec::new();
    let mut ops: Vec<&Op> = Vec::new();
    let mut finals: BTreeMap<(&str, Option<u32>), i64> = BTreeMap::new();
    for r in records {
        match r {
            Record::Meta {
                scenario, nodes, ..
            } => {
                report.scenario = scenario.clone();
                report.nodes = *nodes;
            }
            Record::Op(op) => ops.push(op),
            Record::Fault(f) => faults.push(f),
            Record::Counter {
                resource,
                slot,
                value,
            } => {
                finals.insert((resource, *slot), *value);
            }
            Record::View { .. } | Record::Lead { .. } => {}
        }
    }
    let end_of_run = ops.iter().map(|o| o.end).max().unwrap_or(0);

    count_outcomes(&mut report, &ops);
    check_stuck(&mut report, &ops);

    let semaphores = permits_by_resource(&ops);
    let read_write: BTreeSet<&str> = ops
        .iter()
        .filter(|o| o.side.is_some())
        .map(|o| o.resource.as_str())
        .collect();
    for (resource, holds) in &holds_by_resource(&ops) {
        if read_write.contains(resource) {
            let final_value = finals.get(&(*resource, None)).copied();
            check_read_write(&mut report, resource, holds, final_value);
            continue;
        }
        if let Some(&permits) = semaphores.get(resource) {
            check_semaphore(&mut report, resource, permits, holds, &finals);
            continue;
        }
        let final_value = finals.get(&(*resource, None)).copied();
        check_exclusion(&mut report, resource, holds);
        check_counter(&mut report, resource, holds, final_value);
        check_tokens(&mut report, resource, holds);
    }
    // A semaphore's slot whose counter moved though no permit of it was ever granted.
    for (&(resource, slot), &value) in &finals {
        let Some(slot) = slot else { continue };
        let granted = ops
            .iter()
            .any(|o| o.resource == resource && o.outcome == Outcome::Ok && o.hold.is_some());
        if !granted {
            check_counter(
                &mut report,
                &format!("{resource} slot {slot}"),
                &[],
                Some(value),
            );
        }
    }

    availability(&mut report, &ops, &faults, end_of_run);
    report
}

/// Checks the terms of an election: one `Op` per term, its `hold` spanning the time the
/// leader acted (for `quorumlock elect`, the time its command ran) with the term as token.
/// Two terms that overlap are two leaders at once; a term not greater than every term that
/// began before it is a regression. No counter is involved.
pub fn check_terms(records: &[Record]) -> Report {
    let mut report = Report::default();
    let mut ops: Vec<&Op> = Vec::new();
    for r in records {
        match r {
            Record::Meta {
                scenario, nodes, ..
            } => {
                report.scenario = scenario.clone();
                report.nodes = *nodes;
            }
            Record::Op(op) => ops.push(op),
            _ => {}
        }
    }
    count_outcomes(&mut report, &ops);
    for (election, terms) in &holds_by_resource(&ops) {
        check_exclusion(&mut report, election, terms);
        check_tokens(&mut report, election, terms);
    }
    report
}

/// The holds of the successful operations, by resource, each resource's in the order they
/// began.
fn holds_by_resource<'a>(ops: &[&'a Op]) -> BTreeMap<&'a str, Vec<(&'a Op, &'a Hold)>> {
    let mut by_resource: BTreeMap<&str, Vec<(&Op, &Hold)>> = BTreeMap::new();
    for op in ops {
        if let (Outcome::Ok, Some(hold)) = (op.outcome, &op.hold) {
            by_resource
                .entry(&op.resource)
                .or_default()
                .push((op, hold));
        }
    }
    for holds in by_resource.values_mut() {
        holds.sort_by_key(|(_, h)| (h.cs_start, h.cs_end));
    }
    by_resource
}

/// The number of permits of each resource that was used as a semaphore (the smallest
/// any attempt asked for, should they differ).
fn permits_by_resource<'a>(ops: &[&'a Op]) -> BTreeMap<&'a str, u32> {
    let mut permits: BTreeMap<&str, u32> = BTreeMap::new();
    for op in ops {
        if let Some(n) = op.permits {
            let p = permits.entry(&op.resource).or_insert(n);
            *p = (*p).min(n);
        }
    }
    permits
}

/// The checks of a semaphore of `permits` permits (module docs): the holder bound, each
/// slot as a mutex with its counter, and the order of the tokens.
fn check_semaphore(
    report: &mut Report,
    resource: &str,
    permits: u32,
    holds: &[(&Op, &Hold)],
    finals: &BTreeMap<(&str, Option<u32>), i64>,
) {
    report.permit_sections += holds.len();
    check_holder_bound(report, resource, permits, holds);
    let mut by_slot: BTreeMap<u32, Vec<(&Op, &Hold)>> = BTreeMap::new();
    for &(op, hold) in holds {
        match hold.slot {
            Some(slot) if slot < permits => by_slot.entry(slot).or_default().push((op, hold)),
            slot => {
                report.over_permits += 1;
                let what = format!(
                    "{} held slot {slot:?} of {resource}, which has {permits} permits",
                    op.client
                );
                report.problem(what);
            }
        }
    }
    // Every slot's counter, also those of slots nobody held (they must not have moved).
    for slot in 0..permits {
        let slot_holds = by_slot.remove(&slot).unwrap_or_default();
        let name = format!("{resource} slot {slot}");
        let final_value = finals.get(&(resource, Some(slot))).copied();
        check_exclusion(report, &name, &slot_holds);
        check_counter(report, &name, &slot_holds, final_value);
    }
    check_semaphore_tokens(report, resource, holds);
}

/// The checks of a read-write lock (module docs): exclusion of the write side, the counter,
/// reads against the last write before them, and the tokens. `holds` are in the order
/// their sections began.
fn check_read_write(
    report: &mut Report,
    resource: &str,
    holds: &[(&Op, &Hold)],
    final_value: Option<i64>,
) {
    let is_write = |op: &Op| op.side == Some(Side::Write);
    let writes: Vec<(&Op, &Hold)> = holds.iter().copied().filter(|(o, _)| is_write(o)).collect();
    let reads: Vec<(&Op, &Hold)> = holds
        .iter()
        .copied()
        .filter(|(o, _)| !is_write(o))
        .collect();
    report.write_sections += writes.len();
    report.read_sections += reads.len();

    // Exclusion: every overlapping pair with a writer in it. Sorted by start, section j
    // (after i) overlaps i iff it starts before i ends; the first that does not ends the scan.
    for (i, &(op_i, h_i)) in holds.iter().enumerate() {
        for &(op_j, h_j) in &holds[i + 1..] {
            if h_j.cs_start >= h_i.cs_end {
                break;
            }
            if is_write(op_i) || is_write(op_j) {
                report.overlaps += 1;
                let side = |op: &Op| if is_write(op) { "writer" } else { "reader" };
                let what = format!(
                    "overlap on {resource}: {} {} (token {:?}) held it until {:.1} ms after {} {} (token {:?}) entered",
                    side(op_i),
                    op_i.client,
                    h_i.token,
                    ms(h_i.cs_end - h_j.cs_start),
                    side(op_j),
                    op_j.client,
                    h_j.token
                );
                report.problem(what);
            }
        }
    }
    for &(op, hold) in holds {
        if !hold.valid_at_end {
            report.overruns += 1;
            let what = format!(
                "overrun on {resource}: {} ended its critical section after its side's validity",
                op.client
            );
            report.problem(what);
        }
    }
    max_at_once(report, &reads);

    // The counter, written by the writers only.
    check_counter(report, resource, &writes, final_value);

    // Each read against the last write that ended before it began.
    let mut ended: Vec<(u64, i64, &str)> = writes
        .iter()
        .filter_map(|(op, h)| h.wrote.map(|w| (h.cs_end, w, op.client.as_str())))
        .collect();
    ended.sort_unstable();
    for &(op, hold) in &reads {
        let before = ended.partition_point(|(end, _, _)| *end <= hold.cs_start);
        let (expected, by) = before
            .checked_sub(1)
            .map_or((0, "nobody"), |k| (ended[k].1, ended[k].2));
        match (hold.read, hold.wrote) {
            (_, Some(wrote)) => {
                report.counter_errors += 1;
                let what = format!("reader {} wrote {wrote} on {resource}", op.client);
                report.problem(what);
            }
            (Some(read), None) if read != expected => {
                report.stale_reads += 1;
                let what = format!(
                    "stale read on {resource}: reader {} read {read}, the last writer before it ({by}) wrote {expected}",
                    op.client
                );
                report.problem(what);
            }
            (Some(_), None) => {}
            // An overrun may skip its read; it is counted as one.
            (None, None) if !hold.valid_at_end => {}
            (None, None) => {
                report.counter_errors += 1;
                let what = format!("counter read failed on {resource} for reader {}", op.client);
                report.problem(what);
            }
        }
    }

    // Tokens: writers strictly growing in section order, then the order of rounds.
    check_tokens(report, resource, &writes);
    check_rw_tokens(report, resource, holds, &is_write);
}

/// The most of `holds` running at one instant (half-open intervals), into `max_readers`.
fn max_at_once(report: &mut Report, holds: &[(&Op, &Hold)]) {
    let mut events: Vec<(u64, i32)> = Vec::with_capacity(2 * holds.len());
    for &(_, hold) in holds {
        events.push((hold.cs_start, 1));
        events.push((hold.cs_end.max(hold.cs_start), -1));
    }
    // Ends (-1) sort before starts (+1) at the same instant.
    events.sort_unstable();
    let mut running = 0i32;
    for (_, delta) in events {
        running += delta;
        report.max_readers = report
            .max_readers
            .max(usize::try_from(running).unwrap_or(0));
    }
}

/// For sections `E` and `S` with tokens, `E`'s handed out before `S` asked (`E.cs_start <
/// S.token_asked`, or `S`'s acquire call began when it did not record when it asked): if
/// `E` is a writer, or `S` is, then `token(E) < token(S)`. Two readers may share a token, and
/// one reader's token may be below an earlier reader's (nothing is promised between them).
fn check_rw_tokens(
    report: &mut Report,
    resource: &str,
    holds: &[(&Op, &Hold)],
    is_write: &dyn Fn(&Op) -> bool,
) {
    let mut handed: Vec<(u64, u64, bool, &str)> = Vec::new();
    let mut asked: Vec<(u64, u64, bool, &str)> = Vec::new();
    let mut read_tokens: BTreeMap<u64, usize> = BTreeMap::new();
    for &(op, hold) in holds {
        let Some(token) = hold.token else { continue };
        report.token_starts.push(hold.cs_start);
        let writer = is_write(op);
        handed.push((hold.cs_start, token, writer, &op.client));
        asked.push((
            hold.token_asked.unwrap_or(op.start),
            token,
            writer,
            &op.client,
        ));
        if !writer {
            *read_tokens.entry(token).or_default() += 1;
        }
    }
    report.shared_read_tokens += read_tokens.values().map(|n| n - 1).sum::<usize>();
    handed.sort_unstable();
    asked.sort_unstable();
    // The largest writer's token, and the largest token of either side, handed out before
    // each ask, with their holders.
    let mut highest_writer: Option<(u64, &str)> = None;
    let mut highest_any: Option<(u64, &str)> = None;
    let mut next = 0;
    for (at, token, writer, client) in asked {
        while let Some(&(h_at, h_token, h_writer, h_client)) = handed.get(next) {
            if h_at >= at {
                break;
            }
            if h_writer && highest_writer.is_none_or(|(t, _)| h_token > t) {
                highest_writer = Some((h_token, h_client));
            }
            if highest_any.is_none_or(|(t, _)| h_token > t) {
                highest_any = Some((h_token, h_client));
            }
            next += 1;
        }
        let bound = if writer { highest_any } else { highest_writer };
        if let Some((before, by)) = bound {
            if token <= before {
                report.regressions += 1;
                let side = if writer { "writer" } else { "reader" };
                let what = format!(
                    "token regression on {resource}: {side} {client} got {token}, though {by} had been handed {before} before it asked"
                );
                report.problem(what);
            }
        }
    }
}

/// At no instant more than `permits` critical sections (each `[cs_start, cs_end)`).
fn check_holder_bound(report: &mut Report, resource: &str, permits: u32, holds: &[(&Op, &Hold)]) {
    // Ends sort before starts at the same instant: half-open intervals.
    let mut events: Vec<(u64, bool, usize)> = Vec::with_capacity(2 * holds.len());
    for (i, &(_, hold)) in holds.iter().enumerate() {
        events.push((hold.cs_start, true, i));
        events.push((hold.cs_end.max(hold.cs_start), false, i));
    }
    events.sort_unstable();
    let mut running: BTreeSet<usize> = BTreeSet::new();
    for (_, starts, i) in events {
        if !starts {
            running.remove(&i);
            continue;
        }
        running.insert(i);
        report.max_holders = report.max_holders.max(running.len());
        if running.len() > permits as usize {
            report.over_permits += 1;
            let holders: Vec<String> = running
                .iter()
                .map(|&j| {
                    let (op, hold) = holds[j];
                    format!(
                        "{} (slot {:?}, token {:?})",
                        op.client, hold.slot, hold.token
                    )
                })
                .collect();
            let what = format!(
                "{} holders of {resource} at once, which has {permits} permits: {}",
                running.len(),
                holders.join(", ")
            );
            report.problem(what);
        }
    }
}

/// For sections `E` and `S` with tokens: `E`'s handed out before `S` asked (`E.cs_start <
/// S.token_asked`) ⇒ `token(E) < token(S)`. A section that did not record when it asked
/// is taken to have asked when its acquire call began (earlier: fewer pairs, still sound).
fn check_semaphore_tokens(report: &mut Report, resource: &str, holds: &[(&Op, &Hold)]) {
    let mut handed: Vec<(u64, u64, &str)> = Vec::new();
    let mut asked: Vec<(u64, u64, &str)> = Vec::new();
    let mut counts: BTreeMap<u64, usize> = BTreeMap::new();
    for &(op, hold) in holds {
        let Some(token) = hold.token else { continue };
        report.token_starts.push(hold.cs_start);
        handed.push((hold.cs_start, token, &op.client));
        asked.push((hold.token_asked.unwrap_or(op.start), token, &op.client));
        *counts.entry(token).or_default() += 1;
    }
    report.shared_tokens += counts.values().map(|n| n - 1).sum::<usize>();
    handed.sort_unstable();
    asked.sort_unstable();
    // The largest token handed out before each ask, with its holder.
    let mut highest: Option<(u64, &str)> = None;
    let mut next = 0;
    for (at, token, client) in asked {
        while let Some(&(h_at, h_token, h_client)) = handed.get(next) {
            if h_at >= at {
                break;
            }
            if highest.is_none_or(|(t, _)| h_token > t) {
                highest = Some((h_token, h_client));
            }
            next += 1;
        }
        if let Some((before, by)) = highest {
            if token <= before {
                report.regressions += 1;
                let what = format!(
                    "token regression on {resource}: {client} got {token}, though {by} had been handed {before} before it asked"
                );
                report.problem(what);
            }
        }
    }
}

fn count_outcomes(report: &mut Report, ops: &[&Op]) {
    let mut latencies = Vec::new();
    for op in ops {
        report.ops += 1;
        let took = op.end.saturating_sub(op.start);
        match op.outcome {
            Outcome::Ok => {
                report.ok += 1;
                latencies.push(ms(took));
            }
            Outcome::Taken => report.taken += 1,
            Outcome::NoQuorum => report.no_quorum += 1,
            Outcome::ValidityExpired => report.validity_expired += 1,
            Outcome::Other => report.other += 1,
            Outcome::Stuck => {}
        }
        if op.outcome != Outcome::Ok {
            report.slowest_failure_ms = report.slowest_failure_ms.max(ms(took));
        }
    }
    latencies.sort_by(f64::total_cmp);
    if let Some(&max) = latencies.last() {
        let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q).round() as usize];
        report.latency_ms = Some((at(0.5), at(0.99), max));
    }
}

fn check_stuck(report: &mut Report, ops: &[&Op]) {
    for op in ops {
        let deadline = op.deadline_ms.saturating_mul(1_000_000);
        let took = op.end.saturating_sub(op.start);
        let release = op
            .hold
            .as_ref()
            .map_or(0, |h| h.released_at.saturating_sub(h.cs_end));
        if op.outcome == Outcome::Stuck || took > deadline || release > deadline {
            report.stuck += 1;
            let what = format!(
                "stuck call: {} on {} took {:.0} ms to acquire ({:?}) and {:.0} ms to release; deadline {} ms",
                op.client,
                op.resource,
                ms(took),
                op.outcome,
                ms(release),
                op.deadline_ms
            );
            report.problem(what);
        }
    }
}

fn check_exclusion(report: &mut Report, resource: &str, holds: &[(&Op, &Hold)]) {
    // The section that ends last among those seen so far: any later section starting
    // before that end overlaps it.
    let mut latest: Option<(&Op, &Hold)> = None;
    for &(op, hold) in holds {
        if let Some((prev_op, prev)) = latest {
            if hold.cs_start < prev.cs_end {
                report.overlaps += 1;
                let what = format!(
                    "overlap on {resource}: {} (token {:?}) held it until {:.1} ms after {} (token {:?}) entered",
                    prev_op.client,
                    prev.token,
                    ms(prev.cs_end - hold.cs_start),
                    op.client,
                    hold.token
                );
                report.problem(what);
            }
        }
        if latest.is_none_or(|(_, prev)| hold.cs_end > prev.cs_end) {
            latest = Some((op, hold));
        }
        if !hold.valid_at_end {
            report.overruns += 1;
            let what = format!(
                "overrun on {resource}: {} ended its critical section after its lock's validity",
                op.client
            );
            report.problem(what);
        }
    }
}

fn check_counter(
    report: &mut Report,
    resource: &str,
    holds: &[(&Op, &Hold)],
    final_value: Option<i64>,
) {
    let mut expected = 0i64;
    let mut written = 0i64;
    for &(op, hold) in holds {
        match (hold.read, hold.wrote) {
            (Some(read), Some(wrote)) => {
                if read != expected {
                    report.stale_reads += 1;
                    let what = format!(
                        "stale read on {resource}: {} read {read}, the holder before it wrote {expected}",
                        op.client
                    );
                    report.problem(what);
                }
                if wrote != read + 1 {
                    report.counter_errors += 1;
                    let what = format!("{} read {read} but wrote {wrote} on {resource}", op.client);
                    report.problem(what);
                }
                expected = wrote;
                written += 1;
            }
            // An overrun skips what is left of its critical section; it is counted as one.
            (_, None) if !hold.valid_at_end => {}
            (read, wrote) => {
                report.counter_errors += 1;
                let what = format!(
                    "counter access failed on {resource} for {}: read {read:?}, wrote {wrote:?}",
                    op.client
                );
                report.problem(what);
            }
        }
    }
    match final_value {
        Some(value) => {
            let lost = written.abs_diff(value);
            if lost > 0 {
                report.lost_updates += lost;
                let what = format!(
                    "lost updates on {resource}: {written} critical sections wrote the counter, it ends at {value}"
                );
                report.problem(what);
            }
        }
        None if written > 0 => {
            report.counter_errors += 1;
            report.problem(format!("no final counter value recorded for {resource}"));
        }
        None => {}
    }
}

fn check_tokens(report: &mut Report, resource: &str, holds: &[(&Op, &Hold)]) {
    let mut highest: Option<(u64, &str)> = None;
    for &(op, hold) in holds {
        let Some(token) = hold.token else { continue };
        report.token_starts.push(hold.cs_start);
        if let Some((before, by)) = highest {
            if token <= before {
                report.regressions += 1;
                let what = format!(
                    "token regression on {resource}: {} entered with {token} after {by} had {before}",
                    op.client
                );
                report.problem(what);
            }
        }
        if highest.is_none_or(|(before, _)| token > before) {
            highest = Some((token, op.client.as_str()));
        }
    }
}

/// The nodes hidden from `client` at some instant of `[start, end]`.
fn affected(
    faults: &[&Fault],
    client: Option<&str>,
    start: u64,
    end: u64,
    end_of_run: u64,
) -> BTreeSet<usize> {
    let mut nodes = BTreeSet::new();
    for f in faults {
        let f_end = f.end.unwrap_or(end_of_run);
        let applies = match client {
            Some(c) => f.applies_to(c),
            None => f.clients.is_empty(),
        };
        if applies && f.start <= end && start < f_end {
            nodes.extend(f.nodes.iter().copied());
        }
    }
    nodes
}

fn availability(report: &mut Report, ops: &[&Op], faults: &[&Fault], end_of_run: u64) {
    let n = report.nodes;
    let quorum = n / 2 + 1;
    for op in ops {
        if op.outcome == Outcome::Taken {
            continue;
        }
        let down = affected(faults, Some(&op.client), op.start, op.end, end_of_run).len();
        if n.saturating_sub(down) >= quorum {
            report.healthy_attempts += 1;
            if op.outcome == Outcome::Ok {
                report.healthy_ok += 1;
            }
        }
    }

    // Periods without a healthy majority for every client, from the fault boundaries.
    let mut bounds: Vec<u64> = faults
        .iter()
        .filter(|f| f.clients.is_empty())
        .flat_map(|f| [f.start, f.end.unwrap_or(end_of_run)])
        .collect();
    bounds.sort_unstable();
    bounds.dedup();
    let mut periods: Vec<(u64, u64)> = Vec::new();
    for w in bounds.windows(2) {
        let (a, b) = (w[0], w[1]);
        // Nodes affected throughout [a, b): faults that started by a and end after a.
        let down = faults
            .iter()
            .filter(|f| f.clients.is_empty())
            .filter(|f| f.start <= a && a < f.end.unwrap_or(end_of_run))
            .flat_map(|f| f.nodes.iter().copied())
            .collect::<BTreeSet<_>>()
            .len();
        if n.saturating_sub(down) < quorum {
            match periods.last_mut() {
                Some(last) if last.1 == a => last.1 = b,
                _ => periods.push((a, b)),
            }
        }
    }
    for (start, end) in periods {
        report.majority_down_ms += (end - start) / 1_000_000;
        let first_lock = ops
            .iter()
            .filter(|o| o.outcome == Outcome::Ok && o.end >= end)
            .map(|o| o.end)
            .min();
        report
            .recoveries_ms
            .push(first_lock.map(|t| (t - end) / 1_000_000));
    }
}

#[cfg(test)]
mod tests {
    use super::super::history::{Fault, Hold, Op, Outcome, Record};
    use super::*;

    const MS: u64 = 1_000_000;

    fn meta() -> Record {
        Record::Meta {
            scenario: "hand-made".into(),
            nodes: 5,
            description: String::new(),
            seed: None,
            start: 0,
            stop: 10_000 * MS,
        }
    }

    /// A granted lock at `at` ms whose critical section lasts `len` ms.
    fn hold(client: &str, at: u64, len: u64, token: u64, read: i64) -> Record {
        Record::Op(Op {
            client: client.into(),
            resource: "r".into(),
            op: "acquire".into(),
            permits: None,
            side: None,
            outcome: Outcome::Ok,
            start: (at - 1) * MS,
            end: at * MS,
            deadline_ms: 1_000,
            hold: Some(Hold {
                token: Some(token),
                token_asked: None,
                slot: None,
                cs_start: at * MS,
                cs_end: (at + len) * MS,
                read: Some(read),
                wrote: Some(read + 1),
                valid_at_end: true,
                released_at: (at + len + 1) * MS,
                release: "ok".into(),
            }),
            error: None,
            failed_nodes: Vec::new(),
            quarantined_nodes: Vec::new(),
        })
    }

    fn failed(client: &str, at: u64, took: u64, outcome: Outcome) -> Record {
        Record::Op(Op {
            client: client.into(),
            resource: "r".into(),
            op: "acquire".into(),
            permits: None,
            side: None,
            outcome,
            start: at * MS,
            end: (at + took) * MS,
            deadline_ms: 1_000,
            hold: None,
            error: Some(format!("{outcome:?}")),
            failed_nodes: Vec::new(),
            quarantined_nodes: Vec::new(),
        })
    }

    fn counter(value: i64) -> Record {
        Record::Counter {
            resource: "r".into(),
            slot: None,
            value,
        }
    }

    /// A permit of the semaphore `s` (2 permits) on `slot`, asked for at `asked` ms, its
    /// token handed out and its critical section begun at `at` ms, for `len` ms.
    fn permit(
        client: &str,
        slot: u32,
        asked: u64,
        at: u64,
        len: u64,
        token: u64,
        read: i64,
    ) -> Record {
        Record::Op(Op {
            client: client.into(),
            resource: "s".into(),
            op: "acquire_permit".into(),
            permits: Some(2),
            side: None,
            outcome: Outcome::Ok,
            start: (asked - 1) * MS,
            end: asked * MS,
            deadline_ms: 1_000,
            hold: Some(Hold {
                token: Some(token),
                token_asked: Some(asked * MS),
                slot: Some(slot),
                cs_start: at * MS,
                cs_end: (at + len) * MS,
                read: Some(read),
                wrote: Some(read + 1),
                valid_at_end: true,
                released_at: (at + len + 1) * MS,
                release: "ok".into(),
            }),
            error: None,
            failed_nodes: Vec::new(),
            quarantined_nodes: Vec::new(),
        })
    }

    /// A side of the read-write lock `w`, its token (if any) asked for at `at - 1` ms and its
    /// critical section begun at `at` ms, for `len` ms; a writer writes `read + 1`.
    fn side(client: &str, side: Side, at: u64, len: u64, token: Option<u64>, read: i64) -> Record {
        let writer = side == Side::Write;
        Record::Op(Op {
            client: client.into(),
            resource: "w".into(),
            op: if writer {
                "acquire_write"
            } else {
                "acquire_read"
            }
            .into(),
            permits: None,
            side: Some(side),
            outcome: Outcome::Ok,
            start: (at - 2) * MS,
            end: (at - 1) * MS,
            deadline_ms: 1_000,
            hold: Some(Hold {
                token,
                token_asked: token.map(|_| (at - 1) * MS),
                slot: None,
                cs_start: at * MS,
                cs_end: (at + len) * MS,
                read: Some(read),
                wrote: writer.then_some(read + 1),
                valid_at_end: true,
                released_at: (at + len + 1) * MS,
                release: "ok".into(),
            }),
            error: None,
            failed_nodes: Vec::new(),
            quarantined_nodes: Vec::new(),
        })
    }

    fn rw_counter(value: i64) -> Record {
        Record::Counter {
            resource: "w".into(),
            slot: None,
            value,
        }
    }

    /// Two readers at once sharing a token, a writer, three readers (two at once), a writer,
    /// a reader: nothing to report.
    fn clean_read_write() -> Vec<Record> {
        use Side::{Read, Write};
        vec![
            meta(),
            side("a", Read, 10, 10, Some(1), 0),
            side("b", Read, 12, 10, Some(1), 0),
            side("c", Write, 25, 5, Some(2), 0),
            side("a", Read, 30, 5, None, 1),
            side("b", Read, 31, 5, Some(3), 1),
            side("d", Read, 40, 5, Some(3), 1),
            side("c", Write, 50, 5, Some(4), 1),
            // Ends as the next begins (half-open): not an overlap.
            side("d", Read, 55, 5, None, 2),
            rw_counter(2),
        ]
    }

    fn slot_counter(slot: u32, value: i64) -> Record {
        Record::Counter {
            resource: "s".into(),
            slot: Some(slot),
            value,
        }
    }

    /// Two permits at once on slots 0 and 1, whose token calls overlapped (both read the
    /// same counter; their tokens differ by their slots), then two more: nothing to report.
    fn clean_semaphore() -> Vec<Record> {
        vec![
            meta(),
            permit("a", 0, 9, 10, 10, 1024, 0),
            permit("b", 1, 9, 12, 10, 1025, 0),
            permit("c", 0, 24, 25, 5, 2048, 1),
            // d asked before c's token was handed out: any order between them is allowed.
            permit("d", 1, 24, 26, 2, 2049, 1),
            slot_counter(0, 2),
            slot_counter(1, 2),
        ]
    }

    fn fault(nodes: &[usize], clients: &[&str], from: u64, to: u64) -> Record {
        Record::Fault(Fault {
            kind: "kill".into(),
            nodes: nodes.to_vec(),
            clients: clients.iter().map(|c| c.to_string()).collect(),
            start: from * MS,
            end: Some(to * MS),
        })
    }

    /// Three holders one after another, a contended and a failed attempt: nothing to report.
    fn clean() -> Vec<Record> {
        vec![
            meta(),
            hold("a", 10, 5, 1, 0),
            failed("b", 11, 3, Outcome::Taken),
            hold("b", 20, 5, 2, 1),
            hold("c", 30, 5, 3, 2),
            failed("c", 40, 5, Outcome::NoQuorum),
            counter(3),
        ]
    }

    #[test]
    fn a_clean_history_passes() {
        let report = check(&clean());
        assert!(report.is_clean(), "{report}");
        assert_eq!(
            (report.ops, report.ok, report.taken, report.no_quorum),
            (5, 3, 1, 1)
        );
        // The taken attempt does not count against availability; the no-quorum one does.
        assert_eq!((report.healthy_ok, report.healthy_attempts), (3, 4));
        assert_eq!(report.latency_ms, Some((1.0, 1.0, 1.0)));
    }

    #[test]
    fn overlapping_critical_sections_are_reported() {
        // b enters at 12 while a holds until 15: both read 0.
        let history = vec![
            meta(),
            hold("a", 10, 5, 1, 0),
            hold("b", 12, 1, 2, 0),
            counter(1),
        ];
        let report = check(&history);
        assert_eq!(report.overlaps, 1, "{report}");
        assert!(report.exclusion_violated() && !report.is_clean());
        assert!(report.problems[0].contains("overlap on r"), "{report}");
    }

    #[test]
    fn an_overlap_with_an_earlier_longer_section_is_reported() {
        // a holds 10..50; b (20..25) and c (30..35) do not overlap each other, but both a.
        let history = vec![
            meta(),
            hold("a", 10, 40, 1, 0),
            hold("b", 20, 5, 2, 0),
            hold("c", 30, 5, 3, 1),
            counter(1),
        ];
        assert_eq!(check(&history).overlaps, 2);
    }

    #[test]
    fn lost_updates_and_stale_reads_are_reported() {
        // No overlap in the recorded sections, but the second read the counter before the
        // first wrote it (as a holder the checker could not see would): a stale read, and
        // the final counter is short.
        let history = vec![
            meta(),
            hold("a", 10, 5, 1, 0),
            hold("b", 20, 5, 2, 0),
            counter(1),
        ];
        let report = check(&history);
        assert_eq!((report.overlaps, report.stale_reads), (0, 1), "{report}");
        assert_eq!(report.lost_updates, 1);
        assert!(report.exclusion_violated());
    }

    #[test]
    fn a_final_counter_that_does_not_match_is_reported() {
        let mut history = clean();
        history.pop();
        history.push(counter(2));
        let report = check(&history);
        assert_eq!(
            (report.lost_updates, report.stale_reads),
            (1, 0),
            "{report}"
        );
        history.pop();
        assert_eq!(check(&history).counter_errors, 1, "a missing final value");
    }

    #[test]
    fn token_regressions_are_reported() {
        let history = vec![
            meta(),
            hold("a", 10, 5, 7, 0),
            hold("b", 20, 5, 3, 1),
            hold("c", 30, 5, 7, 2),
            hold("d", 40, 5, 8, 3),
            counter(4),
        ];
        let report = check(&history);
        // 3 after 7, and 7 again after 7 (not strictly greater).
        assert_eq!(report.regressions, 2, "{report}");
        assert!(!report.exclusion_violated() && !report.is_clean());
    }

    #[test]
    fn stuck_calls_are_reported() {
        let mut history = clean();
        history.push(failed("d", 50, 1_500, Outcome::NoQuorum));
        history.push(failed("e", 50, 3_000, Outcome::Stuck));
        let report = check(&history);
        assert_eq!(report.stuck, 2, "{report}");
        assert!(!report.is_clean());
        assert_eq!(report.slowest_failure_ms, 3_000.0);
    }

    #[test]
    fn a_slow_release_is_a_stuck_call() {
        let mut history = clean();
        if let Some(Record::Op(op)) = history.get_mut(1) {
            if let Some(h) = op.hold.as_mut() {
                h.released_at = h.cs_end + 2_000 * MS;
            }
        }
        assert_eq!(check(&history).stuck, 1);
    }

    #[test]
    fn an_overrun_is_reported() {
        let mut history = clean();
        if let Some(Record::Op(op)) = history.get_mut(4) {
            if let Some(h) = op.hold.as_mut() {
                h.valid_at_end = false;
                h.wrote = None;
            }
        }
        history.pop();
        history.push(counter(2));
        let report = check(&history);
        assert_eq!((report.overruns, report.counter_errors), (1, 0), "{report}");
        assert!(!report.is_clean());
    }

    #[test]
    fn attempts_without_a_healthy_majority_do_not_count_against_availability() {
        let history = vec![
            meta(),
            // Three of five nodes down from 100 to 200 ms: these two fail, and do not count.
            fault(&[0, 1], &[], 100, 200),
            fault(&[2], &[], 100, 200),
            failed("a", 120, 5, Outcome::NoQuorum),
            failed("b", 190, 20, Outcome::NoQuorum),
            // Two down: a majority is healthy, so this failure counts.
            fault(&[3, 4], &[], 300, 400),
            failed("a", 320, 5, Outcome::NoQuorum),
            hold("a", 350, 5, 1, 0),
            counter(1),
        ];
        let report = check(&history);
        assert_eq!(
            (report.healthy_ok, report.healthy_attempts),
            (1, 2),
            "{report}"
        );
        assert_eq!(report.majority_down_ms, 100);
        // The first lock after the majority came back: granted at 350 ms.
        assert_eq!(report.recoveries_ms, vec![Some(150)]);
    }

    #[test]
    fn faults_for_some_clients_only_hide_nodes_from_those() {
        let history = vec![
            meta(),
            // Client a cannot see three nodes; client b sees them all.
            fault(&[0, 1, 2], &["a"], 100, 200),
            failed("a.w0", 120, 5, Outcome::NoQuorum),
            failed("b.w0", 120, 5, Outcome::NoQuorum),
        ];
        let report = check(&history);
        assert_eq!((report.healthy_ok, report.healthy_attempts), (0, 1));
        // Not a period without a majority for everyone.
        assert_eq!(report.majority_down_ms, 0);
    }

    #[test]
    fn histories_survive_json_lines() {
        let history = clean();
        let text = super::super::history::to_jsonl(&history);
        let back = super::super::history::parse_jsonl(text.as_bytes()).unwrap();
        assert_eq!(back, history);
    }
    #[test]
    fn a_clean_semaphore_history_passes() {
        let report = check(&clean_semaphore());
        assert!(report.is_clean(), "{report}");
        assert_eq!(
            (
                report.permit_sections,
                report.max_holders,
                report.shared_tokens
            ),
            (4, 2, 0),
            "{report}"
        );
    }

    #[test]
    fn a_token_shared_by_two_permits_is_reported() {
        let mut history = clean_semaphore();
        history[2] = permit("b", 1, 9, 12, 10, 1024, 0);
        let report = check(&history);
        assert!(!report.is_clean(), "{report}");
        assert_eq!(report.shared_tokens, 1, "{report}");
    }

    #[test]
    fn more_holders_than_permits_are_reported() {
        // c takes slot 0 while a holds it, and b holds slot 1: three at once.
        let mut history = clean_semaphore();
        history.insert(3, permit("x", 0, 14, 15, 1, 3, 1));
        let report = check(&history);
        assert_eq!(
            (report.over_permits, report.max_holders),
            (1, 3),
            "{report}"
        );
        assert_eq!(report.overlaps, 1, "a and x on slot 0: {report}");
        assert!(report.exclusion_violated() && !report.is_clean());
        assert!(
            report.problems.iter().any(|p| p.contains("3 holders of s")),
            "{report}"
        );
    }

    #[test]
    fn a_slot_outside_the_permits_is_reported() {
        // Three holders on three slots of a semaphore of two permits: no slot overlaps.
        let history = vec![
            meta(),
            permit("a", 0, 9, 10, 10, 1, 0),
            permit("b", 1, 10, 11, 10, 2, 0),
            permit("c", 2, 11, 12, 10, 3, 0),
            slot_counter(0, 1),
            slot_counter(1, 1),
        ];
        let report = check(&history);
        assert_eq!(report.overlaps, 0, "{report}");
        // The bound at c's start, and c's slot.
        assert_eq!(report.over_permits, 2, "{report}");
        assert!(report.exclusion_violated());
    }

    #[test]
    fn sections_one_after_another_on_two_slots_are_not_over_the_bound() {
        // a ends at 20 exactly when c begins (half-open intervals), on slot 0; b on slot 1.
        let history = vec![
            meta(),
            permit("a", 0, 9, 10, 10, 1, 0),
            permit("b", 1, 10, 11, 20, 2, 0),
            permit("c", 0, 19, 20, 5, 3, 1),
            slot_counter(0, 2),
            slot_counter(1, 1),
        ];
        let report = check(&history);
        assert!(report.is_clean(), "{report}");
        assert_eq!(report.max_holders, 2);
    }

    #[test]
    fn a_lost_update_on_a_slot_is_reported() {
        let mut history = clean_semaphore();
        history.pop();
        history.push(slot_counter(1, 1));
        let report = check(&history);
        assert_eq!(report.lost_updates, 1, "{report}");
        assert!(report.problems[0].contains("s slot 1"), "{report}");
        // A slot's counter that moved though nobody held a permit of the semaphore.
        let report = check(&[meta(), slot_counter(0, 0), slot_counter(1, 1)]);
        assert_eq!(report.lost_updates, 1, "{report}");
    }

    #[test]
    fn a_stale_read_on_a_slot_is_reported() {
        // c on slot 0 after a, without overlap, reads what was there before a wrote.
        let mut history = clean_semaphore();
        history[3] = permit("c", 0, 24, 25, 5, 2, 0);
        history[5] = slot_counter(0, 1);
        let report = check(&history);
        assert_eq!(
            (report.stale_reads, report.lost_updates),
            (1, 1),
            "{report}"
        );
    }

    #[test]
    fn semaphore_token_regressions_are_reported() {
        let history = vec![
            meta(),
            // a's token 5 is handed out at 10; b asks at 12 and gets 5, c at 30 gets 4.
            permit("a", 0, 9, 10, 10, 5, 0),
            permit("b", 1, 12, 13, 2, 5, 0),
            permit("c", 1, 30, 31, 2, 4, 1),
            // d asked at 8, before any token was handed out: 3 is allowed.
            permit("d", 0, 8, 40, 2, 3, 1),
            slot_counter(0, 2),
            slot_counter(1, 2),
        ];
        let report = check(&history);
        assert_eq!(report.regressions, 2, "{report}");
        assert!(!report.exclusion_violated() && !report.is_clean());
    }

    #[test]
    fn semaphore_histories_survive_json_lines_and_old_lines_still_parse() {
        let history = clean_semaphore();
        let text = super::super::history::to_jsonl(&history);
        let back = super::super::history::parse_jsonl(text.as_bytes()).unwrap();
        assert_eq!(back, history);
        // A lock's records as written before semaphores: no slot, permits or token_asked.
        let old = r#"{"type":"counter","resource":"r","value":3}
{"type":"op","client":"a","resource":"r","op":"acquire","outcome":"ok","start":1,"end":2,"deadline_ms":1000,"hold":{"token":1,"cs_start":3,"cs_end":4,"read":0,"wrote":1,"valid_at_end":true,"released_at":5,"release":"ok"}}"#;
        let back = super::super::history::parse_jsonl(old.as_bytes()).unwrap();
        assert_eq!(back[0], counter(3));
        let Record::Op(op) = &back[1] else {
            panic!("{back:?}")
        };
        assert_eq!(op.permits, None);
        assert_eq!(
            op.hold.as_ref().map(|h| (h.slot, h.token_asked)),
            Some((None, None))
        );
        // And a lock's records are written as before.
        assert!(!super::super::history::to_jsonl(&clean()).contains("slot"));
    }

    #[test]
    fn a_clean_read_write_history_passes() {
        let report = check(&clean_read_write());
        assert!(report.is_clean(), "{report}");
        assert_eq!(
            (
                report.read_sections,
                report.write_sections,
                report.max_readers,
                report.shared_read_tokens
            ),
            (6, 2, 2, 2),
            "{report}"
        );
    }

    #[test]
    fn a_writer_beside_a_reader_or_a_writer_is_reported() {
        use Side::{Read, Write};
        // x writes while a and b read (two overlapping pairs); y writes beside c.
        let mut history = clean_read_write();
        history.insert(3, side("x", Write, 15, 2, None, 0));
        history.insert(5, side("y", Write, 27, 1, None, 1));
        history.pop();
        history.push(rw_counter(3));
        let report = check(&history);
        assert_eq!(report.overlaps, 3, "{report}");
        assert!(report.exclusion_violated() && !report.is_clean());
        // Readers at once are not an overlap.
        let report = check(&[
            meta(),
            side("a", Read, 10, 10, None, 0),
            side("b", Read, 11, 10, None, 0),
            side("c", Read, 12, 10, None, 0),
            rw_counter(0),
        ]);
        assert!(report.is_clean(), "{report}");
        assert_eq!(report.max_readers, 3);
    }

    #[test]
    fn a_read_write_lost_update_is_reported() {
        let mut history = clean_read_write();
        history.pop();
        history.push(rw_counter(1));
        let report = check(&history);
        assert_eq!(
            (report.lost_updates, report.stale_reads),
            (1, 0),
            "{report}"
        );
        // A reader's write is a counter error.
        let mut history = clean_read_write();
        if let Some(Record::Op(op)) = history.get_mut(1) {
            if let Some(h) = op.hold.as_mut() {
                h.wrote = Some(1);
            }
        }
        assert_eq!(check(&history).counter_errors, 1);
    }

    #[test]
    fn a_stale_read_is_reported() {
        use Side::{Read, Write};
        let mut history = clean_read_write();
        // d reads at 40 what was there before c wrote at 25..30.
        history[6] = side("d", Read, 40, 5, Some(3), 0);
        // A writer that read what was there before the writer before it wrote.
        history[7] = side("c", Write, 50, 5, Some(4), 0);
        history[8] = side("d", Read, 55, 5, None, 1);
        history.pop();
        history.push(rw_counter(1));
        let report = check(&history);
        assert_eq!(
            (report.stale_reads, report.lost_updates, report.overlaps),
            (2, 1, 0),
            "{report}"
        );
        assert!(
            report
                .problems
                .iter()
                .any(|p| p.contains("reader d read 0")),
            "{report}"
        );
    }

    #[test]
    fn read_write_token_regressions_are_reported() {
        use Side::{Read, Write};
        let history = vec![
            meta(),
            side("a", Read, 10, 5, Some(5), 0),
            // A writer not above a reader's token handed out before it asked.
            side("b", Write, 20, 5, Some(5), 0),
            // A reader not above the writer's.
            side("c", Read, 30, 5, Some(5), 1),
            // A writer below the writer before it: regression twice (in order, and by round).
            side("d", Write, 40, 5, Some(4), 1),
            // A reader below an earlier reader's token: allowed.
            side("e", Read, 50, 5, Some(6), 2),
            side("f", Read, 60, 5, Some(6), 2),
            rw_counter(2),
        ];
        let report = check(&history);
        assert_eq!(report.regressions, 4, "{report}");
        assert!(!report.exclusion_violated() && !report.is_clean());
        // a and c share 5, e and f share 6.
        assert_eq!(report.shared_read_tokens, 2);
    }

    #[test]
    fn read_write_histories_survive_json_lines() {
        let history = clean_read_write();
        let text = super::super::history::to_jsonl(&history);
        let back = super::super::history::parse_jsonl(text.as_bytes()).unwrap();
        assert_eq!(back, history);
        assert!(text.contains(r#""side":"write""#), "{text}");
        // Locks' records are written as before.
        assert!(!super::super::history::to_jsonl(&clean()).contains("side"));
    }
}
