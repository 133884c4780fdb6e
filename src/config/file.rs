//! The configuration as a service writes it in its own configuration file (feature `serde`).

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::algo::schedule::RetryLimit;
use crate::config::given::Given;
use crate::config::tls::TlsFiles;
use crate::config::url::{redact, GivenUrl};
use crate::config::{RedLockBuilder, Retry};
use crate::error::ConfigError;

/// A lock configuration as it is written in a configuration file: every field optional
/// (an absent one keeps the builder's default), durations as
/// [humantime](https://docs.rs/humantime) strings (`"250ms"`, `"10s"`, `"1m 30s"`), unknown
/// fields refused. Nothing is checked when it is read but the shape: turn it into a
/// [`RedLockBuilder`] (`TryFrom`, or deserialize a `RedLockBuilder` directly) and
/// [`build`](RedLockBuilder::build) checks every value, with the same [`ConfigError`]s as
/// the builder's setters. Its `Debug` hides the passwords of node URLs.
///
/// In TOML (a `[lock]` table of a service's file, read with the `toml` crate):
///
/// ```toml
/// nodes = ["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"]
/// ttl = "30s"
/// node_timeout = "50ms"
/// key_prefix = "locks:"
///
/// [retry]
/// within = "5s"
/// delay = "100ms"
/// ```
///
/// The same in JSON:
///
/// ```
/// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
/// use quorumlock::RedLockBuilder;
///
/// let text = r#"{
///     "nodes": ["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"],
///     "ttl": "30s",
///     "node_timeout": "50ms",
///     "key_prefix": "locks:",
///     "retry": { "within": "5s", "delay": "100ms" }
/// }"#;
/// let builder: RedLockBuilder = serde_json::from_str(text)?;
/// let config = builder.validate()?;
/// assert_eq!(config.ttl(), std::time::Duration::from_secs(30));
/// # Ok(()) }
/// ```
#[derive(Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct ConfigFile {
    /// Node URLs ([`RedLockBuilder::nodes`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<String>,
    /// [`RedLockBuilder::ttl`].
    #[serde(with = "humantime_opt", skip_serializing_if = "Option::is_none")]
    pub ttl: Option<Duration>,
    /// [`RedLockBuilder::drift_factor`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drift_factor: Option<f64>,
    /// [`RedLockBuilder::node_timeout`].
    #[serde(with = "humantime_opt", skip_serializing_if = "Option::is_none")]
    pub node_timeout: Option<Duration>,
    /// [`RedLockBuilder::connect_timeout`].
    #[serde(with = "humantime_opt", skip_serializing_if = "Option::is_none")]
    pub connect_timeout: Option<Duration>,
    /// [`RedLockBuilder::retry`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryFile>,
    /// [`RedLockBuilder::key_prefix`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_prefix: Option<String>,
    /// [`RedLockBuilder::fencing`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fencing: Option<bool>,
    /// [`RedLockBuilder::quarantine`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quarantine: Option<bool>,
    /// [`RedLockBuilder::max_ttl`].
    #[serde(with = "humantime_opt", skip_serializing_if = "Option::is_none")]
    pub max_ttl: Option<Duration>,
    /// [`RedLockBuilder::decoder_warning`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decoder_warning: Option<bool>,
    /// [`RedLockBuilder::tls_ca_file`] and [`RedLockBuilder::tls_client_cert`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsFileSettings>,
}

/// The `retry` table of a [`ConfigFile`]: either `attempts` or `within` (not both), and the
/// pause between attempts. Absent fields keep [`Retry::default`]'s.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct RetryFile {
    /// [`Retry::attempts`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempts: Option<u32>,
    /// [`Retry::within`].
    #[serde(with = "humantime_opt", skip_serializing_if = "Option::is_none")]
    pub within: Option<Duration>,
    /// [`Retry::delay`].
    #[serde(with = "humantime_opt", skip_serializing_if = "Option::is_none")]
    pub delay: Option<Duration>,
    /// [`Retry::jitter`].
    #[serde(with = "humantime_opt", skip_serializing_if = "Option::is_none")]
    pub jitter: Option<Duration>,
}

/// The `tls` table of a [`ConfigFile`]: PEM files, read and checked by
/// [`RedLockBuilder::build`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct TlsFileSettings {
    /// [`RedLockBuilder::tls_ca_file`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
    /// The certificate of [`RedLockBuilder::tls_client_cert`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cert_file: Option<PathBuf>,
    /// The key of [`RedLockBuilder::tls_client_cert`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_file: Option<PathBuf>,
}

impl fmt::Debug for ConfigFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nodes: Vec<String> = self.nodes.iter().map(|url| redact(url.trim())).collect();
        f.debug_struct("ConfigFile")
            .field("nodes", &nodes)
            .field("ttl", &self.ttl)
            .field("drift_factor", &self.drift_factor)
            .field("node_timeout", &self.node_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("retry", &self.retry)
            .field("key_prefix", &self.key_prefix)
            .field("fencing", &self.fencing)
            .field("quarantine", &self.quarantine)
            .field("max_ttl", &self.max_ttl)
            .field("decoder_warning", &self.decoder_warning)
            .field("tls", &self.tls)
            .finish()
    }
}

/// A builder with the file's settings over the defaults.
///
/// # Errors
/// [`ConfigError::InvalidRetry`] when the retry table sets both `attempts` and `within`.
/// Every other value is checked by [`RedLockBuilder::build`].
impl TryFrom<ConfigFile> for RedLockBuilder {
    type Error = ConfigError;

    fn try_from(file: ConfigFile) -> Result<RedLockBuilder, ConfigError> {
        let default = RedLockBuilder::default();
        Ok(RedLockBuilder {
            nodes: (file.nodes.into_iter())
                .map(|url| Given::Url(GivenUrl(url)))
                .collect(),
            max_ttl: file.max_ttl,
            ttl: file.ttl.unwrap_or(default.ttl),
            drift_factor: file.drift_factor.unwrap_or(default.drift_factor),
            node_timeout: file.node_timeout.unwrap_or(default.node_timeout),
            connect_timeout: file.connect_timeout.unwrap_or(default.connect_timeout),
            retry: file
                .retry
                .map_or(Ok(default.retry), RetryFile::into_retry)?,
            key_prefix: file.key_prefix.unwrap_or(default.key_prefix),
            fencing: file.fencing.unwrap_or(default.fencing),
            quarantine: file.quarantine.unwrap_or(default.quarantine),
            decoder_warning: file.decoder_warning.unwrap_or(default.decoder_warning),
            tls: file.tls.map_or(default.tls, |tls| TlsFiles {
                ca: tls.ca_file,
                cert: tls.cert_file,
                key: tls.key_file,
            }),
            ..default
        })
    }
}

impl RetryFile {
    fn into_retry(self) -> Result<Retry, ConfigError> {
        let default = Retry::default();
        let limit = match (self.attempts, self.within) {
            (Some(_), Some(_)) => {
                return Err(ConfigError::InvalidRetry(
                    "set either retry.attempts or retry.within, not both",
                ))
            }
            (Some(n), None) => RetryLimit::Attempts(n),
            (None, Some(total)) => RetryLimit::Within(total),
            (None, None) => default.limit,
        };
        Ok(Retry {
            limit,
            delay: self.delay.unwrap_or(default.delay),
            jitter: self.jitter.unwrap_or(default.jitter),
        })
    }
}

/// `Option<Duration>` as a humantime string.
mod humantime_opt {
    use std::time::Duration;

    use serde::{de, Deserialize, Deserializer, Serializer};

    use crate::config::url::quoted;

    pub(super) fn serialize<S: Serializer>(
        value: &Option<Duration>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match value {
            Some(d) => serializer.serialize_str(&humantime::format_duration(*d).to_string()),
            None => serializer.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Duration>, D::Error> {
        let Some(text) = Option::<String>::deserialize(deserializer)? else {
            return Ok(None);
        };
        humantime::parse_duration(text.trim())
            .map(Some)
            .map_err(|e| {
                let shown = quoted(&text);
                de::Error::custom(format!(
                    "invalid duration `{shown}` ({e}): write e.g. \"250ms\", \"10s\", \"1m\""
                ))
            })
    }
}
