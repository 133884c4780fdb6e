//! What a server offers beyond what the client needs, read from its `INFO server` (no command
//! of its own): which server it is, and which Lua-free compare-and-delete it has, if any.
//!
//! Why the client still releases with a script on every server, and where a node's
//! `DELIFEQ` serves inside the batch script: design 3.3a. `doctor` reports the path each node
//! uses and what it offers.

use std::fmt;

use crate::report::facts::Facts;

/// How a release deletes a lock's keys on a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ReleasePath {
    /// The RELEASE Lua script (compare, delete, announce), on every server.
    Script,
    /// Valkey 9's `DELIFEQ key value`.
    Delifeq,
    /// Redis 8.4's `DELEX key IFEQ value`.
    Delex,
}

impl ReleasePath {
    /// Its name in reports: `script`, `delifeq`, `delex`.
    pub fn as_str(self) -> &'static str {
        match self {
            ReleasePath::Script => "script",
            ReleasePath::Delifeq => "delifeq",
            ReleasePath::Delex => "delex",
        }
    }
}

impl fmt::Display for ReleasePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The server's name and version: `valkey 9.1.2` (from `server_name` and `valkey_version`:
/// Valkey's `redis_version` says 7.2.4 for compatibility), `redis 7.0.15`.
pub(crate) fn server(facts: &Facts) -> Option<String> {
    match (&facts.server_name, &facts.server_version, &facts.version) {
        (Some(name), Some(version), _) => Some(format!("{name} {version}")),
        (None, _, Some(version)) => Some(format!("redis {version}")),
        _ => None,
    }
}

/// The Lua-free compare-and-delete the server offers, if any: `DELIFEQ` from Valkey 9.0,
/// `DELEX ... IFEQ` from Redis 8.4. `None` too when the server did not say who it is.
pub(crate) fn compare_and_delete(facts: &Facts) -> Option<ReleasePath> {
    match (facts.server_name.as_deref(), &facts.server_version) {
        (Some("valkey"), Some(version)) => {
            (numbers(version)? >= (9, 0)).then_some(ReleasePath::Delifeq)
        }
        (Some(_), _) => None,
        (None, _) => (numbers(facts.version.as_deref()?)? >= (8, 4)).then_some(ReleasePath::Delex),
    }
}

/// `major.minor` of a version such as `9.1.2` or `8.4.0-rc1`.
fn numbers(version: &str) -> Option<(u32, u32)> {
    let mut parts = version.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts
        .next()?
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()?;
    Some((major, minor))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(text: &str) -> Facts {
        let mut facts = Facts::default();
        assert!(facts.read_info(text));
        facts
    }

    #[test]
    fn each_server_is_named_with_its_own_version() {
        let valkey = info("redis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:9.1.2\r\n");
        assert_eq!(server(&valkey).as_deref(), Some("valkey 9.1.2"));
        let redis = info("redis_version:7.0.15\r\nrun_id:abc\r\n");
        assert_eq!(server(&redis).as_deref(), Some("redis 7.0.15"));
        assert_eq!(server(&Facts::default()), None);
    }

    #[test]
    fn the_lua_free_compare_and_delete_comes_with_valkey_9_and_redis_8_4() {
        let cases = [
            ("redis_version:6.2.14", None),
            ("redis_version:7.0.15", None),
            ("redis_version:8.2.3", None),
            ("redis_version:8.4.0", Some(ReleasePath::Delex)),
            ("redis_version:8.10.1", Some(ReleasePath::Delex)),
            ("redis_version:10.0.0", Some(ReleasePath::Delex)),
            (
                "redis_version:7.2.4\nserver_name:valkey\nvalkey_version:8.1.8",
                None,
            ),
            (
                "redis_version:7.2.4\nserver_name:valkey\nvalkey_version:9.0.0-rc1",
                Some(ReleasePath::Delifeq),
            ),
            (
                "redis_version:7.2.4\nserver_name:valkey\nvalkey_version:9.1.2",
                Some(ReleasePath::Delifeq),
            ),
            // Another server that says it is Redis 8.4-compatible is not trusted to be Redis.
            ("redis_version:8.4.0\nserver_name:other", None),
            ("redis_version:x.y", None),
        ];
        for (text, expected) in cases {
            assert_eq!(compare_and_delete(&info(text)), expected, "{text}");
        }
        assert_eq!(compare_and_delete(&Facts::default()), None);
    }

    #[test]
    fn a_release_path_is_named_in_reports() {
        assert_eq!(ReleasePath::Delifeq.to_string(), "delifeq");
    }
}
