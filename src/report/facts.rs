//! What the client checks about each node, and the rules that decide whether its votes
//! count (design 6.1; a loss of data is told by `algo/lineage/`, from the node's marker).
//!
//! The facts come from `INFO` and `CONFIG GET` (see `node/probe.rs`); everything here is pure and
//! unit-tested.

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

/// What one probe of a node found. `None` means unknown: the server refused to say (ACLs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Facts {
    pub(crate) run_id: Option<String>,
    /// `redis_version` (Valkey says 7.2.4 there, for compatibility).
    pub(crate) version: Option<String>,
    /// `server_name`, which Valkey sets (`valkey`) and Redis does not.
    pub(crate) server_name: Option<String>,
    /// The server's own version when it is not Redis (`valkey_version`).
    pub(crate) server_version: Option<String>,
    pub(crate) uptime: Option<Duration>,
    /// `master` or `slave` (Redis's word).
    pub(crate) role: Option<String>,
    pub(crate) aof_enabled: Option<bool>,
    pub(crate) appendfsync: Option<String>,
    pub(crate) maxmemory: Option<u64>,
    pub(crate) maxmemory_policy: Option<String>,
    /// The node answered `INFO` with something that is not `INFO` output (no `field:value`
    /// line): whatever it is, it is not a Redis server, and its votes never count.
    pub(crate) not_redis: bool,
}

impl Facts {
    /// Reads the fields of `INFO server`, `INFO replication` and `INFO persistence` output
    /// (any of them, in one text or several). Returns whether it had any `field:value`
    /// line: a reply without one is not `INFO` output.
    pub(crate) fn read_info(&mut self, info: &str) -> bool {
        // `key:value` lines; section headers and blank lines are skipped.
        let fields: HashMap<&str, &str> = info
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.trim_end_matches('\r').split_once(':'))
            .collect();
        let get = |k: &str| fields.get(k).map(|v| v.to_string());
        // A field the text does not have keeps what an earlier text said.
        let set = |field: &mut Option<String>, k: &str| *field = get(k).or(field.take());
        set(&mut self.run_id, "run_id");
        set(&mut self.version, "redis_version");
        if let Some(v) = get("server_name") {
            self.server_version = get(&format!("{v}_version"));
            self.server_name = Some(v);
        }
        if let Some(v) = fields.get("uptime_in_seconds").and_then(|v| v.parse().ok()) {
            self.uptime = Some(Duration::from_secs(v));
        }
        set(&mut self.role, "role");
        if let Some(v) = fields.get("aof_enabled") {
            self.aof_enabled = Some(*v == "1");
        }
        !fields.is_empty()
    }

    /// Reads `CONFIG GET` pairs.
    pub(crate) fn read_config(&mut self, pairs: &[(String, String)]) {
        for (k, v) in pairs {
            match k.as_str() {
                "appendfsync" => self.appendfsync = Some(v.clone()),
                "appendonly" => self.aof_enabled = Some(v == "yes"),
                "maxmemory" => self.maxmemory = v.parse().ok(),
                "maxmemory-policy" => self.maxmemory_policy = Some(v.clone()),
                _ => {}
            }
        }
    }

    /// Whether every acknowledged write survives a crash: AOF with `appendfsync always`.
    /// `None` when the server did not say.
    pub(crate) fn persists_every_write(&self) -> Option<bool> {
        match (self.aof_enabled, self.appendfsync.as_deref()) {
            (Some(false), _) => Some(false),
            (Some(true), Some(fsync)) => Some(fsync == "always"),
            _ => None,
        }
    }

    pub(crate) fn is_replica(&self) -> bool {
        self.role.as_deref() == Some("slave")
    }

    /// Whether the eviction settings can remove lock keys (which all have a TTL).
    pub(crate) fn can_evict_lock_keys(&self) -> Option<bool> {
        match (self.maxmemory, self.maxmemory_policy.as_deref()) {
            (Some(0), _) => Some(false),
            (_, Some("noeviction")) => Some(false),
            (Some(_), Some(policy)) => {
                Some(policy.starts_with("volatile-") || policy.starts_with("allkeys-"))
            }
            _ => None,
        }
    }
}

/// Why a node's votes do not count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Excluded {
    /// Connected (again), and not yet checked.
    Unchecked,
    /// Restarted recently, or may have lost data: quarantined for `left` more.
    Quarantined { left: Duration, why: String },
    /// A replica, not an independent master.
    Replica,
    /// The server's ACL refuses commands (or keys) the client needs, listed: a lock taken
    /// there might never be released.
    Forbidden { refused: Vec<String> },
    /// The same server (run_id) as an earlier node in the list.
    SameServerAs { index: usize },
    /// Answered `INFO` with something else: not a Redis server.
    NotRedis,
}

impl fmt::Display for Excluded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Excluded::Unchecked => f.write_str("connected, not yet checked"),
            Excluded::Quarantined { left, why } => write!(
                f,
                "quarantined for {} more: {why}",
                humantime::format_duration(Duration::from_millis(left.as_millis() as u64))
            ),
            Excluded::Replica => f.write_str(
                "the server is a replica (role:slave), not an independent master; its votes \
                 do not count",
            ),
            Excluded::Forbidden { refused } => write!(
                f,
                "the server's ACL refuses what the client needs ({}): a lock taken there \
                 could fail half-way (its release, extension or fencing token); its votes do \
                 not count",
                refused.join(", ")
            ),
            Excluded::SameServerAs { index } => write!(
                f,
                "the same server (run_id) as node {index}: one server must not vote twice"
            ),
            Excluded::NotRedis => f.write_str(
                "answered INFO with something that is not INFO output: not a Redis server; \
                 its votes do not count",
            ),
        }
    }
}

/// The node's clock rate relative to the client's monotonic clock over `window`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct ClockRate {
    /// The estimate: node seconds per client second (1.0 is perfect).
    pub(crate) rate: f64,
    /// The range the true rate lies in, given when the replies could have been made.
    pub(crate) low: f64,
    pub(crate) high: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str = "# Server\r\nredis_version:7.0.15\r\nrun_id:0123456789abcdef\r\n\
uptime_in_seconds:42\r\n\r\n# Replication\r\nrole:master\r\nconnected_slaves:0\r\n\
# Persistence\r\naof_enabled:0\r\n";

    fn facts() -> Facts {
        let mut f = Facts::default();
        f.read_info(INFO);
        f
    }

    #[test]
    fn a_reply_without_fields_is_not_info() {
        let mut f = Facts::default();
        assert!(!f.read_info("OK"));
        assert!(f.read_info(INFO));
    }

    #[test]
    fn info_fields_are_read() {
        let f = facts();
        assert_eq!(f.run_id.as_deref(), Some("0123456789abcdef"));
        assert_eq!(f.version.as_deref(), Some("7.0.15"));
        assert_eq!(f.uptime, Some(Duration::from_secs(42)));
        assert_eq!(f.role.as_deref(), Some("master"));
        assert_eq!(f.aof_enabled, Some(false));
        assert!(!f.is_replica());
        let mut replica = Facts::default();
        replica.read_info("role:slave\r\n");
        assert!(replica.is_replica());
    }

    #[test]
    fn persistence_needs_aof_and_fsync_always() {
        let mut f = Facts::default();
        assert_eq!(f.persists_every_write(), None);
        f.read_config(&[("appendonly".into(), "yes".into())]);
        assert_eq!(f.persists_every_write(), None, "fsync policy unknown");
        f.read_config(&[("appendfsync".into(), "everysec".into())]);
        assert_eq!(f.persists_every_write(), Some(false));
        f.read_config(&[("appendfsync".into(), "always".into())]);
        assert_eq!(f.persists_every_write(), Some(true));
        f.read_config(&[("appendonly".into(), "no".into())]);
        assert_eq!(f.persists_every_write(), Some(false));
    }

    #[test]
    fn eviction_of_lock_keys() {
        let mut f = Facts::default();
        assert_eq!(f.can_evict_lock_keys(), None);
        for (maxmemory, policy, evicts) in [
            ("0", "allkeys-lru", false),
            ("100mb", "noeviction", false),
            ("1000", "allkeys-lru", true),
            ("1000", "volatile-ttl", true),
            ("1000", "noeviction", false),
        ] {
            f.read_config(&[
                ("maxmemory".into(), maxmemory.replace("mb", "000000")),
                ("maxmemory-policy".into(), policy.into()),
            ]);
            assert_eq!(
                f.can_evict_lock_keys(),
                Some(evicts),
                "{maxmemory} {policy}"
            );
        }
    }
}
