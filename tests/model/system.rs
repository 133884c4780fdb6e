//! What the checker explores: the rules (the crate's, or a known-bad variant), the bounds of
//! a run, and the state of `N` nodes and `C` client slots (3 and 2 by default) in ticks of
//! true time.
//!
//! Time. One tick is two seconds of true time. Every clock is read from the tick: a node's
//! clock runs 10% fast (2,200 ms a tick), a client's 10% slow (1,800 ms a tick), the rates
//! most against the lock (a node expires keys early, a holder believes its lock late), and
//! within what the drift factor of these runs covers (0.2: design 5, step 3, asks
//! `(1 − f)(1 + ρn) ≤ 1 − ρc`, here 0.88 ≤ 0.9). Node clocks agree with each other
//! (assumption 7); a client's clock only measures durations. The ttl is 4 s, two ticks and
//! four whole seconds: the resolution of `uptime_in_seconds` (1 s) is half a tick, and
//! `lineage::record_age` dates a young node's record back where its figure is 2 s.

use std::time::Duration;

use quorumlock::__model::Ballot;

use super::storage::{Storage, Write};

/// Nodes of the default runs: a run's node count is the const parameter `N` of
/// [`super::explore::System`], of its bounds and of its state.
pub const NODES: usize = 3;
/// Client slots of the default runs (each runs one process at a time): a run's count is
/// the const parameter `C` of [`super::explore::System`] and of its state.
pub const CLIENTS: usize = 2;
/// Milliseconds a node's clock moves in a tick.
pub const NODE_MS_PER_TICK: u64 = 2_200;
/// Milliseconds a client's clock moves in a tick.
pub const CLIENT_MS_PER_TICK: u64 = 1_800;
/// The ttl of every lock, which is also every client's longest ttl.
pub const TTL: Duration = Duration::from_millis(4_000);
/// The drift factor of every client.
pub const DRIFT_FACTOR: f64 = 0.2;
/// How long the nodes have been up at tick 0, by their clocks: old (past their young first
/// `max_ttl`), so that a flush is a loss on an old node.
pub const UP_AT_START_MS: u64 = 100_000;

/// How a client treats a node that may have lost data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quarantine {
    /// The crate's rule: the quarantine recorded on the node (the QUARANTINE script, read by
    /// every check) and `lineage::hold_back` on it.
    Recorded,
    /// The rule before the record: `hold_back` with no record, each process counting from
    /// when it first saw the loss (or from a young node's start).
    PerProcess,
    /// None: the votes count at once, and the node is re-seeded at once.
    Off,
}

/// Where a new record of a quarantine starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordStart {
    /// `lineage::record_age`: the node's latest possible start while its uptime figure plus
    /// the figure's resolution is below the longest ttl, else now.
    Crate,
    /// The rule before 91b693e: the latest possible start while the figure less its
    /// resolution is below the longest ttl (a server up for more than the longest ttl, whose
    /// votes a client may count, is still dated back when its figure says the ttl).
    FigureLessResolution,
    /// The node's start (its uptime less the resolution), even for an old node.
    NodeStart,
}

/// The rules a run checks: [`Rules::CRATE`], or one rule replaced by a known-bad one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rules {
    pub quarantine: Quarantine,
    pub record_start: RecordStart,
    /// Whether the validity subtracts the drift allowance (`quorumlock::drift`).
    pub drift: bool,
    /// Whether the validity subtracts the time the round took.
    pub elapsed: bool,
    /// The yes votes a round needs instead of a majority (`Tally::needing`), if any.
    pub needed: Option<usize>,
    /// The same for the FENCE round alone: a token recorded on fewer nodes.
    pub fence_needed: Option<usize>,
    /// The same for the PEEK round alone: a token (a term) read from fewer nodes.
    pub peek_needed: Option<usize>,
    /// Whether a node's counters read as at least its marker's floor (`largest_counter!`
    /// in `src/node/scripts/`).
    pub floor: bool,
    /// Whether an acquisition's votes count only if the node, right after running them,
    /// still holds the marker or the record its check found (`lineage::still_checked`): what
    /// sees a FLUSHALL under a connected process.
    pub votes_checked: bool,
    /// Whether SEED holds the node to the quarantine record the re-seeding process's check
    /// found (34d1a41): a record gone is a loss since the check, and the node is checked
    /// again instead. Without, the seeder before, which compared the marker alone (none,
    /// before and after a flush): docs/verification.md, "What the model found".
    pub reseed_checked: bool,
    /// Whether the storage a holder writes to fences: it refuses a token smaller than the
    /// largest it accepted (`storage.rs`). Without, it takes every write.
    pub fenced_storage: bool,
    /// Whether an extension's answer 2 (the key missing) counts against it, as
    /// `node::Extended::Missing` does. Without, it counts as a yes.
    pub missing_refuses: bool,
    /// Whether an extension's validity subtracts the time its round took (measured from the
    /// round's start, `Extension::start` in `engine/extension.rs`). Without, it is measured
    /// from the round's end.
    pub extension_from_start: bool,
}

impl Rules {
    /// The crate's rules, all of them.
    pub const CRATE: Rules = Rules {
        quarantine: Quarantine::Recorded,
        record_start: RecordStart::Crate,
        drift: true,
        elapsed: true,
        needed: None,
        fence_needed: None,
        peek_needed: None,
        floor: true,
        votes_checked: true,
        reseed_checked: true,
        fenced_storage: true,
        missing_refuses: true,
        extension_from_start: true,
    };
}

/// How far a run goes: true time, and how many of each fault and event it may have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds<const N: usize = NODES> {
    /// The last tick.
    pub ticks: u8,
    /// Lock attempts, by all processes together.
    pub attempts: u8,
    /// Node crashes followed by a restart.
    pub restarts: [u8; N],
    /// FLUSHALLs.
    pub flushes: [u8; N],
    /// Client pauses, each of `pause_ticks`.
    pub pauses: u8,
    pub pause_ticks: u8,
    /// Processes started after the first two, each in a slot whose process exited (or
    /// ended: see `lifetime`).
    pub processes: u8,
    /// Ticks a process lives, if bounded (short-lived processes): it ends at the tick its
    /// life is over, and does not exit before.
    pub lifetime: Option<u8>,
    /// Which nodes keep their data across a restart.
    pub persistent: [bool; N],
    /// Whether holders ask for their fencing token.
    pub tokens: bool,
    /// Extensions, by all holders together (`engine/extension.rs`).
    pub extensions: u8,
    /// Whether the processes campaign (`election.rs`): a holder asks its token, the term,
    /// before anything else, and releases the lock if it cannot be had (then campaigns
    /// again); a holder with its term leads until it resigns (releases) or its validity
    /// ends.
    pub election: bool,
    /// Whether an acquisition's replies may come a tick late (else each comes as its
    /// request runs, or never: a timeout).
    pub late_replies: bool,
    /// The last tick at which a node may restart.
    pub restarts_by: u8,
    /// The last tick at which a node may be flushed.
    pub flushes_by: u8,
    /// The sub-second parts of a node's clock (ms) that a restart may start the server at,
    /// one branch each (none: 0). `uptime_in_seconds` is the difference of two readings
    /// truncated to the second, so it depends on it.
    pub phases: &'static [u16],
    /// Whether node 0 restarts empty before the first step of the run (one initial state
    /// per phase), the processes then checking it as they start.
    pub restart_first: bool,
    /// The tick from which faults stop and the run is fair, if any (`live.rs`): no restart,
    /// flush, pause, exit or late reply; every request runs and every reply is taken within
    /// the tick; an empty slot gets a new process; a process that holds no valid lock
    /// attempts once a tick, its round not overlapping another's. `attempts` and
    /// `processes` bound only what comes before.
    pub fair_from: Option<u8>,
    /// Whether a holder with its fencing token checks its lock, then writes to the storage
    /// with the token (`storage.rs`), once a hold.
    pub writes: bool,
}

/// A node's marker, `RUN_ID:FLOOR` or `RUN_ID:0:new` (`lineage::Marker`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Marker {
    pub run: u8,
    pub floor: u64,
    pub fresh: bool,
}

/// One node.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Node {
    /// What the run's bounds let happen to it (its persistence, its restarts and flushes):
    /// nodes of one class are interchangeable.
    pub class: u8,
    /// The server process running now: its run_id is [`run_id`] of this.
    pub run: u8,
    /// Its clock when the server started.
    pub started_ms: u64,
    /// The sub-second part of its wall clock (ms) when the server started: the figure of
    /// `uptime_in_seconds` is `(now − started + phase) / 1000`, truncated.
    pub phase: u16,
    /// The lock key: the token (the attempt that set it) and its expiry, by this node's clock.
    pub key: Option<(u8, u64)>,
    /// The lock's fencing counter (`quorumlock:fence:<key>`).
    pub counter: u64,
    /// `quorumlock:hwm`.
    pub hwm: u64,
    /// `quorumlock:node`.
    pub marker: Option<Marker>,
    /// `quorumlock:quarantine` = (run, START_MS, WAIT_MS).
    pub record: Option<(u8, u64, u64)>,
}

/// What one client process knows of one node (`node/admission.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct View {
    /// Checked since the connection was made (or broke).
    pub checked: bool,
    /// The run the check found.
    pub run: u8,
    /// The marker the check found intact, while the counters are trusted.
    pub marker: Option<Marker>,
    /// Until when (its own clock) its votes do not count: never shortened.
    pub quarantined_until: u64,
    /// When this process first saw the loss, of which run (the per-process rule only).
    pub lost_since: Option<(u64, u8)>,
    /// When the node found without its marker is to be re-seeded (its own clock).
    pub reseed_due: Option<u64>,
    /// What the check found that a loss takes away (`lineage::Checked::found`): the
    /// marker, if the node was intact (after a re-seed by this process, the marker it
    /// wrote), and the record of the running server, `(START_MS, WAIT_MS)`, if any.
    pub found: (Option<Marker>, Option<(u64, u64)>),
}

/// What a round asks of a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Stage {
    /// SET NX of the attempt's token.
    Acquire,
    /// PEEK: the counters, where the key holds our token.
    Peek,
    /// FENCE: record this token where the key holds ours.
    Fence(u64),
    /// EXTEND (compare-and-pexpire), and what became of the extension it belongs to: an
    /// answer 2 (missing) that comes after the round was decided is restored only where the
    /// extension stood.
    Extend(Standing),
    /// RESTORE, with the fencing token handed out to the hold (0 if none).
    Restore(u64),
}

/// What became of an extension, as its EXTENDs still on their way see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Standing {
    /// Not decided yet.
    Pending,
    /// Granted: an answer 2 that comes by the end of this tick (the node timeout) is
    /// restored.
    Stood(u8),
    /// Not granted, or granted and its answer no longer awaited.
    Fell,
}

/// A round: the attempt's token and what is asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Round {
    pub token: u8,
    pub stage: Stage,
}

/// A request on its way to a node, with the marker it carries (PEEK, FENCE).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Request {
    pub round: Round,
    pub marker: Option<Marker>,
}

/// A node's answer on its way back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Reply {
    pub ballot: Ballot,
    /// What the counters read as (PEEK).
    pub value: u64,
    /// The script found another marker than the one sent (it answered -1).
    pub refused: bool,
    pub marker: Option<Marker>,
    /// What the node held right after an acquisition's SET, read in the same atomic step
    /// (`held!` in `src/node/scripts/`): its marker and its record.
    pub held: Held,
}

/// A node's marker and quarantine record, as a command that carries votes reads them back.
pub type Held = (Option<Marker>, Option<(u8, u64, u64)>);

/// One process's connection to one node: requests in order, and the reply of the current
/// round (a reply to an earlier round is dropped when it comes), taken no earlier than
/// tick `reply_at`. The round counts a timeout for the node if no reply was taken by the
/// end of tick `due` (the node timeout: one tick).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Channel {
    pub requests: Vec<Request>,
    pub reply: Option<Reply>,
    pub reply_at: u8,
    pub due: u8,
}

/// The answers of a round so far, node by node, with what PEEK read.
pub type Answers<const N: usize = NODES> = [Option<(Ballot, u64)>; N];

/// What the holder did about its fencing token.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Fencing<const N: usize = NODES> {
    NotAsked,
    Peeking(Answers<N>),
    Recording(u64, Answers<N>),
    Handed(u64),
    Refused,
}

/// Where a process is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Phase<const N: usize = NODES> {
    Idle,
    Acquiring {
        token: u8,
        start_ms: u64,
        answers: Answers<N>,
    },
    Held {
        token: u8,
        /// By its clock: `start + ttl − drift` (the validity it computed).
        valid_until: u64,
        /// Which grant of the run this is, in the order of the grants.
        hold: u8,
        fencing: Fencing<N>,
        /// The extension under way, if any: its start (its clock) and its answers so far,
        /// each with the EXTEND script's answer (1 kept, 0 another token, 2 missing).
        extension: Option<(u64, Answers<N>)>,
    },
}

/// One client slot.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Client<const N: usize = NODES> {
    pub alive: bool,
    pub born: u8,
    /// No step before this tick (a pause).
    pub paused_until: u8,
    /// It attempted in this tick (kept only once the run is fair).
    pub tried: bool,
    pub views: [View; N],
    pub channels: [Channel; N],
    pub phase: Phase<N>,
    /// Its "check, then write" in the hold under way.
    pub write: Write,
}

/// Faults and events used so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Used<const N: usize = NODES> {
    pub restarts: [u8; N],
    pub flushes: [u8; N],
    pub pauses: u8,
    pub starts: u8,
    pub extensions: u8,
}

impl<const N: usize> Default for Used<N> {
    fn default() -> Self {
        Used {
            restarts: [0; N],
            flushes: [0; N],
            pauses: 0,
            starts: 0,
            extensions: 0,
        }
    }
}

/// Things that happened, for the `sometimes` properties and for what a counterexample is
/// asserted to contain.
pub mod seen {
    pub const GRANT: u32 = 1;
    pub const RESTART: u32 = 2;
    pub const TOKEN_AFTER_RESTART: u32 = 4;
    pub const RESEED: u32 = 8;
    pub const GRANT_AFTER_MAJORITY_LOST: u32 = 16;
    pub const TOKEN_AFTER_MAJORITY_LOST: u32 = 32;
    /// A vote of a node flushed since the process checked it was refused by
    /// `still_checked` (and the node checked again).
    pub const FLUSH_SEEN: u32 = 64;
    /// A grant after [`FLUSH_SEEN`].
    pub const GRANT_AFTER_FLUSH_SEEN: u32 = 128;
    /// A vote counted that `still_checked` refuses (only where the rules do not ask it).
    pub const UNCHECKED_VOTE: u32 = 256;
    /// A record dated back by `record_age` (a young node's latest possible start).
    pub const DATED_BACK: u32 = 512;
    /// A record written at a figure that `record_age` and the rule before 91b693e date
    /// differently.
    pub const AT_THE_BOUNDARY: u32 = 1024;
    /// A re-seed by a process whose check's record the node no longer holds (it lost data
    /// again since).
    pub const RESEED_STALE: u32 = 2048;
    /// A grant to an attempt that started once the run was fair.
    pub const FAIR_GRANT: u32 = 4096;
    /// A leader (a campaign with its term) after a node restarted.
    pub const LEADER_AFTER_RESTART: u32 = 8192;
    /// A leader whose term is not greater than an earlier leader's.
    pub const TERM_NOT_GREATER: u32 = 16384;
    /// A leader whose campaign started once the run was fair.
    pub const FAIR_LEADER: u32 = 32768;
    /// An extension granted.
    pub const EXTENDED: u32 = 1 << 16;
    /// A RESTORE that set the key again on a node that restarted.
    pub const RESTORED_AFTER_RESTART: u32 = 1 << 17;
    /// An extension granted on a tally that counted an answer 2 (missing) as a yes.
    pub const MISSING_COUNTED: u32 = 1 << 18;
}

/// The whole system.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct State<const N: usize = NODES, const C: usize = CLIENTS> {
    /// True time.
    pub t: u8,
    pub nodes: [Node; N],
    pub clients: [Client<N>; C],
    /// The next attempt's token.
    pub next_token: u8,
    /// Grants so far.
    pub grants: u8,
    pub used: Used<N>,
    /// The largest fencing token handed out, and the hold it went to.
    pub fenced: Option<(u8, u64)>,
    /// A token was handed out that does not grow with the holds.
    pub out_of_order: bool,
    /// [`seen`] bits.
    pub seen: u32,
    /// Once a majority of the nodes lost data at once: the first token of the attempts
    /// that started after.
    pub majority_lost_at: Option<u8>,
    /// Once the run is fair: the first token of the attempts that started after.
    pub fair_token: Option<u8>,
    /// The storage the holders write to.
    pub storage: Storage,
}

/// A node's run_id for `run`: hex, as a server's.
pub fn run_id(run: u8) -> String {
    format!("{:040x}", 0xc0ffee_u64 * 256 + u64::from(run))
}

impl<const N: usize, const C: usize> State<N, C> {
    /// A node's clock now.
    pub fn node_ms(&self) -> u64 {
        UP_AT_START_MS + NODE_MS_PER_TICK * u64::from(self.t)
    }

    /// A client's clock now.
    pub fn client_ms(&self) -> u64 {
        CLIENT_MS_PER_TICK * u64::from(self.t)
    }

    /// The processes that hold the lock now: granted, alive, and before the end of the
    /// validity they computed, by their own clocks.
    pub fn holders(&self) -> usize {
        let now = self.client_ms();
        self.clients
            .iter()
            .filter(|c| {
                c.alive && matches!(c.phase, Phase::Held { valid_until, .. } if now < valid_until)
            })
            .count()
    }
}
