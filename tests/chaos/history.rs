//! What a chaos run records: one `Op` per lock attempt (or semaphore permit, or side of a
//! read-write lock), one `Fault` per interval during
//! which nodes were down, frozen, cut off or quarantined, and the final value of each
//! shared counter. Written as JSON lines (one record per line) so that the histories of
//! clients in other processes and containers can be merged with the driver's.
//!
//! Every time is nanoseconds of `CLOCK_MONOTONIC`. Containers share the host's kernel and
//! Linux has no per-namespace monotonic clock unless a time namespace is set up (Docker does
//! not), so readings taken on the host and in containers are on one time line.

use std::io::{BufRead, Write};
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Now, in nanoseconds of `CLOCK_MONOTONIC`.
pub fn mono_ns() -> u64 {
    let ts = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .expect("CLOCK_MONOTONIC is always readable on Linux");
    let secs = u64::try_from(ts.tv_sec()).expect("monotonic seconds are never negative");
    let nanos = u64::try_from(ts.tv_nsec()).expect("nanoseconds are never negative");
    secs * 1_000_000_000 + nanos
}

/// `d` in nanoseconds.
pub fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// How one lock call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The lock was granted.
    Ok,
    /// Someone else held it (still, after the retries).
    Taken,
    /// Too few nodes answered.
    NoQuorum,
    /// A majority answered, too late to leave any validity.
    ValidityExpired,
    /// Any other error.
    Other,
    /// The call did not return within its hard limit and was abandoned.
    Stuck,
}

impl Outcome {
    /// The outcome of a lock call that returned an error.
    pub fn of(e: &quorumlock::Error) -> Outcome {
        match e {
            quorumlock::Error::Taken { .. } => Outcome::Taken,
            quorumlock::Error::NoQuorum { .. } => Outcome::NoQuorum,
            quorumlock::Error::ValidityExpired { .. } => Outcome::ValidityExpired,
            _ => Outcome::Other,
        }
    }
}

/// Which side of a read-write lock an attempt asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Side {
    /// Shared: the critical section only reads the lock's counter.
    Read,
    /// Alone: the critical section read-sleep-writes the lock's counter.
    Write,
}

/// A critical section run under a granted lock or semaphore permit: a read-sleep-write of
/// the resource's counter (for a permit, its slot's counter), which a second holder at the
/// same time would make lose an update.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hold {
    /// The lock's or permit's fencing token, if one was asked for and handed out.
    pub token: Option<u64>,
    /// When the fencing token was asked for, if it was: a token handed out before this
    /// instant is smaller than this one (the checker's order for semaphores).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_asked: Option<u64>,
    /// The permit's slot (`Permit::slot`), for a semaphore; `None` for a lock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<u32>,
    /// When the critical section began (after the lock was granted and found valid).
    pub cs_start: u64,
    /// When it ended (after the counter write was acknowledged).
    pub cs_end: u64,
    /// The counter value read (`None`: the read failed).
    pub read: Option<i64>,
    /// The counter value written (`None`: the write failed or was skipped, or the section
    /// held the read side of a read-write lock, which only reads).
    pub wrote: Option<i64>,
    /// Whether the lock was still valid when the critical section ended (a holder that
    /// outlives its lock breaks assumption 5, not the lock).
    pub valid_at_end: bool,
    /// When the release call returned.
    pub released_at: u64,
    /// How the release ended: "ok", or the error.
    pub release: String,
}

/// One lock call, and what was done under the lock if it was granted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Op {
    /// Which client and worker made the call, e.g. `h0.r1.w0` (client `h0`).
    pub client: String,
    /// The locked resource, or the semaphore's name.
    pub resource: String,
    /// The operation: `acquire` (a lock), `acquire_permit` (a permit of a semaphore),
    /// `acquire_read` or `acquire_write` (a side of a read-write lock).
    pub op: String,
    /// The semaphore's number of permits, for `acquire_permit`; `None` for a lock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permits: Option<u32>,
    /// The side asked for, for a read-write lock; `None` for a lock or a semaphore.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub side: Option<Side>,
    pub outcome: Outcome,
    /// When the call was made.
    pub start: u64,
    /// When it returned (or was abandoned).
    pub end: u64,
    /// The longest a call (acquire or release) may take before it counts as stuck.
    pub deadline_ms: u64,
    /// The critical section, when the lock was granted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold: Option<Hold>,
    /// The error, when the call failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The nodes that failed in the deciding attempt (down, frozen, cut off, quarantined),
    /// as the client reported them: in a granted lock's `failures`, or in the error.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed_nodes: Vec<usize>,
    /// Those of `failed_nodes` whose votes did not count because the client quarantined
    /// them (`NodeErrorKind::Quarantined`): a restart the client noticed on reconnecting.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub quarantined_nodes: Vec<usize>,
}

/// An interval during which `nodes` could not be counted on: down, frozen, cut off, or
/// quarantined by the clients after a restart.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fault {
    /// `kill`, `pause`, `disconnect`, `partition`, `quarantine`, `restart`.
    pub kind: String,
    /// Indexes into the node list (0-based; `redis1` is 0).
    pub nodes: Vec<usize>,
    /// Clients the fault applies to, by prefix of their id; empty: every client.
    #[serde(default)]
    pub clients: Vec<String>,
    pub start: u64,
    /// `None` while the fault lasts (the history closes it at the end of the run).
    pub end: Option<u64>,
}

impl Fault {
    /// Whether this fault hides its nodes from `client`.
    pub fn applies_to(&self, client: &str) -> bool {
        self.clients.is_empty() || self.clients.iter().any(|c| client.starts_with(c.as_str()))
    }
}

/// One line of a history.
// An `Op` is most of the records of a run, a few thousand of them: boxing it would save
// nothing worth the noise at every place that builds or matches one.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Record {
    /// What was run, on how many nodes.
    Meta {
        scenario: String,
        nodes: usize,
        description: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        seed: Option<u64>,
        /// When the workload started and was told to stop.
        start: u64,
        stop: u64,
    },
    Op(Op),
    Fault(Fault),
    /// A counter's value after every worker stopped: a lock's, or (`slot`) the counter of
    /// one slot of a semaphore.
    Counter {
        resource: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        slot: Option<u32>,
        value: i64,
    },
    /// A candidate began to lead `election` in `term` at `start` (written at once, so that a
    /// leader killed before its term ends leaves it behind; the term's `Op` follows when it
    /// ends).
    Lead {
        client: String,
        election: String,
        term: u64,
        start: u64,
    },
    /// Which nodes a client could reach at `at` (`RedLock::inspect`): evidence that a fault
    /// looked, from that client, the way the driver meant it to.
    View {
        client: String,
        at: u64,
        reachable: Vec<usize>,
    },
}

/// A history being recorded, shared by the driver and the workers.
#[derive(Debug, Clone, Default)]
pub struct History(Arc<Mutex<Vec<Record>>>);

/// Refers to a fault recorded with [`History::begin_fault`], to end it.
#[derive(Debug, Clone, Copy)]
pub struct FaultId(usize);

impl History {
    pub fn push(&self, record: Record) {
        self.records_mut().push(record);
    }

    pub fn extend(&self, records: impl IntoIterator<Item = Record>) {
        self.records_mut().extend(records);
    }

    /// Records the start of a fault on `nodes` that applies to every client.
    pub fn begin_fault(&self, kind: &str, nodes: &[usize]) -> FaultId {
        self.begin_fault_for(kind, nodes, &[])
    }

    /// Records the start of a fault on `nodes` as seen by the clients whose id starts with
    /// one of `clients`.
    pub fn begin_fault_for(&self, kind: &str, nodes: &[usize], clients: &[&str]) -> FaultId {
        let mut records = self.records_mut();
        records.push(Record::Fault(Fault {
            kind: kind.to_owned(),
            nodes: nodes.to_vec(),
            clients: clients.iter().map(|c| (*c).to_owned()).collect(),
            start: mono_ns(),
            end: None,
        }));
        FaultId(records.len() - 1)
    }

    /// Records the end of a fault, now.
    pub fn end_fault(&self, id: FaultId) {
        self.end_fault_at(id, mono_ns());
    }

    /// Records the end of a fault at `at` (which may be in the future: a quarantine).
    pub fn end_fault_at(&self, id: FaultId, at: u64) {
        if let Some(Record::Fault(f)) = self.records_mut().get_mut(id.0) {
            f.end = Some(at);
        }
    }

    /// Records a fault whose start and end are already known.
    pub fn fault_between(&self, kind: &str, nodes: &[usize], start: u64, end: u64) {
        self.push(Record::Fault(Fault {
            kind: kind.to_owned(),
            nodes: nodes.to_vec(),
            clients: Vec::new(),
            start,
            end: Some(end),
        }));
    }

    /// Ends every fault still open, now.
    pub fn close_open_faults(&self) {
        let now = mono_ns();
        for r in self.records_mut().iter_mut() {
            if let Record::Fault(f) = r {
                f.end.get_or_insert(now);
            }
        }
    }

    /// A copy of everything recorded so far.
    pub fn records(&self) -> Vec<Record> {
        self.records_mut().clone()
    }

    fn records_mut(&self) -> std::sync::MutexGuard<'_, Vec<Record>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One JSON line per record.
pub fn to_jsonl(records: &[Record]) -> String {
    let mut out = String::new();
    for r in records {
        out.push_str(&serde_json::to_string(r).expect("a record always serializes"));
        out.push('\n');
    }
    out
}

/// Writes `records` to `path` as JSON lines, creating the directory.
pub fn write_jsonl(path: &Path, records: &[Record]) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut file = std::io::BufWriter::new(std::fs::File::create(path)?);
    file.write_all(to_jsonl(records).as_bytes())?;
    file.flush()
}

/// Parses JSON lines; blank lines are skipped, anything else that does not parse is an error
/// naming its line.
pub fn parse_jsonl(text: impl BufRead) -> Result<Vec<Record>, String> {
    let mut records = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.map_err(|e| format!("line {}: {e}", i + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        records.push(serde_json::from_str(&line).map_err(|e| format!("line {}: {e}", i + 1))?);
    }
    Ok(records)
}
