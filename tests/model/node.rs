//! What a node does: its scripts, run atomically (`src/node/scripts/`), a restart and a
//! FLUSHALL. The node side is Lua in the crate, so it is written here again, as the scripts
//! say, and held to them on a real server (`lock_refinement.rs`); the decisions of the
//! client are not (they are called, `client.rs`).

use std::cell::RefCell;
use std::collections::BTreeSet;

use quorumlock::__model::{self as algo, Ballot};

use super::system::{run_id, Marker, Node, Reply, Request, Stage, Standing, TTL};

/// A node step as the model takes it, for the refinement check (`lock_refinement.rs`): the
/// node before, its times moved so that the step runs at [`STEP_AT_MS`], and the call.
pub type Step = (Node, Call);

/// A call of a node script, its times moved as the node's.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Call {
    /// SET NX (with its read-back), PEEK or FENCE, and whether counters read the floor.
    Run(Request, bool),
    /// QUARANTINE with its wait and age.
    Quarantine(u64, u64),
    /// SEED: the marker read, the one to write, and the record held to (`RUN_ID:START_MS`).
    Seed(Option<Marker>, Marker, Option<String>),
    /// RELEASE (`true`) or DISCARD of a token: compare-and-delete.
    Delete(u8, bool),
}

/// The node clock of a recorded step.
pub const STEP_AT_MS: u64 = 1_000_000;

thread_local! {
    /// The steps taken since [`record_steps`] was called, if it was.
    static STEPS: RefCell<Option<BTreeSet<Step>>> = const { RefCell::new(None) };
}

/// From now on (on this thread), every node step is noted for [`recorded_steps`].
pub fn record_steps() {
    STEPS.with(|s| *s.borrow_mut() = Some(BTreeSet::new()));
}

/// The distinct steps noted since [`record_steps`], which stops noting them.
pub fn recorded_steps() -> BTreeSet<Step> {
    STEPS.with(|s| s.borrow_mut().take().unwrap_or_default())
}

/// `time` (a node's clock at `now_ms`) as the clock of a recorded step reads it.
fn moved(time: u64, now_ms: u64) -> u64 {
    time + STEP_AT_MS - now_ms
}

fn note(node: &Node, call: impl FnOnce(u64) -> Call, now_ms: u64) {
    STEPS.with(|s| {
        if let Some(steps) = s.borrow_mut().as_mut() {
            let mut node = node.clone();
            // What no script reads: the node's class and when its server started.
            (node.class, node.started_ms, node.phase) = (0, 0, 0);
            node.key = node.key.map(|(token, until)| (token, moved(until, now_ms)));
            node.record = node
                .record
                .map(|(run, start, wait)| (run, moved(start, now_ms), wait));
            steps.insert((node, call(now_ms)));
        }
    });
}

/// `RUN_ID:START_MS` with its start moved as [`moved`] does.
fn moved_record(record: &str, now_ms: u64) -> String {
    let (run, start) = record.rsplit_once(':').expect("RUN_ID:START_MS");
    let start: u64 = start.parse().expect("START_MS");
    format!("{run}:{}", moved(start, now_ms))
}

impl Marker {
    /// As stored: `RUN_ID:FLOOR`, or `RUN_ID:0:new`.
    pub fn text(&self) -> String {
        let run = run_id(self.run);
        if self.fresh {
            algo::fresh_marker(&run)
        } else {
            algo::seeded_marker(&run, self.floor)
        }
    }
}

impl Node {
    /// A node provisioned empty, as the testkit starts one: a fresh marker of its own run.
    pub fn provisioned(class: u8) -> Node {
        Node {
            class,
            run: 0,
            started_ms: 0,
            phase: 0,
            key: None,
            counter: 0,
            hwm: 0,
            marker: Some(Marker {
                run: 0,
                floor: 0,
                fresh: true,
            }),
            record: None,
        }
    }

    /// The marker as stored, if any.
    pub fn marker_text(&self) -> Option<String> {
        self.marker.map(|m| m.text())
    }

    /// `uptime_in_seconds` at `now_ms`: the server's clock now, in whole seconds, less its
    /// clock when it started, in whole seconds (`server.unixtime - server.stat_starttime`),
    /// so from the actual uptime less a second (exclusive) to the actual uptime plus a
    /// second (exclusive), as the phase of the start says.
    pub fn uptime(&self, now_ms: u64) -> std::time::Duration {
        let up = now_ms - self.started_ms + u64::from(self.phase);
        std::time::Duration::from_secs(up / 1_000)
    }

    /// Crash and restart as a new server process, started at `phase` ms past a whole second
    /// of its clock: a new run_id; a node that does not persist comes back empty, one that
    /// does keeps every write (its keys expire as before).
    pub fn restart(&mut self, now_ms: u64, phase: u16, persistent: bool) {
        self.run += 1;
        self.started_ms = now_ms;
        self.phase = phase;
        if !persistent {
            self.flush();
        }
    }

    /// FLUSHALL: every key gone, the same server.
    pub fn flush(&mut self) {
        self.key = None;
        self.counter = 0;
        self.hwm = 0;
        self.marker = None;
        self.record = None;
    }

    /// Deletes the lock key if it expired by `now_ms`.
    pub fn expire(&mut self, now_ms: u64) {
        if self.key.is_some_and(|(_, until)| until <= now_ms) {
            self.key = None;
        }
    }

    /// Runs a request: SET NX PX, PEEK or FENCE (reading the marker's floor, unless not
    /// `floor`), EXTEND or RESTORE. SET NX and EXTEND, which carry votes, read back the
    /// node's marker and record in the same atomic step (the batch script's `held!`).
    pub fn run(&mut self, request: &Request, now_ms: u64, floor: bool) -> Reply {
        // What became of an extension is the client's, not the node's.
        let mut noted = *request;
        if let Stage::Extend(_) = noted.round.stage {
            noted.round.stage = Stage::Extend(Standing::Pending);
        }
        note(self, |_| Call::Run(noted, floor), now_ms);
        let mut reply = self.answer(request, now_ms, floor);
        if matches!(request.round.stage, Stage::Acquire | Stage::Extend(_)) {
            reply.held = (self.marker, self.record);
        }
        reply
    }

    fn answer(&mut self, request: &Request, now_ms: u64, floor: bool) -> Reply {
        let token = request.round.token;
        let ours = self.key.is_some_and(|(held, _)| held == token);
        let reply = |ballot, value, refused| Reply {
            ballot,
            value,
            refused,
            marker: request.marker,
            held: (None, None),
        };
        match request.round.stage {
            Stage::Acquire if self.key.is_none() => {
                self.key = Some((token, now_ms + TTL.as_millis() as u64));
                reply(Ballot::Yes, 0, false)
            }
            Stage::Acquire => reply(Ballot::No, 0, false),
            // EXTEND: 1 kept (its ttl reset), 0 another token, 2 missing.
            Stage::Extend(_) => match self.key {
                Some((held, _)) if held == token => {
                    self.key = Some((token, now_ms + TTL.as_millis() as u64));
                    reply(Ballot::Yes, 1, false)
                }
                Some(_) => reply(Ballot::No, 0, false),
                None => reply(Ballot::No, 2, false),
            },
            // RESTORE: unless another token is there, the key set again and the counters
            // raised to the fencing token (`raise_counters!`); 1, else 0.
            Stage::Restore(_) if self.key.is_some_and(|(held, _)| held != token) => {
                reply(Ballot::No, 0, false)
            }
            Stage::Restore(f) => {
                self.key = Some((token, now_ms + TTL.as_millis() as u64));
                self.counter = self.counter.max(f);
                self.hwm = self.hwm.max(f);
                reply(Ballot::Yes, 1, false)
            }
            // Both compare the node's marker with the one the client checked: -1 if another.
            Stage::Peek | Stage::Fence(_) if self.marker != request.marker => {
                reply(Ballot::Failed, 0, true)
            }
            Stage::Peek if ours => {
                // `largest_counter!`: the floor of the marker, and the counter above it.
                let floor = self
                    .marker_text()
                    .and_then(|m| algo::marker_floor(&m))
                    .filter(|_| floor)
                    .unwrap_or(0);
                reply(Ballot::Yes, self.counter.max(floor), false)
            }
            Stage::Fence(f) if ours => {
                self.counter = self.counter.max(f);
                self.hwm = self.hwm.max(f);
                reply(Ballot::Yes, 0, false)
            }
            Stage::Peek | Stage::Fence(_) => reply(Ballot::No, 0, false),
        }
    }

    /// RELEASE (`announce`) or DISCARD of `token`: deletes the key if it holds the token.
    /// Answers how many keys were deleted.
    pub fn delete(&mut self, token: u8, announce: bool, now_ms: u64) -> u8 {
        note(self, |_| Call::Delete(token, announce), now_ms);
        if self.key.is_some_and(|(held, _)| held == token) {
            self.key = None;
            return 1;
        }
        0
    }

    /// The QUARANTINE script, for a node without a marker of its own: keeps the record of
    /// the running server (its wait raised to `wait_ms`), or writes one that starts `age_ms`
    /// before now. Answers `(START_MS, WAIT_MS, now)`.
    pub fn quarantine(&mut self, wait_ms: u64, age_ms: u64, now_ms: u64) -> (u64, u64, u64) {
        note(self, |_| Call::Quarantine(wait_ms, age_ms), now_ms);
        match &mut self.record {
            Some((run, start, was)) if *run == self.run => {
                *was = (*was).max(wait_ms);
                (*start, *was, now_ms)
            }
            _ => {
                let start = now_ms.saturating_sub(age_ms);
                self.record = Some((self.run, start, wait_ms));
                (start, wait_ms, now_ms)
            }
        }
    }

    /// The record as stored, `RUN_ID:START_MS:WAIT_MS`.
    pub fn record_text(&self) -> Option<String> {
        record_text(self.record)
    }

    /// The SEED script: if the marker is still `old` and, where `record` is given (the
    /// `RUN_ID:START_MS` of the record the re-seeding check found), the node still holds that
    /// record, writes `marker` and raises the hwm to its floor.
    pub fn seed(
        &mut self,
        old: Option<Marker>,
        marker: Marker,
        record: Option<&str>,
        now_ms: u64,
    ) -> Seeded {
        let call = |now| Call::Seed(old, marker, record.map(|r| moved_record(r, now)));
        note(self, call, now_ms);
        if self.marker != old {
            return Seeded::MarkerChanged;
        }
        if record.is_some_and(|record| !self.holds(record)) {
            return Seeded::RecordGone;
        }
        self.marker = Some(marker);
        self.hwm = self.hwm.max(marker.floor);
        Seeded::Written
    }

    /// Whether the node's record is `record` (`RUN_ID:START_MS`), whatever its wait: SEED's
    /// compare of the record's text with `record` and a colon.
    pub fn holds(&self, record: &str) -> bool {
        self.record_text()
            .is_some_and(|text| text.starts_with(&format!("{record}:")))
    }
}

/// What the SEED script answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seeded {
    /// 1: written.
    Written,
    /// 0: the marker is no longer the one the survey read.
    MarkerChanged,
    /// -1: the node no longer holds the record the check found (a loss since).
    RecordGone,
}

/// A record `(run, START_MS, WAIT_MS)` as stored, `RUN_ID:START_MS:WAIT_MS`.
pub fn record_text(record: Option<(u8, u64, u64)>) -> Option<String> {
    record.map(|(run, start, wait)| format!("{}:{start}:{wait}", run_id(run)))
}
