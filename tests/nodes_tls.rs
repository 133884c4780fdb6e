//! TLS and authentication against real servers: `rediss://` nodes with a private CA and
//! client certificates, mixed with plain ones; and connection failures (an untrusted
//! certificate, a missing client certificate, a wrong password) reported as what they are,
//! not as timeouts.

mod common;

use std::time::Duration;

use common::holders;
use common::tls::{tls_nodes, Pki, TlsNode};
use quorumlock::{Error, NodeError, NodeErrorKind, RedLock, RedLockBuilder};

/// A builder for `urls` with test-friendly settings (see `common::builder`).
fn builder(urls: Vec<String>) -> RedLockBuilder {
    common::builder_for(urls)
}

fn urls(nodes: &[TlsNode]) -> Vec<String> {
    nodes.iter().map(|n| n.url("")).collect()
}

/// The failures of an attempt that cannot reach a quorum, once every node's connection has
/// failed at least once (the first attempt may start before that).
async fn connection_failures(redlock: &RedLock) -> Vec<NodeError> {
    for _ in 0..20 {
        match redlock.try_lock("r").await {
            Err(Error::NoQuorum { failures, .. })
                if failures.iter().all(|f| f.kind != NodeErrorKind::Timeout) =>
            {
                return failures
            }
            Err(Error::NoQuorum { .. }) => continue,
            other => panic!("{other:?}"),
        }
    }
    match redlock.try_lock("r").await {
        Err(Error::NoQuorum { failures, .. }) => failures,
        other => panic!("{other:?}"),
    }
}

/// Checks that every failure is of `kind`, with a message that contains `says` and is no
/// `Debug` dump.
#[track_caller]
fn all_failed_with(failures: &[NodeError], nodes: usize, kind: NodeErrorKind, says: &str) {
    assert!(
        failures.len() > nodes / 2,
        "a majority failed: {failures:?}"
    );
    for f in failures {
        assert_eq!(f.kind, kind, "{f}");
        assert!(f.message.contains(says), "{f}");
        assert!(
            !f.message.contains("Custom {") && !f.message.contains("kind:"),
            "{f}"
        );
    }
}

#[tokio::test]
async fn an_untrusted_server_certificate_is_a_tls_error_not_a_timeout() {
    let pki = Pki::new();
    let nodes = tls_nodes(&pki, 3, false, None).await;
    // The servers' CA is in no system store.
    let redlock = builder(urls(&nodes)).build().unwrap();
    let failures = connection_failures(&redlock).await;
    all_failed_with(
        &failures,
        3,
        NodeErrorKind::Tls,
        "not signed by a trusted CA",
    );
}

#[tokio::test]
async fn a_wrong_password_is_an_auth_error_that_does_not_show_it() {
    let pki = Pki::new();
    let nodes = tls_nodes(&pki, 3, false, Some("right-pw")).await;
    let urls = nodes
        .iter()
        .map(|n| format!("redis://:S3CRET@127.0.0.1:{}", n.quorum.node(0).port()))
        .collect();
    let redlock = builder(urls).build().unwrap();
    let failures = connection_failures(&redlock).await;
    all_failed_with(&failures, 3, NodeErrorKind::Auth, "WRONGPASS");
    for f in &failures {
        assert!(!f.to_string().contains("S3CRET"), "{f}");
    }
}

/// Locks and releases on `redlock`, checking the keys on the servers' plain ports.
async fn lock_and_release(redlock: &RedLock, nodes: &[TlsNode]) {
    redlock.wait_for_nodes(Duration::from_secs(5)).await;
    let lock = redlock.try_lock("over-tls").await.unwrap();
    // Decided at the quorum; the last node's answer follows.
    for n in nodes {
        common::eventually("every node holds the key", || async {
            holders(&n.quorum, "over-tls").await == 1
        })
        .await;
    }
    lock.release().await.unwrap();
    for n in nodes {
        common::no_holders(&n.quorum, "over-tls").await;
    }
}

#[tokio::test]
async fn locks_and_releases_on_tls_nodes_with_a_private_ca() {
    let pki = Pki::new();
    let nodes = tls_nodes(&pki, 3, false, Some("tls-pw")).await;
    let urls = nodes.iter().map(|n| n.url(":tls-pw")).collect();
    let redlock = builder(urls).tls_ca_file(pki.ca()).build().unwrap();
    lock_and_release(&redlock, &nodes).await;
}

#[tokio::test]
async fn a_quorum_may_mix_tls_and_plain_nodes() {
    let pki = Pki::new();
    let nodes = tls_nodes(&pki, 3, false, None).await;
    let urls = vec![nodes[0].url(""), nodes[1].plain_url(), nodes[2].url("")];
    let redlock = builder(urls).tls_ca_file(pki.ca()).build().unwrap();
    lock_and_release(&redlock, &nodes).await;
}

#[tokio::test]
async fn a_server_that_requires_a_client_certificate_gets_one_or_refuses() {
    let pki = Pki::new();
    let nodes = tls_nodes(&pki, 3, true, None).await;
    let without = builder(urls(&nodes)).tls_ca_file(pki.ca()).build().unwrap();
    let failures = connection_failures(&without).await;
    all_failed_with(
        &failures,
        3,
        NodeErrorKind::Tls,
        "requires a client certificate",
    );

    let with = builder(urls(&nodes))
        .tls_ca_file(pki.ca())
        .tls_client_cert(pki.client_cert(), pki.client_key())
        .build()
        .unwrap();
    lock_and_release(&with, &nodes).await;
}

#[tokio::test]
async fn a_certificate_from_another_ca_is_a_tls_error() {
    let pki = Pki::new();
    let nodes = tls_nodes(&pki, 3, false, None).await;
    let redlock = builder(urls(&nodes))
        .tls_ca_file(pki.other_ca())
        .build()
        .unwrap();
    let failures = connection_failures(&redlock).await;
    all_failed_with(
        &failures,
        3,
        NodeErrorKind::Tls,
        "not signed by a trusted CA",
    );
    // A plain client on a TLS port is no TLS error, and no hang either.
    let plain = nodes
        .iter()
        .map(|n| format!("redis://127.0.0.1:{}", n.tls_port))
        .collect();
    let redlock = builder(plain).build().unwrap();
    assert!(matches!(
        redlock.try_lock("r").await,
        Err(Error::NoQuorum { .. })
    ));
}

#[tokio::test]
async fn the_inspection_reports_a_tls_failure_as_such() {
    let pki = Pki::new();
    let nodes = tls_nodes(&pki, 1, true, None).await;
    let reports = builder(urls(&nodes))
        .tls_ca_file(pki.ca())
        .connect_timeout(Duration::from_millis(500))
        .inspect(Duration::from_millis(10))
        .await
        .unwrap();
    let report = &reports[0];
    assert!(!report.reachable);
    assert_eq!(report.error_kind, Some(NodeErrorKind::Tls), "{report:?}");
    let error = report.error.as_deref().unwrap_or_default();
    assert!(
        error.contains("TLS error: the server requires a client certificate"),
        "{error}"
    );
}
