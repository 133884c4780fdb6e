//! Nodes the application brings: its own fred clients (shared), or fred configurations.

mod common;

use std::time::Duration;

use common::{builder, holders};
use quorumlock::fred::prelude::*;
use quorumlock::fred::types::{CustomCommand, RespVersion};
use quorumlock::testkit::{LocalQuorum, NodeOptions, Reply};
use quorumlock::{ConfigError, Error, RedLock, RedLockBuilder, Retry};

/// The application's clients, one per node, as an application makes them.
fn app_clients(q: &LocalQuorum, version: RespVersion) -> Vec<Client> {
    q.urls()
        .iter()
        .map(|url| {
            let mut config = Config::from_url(url).expect("a valid URL");
            config.version = version.clone();
            Builder::from_config(config)
                .set_policy(ReconnectPolicy::new_exponential(0, 50, 2_000, 2))
                .build()
                .expect("a client")
        })
        .collect()
}

async fn init(clients: &[Client]) {
    for client in clients {
        client.init().await.expect("connected");
    }
}

fn shared(clients: &[Client]) -> RedLockBuilder {
    clients
        .iter()
        .fold(RedLock::builder(), |b, client| {
            b.fred_client(client.clone())
        })
        .retry(Retry::none())
        .node_timeout(Duration::from_millis(250))
        .max_ttl(Duration::from_secs(60))
        .quarantine(false)
}

/// How many connections the node has, asked through the application's client.
async fn connections(client: &Client) -> u64 {
    let info: String = client
        .custom(
            CustomCommand::new_static("INFO", None, false),
            vec!["clients"],
        )
        .await
        .expect("INFO clients");
    info.lines()
        .find_map(|line| line.strip_prefix("connected_clients:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("connected_clients")
}

async fn locks_through_the_applications_clients(version: RespVersion) {
    let q = LocalQuorum::start(3).await.unwrap();
    let clients = app_clients(&q, version);
    init(&clients).await;
    let before = connections(&clients[0]).await;
    let redlock = common::connected(shared(&clients)).await;
    assert_eq!(redlock.connected_nodes(), 3);

    let lock = redlock.try_lock("job").await.unwrap();
    assert!(lock.acquired_on() >= 2);
    common::eventually("every node has the key", || async {
        holders(&q, "job").await == 3
    })
    .await;
    // No connection of quorumlock's own: the lock went through the application's.
    assert_eq!(connections(&clients[0]).await, before);
    // The application keeps using its clients while the lock is held.
    for client in &clients {
        let _: Value = client
            .set("app:key", "app", None, None, false)
            .await
            .unwrap();
    }
    // Another client, by URL, is excluded: the lock is a real one.
    let other = common::client(&q).await;
    assert!(matches!(
        other.try_lock("job").await,
        Err(Error::Taken { .. })
    ));

    // A waiter on the same clients gets the lock once it is released: its release message
    // comes through quorumlock's own subscriber, made from the clients' configuration.
    let waiter = shared(&clients)
        .retry(Retry::within(Duration::from_secs(20)).delay(Duration::from_secs(5)))
        .build()
        .unwrap();
    waiter.wait_for_nodes(Duration::from_secs(5)).await;
    let waiting = tokio::spawn(async move {
        let lock = waiter.lock("job").await;
        (waiter, lock)
    });
    common::armed(&q, "job").await;
    lock.release().await.unwrap();
    let (waiter, second) = waiting.await.unwrap();
    second.unwrap().release().await.unwrap();

    // Dropping both RedLocks leaves the application's clients connected and working.
    drop(redlock);
    drop(waiter);
    for client in &clients {
        assert!(client.is_connected());
        let value: Option<String> = client.get("app:key").await.unwrap();
        assert_eq!(value.as_deref(), Some("app"));
    }
    for client in &clients {
        client.quit().await.unwrap();
    }
}

#[tokio::test]
async fn locks_work_through_the_applications_resp2_clients_which_stay_its_own() {
    locks_through_the_applications_clients(RespVersion::RESP2).await;
}

#[tokio::test]
async fn locks_work_through_the_applications_resp3_clients_which_stay_its_own() {
    locks_through_the_applications_clients(RespVersion::RESP3).await;
}

#[tokio::test]
async fn a_client_counts_once_the_application_connects_it() {
    let q = LocalQuorum::start(3).await.unwrap();
    let clients = app_clients(&q, RespVersion::RESP2);
    let redlock = shared(&clients).build().unwrap();
    // quorumlock does not connect the application's clients.
    assert_eq!(redlock.wait_for_nodes(Duration::from_millis(300)).await, 0);
    assert!(clients.iter().all(|c| !c.is_connected()));
    assert!(matches!(
        redlock.try_lock("job").await,
        Err(Error::NoQuorum { .. })
    ));
    init(&clients).await;
    assert_eq!(redlock.wait_for_nodes(Duration::from_secs(5)).await, 3);
    redlock
        .try_lock("job")
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

#[tokio::test]
async fn a_shared_client_never_re_sends_the_locks_commands_after_a_reconnect() {
    let mut q = LocalQuorum::start_with(3, NodeOptions::volatile())
        .await
        .unwrap();
    // The application's clients have fred's defaults: no command timeout, and commands in
    // flight re-sent after a reconnect (up to three attempts).
    let clients = app_clients(&q, RespVersion::RESP2);
    init(&clients).await;
    let redlock = common::connected(shared(&clients)).await;
    q.node_mut(2).freeze().unwrap();
    // Granted by the two others; node 2's acquisition stays in flight (a hung node would
    // otherwise hang the call: the node timeout is on every command).
    let lock = tokio::time::timeout(Duration::from_secs(30), redlock.try_lock("job"))
        .await
        .expect("decided without the frozen node")
        .unwrap();
    let token = lock.token().as_str().to_string();
    // Kept, so that no release follows the acquisition on node 2.
    std::mem::forget(lock);
    // Node 2 comes back empty; the application's client reconnects by its own policy.
    q.node_mut(2).restart().await.unwrap();
    common::eventually("the application's client is connected again", || async {
        clients[2].ping::<String>(None).await.is_ok()
    })
    .await;
    // A command re-sent after the reconnect would have run before this GET.
    let key: Option<String> = clients[2].get("job").await.unwrap();
    assert_eq!(key, None, "the acquisition was re-sent: token {token}");
}

#[tokio::test]
async fn nodes_from_fred_configurations_lock() {
    let q = LocalQuorum::start(3).await.unwrap();
    let b = q.urls().iter().fold(RedLock::builder(), |b, url| {
        b.fred_config(Config::from_url(url).unwrap())
    });
    let redlock = common::connected(b.quarantine(false)).await;
    assert_eq!(redlock.connected_nodes(), 3);
    let lock = redlock.try_lock("job").await.unwrap();
    let other = common::client(&q).await;
    assert!(matches!(
        other.try_lock("job").await,
        Err(Error::Taken { .. })
    ));
    lock.release().await.unwrap();
}

#[tokio::test]
async fn unsuitable_clients_and_configurations_are_refused() {
    let q = LocalQuorum::start(3).await.unwrap();
    let urls = q.urls();

    // No reconnect policy: one dropped connection would fail the node for good.
    let bare = Builder::from_config(Config::from_url(&urls[0]).unwrap())
        .build()
        .unwrap();
    let e = RedLock::builder().fred_client(bare).build().unwrap_err();
    assert!(
        matches!(e, ConfigError::UnsuitableNode { index: 0, .. }),
        "{e:?}"
    );

    // A cluster is not independent masters.
    let cluster = Config::from_url(&urls[0].replace("redis://", "redis-cluster://")).unwrap();
    let e = RedLock::builder().fred_config(cluster).build().unwrap_err();
    assert!(
        matches!(e, ConfigError::UnsuitableNode { index: 0, .. }),
        "{e:?}"
    );

    // A client for a server already given by URL is refused before anything is sent.
    let twin = app_clients(&q, RespVersion::RESP2).remove(1);
    let e = builder(&q).fred_client(twin).build().unwrap_err();
    assert!(
        matches!(
            e,
            ConfigError::DuplicateNode {
                first: 1,
                second: 3,
                ..
            }
        ),
        "{e:?}"
    );
}

#[tokio::test]
async fn no_password_of_a_fred_configuration_is_shown() {
    let config = Config::from_url("redis://app:S3CRET@127.0.0.1:7001").unwrap();
    let b = RedLock::builder()
        .fred_config(config.clone())
        .fred_config(config);
    assert!(!format!("{b:?}").contains("S3CRET"), "{b:?}");
    let e = b.build().unwrap_err();
    assert!(matches!(e, ConfigError::DuplicateNode { .. }), "{e:?}");
    assert!(!e.to_string().contains("S3CRET"), "{e}");
    assert!(!format!("{e:?}").contains("S3CRET"), "{e:?}");
    // Nor does a client built from it (the node is down: it connects in the background).
    let down = Config::from_url("redis://app:S3CRET@127.0.0.1:1").unwrap();
    let redlock = RedLock::builder().fred_config(down).build().unwrap();
    assert!(!format!("{redlock:?}").contains("S3CRET"), "{redlock:?}");
}

/// The scripts too (ACQUIRE once a token was asked for; every release) carry the node timeout
/// and are never re-sent after a reconnect, whatever the application's client does with its
/// own commands: a script re-sent on a new connection would run before that connection is
/// checked, and after the caller gave up.
#[tokio::test]
async fn a_shared_client_never_re_sends_the_locks_scripts_after_a_reconnect() {
    let q = LocalQuorum::start(3).await.unwrap();
    let clients = app_clients(&q, RespVersion::RESP2);
    init(&clients).await;
    let redlock = common::connected(shared(&clients)).await;
    // Once a token of its locks was asked for, the client acquires with the ACQUIRE script.
    let warm = redlock.try_lock("warm").await.unwrap();
    warm.fencing_token().await.unwrap();
    warm.release().await.unwrap();
    assert!(redlock.settle(Duration::from_secs(5)).await, "settled");
    let id: i64 = clients[2]
        .custom(CustomCommand::new_static("CLIENT", None, false), vec!["ID"])
        .await
        .unwrap();
    // Node 2 holds every write, scripts included, for 3 s; other commands still run.
    let paused = q
        .node(2)
        .command(&["CLIENT", "PAUSE", "3000", "WRITE"])
        .await;
    assert_eq!(paused.unwrap(), Reply::Status("OK".into()));
    let lock = tokio::time::timeout(Duration::from_secs(30), redlock.try_lock("job"))
        .await
        .expect("decided without node 2")
        .unwrap();
    let token = lock.token().as_str().to_string();
    // Kept, so that no release follows the acquisition on node 2.
    std::mem::forget(lock);
    let id = id.to_string();
    common::eventually("node 2 holds the acquisition", || async {
        let list = q.node(2).command(&["CLIENT", "LIST", "ID", &id]).await;
        matches!(list, Ok(Reply::Bulk(Some(text)))
            if String::from_utf8_lossy(&text).contains("cmd=evalsha"))
    })
    .await;
    // Its connection is cut while the script waits there; the application's client
    // reconnects by its own policy.
    let killed = q.node(2).command(&["CLIENT", "KILL", "ID", &id]).await;
    assert_eq!(killed.unwrap(), Reply::Integer(1));
    common::eventually("the application's client is connected again", || async {
        clients[2].ping::<String>(None).await.is_ok()
    })
    .await;
    // A write waits for the pause to end, behind any script re-sent after the reconnect.
    let probe = q.node(2).command(&["SET", "probe", "1"]).await;
    assert_eq!(probe.unwrap(), Reply::Status("OK".into()));
    let key: Option<String> = clients[2].get("job").await.unwrap();
    assert_eq!(key, None, "the acquisition was re-sent: token {token}");
}
