//! The `QUORUMLOCK_*` environment variables, read into a builder.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use crate::algo::schedule::RetryLimit;
use crate::config::given::Given;
use crate::config::tls::TlsFiles;
use crate::config::url::{quoted, GivenUrl};
use crate::config::RedLockBuilder;
use crate::error::ConfigError;

/// The environment variables read by [`RedLockBuilder::from_env`].
pub const ENV_VARS: [&str; 17] = [
    "QUORUMLOCK_NODES",
    "QUORUMLOCK_TTL",
    "QUORUMLOCK_DRIFT_FACTOR",
    "QUORUMLOCK_NODE_TIMEOUT",
    "QUORUMLOCK_CONNECT_TIMEOUT",
    "QUORUMLOCK_RETRY_ATTEMPTS",
    "QUORUMLOCK_RETRY_WITHIN",
    "QUORUMLOCK_RETRY_DELAY",
    "QUORUMLOCK_RETRY_JITTER",
    "QUORUMLOCK_KEY_PREFIX",
    "QUORUMLOCK_FENCING",
    "QUORUMLOCK_QUARANTINE",
    "QUORUMLOCK_MAX_TTL",
    "QUORUMLOCK_TLS_CA_FILE",
    "QUORUMLOCK_TLS_CERT_FILE",
    "QUORUMLOCK_TLS_KEY_FILE",
    "QUORUMLOCK_DECODER_WARNING",
];

impl RedLockBuilder {
    /// A builder from `QUORUMLOCK_*` environment variables (unset ones keep the defaults):
    ///
    /// | variable | meaning | example |
    /// |---|---|---|
    /// | `QUORUMLOCK_NODES` | comma-separated node URLs | `redis://a:6379,redis://b:6379,redis://c:6379` |
    /// | `QUORUMLOCK_TTL` | default ttl | `10s` |
    /// | `QUORUMLOCK_DRIFT_FACTOR` | clock-drift factor | `0.01` |
    /// | `QUORUMLOCK_NODE_TIMEOUT` | per-node command timeout | `100ms` |
    /// | `QUORUMLOCK_CONNECT_TIMEOUT` | per-node connect timeout | `1s` |
    /// | `QUORUMLOCK_RETRY_ATTEMPTS` | attempts in all | `3` |
    /// | `QUORUMLOCK_RETRY_WITHIN` | keep trying this long (instead of a count) | `5s` |
    /// | `QUORUMLOCK_RETRY_DELAY` | fixed pause between attempts | `100ms` |
    /// | `QUORUMLOCK_RETRY_JITTER` | random extra pause, up to | `100ms` |
    /// | `QUORUMLOCK_KEY_PREFIX` | prefix for every Redis key | `locks:` |
    /// | `QUORUMLOCK_FENCING` | fencing tokens on or off | `true`, `false` |
    /// | `QUORUMLOCK_QUARANTINE` | quarantine of restarted nodes on or off | `true`, `false` |
    /// | `QUORUMLOCK_MAX_TTL` | the longest ttl of any lock or extension | `1m` |
    /// | `QUORUMLOCK_TLS_CA_FILE` | PEM CA bundle trusted for `rediss://` nodes, besides the system's | `/etc/redis/ca.pem` |
    /// | `QUORUMLOCK_TLS_CERT_FILE` | PEM client certificate (chain) for `rediss://` nodes | `/etc/redis/client.pem` |
    /// | `QUORUMLOCK_TLS_KEY_FILE` | its PEM private key | `/etc/redis/client-key.pem` |
    /// | `QUORUMLOCK_DECODER_WARNING` | the stderr warning about an unbounded RESP decoder on or off | `true`, `false` |
    ///
    /// Durations are [humantime](https://docs.rs/humantime) strings: `250ms`, `10s`, `2m`.
    ///
    /// # Errors
    /// [`ConfigError::Env`] naming the variable that does not parse or is not valid UTF-8
    /// (its value is not shown then). The values themselves are checked by
    /// [`build`](Self::build).
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_os_vars(|name| std::env::var_os(name))
    }

    /// Like [`from_vars`](Self::from_vars), from values that may not be text, as the
    /// environment's: one that is not valid UTF-8 is an error naming its variable, not an
    /// unset variable.
    pub(crate) fn from_os_vars(
        lookup: impl Fn(&str) -> Option<OsString>,
    ) -> Result<Self, ConfigError> {
        let mut values = Vec::new();
        for var in ENV_VARS {
            if let Some(value) = lookup(var) {
                let value = value.into_string().map_err(|_| not_utf8(var))?;
                values.push((var, value));
            }
        }
        Self::from_vars(|name| {
            values
                .iter()
                .find(|(var, _)| *var == name)
                .map(|(_, value)| value.clone())
        })
    }

    /// Like [`from_env`](Self::from_env), reading variables through `lookup` (for tests and
    /// for configuration held elsewhere).
    ///
    /// # Errors
    /// As [`from_env`](Self::from_env).
    pub fn from_vars(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let mut b = RedLockBuilder::default();
        let [nodes, ttl, drift, node_to, conn_to, attempts, within, delay, jitter, prefix, fencing, quarantine, max_ttl, ca, cert, key, decoder_warning] =
            ENV_VARS;
        if let Some(v) = lookup(nodes) {
            b.nodes = (v.split(',').map(str::trim))
                .filter(|url| !url.is_empty())
                .map(|url| Given::Url(GivenUrl(url.into())))
                .collect();
        }
        b.ttl = env(&lookup, ttl, duration)?.unwrap_or(b.ttl);
        b.drift_factor = env(&lookup, drift, number)?.unwrap_or(b.drift_factor);
        b.node_timeout = env(&lookup, node_to, duration)?.unwrap_or(b.node_timeout);
        b.connect_timeout = env(&lookup, conn_to, duration)?.unwrap_or(b.connect_timeout);
        if let Some(n) = env(&lookup, attempts, number)? {
            b.retry.limit = RetryLimit::Attempts(n);
        }
        if let Some(d) = env(&lookup, within, duration)? {
            if lookup(attempts).is_some() {
                return Err(env_error(
                    within,
                    &humantime::format_duration(d).to_string(),
                    format!("set either {attempts} or {within}, not both"),
                ));
            }
            b.retry.limit = RetryLimit::Within(d);
        }
        b.retry.delay = env(&lookup, delay, duration)?.unwrap_or(b.retry.delay);
        b.retry.jitter = env(&lookup, jitter, duration)?.unwrap_or(b.retry.jitter);
        if let Some(v) = lookup(prefix) {
            b.key_prefix = v;
        }
        b.fencing = env(&lookup, fencing, boolean)?.unwrap_or(b.fencing);
        b.quarantine = env(&lookup, quarantine, boolean)?.unwrap_or(b.quarantine);
        b.max_ttl = env(&lookup, max_ttl, duration)?.or(b.max_ttl);
        b.decoder_warning = env(&lookup, decoder_warning, boolean)?.unwrap_or(b.decoder_warning);
        let path = |var| lookup(var).filter(|v| !v.is_empty()).map(PathBuf::from);
        b.tls = TlsFiles {
            ca: path(ca),
            cert: path(cert),
            key: path(key),
        };
        Ok(b)
    }
}

/// The error for a variable whose value is not valid UTF-8 (and is not shown).
pub(crate) fn not_utf8(var: &'static str) -> ConfigError {
    ConfigError::Env {
        var,
        value: String::new(),
        reason: "not valid UTF-8".into(),
    }
}

fn env_error(var: &'static str, value: &str, reason: String) -> ConfigError {
    let value = quoted(value);
    ConfigError::Env { var, value, reason }
}

/// `var`'s value, trimmed and read by `parse`; `None` when it is unset.
fn env<T>(
    lookup: &impl Fn(&str) -> Option<String>,
    var: &'static str,
    parse: fn(&str) -> Result<T, String>,
) -> Result<Option<T>, ConfigError> {
    lookup(var)
        .map(|v| parse(v.trim()).map_err(|reason| env_error(var, &v, reason)))
        .transpose()
}

fn duration(v: &str) -> Result<Duration, String> {
    humantime::parse_duration(v).map_err(|e| e.to_string())
}

fn number<T: std::str::FromStr<Err: ToString>>(v: &str) -> Result<T, String> {
    v.parse().map_err(|e: T::Err| e.to_string())
}

fn boolean(v: &str) -> Result<bool, String> {
    match v.to_ascii_lowercase().as_str() {
        "1" | "true" | "on" | "yes" => Ok(true),
        "0" | "false" | "off" | "no" => Ok(false),
        _ => Err("expected true or false".into()),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::ffi::OsStringExt;

    use super::*;

    #[test]
    fn a_variable_that_is_not_utf8_is_an_error_naming_it() {
        let lookup =
            |name: &str| (name == "QUORUMLOCK_TTL").then(|| OsString::from_vec(b"\xff1s".to_vec()));
        let e = RedLockBuilder::from_os_vars(lookup).unwrap_err();
        assert_eq!(e, not_utf8("QUORUMLOCK_TTL"));
        assert_eq!(
            e.to_string(),
            "environment variable QUORUMLOCK_TTL: not valid UTF-8"
        );
        let text = |name: &str| (name == "QUORUMLOCK_TTL").then(|| OsString::from("2s"));
        let b = RedLockBuilder::from_os_vars(text).unwrap();
        assert_eq!(b.ttl, Duration::from_secs(2));
    }
}
