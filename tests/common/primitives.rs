//! Semaphores and read-write locks in tests (tests/semaphore_census.rs, tests/cli_semaphore.rs):
//! permits and sides taken and settled on every node, the census read by a client of its own,
//! and their sorted sets read or written by hand on a node (design 2.9).

use std::collections::BTreeSet;
use std::time::Duration;

use quorumlock::testkit::{LocalNode, LocalQuorum, Reply};
use quorumlock::{Access, Permit, PermitHolder, RedLock, Retry, RwGuard};

use super::{client, keys};

/// How long a client may take to have every node's answer to its last call.
const SETTLE: Duration = Duration::from_secs(5);

/// The SHA1 of a token, 40 lower-case hex digits: how the census and the CLI name holders.
pub fn sha1(token: &str) -> String {
    quorumlock::fred::util::sha1_hash(token)
}

/// The first 12 hex digits of the SHA1 of a token, as `quorumlock status` and `ls` print it.
pub fn sha1_short(token: &str) -> String {
    sha1(token)[..12].to_string()
}

/// A permit of the semaphore `name` of `permits`, taken by `redlock` for `ttl` in one
/// attempt, once every node has answered: a grant waits for a majority only, and a permit
/// asked for next must see this one's claim on every node to record the same slots.
pub async fn settled_permit(redlock: &RedLock, name: &str, permits: u32, ttl: Duration) -> Permit {
    let semaphore = redlock.semaphore(name, permits).expect("a valid semaphore");
    let permit = semaphore
        .acquire_with(ttl, Retry::none())
        .await
        .unwrap_or_else(|e| panic!("a permit of {name}: {e}"));
    assert!(redlock.settle(SETTLE).await, "every node answered");
    permit
}

/// A side of the read-write lock `name`, taken by `redlock` for `ttl` in one attempt, once
/// every node has answered (as [`settled_permit`]).
pub async fn settled_side(redlock: &RedLock, name: &str, access: Access, ttl: Duration) -> RwGuard {
    let rw = redlock.rw_lock(name).expect("a valid read-write lock");
    let guard = rw
        .acquire(access, ttl, Retry::none())
        .await
        .unwrap_or_else(|e| panic!("{access:?} of {name}: {e}"));
    assert!(redlock.settle(SETTLE).await, "every node answered");
    guard
}

/// The holders of the semaphore `name` of `permits`, as a client of its own reads them.
pub async fn census(q: &LocalQuorum, name: &str, permits: u32) -> Vec<PermitHolder> {
    let observer = client(q).await;
    let semaphore = observer
        .semaphore(name, permits)
        .expect("a valid semaphore");
    semaphore
        .holders()
        .await
        .unwrap_or_else(|e| panic!("the holders of {name}: {e}"))
}

/// The node's clock in milliseconds (`TIME`), which the claims expire by.
pub async fn node_ms(node: &LocalNode) -> u64 {
    let Reply::Array(Some(t)) = node.command(&["TIME"]).await.expect("TIME") else {
        panic!("TIME");
    };
    let secs: u64 = t[0].as_str().expect("secs").parse().expect("secs");
    let micros: u64 = t[1].as_str().expect("micros").parse().expect("micros");
    secs * 1000 + micros / 1000
}

/// Records by hand, on `node`, a semaphore of `permits` at `key` with the claim `member`
/// (`slot:token`) expiring `ms` from the node's now (negative: expired).
pub async fn write_claim(node: &LocalNode, key: &str, permits: u32, member: &str, ms: i64) {
    let expiry = node_ms(node).await as i64 + ms;
    let record = format!("-{permits}");
    let reply = node
        .command(&["ZADD", key, &record, "#", &expiry.to_string(), member])
        .await
        .expect("ZADD");
    assert!(reply.as_int().is_some(), "ZADD: {reply:?}");
}

/// The members of the sorted set at `key` on `node`, lowest score first (none if no key).
pub async fn members(node: &LocalNode, key: &str) -> Vec<String> {
    let reply = node.command(&["ZRANGE", key, "0", "-1"]).await;
    let Ok(Reply::Array(Some(members))) = reply else {
        panic!("ZRANGE {key}: {reply:?}");
    };
    members
        .iter()
        .map(|m| m.as_str().expect("a UTF-8 member").to_string())
        .collect()
}

/// The claims `slot:token` of the semaphore at `key` on node `i`, tokens hashed:
/// (slot, SHA1).
pub async fn slot_claims(q: &LocalQuorum, i: usize, key: &str) -> BTreeSet<(u32, String)> {
    members(q.node(i), key)
        .await
        .iter()
        .filter_map(|m| m.split_once(':'))
        .map(|(slot, token)| (slot.parse().expect("a slot"), sha1(token)))
        .collect()
}

/// Every key of every node with its serialized value (`DUMP`, which leaves out the ttl), to
/// show that nothing was written, and nothing left behind.
pub async fn snapshot(q: &LocalQuorum) -> Vec<Vec<(String, Reply)>> {
    let mut nodes = Vec::new();
    for node in q.nodes() {
        let mut dumped = Vec::new();
        for key in keys(node).await {
            let value = node.command(&["DUMP", &key]).await.expect("DUMP");
            dumped.push((key, value));
        }
        nodes.push(dumped);
    }
    nodes
}
