//! Nodes that lose data, as a client process meets them: the connection check and the
//! quarantine kept on the node (`node/admission.rs`), the re-seed (`engine/seeder.rs`),
//! restarts and FLUSHALLs. The decisions are the crate's (`lineage`); the QUARANTINE and SEED
//! scripts are the node's (`node.rs`).

use std::time::Duration;

use quorumlock::__model::{self as algo, Ballot};

use super::node::{record_text, Seeded};
use super::system::{
    run_id, seen, Bounds, Channel, Held, Marker, Quarantine, RecordStart, Reply, Rules, State,
    View, TTL,
};

fn ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

impl View {
    /// What the check found, as the crate keeps it (`lineage::Checked::found` on the
    /// lineage and the record the check had; the record's start is what names it).
    pub fn checked(&self) -> algo::Checked {
        let run = run_id(self.run);
        let marker = self.found.0.map(|m| m.text());
        let lineage = algo::Lineage::of(marker.as_deref(), Some(&run));
        let recorded = self
            .found
            .1
            .map(|(start, wait)| algo::Recorded::answered(start, wait, start));
        algo::Checked::found(&lineage, Some(&run), recorded.as_ref())
    }
}

impl<const N: usize, const C: usize> State<N, C> {
    /// The connection check of node `n` by process `c` (`Admission::recorded` and
    /// `Admission::admit`).
    pub fn check(&mut self, rules: &Rules, c: usize, n: usize) {
        let (now_node, now) = (self.node_ms(), self.client_ms());
        let node = &mut self.nodes[n];
        let run = run_id(node.run);
        let uptime = node.uptime(now_node);
        let marker = node.marker_text();
        let lineage = algo::Lineage::of(marker.as_deref(), Some(&run));
        let intact = lineage.intact().is_some();
        let recorded = match rules.quarantine {
            Quarantine::Recorded if intact => node
                .record_text()
                .and_then(|text| algo::Recorded::read(&text, &run, now_node)),
            Quarantine::Recorded => {
                let krate = algo::record_age(Some(uptime), TTL);
                // The rule before 91b693e, here only as a known-bad variant.
                let before = Some(uptime.saturating_sub(algo::UPTIME_RESOLUTION))
                    .filter(|up| *up < TTL)
                    .unwrap_or_default();
                let age = match rules.record_start {
                    RecordStart::Crate => krate,
                    RecordStart::FigureLessResolution => before,
                    RecordStart::NodeStart => uptime.saturating_sub(algo::UPTIME_RESOLUTION),
                };
                if node.record.is_none_or(|(run, _, _)| run != node.run) {
                    // A new record is written now.
                    if !krate.is_zero() {
                        self.seen |= seen::DATED_BACK;
                    }
                    if krate != before {
                        self.seen |= seen::AT_THE_BOUNDARY;
                    }
                }
                let (start, wait, at) = node.quarantine(ms(TTL), ms(age), now_node);
                Some(algo::Recorded::answered(start, wait, at))
            }
            Quarantine::PerProcess | Quarantine::Off => None,
        };
        let (node_run, node_marker) = (node.run, node.marker);
        // The record the check read or wrote, of the running server.
        let found_record = node
            .record
            .filter(|(run, _, _)| recorded.is_some() && *run == node_run)
            .map(|(_, start, wait)| (start, wait));
        let view = &mut self.clients[c].views[n];
        // When this process first saw the loss: only the per-process rule reads it.
        let seen_for = match (intact, rules.quarantine) {
            (false, Quarantine::PerProcess) => {
                let since = match view.lost_since {
                    Some((since, run)) if run == node_run => since,
                    _ => now,
                };
                view.lost_since = Some((since, node_run));
                now - since
            }
            _ => {
                view.lost_since = None;
                0
            }
        };
        let since = (recorded, Duration::from_millis(seen_for));
        let held_back = match rules.quarantine {
            Quarantine::Off => None,
            _ => algo::hold_back(&lineage, Some(uptime), since, TTL),
        };
        if let Some(left) = held_back {
            view.quarantined_until = view.quarantined_until.max(now + ms(left));
        }
        view.checked = true;
        view.run = node_run;
        view.found = (node_marker.filter(|_| intact), found_record);
        if intact {
            view.marker = node_marker;
            view.reseed_due = None;
        } else {
            view.marker = None;
            view.reseed_due = Some(now + held_back.map_or(0, ms));
        }
    }

    /// Process `c`'s re-seed of node `n`, due now (`engine/seeder.rs`): a survey of the nodes
    /// it checked, the floor, SEED. `false` if nothing changed (the floor says wait).
    pub fn reseed(&mut self, rules: &Rules, c: usize, n: usize) -> bool {
        let now_node = self.node_ms();
        let view = self.clients[c].views[n];
        let node = &self.nodes[n];
        let run = run_id(view.run);
        if algo::Lineage::of(node.marker_text().as_deref(), Some(&run))
            .intact()
            .is_some()
        {
            // Re-seeded by another client since this one checked it (`Admission::reseeded`:
            // the marker read becomes the one found).
            let client = &mut self.clients[c];
            client.views[n].marker = node.marker;
            client.views[n].found.0 = node.marker;
            client.views[n].reseed_due = None;
            return true;
        }
        let views = &self.clients[c].views;
        let answers: Vec<algo::Surveyed> = (0..N)
            .filter(|&m| views[m].checked)
            .map(|m| algo::Surveyed {
                intact: algo::Lineage::of(
                    self.nodes[m].marker_text().as_deref(),
                    Some(&run_id(views[m].run)),
                )
                .intact()
                .is_some(),
                hwm: self.nodes[m].hwm,
                clock_us: now_node * 1_000,
            })
            .collect();
        let floor = match algo::floor(N, &answers) {
            algo::Floor::Majority(floor) | algo::Floor::Clock(floor) => floor,
            algo::Floor::Wait => return false,
        };
        let marker = Marker {
            run: view.run,
            floor,
            fresh: false,
        };
        // The record the check found (`Admission::lost`), which SEED holds the node to.
        let checked = view.checked();
        let record = checked.record();
        if record.is_some_and(|record| !self.nodes[n].holds(record)) {
            // The node lost data again since this process checked it (a flush).
            self.seen |= seen::RESEED_STALE;
        }
        let old = self.nodes[n].marker;
        match self.nodes[n].seed(
            old,
            marker,
            record.filter(|_| rules.reseed_checked),
            now_node,
        ) {
            Seeded::Written => {}
            Seeded::MarkerChanged => return false,
            Seeded::RecordGone => {
                // Checked again, which records the new loss's quarantine.
                self.check(rules, c, n);
                return true;
            }
        }
        let view = &mut self.clients[c].views[n];
        view.marker = Some(marker);
        // `Admission::reseeded`: the marker written becomes the one found; the record stays.
        view.found.0 = Some(marker);
        view.reseed_due = None;
        self.seen |= seen::RESEED;
        true
    }

    /// Whether the votes of node `n`'s reply count for process `c`, given its marker and
    /// record read right after them (`Admission::still_checked`, on
    /// `lineage::still_checked`); `yes` if the reply would count a yes otherwise. Under
    /// rules without the check they count anyway, and such a yes is noted.
    pub fn votes_count(
        &mut self,
        rules: &Rules,
        c: usize,
        n: usize,
        held: &Held,
        yes: bool,
    ) -> bool {
        let checked = self.clients[c].views[n].checked();
        let marker = held.0.map(|m| m.text());
        let record = record_text(held.1);
        if algo::still_checked(&checked, marker.as_deref(), record.as_deref()) {
            return true;
        }
        if rules.votes_checked {
            self.seen |= seen::FLUSH_SEEN;
            return false;
        }
        if yes {
            self.seen |= seen::UNCHECKED_VOTE;
        }
        true
    }

    /// Node `n` crashes and restarts: every connection to it breaks, the rounds waiting for
    /// it count a failure, and every process checks the new connection before its votes
    /// count (at once: a later check only starts a quarantine later).
    pub fn restart(&mut self, rules: &Rules, bounds: &Bounds<N>, n: usize, phase: u16) {
        let now = self.node_ms();
        self.nodes[n].restart(now, phase, bounds.persistent[n]);
        self.used.restarts[n] += 1;
        self.seen |= seen::RESTART;
        for c in 0..self.clients.len() {
            if self.clients[c].alive {
                self.check(rules, c, n);
            }
        }
        for client in self.clients.iter_mut().filter(|c| c.alive) {
            let waiting = client.answers().is_some_and(|a| a[n].is_none());
            client.channels[n] = Channel {
                reply_at: self.t,
                ..Channel::default()
            };
            if waiting {
                client.channels[n].reply = Some(Reply {
                    ballot: Ballot::Failed,
                    value: 0,
                    refused: false,
                    marker: None,
                    held: (None, None),
                });
            }
        }
        self.note_majority_lost();
    }

    /// FLUSHALL on node `n`: the connections stay, and the processes see it only where a
    /// vote reads back what the node holds.
    pub fn flush(&mut self, n: usize) {
        self.nodes[n].flush();
        self.used.flushes[n] += 1;
        self.note_majority_lost();
    }

    fn note_majority_lost(&mut self) {
        let lost = self
            .nodes
            .iter()
            .filter(|node| node.marker.is_none_or(|m| m.run != node.run))
            .count();
        if lost > N / 2 && self.majority_lost_at.is_none() {
            self.majority_lost_at = Some(self.next_token);
        }
    }
}
