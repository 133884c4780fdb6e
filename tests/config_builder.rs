//! Configuration and bad input, without any server: every mistake is a typed error found
//! before anything is sent.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use proptest::prelude::*;
use quorumlock::{ConfigError, NodeUrl, RedLock, RedLockBuilder, Retry};

const THREE: [&str; 3] = [
    "redis://127.0.0.1:7001",
    "redis://127.0.0.1:7002",
    "redis://127.0.0.1:7003",
];

fn err(b: RedLockBuilder) -> ConfigError {
    b.validate().expect_err("configuration should be refused")
}

#[test]
fn the_defaults_are_documented_values() {
    let c = RedLock::builder().nodes(THREE).validate().unwrap();
    assert_eq!(c.ttl(), Duration::from_secs(10));
    assert_eq!(c.drift_factor(), 0.01);
    assert_eq!(c.node_timeout(), Duration::from_millis(100));
    assert_eq!(c.connect_timeout(), Duration::from_secs(1));
    assert_eq!(c.retry(), Retry::attempts(3));
    assert_eq!(c.key_prefix(), "");
    assert_eq!(c.nodes().len(), 3);
}

#[test]
fn an_empty_node_list_is_refused() {
    assert_eq!(err(RedLock::builder()), ConfigError::NoNodes);
    let none: [&str; 0] = [];
    assert_eq!(err(RedLock::builder().nodes(none)), ConfigError::NoNodes);
}

#[test]
fn unparsable_urls_are_refused() {
    for bad in [
        "",
        "not a url",
        "redis://",
        "redis://:6379",
        "redis://host:99999",
        "redis://host/abc",
        "redis://host/0?x=1",
    ] {
        assert!(
            matches!(
                err(RedLock::builder().node(bad)),
                ConfigError::InvalidUrl { .. }
            ),
            "{bad:?} should be an invalid URL"
        );
    }
}

#[test]
fn unknown_schemes_are_refused() {
    for (url, scheme) in [
        ("http://127.0.0.1:6379", "http"),
        ("redis-cluster://127.0.0.1:6379", "redis-cluster"),
        ("redis-sentinel://127.0.0.1:26379", "redis-sentinel"),
        ("unix:///tmp/redis.sock", "unix"),
    ] {
        match err(RedLock::builder().node(url)) {
            ConfigError::UnsupportedScheme { scheme: s, .. } => {
                assert_eq!(s.as_deref(), Some(scheme))
            }
            other => panic!("{url}: {other:?}"),
        }
    }
    // A name that is no known scheme may be a user name or a password: not shown.
    match err(RedLock::builder().node("default:S3CRET@example.com/2")) {
        e @ ConfigError::UnsupportedScheme { scheme: None, .. } => {
            assert_eq!(
                e.to_string(),
                "unsupported scheme in `***@example.com/2`: use redis:// or rediss://"
            )
        }
        other => panic!("{other:?}"),
    }
}

/// `127.0.0.1:7701` is an address without its `redis://`, not a relative URL; with
/// credentials in front (`default:pw@host:port`), they stay hidden.
#[test]
fn a_node_without_a_scheme_is_told_to_add_one() {
    let e = err(RedLock::builder().nodes(["127.0.0.1:7701", "redis://127.0.0.1:7702"]));
    assert_eq!(
        e,
        ConfigError::MissingScheme {
            url: "127.0.0.1:7701".into()
        }
    );
    assert_eq!(
        e.to_string(),
        "node URL `127.0.0.1:7701` has no scheme: write `redis://127.0.0.1:7701` (or \
         `rediss://127.0.0.1:7701` for TLS)"
    );
    let from_env = RedLockBuilder::from_vars(vars(&[("QUORUMLOCK_NODES", "localhost:6379/2")]))
        .unwrap()
        .validate();
    assert_eq!(
        from_env.unwrap_err(),
        ConfigError::MissingScheme {
            url: "localhost:6379/2".into()
        }
    );
    let e = err(RedLock::builder().node("default:S3CRET@127.0.0.1:7401"));
    assert_eq!(
        e,
        ConfigError::MissingScheme {
            url: "***@127.0.0.1:7401".into()
        }
    );
    assert!(!format!("{e} {e:?}").contains("S3CRET"), "{e}");
}

#[test]
fn the_same_server_twice_is_refused() {
    let e = err(RedLock::builder().nodes([
        "redis://127.0.0.1:7001",
        "redis://127.0.0.1:7002",
        "redis://127.0.0.1:7001/3",
    ]));
    assert!(
        matches!(
            e,
            ConfigError::DuplicateNode {
                first: 0,
                second: 2,
                ..
            }
        ),
        "{e:?}"
    );
    // The default port counts as the same port.
    let e = err(RedLock::builder().nodes(["redis://Example.com", "redis://example.com:6379"]));
    assert!(matches!(e, ConfigError::DuplicateNode { .. }), "{e:?}");
}

/// Two spellings of one loopback server that the URLs alone give away: `localhost` with
/// `127.0.0.1` or `[::1]` on one port, an IPv4-mapped IPv6 address with its IPv4 address.
#[tokio::test]
async fn two_names_of_one_loopback_server_are_refused_by_build() {
    let same = [
        ("redis://127.0.0.1:7501", "redis://localhost:7501"),
        ("redis://LocalHost:7501", "redis://127.0.0.1:7501"),
        ("redis://localhost:7501", "redis://[::1]:7501"),
        ("redis://[0:0:0:0:0:0:0:1]:7501", "redis://localhost:7501/2"),
        ("redis://[::ffff:127.0.0.1]:7501", "redis://127.0.0.1:7501"),
        ("redis://[::ffff:10.0.0.1]:6379", "redis://10.0.0.1"),
        ("redis://localhost", "rediss://:pw@127.0.0.1:6379"),
    ];
    for (a, b) in same {
        let e = RedLock::builder()
            .nodes([a, "redis://127.0.0.1:7999", b])
            .build()
            .expect_err(&format!("{a} and {b} are one server"));
        assert!(
            matches!(
                e,
                ConfigError::DuplicateNode {
                    first: 0,
                    second: 2,
                    ..
                }
            ),
            "{a} and {b}: {e:?}"
        );
    }
}

/// What may be two servers is left to `connect()`, which compares their run_ids: another
/// port, another loopback address, and `127.0.0.1` with `[::1]` (each may have a server of
/// its own).
#[test]
fn addresses_that_may_be_two_servers_are_accepted() {
    let different = [
        ("redis://localhost:7501", "redis://localhost:7502"),
        ("redis://localhost:7501", "redis://127.0.0.2:7501"),
        ("redis://127.0.0.1:7501", "redis://127.0.0.2:7501"),
        ("redis://127.0.0.1:7501", "redis://[::1]:7501"),
        ("redis://redis1.local:7501", "redis://127.0.0.1:7501"),
    ];
    for (a, b) in different {
        let c = RedLock::builder().nodes([a, b]).validate();
        assert!(c.is_ok(), "{a} and {b}: {c:?}");
    }
}

#[test]
fn credentials_tls_and_databases_are_accepted_and_passwords_never_shown() {
    let url = NodeUrl::parse("redis://app:s3cret@127.0.0.1:7001/2").unwrap();
    assert_eq!(url.port(), 7001);
    assert!(!url.tls());
    assert!(!url.redacted().contains("s3cret"), "{}", url.redacted());
    assert!(!format!("{url:?} {url}").contains("s3cret"));
    assert!(NodeUrl::parse("redis://:onlypass@[::1]:7001").is_ok());
    #[cfg(feature = "tls")]
    assert!(NodeUrl::parse("rediss://app:pw@localhost:6380")
        .unwrap()
        .tls());

    let e = err(RedLock::builder().node("redis://app:s3cret@127.0.0.1:7001/notadb"));
    assert!(!e.to_string().contains("s3cret"), "{e}");
}

#[test]
fn a_user_name_without_a_password_is_refused() {
    for url in [
        "redis://app@127.0.0.1:7001",
        "redis://app:@127.0.0.1:7001",
        "redis://S3CRET@127.0.0.1:7001/1",
    ] {
        match err(RedLock::builder().node(url)) {
            ConfigError::UserWithoutPassword { url: shown } => {
                assert!(shown.starts_with("redis://***@127.0.0.1:7001"), "{shown}");
            }
            other => panic!("{url}: {other:?}"),
        }
    }
    // A password alone means the `default` user; no credentials at all, no AUTH.
    for url in [
        "redis://:pw@127.0.0.1:7001",
        "redis://app:pw@127.0.0.1:7001",
        "redis://@127.0.0.1:7001",
        "redis://127.0.0.1:7001",
    ] {
        assert!(NodeUrl::parse(url).is_ok(), "{url}");
    }
}

#[test]
fn a_zero_ttl_or_one_not_above_the_drift_is_refused() {
    assert_eq!(
        err(RedLock::builder().nodes(THREE).ttl(Duration::ZERO)),
        ConfigError::ZeroTtl
    );
    // 2 ms ttl: drift is 2 ms + 0.02 ms.
    assert!(matches!(
        err(RedLock::builder()
            .nodes(THREE)
            .ttl(Duration::from_millis(2))),
        ConfigError::TtlNotAboveDrift { .. }
    ));
    assert!(matches!(
        err(RedLock::builder()
            .nodes(THREE)
            .ttl(Duration::from_secs(400 * 24 * 3600))),
        ConfigError::TtlTooLarge { .. }
    ));
    // 5 ms is above its drift (2.05 ms). (With a node timeout below the 2.95 ms of
    // validity left: the default 100 ms would be refused, see the next test.)
    assert!(RedLock::builder()
        .nodes(THREE)
        .ttl(Duration::from_millis(5))
        .node_timeout(Duration::from_millis(2))
        .validate()
        .is_ok());
}

/// A node timeout at least as long as the validity of the longest lock is refused, the same
/// whether the settings come from the builder, the environment or a configuration file;
/// a longer max ttl makes room for it.
#[test]
fn a_node_timeout_that_no_lock_can_outlast_is_refused_however_given() {
    // ttl 50 ms, drift 2.5 ms: 47.5 ms of validity, against the default 100 ms.
    let refused = ConfigError::NodeTimeoutOutlastsLocks {
        node_timeout: Duration::from_millis(100),
        max_ttl: Duration::from_millis(50),
        validity: Duration::from_micros(47_500),
    };
    let short = RedLock::builder()
        .nodes(THREE)
        .ttl(Duration::from_millis(50));
    assert_eq!(err(short.clone()), refused);
    assert_eq!(
        refused.to_string(),
        "the node timeout (100ms) is not shorter than the validity of the longest lock (47ms \
         500us: the max ttl 50ms less the drift allowance): a round that waits it out for one \
         slow node would always end with no validity left; lower the node timeout \
         (QUORUMLOCK_NODE_TIMEOUT) or raise the ttl or max ttl (QUORUMLOCK_TTL, \
         QUORUMLOCK_MAX_TTL)"
    );
    let env = RedLockBuilder::from_vars(vars(&[
        ("QUORUMLOCK_NODES", &THREE.join(",")),
        ("QUORUMLOCK_TTL", "50ms"),
    ]))
    .unwrap();
    assert_eq!(err(env), refused);
    #[cfg(feature = "serde")]
    {
        let file: RedLockBuilder =
            serde_json::from_str(&format!(r#"{{"nodes": {THREE:?}, "ttl": "50ms"}}"#)).unwrap();
        assert_eq!(err(file), refused);
    }
    // The node timeout of 10 s against the default ttl: 9.898 s of validity.
    assert!(matches!(
        err(RedLock::builder()
            .nodes(THREE)
            .node_timeout(Duration::from_secs(10))),
        ConfigError::NodeTimeoutOutlastsLocks { .. }
    ));
    // Longer locks may be taken (lock_with, extend_for): the timeout serves them.
    assert!(short.max_ttl(Duration::from_secs(1)).validate().is_ok());
}

#[test]
fn bad_drift_factors_timeouts_and_retries_are_refused() {
    for f in [-0.01, 1.0, 2.0, f64::NAN, f64::INFINITY] {
        assert!(matches!(
            err(RedLock::builder().nodes(THREE).drift_factor(f)),
            ConfigError::InvalidDriftFactor(_)
        ));
    }
    assert!(matches!(
        err(RedLock::builder().nodes(THREE).node_timeout(Duration::ZERO)),
        ConfigError::ZeroTimeout(_)
    ));
    assert!(matches!(
        err(RedLock::builder()
            .nodes(THREE)
            .connect_timeout(Duration::ZERO)),
        ConfigError::ZeroTimeout(_)
    ));
    assert!(matches!(
        err(RedLock::builder().nodes(THREE).retry(Retry::attempts(0))),
        ConfigError::InvalidRetry(_)
    ));
    assert!(matches!(
        err(RedLock::builder()
            .nodes(THREE)
            .retry(Retry::within(Duration::ZERO))),
        ConfigError::InvalidRetry(_)
    ));
}

#[test]
fn too_many_nodes_are_refused() {
    let many: Vec<String> = (0..65)
        .map(|i| format!("redis://127.0.0.1:{}", 10_000 + i))
        .collect();
    assert_eq!(
        err(RedLock::builder().nodes(many)),
        ConfigError::TooManyNodes(65)
    );
}

#[test]
fn build_outside_a_runtime_is_an_error_not_a_panic() {
    assert_eq!(
        RedLock::builder().nodes(THREE).build().unwrap_err(),
        ConfigError::NoRuntime
    );
}

fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |k| map.get(k).cloned()
}

#[test]
fn the_environment_sets_every_option() {
    let b = RedLockBuilder::from_vars(vars(&[
        (
            "QUORUMLOCK_NODES",
            " redis://127.0.0.1:7001, redis://127.0.0.1:7002 ,redis://127.0.0.1:7003,",
        ),
        ("QUORUMLOCK_TTL", "30s"),
        ("QUORUMLOCK_DRIFT_FACTOR", "0.02"),
        ("QUORUMLOCK_NODE_TIMEOUT", "250ms"),
        ("QUORUMLOCK_CONNECT_TIMEOUT", "2s"),
        ("QUORUMLOCK_RETRY_WITHIN", "1m"),
        ("QUORUMLOCK_RETRY_DELAY", "10ms"),
        ("QUORUMLOCK_RETRY_JITTER", "5ms"),
        ("QUORUMLOCK_KEY_PREFIX", "locks:"),
        ("QUORUMLOCK_DECODER_WARNING", "off"),
    ]))
    .unwrap();
    let c = b.validate().unwrap();
    assert_eq!(c.nodes().len(), 3);
    assert_eq!(c.ttl(), Duration::from_secs(30));
    assert_eq!(c.drift_factor(), 0.02);
    assert_eq!(c.node_timeout(), Duration::from_millis(250));
    assert_eq!(c.connect_timeout(), Duration::from_secs(2));
    assert_eq!(
        c.retry(),
        Retry::within(Duration::from_secs(60))
            .delay(Duration::from_millis(10))
            .jitter(Duration::from_millis(5))
    );
    assert_eq!(c.key_prefix(), "locks:");
    assert!(!c.decoder_warning());

    let c = RedLockBuilder::from_vars(vars(&[
        ("QUORUMLOCK_NODES", THREE.join(",").as_str()),
        ("QUORUMLOCK_RETRY_ATTEMPTS", "7"),
    ]))
    .unwrap()
    .validate()
    .unwrap();
    assert_eq!(c.retry(), Retry::attempts(7));
    assert!(c.decoder_warning(), "on by default");
}

#[test]
fn bad_environment_values_name_the_variable() {
    for (var, value) in [
        ("QUORUMLOCK_TTL", "10"),
        ("QUORUMLOCK_TTL", "ten seconds"),
        ("QUORUMLOCK_NODE_TIMEOUT", "-5ms"),
        ("QUORUMLOCK_DRIFT_FACTOR", "one"),
        ("QUORUMLOCK_RETRY_ATTEMPTS", "-1"),
        ("QUORUMLOCK_DECODER_WARNING", "quiet"),
    ] {
        match RedLockBuilder::from_vars(vars(&[(var, value)])) {
            Err(e @ ConfigError::Env { var: v, .. }) => {
                assert_eq!(v, var);
                assert!(e.to_string().contains(&format!("`{value}`")), "{e}");
            }
            other => panic!("{var}={value}: {other:?}"),
        }
    }
    // A URL in the wrong variable is shown without its password.
    let e = RedLockBuilder::from_vars(vars(&[("QUORUMLOCK_TTL", "redis://u:S3CRET@h")]));
    assert!(
        matches!(&e, Err(e @ ConfigError::Env { .. }) if !format!("{e} {e:?}").contains("S3CRET")),
        "{e:?}"
    );
    assert!(matches!(
        RedLockBuilder::from_vars(vars(&[
            ("QUORUMLOCK_RETRY_ATTEMPTS", "2"),
            ("QUORUMLOCK_RETRY_WITHIN", "1s")
        ])),
        Err(ConfigError::Env { .. })
    ));
    // Missing nodes are caught by validation, like in code.
    assert_eq!(
        RedLockBuilder::from_vars(vars(&[]))
            .unwrap()
            .validate()
            .unwrap_err(),
        ConfigError::NoNodes
    );
}

#[cfg(feature = "tls")]
#[test]
fn tls_files_are_checked_before_anything_connects_and_never_quoted() {
    use std::path::PathBuf;

    let pki = common::tls::Pki::new();
    let file = |name: &str, text: &str| {
        let path = pki.dir().join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let tls_file = |b: RedLockBuilder| {
        let e = err(b.nodes(THREE));
        assert!(!format!("{e} {e:?}").contains("S3CRET"), "{e}");
        match e {
            ConfigError::TlsFile { path, reason } => (path, reason),
            other => panic!("{other:?}"),
        }
    };
    let missing = pki.dir().join("missing.pem");
    let (path, reason) = tls_file(RedLock::builder().tls_ca_file(&missing));
    assert_eq!(path, missing);
    assert!(reason.contains("cannot be read"), "{reason}");
    let empty = file("empty.pem", "");
    let (_, reason) = tls_file(RedLock::builder().tls_ca_file(&empty));
    assert!(reason.contains("no PEM certificate"), "{reason}");

    let cert = pki.client_cert();
    for (name, text, says) in [
        ("plain.pem", "S3CRET key material\n", "no PEM private key"),
        (
            "base64.pem",
            "-----BEGIN PRIVATE KEY-----\nS3CRET*key*material\n-----END PRIVATE KEY-----\n",
            "not valid base64",
        ),
        (
            "unended.pem",
            "-----BEGIN PRIVATE KEY-----\nS3CRETkeymaterial\n",
            "no END line",
        ),
    ] {
        let key = file(name, text);
        let (path, reason) = tls_file(RedLock::builder().tls_client_cert(&cert, &key));
        assert_eq!(path, key);
        assert!(reason.contains(says), "{name}: {reason}");
    }
    // A certificate with someone else's key.
    let other_key = pki.path("server-key.pem");
    let e = err(RedLock::builder()
        .nodes(THREE)
        .tls_client_cert(&cert, &other_key));
    assert!(matches!(e, ConfigError::InvalidTls(_)), "{e:?}");

    // From the environment: all three, or a certificate without its key.
    let var = |p: PathBuf| p.to_string_lossy().into_owned();
    let (ca, key) = (var(pki.ca()), var(pki.client_key()));
    let cert_var = var(cert.clone());
    let c = RedLockBuilder::from_vars(vars(&[
        ("QUORUMLOCK_NODES", "rediss://127.0.0.1:7001"),
        ("QUORUMLOCK_TLS_CA_FILE", &ca),
        ("QUORUMLOCK_TLS_CERT_FILE", &cert_var),
        ("QUORUMLOCK_TLS_KEY_FILE", &key),
    ]))
    .unwrap()
    .validate()
    .unwrap();
    assert_eq!(c.tls_ca_file(), Some(pki.ca().as_path()));
    assert_eq!(
        c.tls_client_cert(),
        Some((cert.as_path(), pki.client_key().as_path()))
    );
    let alone = RedLockBuilder::from_vars(vars(&[
        ("QUORUMLOCK_NODES", "rediss://127.0.0.1:7001"),
        ("QUORUMLOCK_TLS_CERT_FILE", &cert_var),
    ]))
    .unwrap()
    .validate();
    assert!(
        matches!(alone, Err(ConfigError::InvalidTls(_))),
        "{alone:?}"
    );
}

/// Everything a mistaken node URL `url` could be shown through: the parsed URL or the
/// parser's error, `validate()`'s error as such and as an [`quorumlock::Error`], and the
/// builder (from code and from `QUORUMLOCK_NODES`).
fn every_way_of_showing(url: &str) -> Vec<String> {
    let mut shown = Vec::new();
    match NodeUrl::parse(url) {
        Ok(u) => shown.extend([u.to_string(), format!("{u:?}")]),
        Err(e) => shown.extend([e.to_string(), format!("{e:?}")]),
    }
    let from_code = RedLock::builder().nodes([THREE[0], url]);
    let from_env = RedLockBuilder::from_vars(vars(&[("QUORUMLOCK_NODES", url)]));
    for b in [Ok(from_code), from_env] {
        match b {
            Ok(b) => {
                shown.push(format!("{b:?}"));
                match b.validate() {
                    Ok(config) => shown.push(format!("{config:?}")),
                    Err(e) => {
                        let e = quorumlock::Error::from(e);
                        shown.extend([e.to_string(), format!("{e:?}")]);
                    }
                }
            }
            Err(e) => shown.extend([e.to_string(), format!("{e:?}")]),
        }
    }
    shown
}

/// A password: it starts with `S3cr`, which no other part of the generated URLs contains,
/// and has no character that ends a URL's user-info part.
fn password() -> impl Strategy<Value = String> {
    "S3cr[A-Za-z0-9!$&*+;=._~-]{2,12}"
}

/// A node URL, correct or mistyped in the ways people mistype them, with `password` where
/// a password goes (or where one lands after the mistake).
fn url_with(password: String) -> impl Strategy<Value = String> {
    let scheme = prop::sample::select(vec![
        "redis", "rediss", "REDIS", "default", "http", "unix", "x", "",
    ]);
    let sep = prop::sample::select(vec!["://", ":/", ":", "//", "/", ":///", ""]);
    let user = prop::sample::select(vec!["", "app", "default"]);
    let host = prop::sample::select(vec!["127.0.0.1", "example.com", "[::1]", "", "a b"]);
    let port = prop::sample::select(vec!["", ":7401", ":99999", ":x"]);
    let tail = prop::sample::select(vec!["", "/0", "/x", "?db=1", "#f"]);
    (scheme, sep, user, host, port, tail, 0..6usize).prop_map(
        move |(scheme, sep, user, host, port, tail, shape)| {
            let pw = &password;
            match shape {
                0 => format!("{scheme}{sep}{user}:{pw}@{host}{port}{tail}"),
                // A password given as the user name (Lettuce's `redis://password@host`).
                1 => format!("{scheme}{sep}{pw}@{host}{port}{tail}"),
                // The `@` forgotten.
                2 => format!("{scheme}{sep}{user}:{pw}{host}{port}"),
                3 => format!("{scheme}{sep}{host}{port}/?password={pw}"),
                // (With a host: `redis:/` + `/secret` is `redis://secret`, a host name.)
                4 => format!("{scheme}{sep}example.com{port}/{pw}"),
                _ => format!("{user}:{pw}@{scheme}{sep}{host}{port}{tail}"),
            }
        },
    )
}

#[test]
fn mistyped_urls_never_show_their_password() {
    for url in [
        "default:S3CRET@127.0.0.1:7401",
        "redis//u:S3CRET@127.0.0.1:7401",
        "redis:/u:S3CRET@127.0.0.1:7401",
        "redis:u:S3CRET@127.0.0.1:7401",
        "redis://u:S3CRET@127.0.0.1:port",
        "redis://u:S3CRET",
        "redis://u:12#S3CRET@127.0.0.1",
        "redis://u:ab/S3CRET@127.0.0.1",
        "rediss://S3CRET@127.0.0.1",
    ] {
        for text in every_way_of_showing(url) {
            assert!(!text.contains("S3CRET"), "{url}: {text}");
        }
    }
}

proptest! {
    // Many shapes: more cases than the default 256.
    #![proptest_config(ProptestConfig::with_cases(4096))]

    #[test]
    fn no_url_shape_shows_its_password((pw, url) in password().prop_flat_map(|pw| (Just(pw.clone()), url_with(pw)))) {
        for text in every_way_of_showing(&url) {
            prop_assert!(!text.contains(&pw) && !text.contains("S3cr"), "{url:?} shown as {text:?}");
        }
    }
}

proptest! {

    #[test]
    fn no_url_makes_the_parser_panic(s in "\\PC{0,40}", t in "(redis|rediss|http)://[a-z0-9:@./\\[\\]?#%-]{0,30}") {
        let _ = NodeUrl::parse(&s);
        let _ = NodeUrl::parse(&t);
    }

    #[test]
    fn no_environment_value_makes_the_builder_panic(v in "\\PC{0,20}") {
        for var in quorumlock::ENV_VARS {
            let _ = RedLockBuilder::from_vars(vars(&[(var, v.as_str())])).map(|b| b.validate());
        }
    }
}

/// The warnings `build()` logs: each event's level and message.
#[derive(Clone, Default)]
struct Warnings(std::sync::Arc<std::sync::Mutex<Vec<(tracing::Level, String)>>>);

struct Message<'a>(&'a mut String);

impl tracing::field::Visit for Message<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            *self.0 = format!("{value:?}");
        }
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Warnings {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        let mut message = String::new();
        event.record(&mut Message(&mut message));
        let level = *event.metadata().level();
        self.0.lock().unwrap().push((level, message));
    }
}

/// Fragile settings are accepted, with a warning each when the client is built: two nodes
/// (no node may fail), four (no more tolerance than three), and a node timeout that leaves a
/// lock of the ttl under half its validity after one slow node.
#[tokio::test]
async fn build_warns_about_each_fragile_setting() {
    use tracing_subscriber::layer::SubscriberExt;

    let warned = |builder: RedLockBuilder| {
        let warnings = Warnings::default();
        let subscriber = tracing_subscriber::registry().with(warnings.clone());
        let redlock = tracing::subscriber::with_default(subscriber, || builder.build());
        drop(redlock.expect("accepted"));
        let found = warnings.0.lock().unwrap().clone();
        found
            .into_iter()
            .filter(|(level, _)| *level == tracing::Level::WARN)
            .map(|(_, message)| message)
            .collect::<Vec<_>>()
    };
    let four = [THREE.as_slice(), &["redis://127.0.0.1:7004"]].concat();
    assert_eq!(
        warned(RedLock::builder().nodes(THREE)),
        Vec::<String>::new()
    );
    assert_eq!(
        warned(RedLock::builder().nodes(THREE[..2].iter().copied())),
        [
            "2 nodes: no node may fail (a quorum of 2 is 2), so locks fail whenever one node is \
          down, frozen or cut off; use 3 or 5 independent masters"
        ]
    );
    assert_eq!(
        warned(RedLock::builder().nodes(four)),
        [
            "4 nodes: a quorum is 3, so they can lose 1 node, no more than 3 nodes can; an odd \
          number is as tolerant with one node fewer"
        ]
    );
    let slow = warned(
        RedLock::builder()
            .nodes(THREE)
            .ttl(Duration::from_secs(1))
            .node_timeout(Duration::from_millis(600)),
    );
    assert_eq!(slow.len(), 1, "{slow:?}");
    assert!(
        slow[0].starts_with(
            "a round that waits the node timeout (600ms) for one slow node leaves a lock of the \
             ttl (1s) 388ms of validity, under half of the 988ms a prompt round leaves"
        ),
        "{slow:?}"
    );
}
