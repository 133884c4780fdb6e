//! The configuration read from a service's configuration file (feature `serde`).

use std::path::PathBuf;
use std::time::Duration;

use quorumlock::{Config, ConfigError, ConfigFile, RedLock, RedLockBuilder, Retry};

const URLS: [&str; 3] = [
    "redis://:S3CRET@10.0.0.1:6379",
    "redis://10.0.0.2:6379",
    "redis://10.0.0.3:6379",
];

/// Every field set, none to its default.
const FULL: &str = r#"
nodes = ["redis://:S3CRET@10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"]
ttl = "30s"
drift_factor = 0.02
node_timeout = "50ms"
connect_timeout = "2s 500ms"
key_prefix = "locks:"
fencing = false
quarantine = false
max_ttl = "2m"
decoder_warning = false

[retry]
within = "5s"
delay = "20ms"
jitter = "30ms"
"#;

fn toml_builder(text: &str) -> Result<RedLockBuilder, toml::de::Error> {
    toml::from_str(text)
}

/// The settings of a validated configuration that can be compared.
fn settings(c: &Config) -> (Vec<String>, Duration, f64, Duration, Duration, Retry) {
    let nodes = c.nodes().iter().map(|n| n.redacted().to_string()).collect();
    (
        nodes,
        c.ttl(),
        c.drift_factor(),
        c.node_timeout(),
        c.connect_timeout(),
        c.retry(),
    )
}

#[test]
fn every_field_reaches_the_configuration() {
    let config = toml_builder(FULL).unwrap().validate().unwrap();
    let expected = RedLock::builder()
        .nodes(URLS)
        .ttl(Duration::from_secs(30))
        .drift_factor(0.02)
        .node_timeout(Duration::from_millis(50))
        .connect_timeout(Duration::from_millis(2_500))
        .retry(
            Retry::within(Duration::from_secs(5))
                .delay(Duration::from_millis(20))
                .jitter(Duration::from_millis(30)),
        )
        .key_prefix("locks:")
        .fencing(false)
        .quarantine(false)
        .max_ttl(Duration::from_secs(120))
        .validate()
        .unwrap();
    assert_eq!(settings(&config), settings(&expected));
    assert_eq!(config.key_prefix(), "locks:");
    assert!(!config.fencing());
    assert!(!config.quarantine());
    assert_eq!(config.max_ttl(), Duration::from_secs(120));
    assert!(!config.decoder_warning());

    let attempts: RedLockBuilder =
        serde_json::from_str(r#"{"nodes": ["redis://a"], "retry": {"attempts": 7}}"#).unwrap();
    assert_eq!(attempts.validate().unwrap().retry(), Retry::attempts(7));
}

#[test]
fn absent_fields_keep_the_defaults() {
    let config = toml_builder(r#"nodes = ["redis://10.0.0.1"]"#)
        .unwrap()
        .validate()
        .unwrap();
    let defaults = RedLock::builder()
        .node("redis://10.0.0.1")
        .validate()
        .unwrap();
    assert_eq!(settings(&config), settings(&defaults));
    assert_eq!(config.max_ttl(), defaults.max_ttl());
    assert_eq!(config.fencing(), defaults.fencing());
    assert_eq!(config.quarantine(), defaults.quarantine());
    assert!(config.decoder_warning());
}

#[test]
fn tls_files_reach_the_builder() {
    let text = r#"
        nodes = ["rediss://10.0.0.1"]
        [tls]
        ca_file = "/nonexistent/ca.pem"
    "#;
    match toml_builder(text).unwrap().validate() {
        Err(ConfigError::TlsFile { path, .. }) => {
            assert_eq!(path, PathBuf::from("/nonexistent/ca.pem"))
        }
        other => panic!("{other:?}"),
    }
    let text = r#"
        nodes = ["rediss://10.0.0.1"]
        tls = { cert_file = "/nonexistent/client.pem" }
    "#;
    assert!(matches!(
        toml_builder(text).unwrap().validate(),
        Err(ConfigError::InvalidTls(_))
    ));
}

#[test]
fn a_file_round_trips() {
    let file: ConfigFile = toml::from_str(FULL).unwrap();
    let tls = r#"{"tls": {"ca_file": "/etc/ca.pem", "cert_file": "/etc/c.pem", "key_file": "/etc/k.pem"}}"#;
    let with_tls: ConfigFile = serde_json::from_str(tls).unwrap();
    for file in [file, with_tls, ConfigFile::default()] {
        let json = serde_json::to_string(&file).unwrap();
        assert_eq!(serde_json::from_str::<ConfigFile>(&json).unwrap(), file);
        let toml = toml::to_string(&file).unwrap();
        assert_eq!(toml::from_str::<ConfigFile>(&toml).unwrap(), file, "{toml}");
    }
    // Durations are written as humantime strings.
    let file: ConfigFile = toml::from_str(FULL).unwrap();
    let json = serde_json::to_value(&file).unwrap();
    assert_eq!(json["connect_timeout"], "2s 500ms");
    assert_eq!(json["retry"]["delay"], "20ms");
}

#[test]
fn bad_durations_are_refused_with_the_value_shown() {
    for (text, shown) in [
        (r#"ttl = "10 parsecs""#, "10 parsecs"),
        (r#"ttl = "10""#, "`10`"),
        (r#"retry = { delay = "soon" }"#, "soon"),
    ] {
        let e = toml_builder(text).unwrap_err().to_string();
        assert!(e.contains("invalid duration") && e.contains(shown), "{e}");
    }
    // A number is not a duration: its unit would be a guess.
    let e = toml_builder("node_timeout = 50").unwrap_err().to_string();
    assert!(e.contains("node_timeout") || e.contains("string"), "{e}");
    let e = serde_json::from_str::<RedLockBuilder>(r#"{"ttl": 10}"#)
        .unwrap_err()
        .to_string();
    assert!(e.contains("invalid type"), "{e}");
}

#[test]
fn unknown_fields_are_refused() {
    for text in [
        r#"ttl_ms = "10s""#,
        r#"retry = { attemps = 3 }"#,
        r#"tls = { ca = "/etc/ca.pem" }"#,
    ] {
        let e = toml_builder(text).unwrap_err().to_string();
        assert!(e.contains("unknown field"), "{text}: {e}");
    }
    let e = serde_json::from_str::<ConfigFile>(r#"{"nodez": []}"#)
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown field `nodez`"), "{e}");
}

#[test]
fn values_are_checked_by_build_with_the_builders_errors() {
    let checked = |text: &str| toml_builder(text).unwrap().validate().unwrap_err();
    assert_eq!(checked(r#"ttl = "1s""#), ConfigError::NoNodes);
    let nodes = r#"nodes = ["redis://10.0.0.1"]"#;
    assert_eq!(
        checked(&format!("{nodes}\nttl = \"0s\"")),
        ConfigError::ZeroTtl
    );
    assert_eq!(
        checked(&format!("{nodes}\ndrift_factor = 1.5")),
        ConfigError::InvalidDriftFactor(1.5)
    );
    assert_eq!(
        checked(&format!("{nodes}\nnode_timeout = \"0s\"")),
        ConfigError::ZeroTimeout("node timeout")
    );
    assert!(matches!(
        checked(&format!("{nodes}\nttl = \"1m\"\nmax_ttl = \"10s\"")),
        ConfigError::TtlAboveMax { .. }
    ));
    assert!(matches!(
        checked(&format!("{nodes}\nretry = {{ attempts = 0 }}")),
        ConfigError::InvalidRetry(_)
    ));
    assert!(matches!(
        checked(r#"nodes = ["redis://10.0.0.1", "redis://10.0.0.1:6379"]"#),
        ConfigError::DuplicateNode { .. }
    ));
    // Attempts and a deadline together: refused when the file is turned into a builder.
    let both: ConfigFile = toml::from_str("retry = { attempts = 3, within = \"5s\" }").unwrap();
    assert!(matches!(
        RedLockBuilder::try_from(both),
        Err(ConfigError::InvalidRetry(_))
    ));
    let e = toml_builder("retry = { attempts = 3, within = \"5s\" }")
        .unwrap_err()
        .to_string();
    assert!(e.contains("not both"), "{e}");
}

#[test]
fn passwords_never_show() {
    let file: ConfigFile = toml::from_str(FULL).unwrap();
    assert!(!format!("{file:?}").contains("S3CRET"), "{file:?}");
    let builder = toml_builder(FULL).unwrap();
    assert!(!format!("{builder:?}").contains("S3CRET"), "{builder:?}");
    // A bad URL's error, and a URL put in a duration's place.
    let e = toml_builder(r#"nodes = ["redis://:S3CRET@10.0.0.1:99999"]"#)
        .unwrap()
        .validate()
        .unwrap_err();
    assert!(!e.to_string().contains("S3CRET"), "{e}");
    // (serde_json: the toml crate quotes the offending line of the file in its errors.)
    let e = serde_json::from_str::<RedLockBuilder>(r#"{"ttl": "redis://:S3CRET@10.0.0.1"}"#)
        .unwrap_err();
    assert!(e.to_string().contains("invalid duration"), "{e}");
    assert!(!e.to_string().contains("S3CRET"), "{e}");
}

/// The README's example is a file section a service reads.
#[test]
fn the_readme_example_reads() {
    let readme = include_str!("../README.md");
    let start = readme
        .find("```toml\n[lock]")
        .expect("the README's TOML example")
        + "```toml\n".len();
    let end = start + readme[start..].find("```").expect("its end");
    #[derive(serde::Deserialize)]
    struct Service {
        lock: RedLockBuilder,
    }
    let service: Service = toml::from_str(&readme[start..end]).unwrap();
    let config = service.lock.validate().unwrap();
    assert_eq!(config.nodes().len(), 3);
    assert_eq!(config.ttl(), Duration::from_secs(30));
}

// The README's Rust example, verbatim (the README marks it `ignore`: this compiles it).
#[derive(serde::Deserialize)]
struct ServiceConfig {
    lock: quorumlock::RedLockBuilder,
    // ... the service's other settings
}

fn redlock_from(path: &str) -> Result<quorumlock::RedLock, Box<dyn std::error::Error>> {
    let config: ServiceConfig = toml::from_str(&std::fs::read_to_string(path)?)?;
    Ok(config.lock.build()?)
}

/// The README's Rust example is the code above, and it builds a client from the README's
/// TOML example.
#[tokio::test]
async fn the_readme_rust_example_builds_a_client() {
    let readme = include_str!("../README.md");
    let this = include_str!("config_file.rs");
    let code = |text: &'static str| {
        let start = text
            .find("#[derive(serde::Deserialize)]\nstruct ServiceConfig")
            .expect("the example");
        let end = start + text[start..].find("\n}\n\nfn ").expect("the struct's end");
        let end = end + text[end..].find("\n}\n").expect("the function's end") + 3;
        &text[start..end]
    };
    assert_eq!(
        code(readme),
        code(this),
        "README.md and tests/config_file.rs differ"
    );
    let start = readme.find("```toml\n[lock]").expect("the TOML example") + "```toml\n".len();
    let end = start + readme[start..].find("```").expect("its end");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("service.toml");
    std::fs::write(&path, &readme[start..end]).unwrap();
    let redlock = redlock_from(path.to_str().unwrap()).unwrap();
    assert_eq!(redlock.nodes(), 3);
}
