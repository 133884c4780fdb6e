//! Hostile nodes: peers that are not Redis, or Redis servers that cannot take part, among
//! the five nodes of a quorum. With one or two of them, locks are still granted (in bounded
//! time: an outer timeout catches a hang) and released with nothing left behind; with three,
//! every attempt ends in a typed error and leaves nothing behind. No kind may abort the
//! process (the nested reply did, by overflowing the stack of the decoding task).
//!
//! Design section 6.3 says what the client does with each kind.

mod common;

use std::fmt;
use std::time::Duration;

use common::HANG;
use quorumlock::testkit::LocalQuorum;
use quorumlock::{Error, NodeErrorKind, RedLock, RedLockBuilder, Retry};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How a hostile node behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Accepts connections and never answers.
    Silent,
    /// Answers bytes that are not RESP.
    Garbage,
    /// Answers an array nested 5,000 levels deep (20 KB).
    Nested,
    /// Answers like a web server, then closes.
    Http,
    /// Nothing listens on the port.
    Closed,
    /// A real Redis server out of memory (`maxmemory 1`): every write fails.
    OutOfMemory,
    /// A real Redis server that is a replica (read-only).
    Replica,
    /// Answers `+OK` to everything, whatever was asked.
    Liar,
}

const KINDS: [Kind; 8] = [
    Kind::Silent,
    Kind::Garbage,
    Kind::Nested,
    Kind::Http,
    Kind::Closed,
    Kind::OutOfMemory,
    Kind::Replica,
    Kind::Liar,
];

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// A fake peer on a loopback port: its URL. It serves until the test's runtime ends.
async fn fake_peer(kind: Kind) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("redis://{}", listener.local_addr().expect("local addr"));
    if kind == Kind::Closed {
        // The port was free a moment ago, and nothing listens on it now.
        drop(listener);
        return url;
    }
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            tokio::spawn(serve(kind, socket));
        }
    });
    url
}

async fn serve(kind: Kind, mut socket: TcpStream) {
    let nested = b"*1\r\n".repeat(5_000);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match socket.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let reply: &[u8] = match kind {
            Kind::Silent => continue,
            Kind::Garbage => b"\x00\xffnot resp at all\r\n:x\r\n",
            Kind::Nested => &nested,
            Kind::Http => {
                let _ = socket
                    .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
                    .await;
                return;
            }
            Kind::Liar => b"+OK\r\n",
            Kind::Closed | Kind::OutOfMemory | Kind::Replica => unreachable!("not a fake"),
        };
        if socket.write_all(reply).await.is_err() {
            return;
        }
    }
}

/// Five nodes of which the last `hostile` behave as `kind`; the others are healthy.
async fn quorum_with(kind: Kind, hostile: usize) -> (LocalQuorum, Vec<String>) {
    let q = LocalQuorum::start(5)
        .await
        .expect("five redis-server processes");
    let mut urls = q.urls();
    for (i, url) in urls.iter_mut().enumerate().skip(5 - hostile) {
        match kind {
            Kind::OutOfMemory => {
                let ok = q
                    .node(i)
                    .command(&["CONFIG", "SET", "maxmemory", "1"])
                    .await;
                assert_eq!(ok.expect("CONFIG SET").as_str(), Some("OK"));
            }
            Kind::Replica => {
                // A replica of a master that is not there: read-only, and says so.
                let ok = q.node(i).command(&["REPLICAOF", "127.0.0.1", "1"]).await;
                assert_eq!(ok.expect("REPLICAOF").as_str(), Some("OK"));
            }
            _ => *url = fake_peer(kind).await,
        }
    }
    (q, urls)
}

fn client(urls: Vec<String>, retry: Retry) -> RedLock {
    builder(urls, retry).build().expect("valid configuration")
}

fn builder(urls: Vec<String>, retry: Retry) -> RedLockBuilder {
    common::builder_for(urls).retry(retry)
}

/// How many of the healthy nodes (the first `healthy`) hold any key.
async fn keys_left(q: &LocalQuorum, healthy: usize) -> usize {
    let mut n = 0;
    for node in &q.nodes()[..healthy] {
        let reply = node.command(&["DBSIZE"]).await.expect("DBSIZE");
        let keys = reply.as_int().expect("an integer");
        // Fencing counters and the node's marker and largest counter (design 2.6a) have no
        // expiry and are meant to stay; lock keys are not.
        let fences = node
            .command(&[
                "EVAL",
                "return #redis.call('keys', 'quorumlock:fence:*') \
                 + redis.call('exists', 'quorumlock:node', 'quorumlock:hwm')",
                "0",
            ])
            .await
            .expect("EVAL")
            .as_int()
            .expect("an integer");
        n += usize::from(keys > fences);
    }
    n
}

async fn granted_with(kind: Kind, hostile: usize) {
    let (q, urls) = quorum_with(kind, hostile).await;
    // Retries until the healthy nodes have connected and been checked.
    let redlock = client(urls, Retry::within(Duration::from_secs(20)));
    let resource = format!("hostile-{kind}-{hostile}");
    let lock = tokio::time::timeout(HANG, redlock.lock(&resource))
        .await
        .unwrap_or_else(|_| panic!("{kind} x{hostile}: lock() hung"))
        .unwrap_or_else(|e| panic!("{kind} x{hostile}: lock refused: {e}"));
    assert!(lock.acquired_on() >= 3, "{kind} x{hostile}");
    tokio::time::timeout(HANG, lock.release())
        .await
        .unwrap_or_else(|_| panic!("{kind} x{hostile}: release() hung"))
        .unwrap_or_else(|e| panic!("{kind} x{hostile}: release failed: {e}"));
    assert!(
        redlock.settle(HANG).await,
        "{kind} x{hostile}: releases unsettled"
    );
    common::eventually(&format!("{kind} x{hostile}: no key left"), || async {
        keys_left(&q, 5 - hostile).await == 0
    })
    .await;
}

async fn refused_with(kind: Kind) {
    let (q, urls) = quorum_with(kind, 3).await;
    let redlock = client(urls, Retry::attempts(2));
    redlock.wait_for_nodes(Duration::from_secs(1)).await;
    let resource = format!("hostile-{kind}-3");
    let e = tokio::time::timeout(HANG, redlock.lock(&resource))
        .await
        .unwrap_or_else(|_| panic!("{kind} x3: lock() hung"))
        .expect_err("no quorum without three healthy nodes");
    assert!(matches!(e, Error::NoQuorum { .. }), "{kind} x3: {e}");
    assert!(redlock.settle(HANG).await, "{kind} x3: releases unsettled");
    common::eventually(&format!("{kind} x3: no key left"), || async {
        keys_left(&q, 2).await == 0
    })
    .await;
}

/// The reply that aborted the process: decoding it overflowed the stack.
#[tokio::test]
async fn a_deeply_nested_reply_is_a_failed_node_not_an_abort() {
    granted_with(Kind::Nested, 1).await;
}

#[tokio::test]
async fn one_hostile_node_of_five_costs_nothing_but_its_vote() {
    for kind in KINDS {
        granted_with(kind, 1).await;
    }
}

#[tokio::test]
async fn two_hostile_nodes_of_five_cost_nothing_but_their_votes() {
    for kind in KINDS {
        granted_with(kind, 2).await;
    }
}

#[tokio::test]
async fn three_hostile_nodes_of_five_are_a_typed_error_and_leave_nothing() {
    for kind in KINDS {
        refused_with(kind).await;
    }
}

/// A node that answers `+OK` to everything would vote yes to a bare `SET NX` (the answer of
/// a key set): the connection check, whose `INFO` it does not answer with `INFO` output, is
/// what keeps its votes from counting. Without it, three such nodes of five grant a lock.
#[tokio::test]
async fn nodes_that_answer_ok_to_everything_never_vote_for_a_bare_set_nx() {
    let (q, urls) = quorum_with(Kind::Liar, 3).await;
    let redlock = builder(urls, Retry::attempts(2))
        .fencing(false)
        .build()
        .expect("valid configuration");
    redlock.wait_for_nodes(Duration::from_secs(1)).await;
    let e = tokio::time::timeout(HANG, redlock.lock("liars"))
        .await
        .expect("lock() hung")
        .expect_err("no quorum without three Redis servers");
    match e {
        // Only the two Redis servers may have said yes. (A liar's failure is a protocol
        // error, or a timeout when it answered fewer replies than it was sent commands.)
        Error::NoQuorum {
            agreed, failures, ..
        } => {
            assert!(agreed <= 2, "{agreed} yes: {failures:?}");
            assert!(
                failures.iter().filter(|f| f.index >= 2).all(|f| matches!(
                    f.kind,
                    NodeErrorKind::Protocol | NodeErrorKind::Timeout | NodeErrorKind::Unchecked
                )),
                "{failures:?}"
            );
        }
        other => panic!("{other}"),
    }
    assert!(redlock.settle(HANG).await, "releases unsettled");
    common::eventually("no key left", || async { keys_left(&q, 2).await == 0 }).await;
}

/// An out-of-memory server refuses every write with an error reply: a failure of kind
/// `Server`, carrying the server's own words.
#[tokio::test]
async fn an_out_of_memory_node_fails_with_a_server_error() {
    let (_q, urls) = quorum_with(Kind::OutOfMemory, 3).await;
    let redlock = builder(urls, Retry::none()).fencing(false).build().unwrap();
    assert_eq!(redlock.wait_for_nodes(HANG).await, 5);
    let e = tokio::time::timeout(HANG, redlock.lock("oom"))
        .await
        .expect("lock() hung")
        .expect_err("no quorum with three nodes out of memory");
    let Error::NoQuorum { failures, .. } = &e else {
        panic!("{e:?}")
    };
    let mut kinds: Vec<_> = failures.iter().map(|f| (f.index, f.kind)).collect();
    kinds.sort_by_key(|(index, _)| *index);
    assert_eq!(
        kinds,
        [2, 3, 4].map(|i| (i, NodeErrorKind::Server)),
        "{failures:?}"
    );
    assert!(
        failures.iter().all(|f| f.message.contains("OOM")),
        "{failures:?}"
    );
}
