//! What every subcommand shares: the node list, duration flags, and the `QUORUMLOCK_*`
//! variables with the command line laid over them. Unset variables take the library's
//! defaults: the command line has none of its own.

use std::collections::HashMap;
use std::env::VarError;
use std::time::Duration;

use clap::Args;
use quorumlock::{ConfigError, RedLockBuilder, ENV_VARS};

use super::exit::Failure;

pub(crate) const NODES: &str = "QUORUMLOCK_NODES";
pub(crate) const TTL: &str = "QUORUMLOCK_TTL";
pub(crate) const RETRY_ATTEMPTS: &str = "QUORUMLOCK_RETRY_ATTEMPTS";
pub(crate) const RETRY_WITHIN: &str = "QUORUMLOCK_RETRY_WITHIN";
pub(crate) const RETRY_DELAY: &str = "QUORUMLOCK_RETRY_DELAY";
pub(crate) const RETRY_JITTER: &str = "QUORUMLOCK_RETRY_JITTER";
pub(crate) const MAX_TTL: &str = "QUORUMLOCK_MAX_TTL";

/// `--nodes`, for every subcommand that talks to the nodes.
#[derive(Debug, Args)]
pub(crate) struct NodesArg {
    /// Comma-separated node URLs, each an independent Redis master:
    /// redis://[[user]:password@]host[:port][/db], or rediss:// for TLS
    /// [default: $QUORUMLOCK_NODES]
    #[arg(long, value_name = "URLS")]
    pub(crate) nodes: Option<String>,
}

/// A duration flag's value greater than zero: a humantime duration (`500ms`, `10s`, `2m`),
/// or a bare number of seconds (`30`, `0.5`), as flock(1) takes `-w 5`.
pub(crate) fn positive_duration(s: &str) -> Result<Duration, String> {
    match flag_duration(s)? {
        d if d.is_zero() => Err("must be greater than zero".into()),
        d => Ok(d),
    }
}

/// A duration flag's value, zero included: a humantime duration (`500ms`, `10s`, `2m`), or a
/// bare number of seconds (`5`, `0.5`, `0`). Only flags take bare numbers: the variables are
/// the library's, read by [`duration`], and need a unit.
pub(crate) fn flag_duration(s: &str) -> Result<Duration, String> {
    match bare_seconds(s.trim()) {
        Some(seconds) => seconds,
        None => duration(s).map_err(|e| e.replace("such as", "such as 5 (seconds),")),
    }
}

/// A humantime duration (`500ms`, `10s`, `2m`), zero included, with its unit: what the
/// `QUORUMLOCK_*` variables hold (a bare number is refused, as the library refuses it).
pub(crate) fn duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s.trim())
        .map_err(|e| format!("{e} (expected a duration such as 500ms, 10s or 2m)"))
}

/// `s` as a decimal number of seconds (`5`, `0.5`, `.5`, `5.`), to the nanosecond; `None` if
/// `s` is not made of digits and at most one point (then it is a humantime duration, or
/// nothing). Exact: no floating point, so `0.001` is one millisecond.
fn bare_seconds(s: &str) -> Option<Result<Duration, String>> {
    let (whole, fraction) = s.split_once('.').unwrap_or((s, ""));
    let digits = |part: &str| part.bytes().all(|b| b.is_ascii_digit());
    if whole.len() + fraction.len() == 0 || !digits(whole) || !digits(fraction) {
        return None;
    }
    let too_long = || format!("{s} seconds: too long");
    let seconds = match whole {
        "" => 0,
        whole => match whole.parse::<u64>() {
            Ok(n) => n,
            Err(_) => return Some(Err(too_long())),
        },
    };
    if fraction.len() > 9 {
        return Some(Err(format!(
            "{s} seconds: at most 9 decimals (nanoseconds)"
        )));
    }
    // Nine digits at most, padded with zeros to nine: the nanoseconds, under 10^9.
    let nanos = (fraction.bytes().chain(std::iter::repeat(b'0')).take(9))
        .fold(0u32, |n, digit| n * 10 + u32::from(digit - b'0'));
    Some(Ok(Duration::new(seconds, nanos)))
}

/// The `QUORUMLOCK_*` variables as a subcommand sees them: flags first, then the
/// environment (unset ones take the library's defaults). The library parses and checks them all
/// ([`RedLockBuilder::from_vars`] and `build()`), so a flag means exactly what its variable
/// means.
#[derive(Debug, Clone)]
pub(crate) struct Vars {
    values: HashMap<&'static str, String>,
}

impl Vars {
    /// The variables of the process's environment.
    ///
    /// # Errors
    /// A usage failure naming a variable that is not valid UTF-8, as
    /// [`RedLockBuilder::from_env`] reports it.
    pub(crate) fn from_env() -> Result<Vars, Failure> {
        for name in ENV_VARS {
            env_var(name)?;
        }
        Ok(Vars::from_lookup(|name| std::env::var(name).ok()))
    }

    pub(crate) fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Vars {
        let values = ENV_VARS
            .into_iter()
            .filter_map(|name| lookup(name).map(|v| (name, v)))
            .collect();
        Vars { values }
    }

    /// Sets `name`, whatever the environment says.
    pub(crate) fn set(&mut self, name: &'static str, value: impl Into<String>) {
        self.values.insert(name, value.into());
    }

    /// Sets `name` from a flag, if the flag was given.
    pub(crate) fn flag(&mut self, name: &'static str, value: Option<impl Into<String>>) {
        if let Some(value) = value {
            self.set(name, value);
        }
    }

    /// Unsets `name`.
    pub(crate) fn unset(&mut self, name: &str) {
        self.values.remove(name);
    }

    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }

    pub(crate) fn is_set(&self, name: &str) -> bool {
        self.values.contains_key(name)
    }

    /// A builder from these variables; nothing checked yet beyond parsing.
    pub(crate) fn builder(&self) -> Result<RedLockBuilder, Failure> {
        Ok(RedLockBuilder::from_vars(|name| {
            self.get(name).map(str::to_string)
        })?)
    }
}

/// An environment variable's value; one that is not valid UTF-8 is an error naming it (its
/// value is not shown).
pub(crate) fn env_var(name: &'static str) -> Result<Option<String>, ConfigError> {
    match std::env::var(name) {
        Ok(value) => Ok(Some(value)),
        Err(VarError::NotPresent) => Ok(None),
        Err(VarError::NotUnicode(_)) => Err(ConfigError::Env {
            var: name,
            value: String::new(),
            reason: "not valid UTF-8".into(),
        }),
    }
}

/// A duration as a variable's value; humantime reads back exactly what it writes.
pub(crate) fn var_duration(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(env: &[(&str, &str)]) -> Vars {
        Vars::from_lookup(|name| {
            env.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn flags_override_the_environment() {
        let mut v = vars(&[(NODES, "redis://a"), (TTL, "5s"), ("UNRELATED", "x")]);
        v.flag(NODES, Some("redis://b, redis://c,"));
        v.flag(TTL, None::<String>);
        assert_eq!(v.get(TTL), Some("5s"));
        assert!(!v.is_set("UNRELATED"));
        let config = v.builder().ok().and_then(|b| b.validate().ok());
        let config = config.expect("a valid configuration");
        assert_eq!(config.ttl(), Duration::from_secs(5));
        let nodes: Vec<&str> = config.nodes().iter().map(|n| n.redacted()).collect();
        assert_eq!(nodes, ["redis://b", "redis://c"]);
    }

    #[test]
    fn durations_round_trip_through_variables() {
        for d in [
            Duration::from_millis(1),
            Duration::from_millis(1500),
            Duration::from_nanos(1_000_000_007),
            Duration::from_secs(3600 * 30),
        ] {
            assert_eq!(duration(&var_duration(d)), Ok(d));
        }
    }

    #[test]
    fn zero_is_a_duration_but_not_a_positive_one() {
        assert_eq!(duration("0s"), Ok(Duration::ZERO));
        assert_eq!(flag_duration("0"), Ok(Duration::ZERO));
        assert!(positive_duration("0s").is_err());
        assert!(positive_duration("0ms").is_err());
        assert!(positive_duration("0").is_err());
        assert!(positive_duration("0.0").is_err());
        assert_eq!(positive_duration(" 2m "), Ok(Duration::from_secs(120)));
        assert!(duration("soon").is_err());
        assert!(flag_duration("soon").is_err());
    }

    #[test]
    fn a_flag_takes_bare_seconds_and_a_variable_needs_a_unit() {
        let ms = Duration::from_millis;
        for (flag, expected) in [
            ("5", ms(5000)),
            (" 30 ", ms(30_000)),
            ("0.5", ms(500)),
            (".25", ms(250)),
            ("2.", ms(2000)),
            ("0.001", ms(1)),
            ("1.000000001", Duration::new(1, 1)),
            ("10s", ms(10_000)),
            ("1m 30s", ms(90_000)),
        ] {
            assert_eq!(flag_duration(flag), Ok(expected), "{flag}");
            assert_eq!(positive_duration(flag), Ok(expected), "{flag}");
        }
        for bad in [
            "", ".", "-5", "+5", "1e3", "0x10", "5 5", "1.2.3", "inf", "NaN", "5 s x",
        ] {
            assert!(flag_duration(bad).is_err(), "{bad}");
        }
        let e = flag_duration("0.0000000001").err().unwrap_or_default();
        assert!(e.contains("at most 9 decimals"), "{e}");
        let e = flag_duration("99999999999999999999")
            .err()
            .unwrap_or_default();
        assert!(e.contains("too long"), "{e}");
        let e = flag_duration("soon").err().unwrap_or_default();
        assert!(e.contains("such as 5 (seconds), 500ms"), "{e}");
        // The variables keep the library's rule.
        assert!(duration("10").is_err());
        assert!(duration("0.5").is_err());
    }
}
