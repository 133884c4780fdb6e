//! Per-node reports: what the client knows and can find out about each node, and which of
//! the algorithm's assumptions it breaks. `RedLock::inspect` makes them for a running client;
//! `RedLockBuilder::inspect` (and `quorumlock doctor`) for a configuration.

use std::fmt;
use std::time::Duration;

use crate::error::NodeErrorKind;
use crate::report::capabilities::ReleasePath;
use crate::report::facts::{ClockRate, Excluded, Facts};

/// How serious a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Severity {
    /// Worth knowing; does not make locks unsafe (a node in quarantine, say).
    Note,
    /// Could not be checked (the server refused to say): safety cannot be confirmed.
    Unknown,
    /// Breaks an assumption the lock's safety rests on, or makes the node unusable.
    Unsafe,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Note => "note",
            Severity::Unknown => "unknown",
            Severity::Unsafe => "unsafe",
        })
    }
}

/// One thing found about a node.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Finding {
    /// How serious it is.
    pub severity: Severity,
    /// What was found, and what to do about it.
    pub message: String,
}

impl Finding {
    pub(crate) fn new(severity: Severity, message: impl Into<String>) -> Self {
        Finding {
            severity,
            message: message.into(),
        }
    }
}

/// Everything known about one node. Fields are `None` where the server refused to say
/// (ACLs) or could not be reached: unknown, never guessed.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct NodeReport {
    /// The node's position in the configured list.
    pub index: usize,
    /// Its URL, password hidden.
    pub node: String,
    /// Whether it answered.
    pub reachable: bool,
    /// Why it could not be reached.
    pub error: Option<String>,
    /// What kind of failure that was (TLS, authentication, I/O, timeout), when known.
    pub error_kind: Option<NodeErrorKind>,
    /// One `PING` round trip.
    pub round_trip: Option<Duration>,
    /// `redis_version` (Valkey says 7.2.4 there, for compatibility: see `server`).
    pub version: Option<String>,
    /// The server and its own version: `redis 7.0.15`, `valkey 9.1.2`.
    pub server: Option<String>,
    /// How the client releases locks on this node (a script, on every server today; inside
    /// a batch, with `DELIFEQ` where the node runs it).
    pub release_path: Option<ReleasePath>,
    /// The Lua-free compare-and-delete the server offers (Valkey 9's `DELIFEQ`, Redis 8.4's
    /// `DELEX`), if any; `None` too when unknown.
    pub compare_and_delete: Option<ReleasePath>,
    /// `master` or `replica`.
    pub role: Option<String>,
    /// The server's `run_id`.
    pub run_id: Option<String>,
    /// How long the server has been up.
    pub uptime: Option<Duration>,
    /// Whether AOF is on.
    pub aof_enabled: Option<bool>,
    /// The AOF fsync policy.
    pub appendfsync: Option<String>,
    /// `maxmemory` in bytes (0: no limit).
    pub maxmemory: Option<u64>,
    /// `maxmemory-policy`.
    pub maxmemory_policy: Option<String>,
    /// The node's clock rate relative to the client's monotonic clock (node seconds per
    /// client second; 1.0 is perfect), measured over the inspection window.
    pub clock_rate: Option<f64>,
    /// The drift factor in use, to compare the clock rate with.
    pub drift_factor: f64,
    /// How much longer the node is quarantined (votes not counted), if it is.
    pub quarantined_for: Option<Duration>,
    /// The earlier node that is the same server, if any.
    pub same_server_as: Option<usize>,
    /// Commands the client needs that the node refuses.
    pub refused_commands: Vec<String>,
    /// Commands that leader elections need besides (on the identity keys,
    /// `quorumlock:leader:*`) that the node refuses: a note, since a client that only locks
    /// never sends them.
    pub refused_for_elections: Vec<String>,
    /// Commands that semaphores need besides (`TIME`, `TYPE`, `PTTL` and the sorted set's, on the
    /// semaphores' keys) that the node refuses: a note, since a client that only locks never
    /// sends them.
    pub refused_for_semaphores: Vec<String>,
    /// What was found.
    pub findings: Vec<Finding>,
}

impl NodeReport {
    /// The most serious finding, or `None` when nothing is wrong.
    pub fn verdict(&self) -> Option<Severity> {
        self.findings.iter().map(|f| f.severity).max()
    }

    /// Whether nothing breaks the algorithm's assumptions and nothing is unknown.
    pub fn is_safe(&self) -> bool {
        self.verdict().is_none_or(|v| v == Severity::Note)
    }
}

/// What the inspection of one node collected.
#[derive(Debug, Default)]
pub(crate) struct Observed {
    pub(crate) error: Option<String>,
    pub(crate) error_kind: Option<NodeErrorKind>,
    pub(crate) round_trip: Option<Duration>,
    pub(crate) facts: Option<Facts>,
    pub(crate) clock_rate: Option<ClockRate>,
    pub(crate) refused: Vec<String>,
    pub(crate) refused_for_elections: Vec<String>,
    pub(crate) refused_for_semaphores: Vec<String>,
    pub(crate) unchecked: Vec<String>,
    pub(crate) excluded: Option<Excluded>,
    pub(crate) quarantined_for: Option<Duration>,
    /// Why the node may have lost data (its fencing counters not trusted until it is
    /// re-seeded), if it may have.
    pub(crate) lost_data: Option<String>,
    pub(crate) same_server_as: Option<usize>,
}

/// The settings the findings depend on.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rules {
    pub(crate) drift_factor: f64,
    pub(crate) quarantine: bool,
    pub(crate) max_ttl: Duration,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::findings::report;

    fn healthy() -> Observed {
        let mut facts = Facts::default();
        facts.read_info("run_id:abcdef0123456789\r\nrole:master\r\nuptime_in_seconds:999\r\n");
        facts.read_config(&[
            ("appendonly".into(), "yes".into()),
            ("appendfsync".into(), "always".into()),
            ("maxmemory".into(), "0".into()),
            ("maxmemory-policy".into(), "noeviction".into()),
        ]);
        Observed {
            round_trip: Some(Duration::from_micros(200)),
            facts: Some(facts),
            clock_rate: Some(ClockRate {
                rate: 1.0001,
                low: 1.0,
                high: 1.0002,
            }),
            ..Observed::default()
        }
    }

    /// `seen` with its facts changed by `change`.
    fn with(mut seen: Observed, change: impl FnOnce(&mut Facts)) -> Observed {
        change(seen.facts.get_or_insert_with(Facts::default));
        seen
    }

    const RULES: Rules = Rules {
        drift_factor: 0.01,
        quarantine: true,
        max_ttl: Duration::from_secs(10),
    };

    #[test]
    fn a_healthy_persistent_master_is_safe() {
        let r = report(0, "redis://a", healthy(), RULES);
        assert!(r.is_safe(), "{:?}", r.findings);
        assert_eq!(r.release_path, Some(ReleasePath::Script));
        assert_eq!(r.verdict(), None);
        assert_eq!(r.role.as_deref(), Some("master"));
    }

    #[test]
    fn each_broken_assumption_is_unsafe() {
        let replica = with(healthy(), |f| {
            f.read_info("role:slave\r\n");
        });
        let evicting = with(healthy(), |f| {
            f.read_config(&[
                ("maxmemory".into(), "1000000".into()),
                ("maxmemory-policy".into(), "allkeys-lru".into()),
            ])
        });
        let mut fast_clock = healthy();
        fast_clock.clock_rate = Some(ClockRate {
            rate: 1.05,
            low: 1.04,
            high: 1.06,
        });
        let mut refusing = healthy();
        refusing.refused = vec!["EVAL".into(), "EVALSHA".into()];
        let mut twice = healthy();
        twice.same_server_as = Some(0);
        let down = Observed {
            error: Some("connection refused".into()),
            ..Observed::default()
        };
        for (what, seen) in [
            ("replica", replica),
            ("eviction", evicting),
            ("clock", fast_clock),
            ("refused", refusing),
            ("same server", twice),
            ("unreachable", down),
        ] {
            let r = report(1, "redis://b", seen, RULES);
            assert_eq!(
                r.verdict(),
                Some(Severity::Unsafe),
                "{what}: {:?}",
                r.findings
            );
            assert!(!r.is_safe());
            assert_eq!(r.release_path.is_some(), what != "unreachable", "{what}");
        }
        let volatile = with(healthy(), |f| {
            f.read_config(&[("appendonly".into(), "no".into())])
        });
        let no_quarantine = Rules {
            quarantine: false,
            ..RULES
        };
        assert!(report(1, "b", volatile, no_quarantine).verdict() == Some(Severity::Unsafe));
    }

    #[test]
    fn a_stalled_clock_measurement_is_imprecise_not_unsafe() {
        let mut stalled = healthy();
        stalled.clock_rate = Some(ClockRate {
            rate: 1.3,
            low: 0.9,
            high: 1.6,
        });
        let r = report(0, "a", stalled, RULES);
        assert_eq!(r.verdict(), Some(Severity::Unknown), "{:?}", r.findings);
    }

    #[test]
    fn what_the_server_refuses_to_say_is_unknown_not_guessed() {
        let seen = Observed {
            facts: Some(Facts::default()),
            clock_rate: None,
            unchecked: vec!["SET".into()],
            ..Observed::default()
        };
        let r = report(0, "a", seen, RULES);
        assert_eq!(r.verdict(), Some(Severity::Unknown), "{:?}", r.findings);
        assert_eq!(r.run_id, None);
        assert_eq!(r.maxmemory_policy, None);
        assert!(r.findings.iter().all(|f| f.severity != Severity::Unsafe));
    }

    #[test]
    fn a_volatile_node_is_only_a_note_when_quarantine_is_on() {
        let mut seen = with(healthy(), |f| {
            f.read_config(&[("appendfsync".into(), "everysec".into())])
        });
        seen.quarantined_for = Some(Duration::from_secs(3));
        let r = report(0, "a", seen, RULES);
        assert_eq!(r.verdict(), Some(Severity::Note), "{:?}", r.findings);
        assert!(r.is_safe());
    }
}
