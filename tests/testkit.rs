//! Integration tests for the `testkit` fixture against real `redis-server` processes.

use std::io::ErrorKind;
use std::net::TcpStream;
use std::time::Duration;

use quorumlock::testkit::{LocalQuorum, NodeOptions, NodeState, Reply, TestkitError};
use quorumlock::RedLock;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const BOUND: Duration = Duration::from_secs(5);

fn ok() -> Reply {
    Reply::Status("OK".into())
}

fn bulk(s: &str) -> Reply {
    Reply::Bulk(Some(s.as_bytes().to_vec()))
}

fn assert_refused(port: u16) {
    match TcpStream::connect(("127.0.0.1", port)) {
        Ok(_) => panic!("port {port} still accepts connections"),
        Err(e) => assert_eq!(e.kind(), ErrorKind::ConnectionRefused, "port {port}: {e}"),
    }
}

/// A client with the library's defaults (quarantine on) counts the fixture's default nodes
/// as soon as they start, and locks at once: they persist every write, so they are not
/// quarantined for being young.
#[tokio::test]
async fn a_default_client_locks_on_default_nodes_at_once() {
    let quorum = LocalQuorum::start(3).await.unwrap();
    let redlock = RedLock::builder().nodes(quorum.urls()).build().unwrap();
    let counted = redlock.wait_for_quorum(Duration::from_secs(10)).await;
    assert!(counted >= redlock.quorum(), "{counted} nodes count");
    let lock = redlock.lock("fresh-nodes").await.unwrap();
    lock.release().await.unwrap();
}

#[tokio::test]
async fn three_nodes_answer_ping() -> Result<(), TestkitError> {
    let quorum = LocalQuorum::start(3).await?;
    assert_eq!(quorum.len(), 3);
    assert!(!quorum.is_empty());
    let mut ports: Vec<u16> = quorum.nodes().iter().map(|n| n.port()).collect();
    ports.sort_unstable();
    ports.dedup();
    assert_eq!(ports.len(), 3, "ports must be distinct");
    for (node, url) in quorum.nodes().iter().zip(quorum.urls()) {
        assert_eq!(url, format!("redis://127.0.0.1:{}", node.port()));
        assert_eq!(
            node.addr().to_string(),
            format!("127.0.0.1:{}", node.port())
        );
        assert_eq!(node.state(), NodeState::Running);
        assert_eq!(node.command(&["PING"]).await?, Reply::Status("PONG".into()));
    }
    Ok(())
}

#[tokio::test]
async fn set_get_round_trip() -> Result<(), TestkitError> {
    let quorum = LocalQuorum::start_with(1, NodeOptions::volatile()).await?;
    let node = quorum.node(0);
    assert_eq!(
        node.command(&["SET", "greeting", "hello world"]).await?,
        ok()
    );
    let got = node.command(&["GET", "greeting"]).await?;
    assert_eq!(got, bulk("hello world"));
    assert_eq!(got.as_str(), Some("hello world"));
    assert!(node.command(&["GET", "missing"]).await?.is_nil());
    assert_eq!(node.command(&["INCR", "n"]).await?.as_int(), Some(1));
    let mget = node.command(&["MGET", "greeting", "missing"]).await?;
    assert_eq!(
        mget,
        Reply::Array(Some(vec![bulk("hello world"), Reply::Bulk(None)]))
    );
    assert!(matches!(node.command(&["NOSUCHCMD"]).await?, Reply::Error(e) if e.starts_with("ERR")));
    // Persistence::None really disables snapshots and AOF.
    let save = node.command(&["CONFIG", "GET", "save"]).await?;
    assert_eq!(save, Reply::Array(Some(vec![bulk("save"), bulk("")])));
    Ok(())
}

#[tokio::test]
async fn freeze_blocks_replies_and_resume_releases_them() -> Result<(), TestkitError> {
    let mut quorum = LocalQuorum::start(1).await?;
    quorum.node_mut(0).freeze()?;
    assert_eq!(quorum.node(0).state(), NodeState::Frozen);
    let frozen = tokio::time::timeout(
        Duration::from_millis(200),
        quorum.node(0).command(&["PING"]),
    )
    .await;
    assert!(frozen.is_err(), "a frozen server answered: {frozen:?}");
    quorum.node_mut(0).resume()?;
    assert_eq!(quorum.node(0).state(), NodeState::Running);
    let answer = tokio::time::timeout(BOUND, quorum.node(0).command(&["PING"])).await;
    assert!(
        matches!(answer, Ok(Ok(Reply::Status(ref s))) if s == "PONG"),
        "{answer:?}"
    );
    Ok(())
}

#[tokio::test]
async fn kill_refuses_connections_and_restart_loses_data_without_persistence(
) -> Result<(), TestkitError> {
    let mut quorum = LocalQuorum::start_with(2, NodeOptions::volatile()).await?;
    let node = quorum.node_mut(1);
    let port = node.port();
    assert_eq!(node.command(&["SET", "k", "v"]).await?, ok());
    node.kill().await?;
    assert_eq!(node.state(), NodeState::Killed);
    assert_eq!(node.pid(), None);
    let err = node.command(&["PING"]).await.err();
    assert!(
        err.as_ref()
            .is_some_and(TestkitError::is_connection_refused),
        "{err:?}"
    );
    assert!(matches!(
        node.freeze(),
        Err(TestkitError::NodeKilled { .. })
    ));
    node.kill().await?; // idempotent

    node.restart().await?;
    assert_eq!(node.port(), port);
    assert_eq!(node.state(), NodeState::Running);
    assert!(node.command(&["GET", "k"]).await?.is_nil());
    // The other node was untouched.
    assert_eq!(
        quorum.node(0).command(&["PING"]).await?,
        Reply::Status("PONG".into())
    );
    Ok(())
}

#[tokio::test]
async fn restart_of_a_frozen_node_works() -> Result<(), TestkitError> {
    let mut quorum = LocalQuorum::start(1).await?;
    let node = quorum.node_mut(0);
    let old_pid = node.pid();
    node.freeze()?;
    node.restart().await?;
    assert_ne!(node.pid(), old_pid);
    assert_eq!(node.command(&["PING"]).await?, Reply::Status("PONG".into()));
    Ok(())
}

/// The default nodes persist every write (`appendfsync always`), as production nodes should.
#[tokio::test]
async fn default_nodes_keep_every_write_across_kill_and_restart() -> Result<(), TestkitError> {
    let mut quorum = LocalQuorum::start(1).await?;
    let node = quorum.node_mut(0);
    assert_eq!(node.command(&["SET", "durable", "yes"]).await?, ok());
    node.kill().await?;
    node.restart().await?;
    assert_eq!(node.command(&["GET", "durable"]).await?, bulk("yes"));
    let fsync = node.command(&["CONFIG", "GET", "appendfsync"]).await?;
    assert_eq!(
        fsync,
        Reply::Array(Some(vec![bulk("appendfsync"), bulk("always")]))
    );
    Ok(())
}

#[tokio::test]
async fn requirepass_is_enforced_and_handled_by_command() -> Result<(), TestkitError> {
    let opts = NodeOptions {
        requirepass: Some("s3cret/pw".into()),
        ..NodeOptions::default()
    };
    let quorum = LocalQuorum::start_with(2, opts).await?;
    for (i, url) in quorum.urls_with_password().iter().enumerate() {
        let port = quorum.node(i).port();
        assert_eq!(url, &format!("redis://:s3cret%2Fpw@127.0.0.1:{port}"));
        assert_eq!(quorum.urls()[i], format!("redis://127.0.0.1:{port}"));
    }
    let node = quorum.node(0);
    assert_eq!(node.command(&["PING"]).await?, Reply::Status("PONG".into()));

    // Without AUTH the server refuses to work.
    let mut raw = tokio::net::TcpStream::connect(node.addr()).await?;
    raw.write_all(b"*1\r\n$4\r\nPING\r\n").await?;
    let mut buf = [0u8; 64];
    let n = raw.read(&mut buf).await?;
    let text = String::from_utf8_lossy(&buf[..n]);
    assert!(text.starts_with("-NOAUTH"), "{text}");
    Ok(())
}

#[tokio::test]
async fn drop_kills_running_and_frozen_processes() -> Result<(), TestkitError> {
    let mut quorum = LocalQuorum::start(2).await?;
    quorum.node_mut(0).freeze()?;
    let ports: Vec<u16> = quorum.nodes().iter().map(|n| n.port()).collect();
    let pids: Vec<u32> = quorum.nodes().iter().filter_map(|n| n.pid()).collect();
    let dir = quorum.node(0).data_dir().to_path_buf();
    assert_eq!(pids.len(), 2);
    drop(quorum);
    for port in ports {
        assert_refused(port);
    }
    for pid in pids {
        // Reaped: not even a zombie is left.
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "pid {pid} not reaped"
        );
    }
    assert!(!dir.exists(), "temporary directory not removed");
    Ok(())
}

#[tokio::test]
async fn drop_during_panic_unwind_kills_processes() {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let quorum = LocalQuorum::start(2).await.expect("start quorum");
        let ports: Vec<u16> = quorum.nodes().iter().map(|n| n.port()).collect();
        tx.send(ports).expect("send ports");
        panic!("simulated test failure while the quorum is alive");
    });
    let joined = task.await;
    assert!(joined.is_err_and(|e| e.is_panic()));
    let ports = rx.await.expect("ports were sent before the panic");
    for port in ports {
        assert_refused(port);
    }
}

#[tokio::test]
async fn bad_extra_args_report_not_ready_with_the_log() {
    let opts = NodeOptions {
        extra_args: vec!["--no-such-directive".into(), "x".into()],
        ..NodeOptions::default()
    };
    match LocalQuorum::start_with(2, opts).await {
        Err(TestkitError::NotReady {
            reason, log_tail, ..
        }) => {
            assert!(reason.contains("exited early"), "{reason}");
            assert!(log_tail.contains("Bad directive"), "{log_tail}");
        }
        other => panic!("expected NotReady, got {other:?}"),
    }
}

#[tokio::test]
async fn restart_reports_a_taken_port_and_recovers_once_it_is_free() -> Result<(), TestkitError> {
    let mut quorum = LocalQuorum::start(1).await?;
    let node = quorum.node_mut(0);
    node.kill().await?;
    let squatter = std::net::TcpListener::bind(node.addr())?;
    match node.restart().await {
        Err(TestkitError::NotReady { port, log_tail, .. }) => {
            assert_eq!(port, node.port());
            assert!(log_tail.contains("Address already in use"), "{log_tail}");
        }
        other => panic!("expected NotReady, got {other:?}"),
    }
    assert_eq!(node.state(), NodeState::Killed);
    drop(squatter);
    node.restart().await?;
    assert_eq!(node.command(&["PING"]).await?, Reply::Status("PONG".into()));
    Ok(())
}
