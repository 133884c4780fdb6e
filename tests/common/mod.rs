//! Helpers shared by the integration tests.
#![allow(dead_code, unreachable_pub)]

use std::future::Future;
use std::time::Duration;

use quorumlock::testkit::{LocalNode, LocalQuorum, Reply};
use quorumlock::{RedLock, RedLockBuilder};

/// Running the `quorumlock` binary (built only with the `cli` feature).
#[cfg(feature = "cli")]
pub mod cli;

/// Semaphores and read-write locks: permits and sides taken and settled, the census, their
/// sorted sets on the nodes.
pub mod primitives;

/// Certificates and servers that speak TLS.
#[cfg(feature = "tls")]
pub mod tls;

/// An example's binary (`examples/<name>.rs`), which `cargo test` builds beside the test
/// binaries.
pub fn example(name: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    // target/<profile>/deps/<test> -> target/<profile>/examples/<name>
    let profile = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>");
    let path = profile.join("examples").join(name);
    assert!(
        path.exists(),
        "{} is missing: `cargo test` builds it (cargo build --examples)",
        path.display()
    );
    path
}

/// A builder for `quorum` with test-friendly defaults: one attempt; a generous node timeout
/// so that a loaded CI machine does not turn a healthy node into a failed one; ttls up to a
/// minute; and no quarantine, so that the same tests also run on nodes that keep nothing
/// across a restart (`NodeOptions::volatile()`; tests/nodes_safeguards.rs covers the quarantine).
pub fn builder(quorum: &LocalQuorum) -> RedLockBuilder {
    builder_for(quorum.urls()).max_ttl(Duration::from_secs(60))
}

/// A builder for the nodes at `urls` (ACL users, TLS, servers not of a [`LocalQuorum`]) with
/// [`builder`]'s settings but its longest ttl: one attempt, a 250 ms node timeout, no
/// quarantine.
pub fn builder_for<I, S>(urls: I) -> RedLockBuilder
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    RedLock::builder()
        .nodes(urls)
        .retry(quorumlock::Retry::none())
        .node_timeout(Duration::from_millis(250))
        .quarantine(false)
}

/// A connected client for `quorum`.
pub async fn client(quorum: &LocalQuorum) -> RedLock {
    connected(builder(quorum)).await
}

pub async fn connected(b: RedLockBuilder) -> RedLock {
    let redlock = b.build().expect("valid configuration");
    redlock.wait_for_nodes(Duration::from_secs(5)).await;
    redlock
}

/// The value stored under `key` on `node`, if any.
pub async fn get(node: &LocalNode, key: &str) -> Option<String> {
    match node.command(&["GET", key]).await.expect("GET") {
        Reply::Bulk(Some(v)) => Some(String::from_utf8(v).expect("utf-8 value")),
        Reply::Bulk(None) => None,
        other => panic!("GET {key}: unexpected {other:?}"),
    }
}

/// Every key on `node`, sorted.
pub async fn keys(node: &LocalNode) -> Vec<String> {
    let mut keys: Vec<String> = match node.command(&["KEYS", "*"]).await.expect("KEYS") {
        Reply::Array(Some(keys)) => keys
            .iter()
            .map(|k| k.as_str().expect("a UTF-8 key").to_string())
            .collect(),
        other => panic!("KEYS: unexpected {other:?}"),
    };
    keys.sort();
    keys
}

/// How many nodes of `quorum` that are running hold `key`.
pub async fn holders(quorum: &LocalQuorum, key: &str) -> usize {
    let mut n = 0;
    for node in quorum.nodes() {
        if node.state() == quorumlock::testkit::NodeState::Running && get(node, key).await.is_some()
        {
            n += 1;
        }
    }
    n
}

/// Whether `node`'s server has `command` (`COMMAND INFO`, one element per command: its
/// description, or nil for a command the server lacks).
pub async fn has_command(node: &LocalNode, command: &str) -> bool {
    match node
        .command(&["COMMAND", "INFO", command])
        .await
        .expect("COMMAND INFO")
    {
        Reply::Array(Some(entries)) => matches!(entries.as_slice(), [Reply::Array(Some(_))]),
        other => panic!("COMMAND INFO {command}: {other:?}"),
    }
}

/// How many times `node` has run `command` (from INFO commandstats), to prove that nothing
/// was sent.
pub async fn calls(node: &LocalNode, command: &str) -> u64 {
    let info = match node.command(&["INFO", "commandstats"]).await.expect("INFO") {
        Reply::Bulk(Some(v)) => String::from_utf8(v).expect("utf-8"),
        other => panic!("INFO: {other:?}"),
    };
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .map(|n| n.parse().expect("calls"))
        .unwrap_or(0)
}

/// How many times the nodes of `quorum` have run `command`, all together.
pub async fn calls_on_all(quorum: &LocalQuorum, command: &str) -> u64 {
    let mut n = 0;
    for node in quorum.nodes() {
        n += calls(node, command).await;
    }
    n
}

/// Waits, polling every 10 ms for at most 10 s, until `check` holds. For states that become
/// true on a node some time after an event we cannot observe directly (a resumed server
/// working through its input buffer).
pub async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    for _ in 0..1000 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting until {what}");
}

/// Waits until no running node of `quorum` holds `key`. A failed attempt's or a release's
/// deletes on nodes that had not answered before the outcome was decided run in the
/// background, so this is eventual.
pub async fn no_holders(quorum: &LocalQuorum, key: &str) {
    eventually(&format!("no node holds {key}"), || async {
        holders(quorum, key).await == 0
    })
    .await;
}

/// The key's value on every node of `quorum`, in order (`None` where it is not set).
pub async fn values(quorum: &LocalQuorum, key: &str) -> Vec<Option<String>> {
    let mut values = Vec::new();
    for node in quorum.nodes() {
        values.push(get(node, key).await);
    }
    values
}

/// Bounds a wait that must end (a liveness bound, not a timing assertion).
pub async fn within<T>(what: &str, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(30), f)
        .await
        .unwrap_or_else(|_| panic!("{what} did not happen"))
}

/// A hang detector, not a timing assertion: a call that does not hang ends long before it
/// (within a few node timeouts or retry pauses, or once a release wakes a waiter).
pub const HANG: Duration = Duration::from_secs(60);

/// A pause no test waits out: only a release (or a handover) ends a wait before the
/// [`HANG`] detector.
pub const NEVER: Duration = Duration::from_secs(600);

/// The type of `key` on `node` (`none` when it does not exist).
pub async fn get_type(node: &LocalNode, key: &str) -> String {
    match node.command(&["TYPE", key]).await.expect("TYPE") {
        Reply::Status(t) => t,
        other => panic!("TYPE {key}: unexpected {other:?}"),
    }
}

/// Waits until a client subscribed to the release channel of `key` on every node of `q`: a
/// waiter is armed (design 2.4a), and a release from now on wakes it.
pub async fn armed(q: &LocalQuorum, key: &str) {
    let channel = format!("quorumlock:released:{key}");
    eventually(
        &format!("a waiter subscribed to {channel} on every node"),
        || async {
            let mut subscribed = 0;
            for node in q.nodes() {
                let reply = node.command(&["PUBSUB", "NUMSUB", &channel]).await;
                if let Ok(Reply::Array(Some(parts))) = reply {
                    if parts.get(1) == Some(&Reply::Integer(1)) {
                        subscribed += 1;
                    }
                }
            }
            subscribed == q.len()
        },
    )
    .await;
}
