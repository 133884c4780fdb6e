//! A storage service that refuses writes from a holder whose lock has expired, by fencing
//! token. Run with `cargo run --example fenced_storage` (starts its own three Redis servers).
//!
//! Client A takes the lock and then "pauses" (a GC pause, a stopped VM) past its validity.
//! Client B takes the lock meanwhile and writes. When A wakes up and writes, it still believes
//! it holds the lock, but the store has seen a larger token and refuses the write. Without the
//! token check, A's late write would overwrite B's.

use std::sync::Mutex;
use std::time::Duration;

use quorumlock::testkit::{LocalQuorum, NodeOptions};
use quorumlock::{RedLock, Retry};

/// The protected resource: a document store that remembers the largest fencing token it has
/// accepted and refuses a write carrying a smaller one (an equal token is the same holder
/// writing again).
#[derive(Default)]
struct Store {
    inner: Mutex<Option<(u64, String)>>,
}

#[derive(Debug)]
struct Stale {
    token: u64,
    newest: u64,
}

impl std::fmt::Display for Stale {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "stale fencing token {} < {}", self.token, self.newest)
    }
}

impl std::error::Error for Stale {}

impl Store {
    fn write(&self, token: u64, text: &str) -> Result<(), Stale> {
        let mut doc = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        match &*doc {
            Some((newest, _)) if token < *newest => Err(Stale {
                token,
                newest: *newest,
            }),
            _ => {
                *doc = Some((token, text.to_string()));
                Ok(())
            }
        }
    }

    fn read(&self) -> Option<(u64, String)> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Nodes that persist every write: clients do not quarantine them when they are young.
    let quorum = LocalQuorum::start_with(3, NodeOptions::persistent()).await?;
    let client = || {
        RedLock::builder()
            .nodes(quorum.urls())
            .retry(Retry::within(Duration::from_secs(2)))
            .build()
    };
    let (a, b) = (client()?, client()?);
    a.wait_for_nodes(Duration::from_secs(5)).await;
    b.wait_for_nodes(Duration::from_secs(5)).await;
    let store = Store::default();

    let ttl = Duration::from_millis(500);
    let lock_a = a.lock_with("doc:7", ttl, Retry::none()).await?;
    // Asked for before the first write; the first call records it on a majority of nodes.
    let token_a = lock_a.fencing_token().await?;
    println!(
        "A holds doc:7 with fencing token {token_a}, checks that its lock is valid ({}), \
         and pauses right before writing",
        lock_a.is_valid()
    );
    // A's pause falls between its check and its write: no check can close that gap.
    let paused = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(800)).await;
        lock_a
    });

    // B gets the lock once A's keys have expired, and writes.
    let lock_b = b
        .lock_with("doc:7", ttl, Retry::within(Duration::from_secs(2)))
        .await?;
    let token_b = lock_b.fencing_token().await?;
    println!("B holds doc:7 with fencing token {token_b} and writes");
    store.write(token_b, "written by B")?;
    lock_b.release().await?;

    // A wakes up and writes with its old token: refused by the store. (Had A asked for its
    // token only now, it would have been refused one: its lock's validity has run out.)
    let lock_a = paused.await?;
    if let Err(e) = lock_a.fencing_token().await {
        println!("A asks for its token again: {e}");
    }
    println!("A wakes up and writes with token {token_a}");
    match store.write(token_a, "written by A, too late") {
        Err(Stale { token, newest }) => {
            println!("store refused A's write: token {token} < newest {newest}")
        }
        Ok(()) => return Err("the store accepted a stale write".into()),
    }
    // The end of the process: nothing either client holds outlives it. (A's lock has
    // expired: its release, a compare-and-delete, leaves anyone else's key alone.)
    drop(lock_a);
    a.shutdown().await;
    b.shutdown().await;
    let (token, text) = store.read().ok_or("nothing written")?;
    println!("document: {text:?} (token {token})");
    assert_eq!(text, "written by B");
    Ok(())
}
