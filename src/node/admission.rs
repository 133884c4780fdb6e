//! Whether a node's votes count right now: every connection (the first and each reconnect)
//! is checked before its votes count (design 6.1, what is checked). The rules are in
//! `report/facts.rs`; this file keeps the per-node state and runs the checks.

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use fred::clients::Client;
use fred::interfaces::{ClientInterface, ClientLike};
use tokio::sync::Notify;

use crate::algo::lineage::{self, Lineage, Recorded};
use crate::error::NodeErrorKind;
use crate::node::probe::{self, KeySpace};
use crate::node::quarantine::{self, Answer};
use crate::node::scripts::Natives;
use crate::report::facts::{Excluded, Facts};

/// Settings and state shared by the nodes of one client.
#[derive(Debug)]
pub(crate) struct Fleet {
    /// The run_id each node reported at its last check, by node index.
    run_ids: Mutex<Vec<Option<String>>>,
    /// By node index, what [`same_server_as`](Self::same_server_as) answers (`usize::MAX`
    /// for none), computed whenever a run_id is recorded: read by every vote of every node,
    /// it takes no lock.
    same_as: Box<[AtomicUsize]>,
    pub(crate) quarantine: bool,
    pub(crate) max_ttl: Duration,
    pub(crate) timeout: Duration,
    /// Where the client's keys live, for the permission check.
    pub(crate) keys: KeySpace,
    /// Notified whenever a check ends (see `RedLock::wait_for_quorum`).
    pub(crate) checked: Notify,
    /// Notified whenever a node is re-seeded (see [`Admission::reseed_due`]).
    pub(crate) reseeded: Notify,
    /// Where a node that may have lost data is sent to be re-seeded (`engine/seeder.rs`), with its
    /// check's generation and when its quarantine ends.
    reseed: tokio::sync::mpsc::UnboundedSender<Reseed>,
}

/// A request to re-seed a node (`engine/seeder.rs`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reseed {
    pub(crate) index: usize,
    pub(crate) generation: u64,
    /// Not before this: the end of the node's quarantine.
    pub(crate) due: Instant,
}

impl Fleet {
    pub(crate) fn new(
        nodes: usize,
        quarantine: bool,
        max_ttl: Duration,
        timeout: Duration,
        keys: KeySpace,
        reseed: tokio::sync::mpsc::UnboundedSender<Reseed>,
    ) -> Self {
        Fleet {
            run_ids: Mutex::new(vec![None; nodes]),
            same_as: (0..nodes).map(|_| AtomicUsize::new(usize::MAX)).collect(),
            quarantine,
            max_ttl,
            timeout,
            keys,
            checked: Notify::new(),
            reseeded: Notify::new(),
            reseed,
        }
    }

    /// The first node before `index` that reported the same run_id.
    pub(crate) fn same_server_as(&self, index: usize) -> Option<usize> {
        let first = self.same_as.get(index)?.load(Ordering::SeqCst);
        (first != usize::MAX).then_some(first)
    }

    /// Records the run_id node `index` reported, and which nodes now share a server.
    fn record_run_id(&self, index: usize, run_id: &Option<String>) {
        let mut ids = self.run_ids.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = ids.get_mut(index) {
            slot.clone_from(run_id);
        }
        for (i, same_as) in self.same_as.iter().enumerate() {
            let first = ids
                .get(i)
                .and_then(Option::as_ref)
                .and_then(|mine| ids.iter().take(i).position(|id| id.as_ref() == Some(mine)));
            same_as.store(first.unwrap_or(usize::MAX), Ordering::SeqCst);
        }
    }
}

/// One node's admission state.
#[derive(Debug, Default)]
pub(crate) struct State {
    checked: bool,
    generation: u64,
    facts: Option<Facts>,
    /// The node's marker as last checked, while it says that the node lost nothing
    /// (`algo/lineage/`); `None` until then, and from the moment a connection changes.
    marker: Option<Arc<str>>,
    /// What the last check found that a loss of the node's data takes away (its marker, its
    /// quarantine record), against which every command's votes are held (`still_checked`).
    found: lineage::Checked,
    /// Why the node's fencing counters are not trusted, while they are not.
    lineage_why: String,
    /// Since when this client knows that the node may have lost data, and the run_id it
    /// had then (a new run_id is a new loss).
    lost_since: Option<(Instant, Option<String>)>,
    /// When the re-seed this check asked for is due (its quarantine's end), until it is done.
    reseed_due: Option<Instant>,
    quarantined_until: Option<Instant>,
    quarantine_why: String,
    /// What the node's ACL refuses of what the client needs (see `probe::permissions`).
    refused: Vec<String>,
    /// The connection the last check ran on (its `CLIENT ID`, as fred reads it when it
    /// connects; `None` when the server refused it).
    connection: Option<i64>,
}

impl State {
    /// The quarantine left now, if any.
    fn quarantine_left(&self) -> Option<Duration> {
        let left = self
            .quarantined_until?
            .saturating_duration_since(Instant::now());
        (!left.is_zero()).then_some(left)
    }
}

/// Whether a vote may be written to the node now (see [`Admission::clearance`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Clearance {
    /// Connected, on the connection that was checked, and the node's votes count.
    Clear,
    /// Not connected, or the current connection is not checked (yet).
    Wait,
    /// Checked, and the node's votes do not count.
    Refused(Excluded),
}

/// The connection fred writes on now: its `CLIENT ID`. fred removes it when the connection
/// breaks, before it queues the reconnection, and sets the new one when it connects, before
/// it reports the connection: unlike the events, it is never late.
fn connection_id(client: &Client) -> Option<i64> {
    client.connection_ids().into_values().next()
}

/// A node's admission: its state, shared with the tasks that check it.
#[derive(Debug, Clone)]
pub(crate) struct Admission {
    index: usize,
    label: Arc<str>,
    state: Arc<Mutex<State>>,
    pub(crate) fleet: Arc<Fleet>,
    /// What the last check found of `DELIFEQ` and `MSETEX` ([`probe::Permissions::natives`]),
    /// as bits: 1 for `DELIFEQ`, 2 for `MSETEX`.
    natives: Arc<AtomicU8>,
}

impl Admission {
    pub(crate) fn new(index: usize, label: Arc<str>, fleet: Arc<Fleet>) -> Self {
        Admission {
            index,
            label,
            state: Arc::new(Mutex::new(State::default())),
            fleet,
            natives: Arc::new(AtomicU8::new(0)),
        }
    }

    /// What the node's last check found that it runs for this client, for the batch script to
    /// use ([`Natives`]). Only a matter of speed: where one fails, the script does without.
    pub(crate) fn natives(&self) -> Natives {
        let bits = self.natives.load(Ordering::Relaxed);
        Natives {
            delifeq: bits & 1 != 0,
            msetex: bits & 2 != 0,
        }
    }

    /// Records what a check found (read back by [`natives`](Self::natives)).
    fn record_natives(&self, natives: Natives) {
        let bits = u8::from(natives.delifeq) | u8::from(natives.msetex) << 1;
        self.natives.store(bits, Ordering::Relaxed);
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Why the node's votes do not count now, if they do not.
    pub(crate) fn excluded(&self) -> Option<Excluded> {
        let state = self.state();
        if !state.checked {
            return Some(Excluded::Unchecked);
        }
        if state.facts.as_ref().is_some_and(|f| f.not_redis) {
            return Some(Excluded::NotRedis);
        }
        if state.facts.as_ref().is_some_and(Facts::is_replica) {
            return Some(Excluded::Replica);
        }
        if !state.refused.is_empty() {
            return Some(Excluded::Forbidden {
                refused: state.refused.clone(),
            });
        }
        if let Some(index) = self.fleet.same_server_as(self.index) {
            return Some(Excluded::SameServerAs { index });
        }
        let left = state.quarantine_left()?;
        let why = state.quarantine_why.clone();
        Some(Excluded::Quarantined { left, why })
    }

    pub(crate) fn is_checked(&self) -> bool {
        self.state().checked
    }

    /// The marker the node was last checked with, while its fencing counters are trusted.
    pub(crate) fn marker(&self) -> Option<Arc<str>> {
        self.state().marker.clone()
    }

    /// Why the node's fencing counters are not trusted now.
    pub(crate) fn lineage_why(&self) -> String {
        let state = self.state();
        match (&state.marker, state.lineage_why.is_empty()) {
            (Some(_), _) => "its fencing counters changed since it was checked".into(),
            (None, true) => "connected, not yet checked".into(),
            (None, false) => state.lineage_why.clone(),
        }
    }

    /// After a command that carried votes: whether they count, given the node's marker and
    /// quarantine record as the command read them right after its calls ran
    /// (`lineage::still_checked`; design 2.6a, "A flush under a connected client"). If they do
    /// not, the node is checked again, which finds the loss, and the votes are refused.
    pub(crate) fn still_checked(
        &self,
        client: &Client,
        marker: Option<&str>,
        record: Option<&str>,
    ) -> Result<(), Excluded> {
        if lineage::still_checked(&self.state().found, marker, record) {
            return Ok(());
        }
        tracing::warn!(
            node = self.index,
            url = %self.label,
            "node lost its data under a connected client (flushed): its votes no longer count; checking it again"
        );
        self.recheck(client, false);
        let left = if self.fleet.quarantine {
            self.fleet.max_ttl
        } else {
            Duration::ZERO
        };
        Err(Excluded::Quarantined {
            left,
            why: "the node no longer holds the marker or the quarantine record its check found: \
                  it lost its data (a flush) since; checked again"
                .to_string(),
        })
    }

    /// What a re-seed needs: the check's generation, the run_id it found and the
    /// `RUN_ID:START_MS` of the quarantine record it found (which the node must still hold),
    /// while the node is checked and its counters are not trusted (`None` otherwise).
    pub(crate) fn lost(&self) -> Option<(u64, String, Option<Arc<str>>)> {
        let state = self.state();
        if !state.checked || state.marker.is_some() {
            return None;
        }
        let run_id = state.facts.as_ref()?.run_id.clone()?;
        Some((state.generation, run_id, state.found.record.clone()))
    }

    /// The run_id of the node's last check, if it was checked and told it.
    pub(crate) fn run_id(&self) -> Option<String> {
        let state = self.state();
        state
            .facts
            .as_ref()
            .filter(|_| state.checked)?
            .run_id
            .clone()
    }

    /// The node was re-seeded with `marker` (`engine/seeder.rs`): its counters count again, unless
    /// a newer check took over meanwhile.
    pub(crate) fn reseeded(&self, generation: u64, marker: &str) {
        let mut state = self.state();
        if state.generation == generation && state.checked {
            state.marker = Some(Arc::from(marker));
            state.found.marker = state.marker.clone();
            state.lineage_why.clear();
            state.lost_since = None;
            state.reseed_due = None;
        }
        drop(state);
        self.fleet.reseeded.notify_waiters();
    }

    /// When the node, checked and found to have lost data, is due to be re-seeded (the end
    /// of its quarantine; at once with quarantine off), while that is yet to be done.
    pub(crate) fn reseed_due(&self) -> Option<Instant> {
        let state = self.state();
        state
            .reseed_due
            .filter(|_| state.checked && state.marker.is_none())
    }

    /// Whether a connection was ever made (each one starts a check).
    pub(crate) fn ever_connected(&self) -> bool {
        self.state().generation > 0
    }

    /// Whether a vote (a command that changes data) may be handed to the node's client now:
    /// only while it is connected on the very connection whose check passed (its `CLIENT ID`),
    /// and the node's votes count (design 4.3, "No vote is written on a connection...").
    pub(crate) fn clearance(&self, client: &Client) -> Clearance {
        if !client.is_connected() {
            return Clearance::Wait;
        }
        {
            let state = self.state();
            if !state.checked {
                return Clearance::Wait;
            }
            // A replaced connection whose new check has not started yet: its events are late.
            if state.connection.is_some() && connection_id(client) != state.connection {
                return Clearance::Wait;
            }
        }
        match self.excluded() {
            None => Clearance::Clear,
            Some(Excluded::Unchecked) => Clearance::Wait,
            Some(excluded) => Clearance::Refused(excluded),
        }
    }

    /// Waits, until `deadline` at the latest, for the [`clearance`](Self::clearance) of a
    /// vote: `Ok` when it may be sent, `Err(Some(why))` when the node's votes do not count
    /// (`Unchecked` when the node is connected but its check has not passed by the
    /// deadline), `Err(None)` when it is not connected by the deadline.
    pub(crate) async fn cleared(
        &self,
        client: &Client,
        deadline: tokio::time::Instant,
    ) -> Result<(), Option<Excluded>> {
        let mut late = false;
        loop {
            // Subscribed before looking, so that a check that ends in between is not missed.
            // Every new connection is checked, so a check's end is what changes the answer.
            let checked = self.fleet.checked.notified();
            tokio::pin!(checked);
            checked.as_mut().enable();
            match self.clearance(client) {
                Clearance::Clear => return Ok(()),
                Clearance::Refused(excluded) => return Err(Some(excluded)),
                Clearance::Wait if late => {
                    return Err(client.is_connected().then_some(Excluded::Unchecked))
                }
                Clearance::Wait => {}
            }
            late = tokio::time::timeout_at(deadline, checked).await.is_err();
        }
    }

    /// Waits, for `within` at the most, while the node is connected and its new connection
    /// not yet checked. A checked node returns at once, reading no clock.
    pub(crate) async fn wait_for_check(&self, client: &Client, within: Duration) {
        if self.is_checked() {
            return;
        }
        let deadline = tokio::time::Instant::now() + within;
        while client.is_connected() && !self.is_checked() && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// The facts of the last check, and the quarantine left.
    pub(crate) fn snapshot(&self) -> (Option<Facts>, Option<Duration>) {
        let state = self.state();
        (state.facts.clone(), state.quarantine_left())
    }

    /// The connection changed (re-established, or broke): stop counting the node's votes and
    /// check it again, in the background, until it answers. `always` starts a new check even
    /// if one is under way (a new connection); otherwise only if the node was counted.
    pub(crate) fn recheck(&self, client: &Client, always: bool) {
        let generation = {
            let mut state = self.state();
            if !always && !state.checked {
                return;
            }
            state.checked = false;
            // What the new connection leads to is unknown until it is checked: a restarted
            // server may hold the very marker this one held, loaded from an old snapshot.
            state.marker = None;
            state.generation += 1;
            state.generation
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (this, client) = (self.clone(), client.clone());
        runtime.spawn(async move {
            let mut pause = Duration::from_millis(50);
            loop {
                if this.state().generation != generation {
                    return; // a newer check took over
                }
                let timeout = this.fleet.timeout;
                let connection = connection_id(&client);
                let (facts, permissions, marker, record) = tokio::join!(
                    probe::facts(&client, timeout),
                    probe::permissions(&client, timeout, &this.fleet.keys),
                    probe::marker(&client, timeout),
                    probe::quarantine_record(&client, timeout)
                );
                let error = match (facts, marker) {
                    // Checked on one connection throughout: it is the one that counts.
                    (Ok(facts), Ok(mut marker))
                        if permissions.unanswered.is_empty()
                            && connection_id(&client) == connection =>
                    {
                        this.record_natives(permissions.natives);
                        let recorded = this.recorded(&client, &facts, &mut marker, record).await;
                        let found = (facts, marker, recorded);
                        return this.admit(generation, found, permissions.refused, connection);
                    }
                    (Ok(_), Ok(_)) if permissions.unanswered.is_empty() => {
                        "the connection was replaced during the check".to_string()
                    }
                    (Ok(_), Err(error)) => error.to_string(),
                    (Ok(_), _) => format!("no answer to {}", permissions.unanswered.join(", ")),
                    (Err(error), _) => error.to_string(),
                };
                tracing::debug!(node = this.index, %error, "node check unanswered; retrying");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
        });
    }

    /// The node's quarantine as recorded on it, of the running server (design 2.6a, "The
    /// quarantine is kept on the node"): for a node that may have lost data, recorded now if
    /// it is not yet, unless the marker shows that it lost nothing after all (then in
    /// `marker`); for an intact node, as `record` read it. `None` where none applies or none
    /// could be had (the client then falls back on its own rules).
    async fn recorded(
        &self,
        client: &Client,
        facts: &Facts,
        marker: &mut Result<Option<String>, String>,
        record: Option<(String, u64)>,
    ) -> Option<Recorded> {
        let fleet = &self.fleet;
        let run_id = facts.run_id.as_deref().filter(|_| fleet.quarantine)?;
        let found = marker.as_ref().ok()?;
        if lineage::lineage(found.as_deref(), Some(run_id))
            .intact()
            .is_some()
        {
            let (text, now_ms) = record?;
            return Recorded::read(&text, run_id, now_ms);
        }
        let age = lineage::record_age(facts.uptime, fleet.max_ttl);
        match quarantine::record(client, fleet.timeout, run_id, fleet.max_ttl, age).await {
            Ok(Answer::Recorded(recorded)) => Some(recorded),
            Ok(Answer::Marker(found)) => {
                *marker = Ok(Some(found));
                None
            }
            Err(error) => {
                tracing::warn!(node = self.index, url = %self.label, %error, "could not keep the node's quarantine on the node: this client counts it from now");
                None
            }
        }
    }

    /// Applies what a check found of the node's data (its facts, its marker, `Err` where the
    /// ACL refused to read it, and its quarantine as recorded on it), the permissions it found
    /// refused and the connection it ran on: lineage and quarantine, replica, permission and
    /// same-server detection, warnings.
    fn admit(
        &self,
        generation: u64,
        (facts, marker, recorded): (Facts, Result<Option<String>, String>, Option<Recorded>),
        refused: Vec<String>,
        connection: Option<i64>,
    ) {
        let (node, url) = (self.index, &*self.label);
        let mut state = self.state();
        if state.generation != generation {
            return;
        }
        let fleet = &self.fleet;
        let now = Instant::now();
        let lineage = match &marker {
            Ok(marker) => lineage::lineage(marker.as_deref(), facts.run_id.as_deref()),
            Err(why) => Lineage::Lost { why: why.clone() },
        };
        let seen_for = match &lineage {
            Lineage::Intact { .. } => {
                state.lost_since = None;
                Duration::ZERO
            }
            Lineage::Lost { .. } => {
                let since = match &state.lost_since {
                    Some((since, run_id)) if *run_id == facts.run_id => *since,
                    _ => now,
                };
                state.lost_since = Some((since, facts.run_id.clone()));
                now - since
            }
        };
        state.found = lineage::Checked::found(&lineage, facts.run_id.as_deref(), recorded.as_ref());
        let since = (recorded, seen_for);
        let hold_back = lineage::hold_back(&lineage, facts.uptime, since, fleet.max_ttl);
        self.apply_lineage(&mut state, generation, lineage, hold_back, now);
        warn_of(node, url, &facts, &refused);
        state.refused = refused;
        state.connection = connection;
        self.fleet.record_run_id(self.index, &facts.run_id);
        state.facts = Some(facts);
        state.checked = true;
        drop(state);
        self.fleet.checked.notify_waiters();
        if let Some(first) = self.fleet.same_server_as(self.index) {
            tracing::error!(
                node,
                url,
                first,
                "node is the same server (run_id) as an earlier node: its votes do not count"
            );
        }
    }

    /// Applies a check's lineage: a node that may have lost data is quarantined for what
    /// `hold_back` says is left (unless quarantine is off) and queued for its re-seed; one
    /// that kept its data keeps its marker.
    fn apply_lineage(
        &self,
        state: &mut State,
        generation: u64,
        lineage: Lineage,
        hold_back: Option<(Duration, String)>,
        now: Instant,
    ) {
        let fleet = &self.fleet;
        match &hold_back {
            Some((left, why)) if fleet.quarantine => {
                tracing::warn!(node = self.index, url = &*self.label, quarantine = %humantime::format_duration(*left), %why, "node quarantined: its votes do not count until the longest ttl has passed since it may have lost data");
                // Never shortened by a later check (another client may re-seed it sooner).
                let until = now + *left;
                state.quarantined_until = state.quarantined_until.max(Some(until));
                state.quarantine_why.clone_from(why);
            }
            Some((_, why)) => {
                tracing::warn!(node = self.index, url = &*self.label, %why, "node may have lost locks, and quarantine is off: two holders are possible");
            }
            None => {}
        }
        match lineage {
            Lineage::Intact { text, .. } => {
                state.marker = Some(Arc::from(text));
                state.lineage_why.clear();
                state.reseed_due = None;
            }
            Lineage::Lost { why } => {
                tracing::warn!(node = self.index, url = &*self.label, %why, "node may have lost data: its fencing counters count again once it is re-seeded");
                state.marker = None;
                state.lineage_why = format!("{why}; re-seeded once its quarantine ends");
                // With quarantine off, the operator vouches that a node that lost data came
                // back only after the longest ttl: it may be re-seeded at once.
                let wait = hold_back
                    .filter(|_| fleet.quarantine)
                    .map_or(Duration::ZERO, |(left, _)| left);
                state.reseed_due = Some(now + wait);
                let _ = fleet.reseed.send(Reseed {
                    index: self.index,
                    generation,
                    due: now + wait,
                });
            }
        }
    }
}

/// Warns of what a check found that makes a node's votes not count or its locks unsafe: no
/// run_id, not Redis, a replica, an eviction policy that can evict lock keys, the commands
/// its ACL refuses (`refused`).
fn warn_of(node: usize, url: &str, facts: &Facts, refused: &[String]) {
    if facts.run_id.is_none() {
        tracing::warn!(
            node,
            url,
            "INFO server refused: restarts of this node cannot be detected (unknown)"
        );
    }
    if facts.not_redis {
        tracing::error!(
            node,
            url,
            "node answered INFO with something that is not INFO output: not a Redis \
             server; its votes do not count"
        );
    }
    if facts.is_replica() {
        tracing::error!(
            node,
            url,
            "node is a replica, not an independent master: its votes do not count"
        );
    }
    match facts.can_evict_lock_keys() {
        Some(true) => tracing::warn!(
            node,
            url,
            policy = facts.maxmemory_policy.as_deref().unwrap_or(""),
            "maxmemory policy can evict lock keys"
        ),
        None => tracing::debug!(node, url, "eviction settings unknown"),
        Some(false) => {}
    }
    if !refused.is_empty() {
        tracing::error!(
            node,
            url,
            refused = %refused.join(", "),
            "the server's ACL refuses what the client needs: its votes do not count"
        );
    }
}

/// The error kind reported for a node whose votes do not count.
pub(crate) fn kind(excluded: &Excluded) -> NodeErrorKind {
    match excluded {
        Excluded::Unchecked => NodeErrorKind::Unchecked,
        Excluded::Quarantined { .. } => NodeErrorKind::Quarantined,
        Excluded::Replica => NodeErrorKind::Replica,
        Excluded::Forbidden { .. } => NodeErrorKind::Auth,
        Excluded::SameServerAs { .. } => NodeErrorKind::SameServer,
        Excluded::NotRedis => NodeErrorKind::Protocol,
    }
}
