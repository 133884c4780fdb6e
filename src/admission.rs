//! Whether a node's votes count right now. Every connection (the first and each reconnect)
//! is checked before its votes count: who the server is, whether it restarted, whether it is
//! a replica or a server already configured under another URL, whether its ACL lets the
//! client do everything a lock needs (so that no lock is granted that cannot be released). The rules are in `health.rs`;
//! this file keeps the per-node state and runs the checks.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use fred::clients::Client;
use fred::interfaces::ClientLike;
use tokio::sync::Notify;

use crate::error::NodeErrorKind;
use crate::health::{self, Excluded, Facts};
use crate::probe::{self, KeySpace};

/// Settings and state shared by the nodes of one client.
#[derive(Debug)]
pub(crate) struct Fleet {
    /// The run_id each node reported at its last check, by node index.
    run_ids: Mutex<Vec<Option<String>>>,
    pub(crate) quarantine: bool,
    pub(crate) max_ttl: Duration,
    pub(crate) timeout: Duration,
    /// Where the client's keys live, for the permission check.
    pub(crate) keys: KeySpace,
    /// Notified whenever a check ends (see `RedLock::wait_for_quorum`).
    pub(crate) checked: Notify,
}

impl Fleet {
    pub(crate) fn new(
        nodes: usize,
        quarantine: bool,
        max_ttl: Duration,
        timeout: Duration,
        keys: KeySpace,
    ) -> Self {
        Fleet {
            run_ids: Mutex::new(vec![None; nodes]),
            quarantine,
            max_ttl,
            timeout,
            keys,
            checked: Notify::new(),
        }
    }

    fn run_ids(&self) -> MutexGuard<'_, Vec<Option<String>>> {
        self.run_ids.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The first node before `index` that reported the same run_id.
    pub(crate) fn same_server_as(&self, index: usize) -> Option<usize> {
        let ids = self.run_ids();
        let mine = ids.get(index)?.as_ref()?;
        ids[..index].iter().position(|id| id.as_ref() == Some(mine))
    }
}

/// One node's admission state.
#[derive(Debug, Default)]
pub(crate) struct State {
    checked: bool,
    generation: u64,
    facts: Option<Facts>,
    last_run_id: Option<String>,
    quarantined_until: Option<Instant>,
    quarantine_why: String,
    /// What the node's ACL refuses of what the client needs (see `probe::permissions`).
    refused: Vec<String>,
}

/// A node's admission: its state, shared with the tasks that check it.
#[derive(Debug, Clone)]
pub(crate) struct Admission {
    index: usize,
    label: Arc<str>,
    state: Arc<Mutex<State>>,
    fleet: Arc<Fleet>,
}

impl Admission {
    pub(crate) fn new(index: usize, label: Arc<str>, fleet: Arc<Fleet>) -> Self {
        Admission {
            index,
            label,
            state: Arc::new(Mutex::new(State::default())),
            fleet,
        }
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
        match state.quarantined_until {
            Some(until) => {
                let left = until.saturating_duration_since(Instant::now());
                (!left.is_zero()).then(|| Excluded::Quarantined {
                    left,
                    why: state.quarantine_why.clone(),
                })
            }
            None => None,
        }
    }

    pub(crate) fn is_checked(&self) -> bool {
        self.state().checked
    }

    /// Whether a connection was ever made (each one starts a check).
    pub(crate) fn ever_connected(&self) -> bool {
        self.state().generation > 0
    }

    /// Why a vote may not be sent to the node now: [`excluded`](Self::excluded), except that
    /// a node that is not connected gets it (the command fails, or waits for the connection,
    /// as usual).
    pub(crate) fn refuses(&self, client: &Client) -> Option<Excluded> {
        match self.excluded() {
            Some(Excluded::Unchecked) if !client.is_connected() => None,
            other => other,
        }
    }

    /// Waits, until `deadline` at the latest, while the node is connected and its new
    /// connection not yet checked.
    pub(crate) async fn wait_for_check(&self, client: &Client, deadline: tokio::time::Instant) {
        while client.is_connected() && !self.is_checked() && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// The facts of the last check, and the quarantine left.
    pub(crate) fn snapshot(&self) -> (Option<Facts>, Option<Duration>) {
        let state = self.state();
        let left = state
            .quarantined_until
            .map(|until| until.saturating_duration_since(Instant::now()))
            .filter(|left| !left.is_zero());
        (state.facts.clone(), left)
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
                let (facts, permissions) = tokio::join!(
                    probe::facts(&client, timeout),
                    probe::permissions(&client, timeout, &this.fleet.keys)
                );
                let error = match facts {
                    Ok(facts) if permissions.unanswered.is_empty() => {
                        return this.admit(generation, facts, permissions.refused)
                    }
                    Ok(_) => format!("no answer to {}", permissions.unanswered.join(", ")),
                    Err(error) => error.to_string(),
                };
                tracing::debug!(node = this.index, %error, "node check unanswered; retrying");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
        });
    }

    /// Applies a check's facts and the permissions it found refused: quarantine, replica,
    /// permission and same-server detection, warnings.
    fn admit(&self, generation: u64, facts: Facts, refused: Vec<String>) {
        let (node, url) = (self.index, &*self.label);
        let mut state = self.state();
        if state.generation != generation {
            return;
        }
        let fleet = &self.fleet;
        match health::quarantine(&facts, state.last_run_id.as_deref(), fleet.max_ttl) {
            Some((left, why)) if fleet.quarantine => {
                tracing::warn!(node, url, quarantine = %humantime::format_duration(left), %why, "node quarantined: its votes do not count until it has been up for longer than the longest ttl");
                state.quarantined_until = Some(Instant::now() + left);
                state.quarantine_why = why;
            }
            Some((_, why)) => {
                tracing::warn!(node, url, %why, "node may have lost locks, and quarantine is off: two holders are possible");
            }
            None => {}
        }
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
        if facts.persists_every_write() != Some(true) && !fleet.quarantine {
            tracing::warn!(
                node,
                url,
                "node does not persist every write and quarantine is off"
            );
        }
        if !refused.is_empty() {
            tracing::error!(
                node,
                url,
                refused = %refused.join(", "),
                "the server's ACL refuses what the client needs: its votes do not count"
            );
        }
        state.refused = refused;
        state.last_run_id.clone_from(&facts.run_id);
        self.fleet.run_ids()[self.index].clone_from(&facts.run_id);
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
