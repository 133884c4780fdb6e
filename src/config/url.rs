//! Node URLs: parsing, and showing them without anything that may be a password.
//!
//! A URL is shown as given only once it parses as `redis://` or `rediss://` with a host; then
//! only its password is hidden. Anything else is shown by shape: a known scheme's name, `***`
//! for whatever comes before the last `@`, and the rest only if it looks like
//! `host[:port][/db]`. Mistyped URLs such as `redis:/user:pw@host` or `default:pw@host`
//! (which parses as scheme `default`) still carry their password in odd places.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::error::ConfigError;

/// Scheme names that may be shown in an error. Any other name may be a user name or a
/// password: `default:S3CRET@host` parses as scheme `default`.
const KNOWN_SCHEMES: [&str; 19] = [
    "redis",
    "rediss",
    "redis-cluster",
    "rediss-cluster",
    "redis-sentinel",
    "rediss-sentinel",
    "redis+sentinel",
    "rediss+sentinel",
    "redis+unix",
    "redis-socket",
    "valkey",
    "valkeys",
    "valkey-cluster",
    "valkey-sentinel",
    "unix",
    "tcp",
    "tls",
    "http",
    "https",
];

/// One node's address, parsed and checked.
#[derive(Clone, PartialEq, Eq)]
pub struct NodeUrl {
    raw: String,
    redacted: String,
    host: String,
    port: u16,
    tls: bool,
}

impl NodeUrl {
    /// Parses `redis://[[user]:password@]host[:port][/db]` or the same with `rediss://`.
    ///
    /// # Errors
    /// [`ConfigError::InvalidUrl`], [`ConfigError::UnsupportedScheme`],
    /// [`ConfigError::UserWithoutPassword`], or [`ConfigError::TlsUnavailable`] for
    /// `rediss://` without the `tls` feature. None of them shows a password, whatever the
    /// shape of the text given.
    pub fn parse(raw: &str) -> Result<NodeUrl, ConfigError> {
        let raw = raw.trim();
        let invalid = |reason: &str| ConfigError::InvalidUrl {
            url: redact(raw),
            reason: reason.to_string(),
        };
        // Before parsing: `localhost:7701` parses, as scheme `localhost`.
        if let Some(url) = without_scheme(raw) {
            return Err(ConfigError::MissingScheme { url });
        }
        // The url crate's messages never quote the input.
        let url = url::Url::parse(raw).map_err(|e| invalid(&e.to_string()))?;
        let tls = match url.scheme() {
            "redis" => false,
            "rediss" => true,
            other => {
                return Err(ConfigError::UnsupportedScheme {
                    url: redact(raw),
                    scheme: shown_scheme(other),
                })
            }
        };
        if tls && !cfg!(feature = "tls") {
            return Err(ConfigError::TlsUnavailable { url: redact(raw) });
        }
        let host = (url.host_str().filter(|h| !h.is_empty()))
            .ok_or_else(|| invalid("no host"))?
            .to_ascii_lowercase();
        let port = url.port().unwrap_or(6379);
        let path = url.path().trim_matches('/');
        if !path.is_empty() && path.parse::<u8>().is_err() {
            return Err(invalid("the path must be a database number, e.g. /0"));
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err(invalid("query strings and fragments are not supported"));
        }
        // fred sends AUTH only with a password; redis-cli takes a lone name for one.
        if !url.username().is_empty() && url.password().is_none() {
            return Err(ConfigError::UserWithoutPassword {
                url: redact_url(&url),
            });
        }
        let url = NodeUrl {
            redacted: redact_url(&url),
            raw: raw.to_string(),
            host,
            port,
            tls,
        };
        // Validate with the client library too, so build() cannot fail on it later. Its
        // messages do not quote the URL either. (As `redis://`: for `rediss://` it would
        // load the system's root certificates, which is done once, in `validate`.)
        fred::types::config::Config::from_url_centralized(&url.as_plain())
            .map_err(|e| invalid(e.details()))?;
        Ok(url)
    }

    /// The address of a node given as a client library configuration or client, written as
    /// a URL without credentials: for messages, and for telling whether two nodes name one
    /// server. Never connected to (the node's own configuration is).
    pub(crate) fn of_server(host: &str, port: u16, tls: bool, db: Option<u8>) -> NodeUrl {
        let host = host.to_ascii_lowercase();
        let shown_host = if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]")
        } else {
            host
        };
        let scheme = if tls { "rediss" } else { "redis" };
        let db = db.map(|db| format!("/{db}")).unwrap_or_default();
        let raw = format!("{scheme}://{shown_host}:{port}{db}");
        NodeUrl {
            redacted: raw.clone(),
            raw,
            host: shown_host,
            port,
            tls,
        }
    }

    /// The URL as given, with `redis` for its scheme.
    pub(crate) fn as_plain(&self) -> String {
        match self.raw.find(':') {
            Some(colon) => format!("redis{}", &self.raw[colon..]),
            None => self.raw.clone(),
        }
    }

    /// The URL as given (with its password, if any).
    pub(crate) fn as_str(&self) -> &str {
        &self.raw
    }

    /// The URL with any password replaced by `***`: safe for logs and errors.
    pub fn redacted(&self) -> &str {
        &self.redacted
    }

    /// Host name or address, lower-cased.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// TCP port (6379 when the URL has none).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Whether the URL asks for TLS (`rediss://`).
    pub fn tls(&self) -> bool {
        self.tls
    }

    /// Whether the two URLs name one server, as far as the URLs alone tell, without any
    /// lookup: as [`ConfigError::DuplicateNode`] says.
    pub(crate) fn names_the_same_server_as(&self, other: &NodeUrl) -> bool {
        if self.port != other.port {
            return false;
        }
        match (self.endpoint(), other.endpoint()) {
            (Endpoint::Localhost, Endpoint::Ip(ip)) | (Endpoint::Ip(ip), Endpoint::Localhost) => {
                ip == IpAddr::V4(Ipv4Addr::LOCALHOST) || ip == IpAddr::V6(Ipv6Addr::LOCALHOST)
            }
            (a, b) => a == b,
        }
    }

    fn endpoint(&self) -> Endpoint<'_> {
        // `host` is lower-case; an IPv6 address keeps its brackets.
        let bare = self.host.trim_start_matches('[').trim_end_matches(']');
        match bare.parse::<IpAddr>() {
            // An IPv4-mapped IPv6 address as its IPv4 address.
            Ok(ip) => Endpoint::Ip(ip.to_canonical()),
            Err(_) if self.host == "localhost" => Endpoint::Localhost,
            Err(_) => Endpoint::Name(&self.host),
        }
    }
}

/// A URL's host, for telling whether two URLs name one server.
#[derive(Debug, PartialEq, Eq)]
enum Endpoint<'a> {
    Ip(IpAddr),
    Localhost,
    Name(&'a str),
}

impl fmt::Debug for NodeUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("NodeUrl").field(&self.redacted).finish()
    }
}

impl fmt::Display for NodeUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted)
    }
}

/// A node URL as given to the builder, not parsed yet: its `Debug` shows it redacted.
#[derive(Clone)]
pub(crate) struct GivenUrl(pub(crate) String);

impl fmt::Debug for GivenUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&redact(self.0.trim()), f)
    }
}

/// For a node written without a scheme, `[credentials@]host:port[/db]` or an IP address with
/// no port: the text as it may be shown, credentials hidden (`***@host:port`). `None` for
/// anything else, which is left to the parser: a mistyped scheme (`redis:/host`), a `/`
/// before the host, or a bare word with no port, which may as well be a password.
fn without_scheme(raw: &str) -> Option<String> {
    let (head, tail) = raw
        .rsplit_once('@')
        .map_or((None, raw), |(h, t)| (Some(h), t));
    if head.is_some_and(|h| h.contains('/')) || !split_known_scheme(raw).0.is_empty() {
        return None;
    }
    let (address, db) = tail.split_once('/').unwrap_or((tail, ""));
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    let bare_ip = address.parse::<IpAddr>().is_ok()
        || address
            .strip_prefix('[')
            .and_then(|a| a.strip_suffix(']'))
            .is_some_and(|a| a.parse::<Ipv6Addr>().is_ok());
    let with_port = match address.rsplit_once(':') {
        Some((host, port)) => !host.is_empty() && digits(port) && port.len() <= 5,
        None => false,
    };
    let shaped = (bare_ip || with_port) && (db.is_empty() || digits(db));
    // `host_like` accepts only what cannot be a password.
    if !shaped || host_like(tail) != tail {
        return None;
    }
    Some(match head {
        Some(_) => format!("***@{tail}"),
        None => tail.to_string(),
    })
}

/// A scheme's name if it is a known one (see [`KNOWN_SCHEMES`]), for an error message.
fn shown_scheme(scheme: &str) -> Option<String> {
    let lower = scheme.to_ascii_lowercase();
    KNOWN_SCHEMES.contains(&lower.as_str()).then_some(lower)
}

/// A `redis://` or `rediss://` URL with a host, rebuilt from its parts: the password
/// becomes `***`, and so does a user name given without one (Lettuce and others read
/// `redis://secret@host` as a password), a path that is not a database number, and any
/// query or fragment.
fn redact_url(url: &url::Url) -> String {
    let mut shown = format!("{}://", url.scheme());
    let user = url.username();
    if url.password().is_some() {
        shown.push_str(user);
        shown.push_str(":***@");
    } else if !user.is_empty() {
        shown.push_str("***@");
    }
    shown.push_str(url.host_str().unwrap_or_default());
    if let Some(port) = url.port() {
        shown.push_str(&format!(":{port}"));
    }
    let path = url.path();
    let db = path.trim_matches('/');
    if db.is_empty() || db.parse::<u8>().is_ok() {
        shown.push_str(path);
    } else {
        shown.push_str("/***");
    }
    if url.query().is_some() || url.fragment().is_some() {
        shown.push_str("?***");
    }
    shown
}

/// The given text as it may be shown in an error or a log: see the module's documentation.
pub(crate) fn redact(raw: &str) -> String {
    match url::Url::parse(raw) {
        Ok(url)
            if matches!(url.scheme(), "redis" | "rediss")
                && url.host_str().is_some_and(|h| !h.is_empty()) =>
        {
            redact_url(&url)
        }
        _ => redact_shape(raw),
    }
}

/// `text` as an error may quote it: by shape ([`redact`]) when it may hold credentials (a
/// URL in the wrong field or variable).
pub(crate) fn quoted(text: &str) -> String {
    if text.contains([':', '@']) {
        redact(text)
    } else {
        text.to_string()
    }
}

/// A string that is not a usable URL, by shape: a known scheme with the separator as typed
/// (`redis:/`, `redis//`), `***@` if there is an `@`, and what follows the last `@` (or a
/// well-formed `scheme://`, without one) if it looks like `host[:port][/db]`, else `***`.
fn redact_shape(raw: &str) -> String {
    let (head, tail) = raw
        .rsplit_once('@')
        .map_or((raw, None), |(h, t)| (h, Some(t)));
    let (scheme, rest) = split_known_scheme(head);
    let mut shown = scheme.to_string();
    match tail {
        Some(tail) => {
            shown.push_str("***@");
            shown.push_str(host_like(tail));
        }
        // Without an `@`, a host is told from a password only after a proper `scheme://`:
        // `redis:secret` or `redis:///secret` look like `redis:host` too.
        None if scheme.ends_with("://") && !scheme.ends_with(":///") => {
            shown.push_str(host_like(rest))
        }
        None => shown.push_str("***"),
    }
    shown
}

/// `(scheme with its separator, rest)` when `s` starts with a known scheme name followed by
/// a separator as typed (`:`, `/`s, or `:` and `/`s); `("", s)` otherwise. A `:` after the
/// slashes is left to the rest: it may start a password (`redis://:secret`).
fn split_known_scheme(s: &str) -> (&str, &str) {
    let is_name = |c: char| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.');
    let name_end = s.find(|c: char| !is_name(c)).unwrap_or(s.len());
    let after = &s[name_end..];
    let colon = usize::from(after.starts_with(':'));
    let slashes = after[colon..].len() - after[colon..].trim_start_matches('/').len();
    let sep_len = colon + slashes;
    if sep_len > 0 && shown_scheme(&s[..name_end]).is_some() {
        s.split_at(name_end + sep_len)
    } else {
        ("", s)
    }
}

/// `s` if it looks like `host[:port][/db]` (nothing in it can be a password), else `***`.
fn host_like(s: &str) -> &str {
    let digits = |t: &str| t.chars().all(|c| c.is_ascii_digit());
    let (rest, db) = s.split_once('/').unwrap_or((s, ""));
    let (host_ok, port) = match rest.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((addr, port)) => (
                addr.chars()
                    .all(|c| c.is_ascii_hexdigit() || matches!(c, ':' | '.')),
                port,
            ),
            None => (false, ""),
        },
        None => {
            let end = rest.find(':').unwrap_or(rest.len());
            let host = &rest[..end];
            let ok = host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'));
            (ok, &rest[end..])
        }
    };
    let port_ok = port.is_empty()
        || port
            .strip_prefix(':')
            .is_some_and(|p| !p.is_empty() && digits(p));
    if host_ok && port_ok && digits(db) {
        s
    } else {
        "***"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mistyped_urls_show_their_shape_but_no_credentials() {
        for (raw, shown) in [
            ("default:S3CRET@host:7401", "***@host:7401"),
            ("redis//u:S3CRET@host:7401", "redis//***@host:7401"),
            ("redis:/u:S3CRET@host", "redis:/***@host"),
            ("redis:u:S3CRET@host/2", "redis:***@host/2"),
            ("http://u:S3CRET@[::1]:80", "http://***@[::1]:80"),
            ("redis://u:S3CRET", "redis://***"),
            ("redis://:S3CRET127.0.0.1", "redis://***"),
            ("redis:///:S3CRET", "redis:///***"),
            ("redis://u:S3CRET@host:port", "redis://***@***"),
            ("S3CRET@host", "***@host"),
            ("redis://S3CRET@host:7401", "redis://***@host:7401"),
            (
                "redis://app:S3CRET@host:7401/2",
                "redis://app:***@host:7401/2",
            ),
            ("redis://host/0?password=S3CRET", "redis://host/0?***"),
            ("redis://host/S3CRET", "redis://host/***"),
            ("not a url", "***"),
            ("redis://host:7401", "redis://host:7401"),
            ("redis://host:99999", "redis://host:99999"),
            ("redis:S3CRET", "redis:***"),
            ("127.0.0.1:7401", "***"),
        ] {
            assert_eq!(redact(raw), shown, "{raw}");
        }
    }

    #[test]
    fn a_missing_scheme_is_told_from_a_mistyped_one() {
        for (raw, shown) in [
            ("127.0.0.1:7701", Some("127.0.0.1:7701")),
            ("localhost:6379/2", Some("localhost:6379/2")),
            ("10.0.0.1", Some("10.0.0.1")),
            ("[::1]:7701", Some("[::1]:7701")),
            ("default:S3CRET@host:7401", Some("***@host:7401")),
            ("S3CRET@10.0.0.1", Some("***@10.0.0.1")),
            ("S3CRET", None),
            ("host", None),
            ("host:port", None),
            ("redis:host:6379", None),
            ("redis:/u:S3CRET@127.0.0.1:7401", None),
            ("redis://127.0.0.1:7701", None),
            ("a b:6379", None),
            (":6379", None),
        ] {
            assert_eq!(without_scheme(raw).as_deref(), shown, "{raw}");
        }
    }

    #[test]
    fn only_known_scheme_names_are_shown() {
        assert_eq!(shown_scheme("HTTP").as_deref(), Some("http"));
        assert_eq!(shown_scheme("default"), None);
        assert_eq!(split_known_scheme("s3cret://h"), ("", "s3cret://h"));
    }
}
