//! Leader election on a kept lock (design 2.8): [`Leading::campaign`] waits for the lock of
//! an election, keeps it, takes a fencing token as the term, and writes the leader's
//! identity beside the lock; `engine/observe.rs` reads who leads.

use std::future::Future;
use std::time::Duration;

use fred::types::{Key, Value};
use futures::future::{FutureExt, RemoteHandle};

use crate::algo::keys;
use crate::algo::quorum::Stake;
use crate::config::Candidacy;
use crate::config::Retry;
use crate::engine::coordinator::Coordinator;
use crate::engine::held::{self, Released};
use crate::engine::kept::{Kept, KeptHandle};
use crate::error::{ConfigError, Error};
use crate::node::scripts::IDENTIFY;

#[derive(Debug)]
pub(crate) struct Leading {
    pub(crate) kept: Kept,
    pub(crate) term: u64,
    pub(crate) identity: String,
    /// Rewrites the identity record while the lock is kept; dropped, it ends the task that
    /// does.
    refresher: RemoteHandle<()>,
}

impl Leading {
    pub(crate) async fn resign(self) -> Result<Released, Error> {
        drop(self.refresher);
        self.kept.release().await
    }

    pub(crate) async fn run<F, Fut, T>(self, work: F) -> Result<T, Error>
    where
        F: FnOnce(KeptHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        // The identity is refreshed while `work` runs: `self.refresher` is dropped after it.
        self.kept.run(work).await
    }
}

/// The keys of an election: its lock key and identity key.
pub(crate) fn election_keys(client: &Coordinator, name: &str) -> (Key, Key) {
    let lock = keys::lock_key(&client.config().key_prefix, name);
    let identity = keys::identity_key(&lock);
    (Key::from(lock), Key::from(identity))
}

/// The identity record: `TERM:SHA1(token):IDENTITY`.
fn record(term: u64, token: &str, identity: &str) -> String {
    format!("{term}:{}:{identity}", fred::util::sha1_hash(token))
}

/// A record's term, token hash and identity, if it has that shape.
pub(crate) fn parse_record(record: &str) -> Option<(u64, &str, &str)> {
    let mut parts = record.splitn(3, ':');
    let term = parts.next()?.parse().ok()?;
    let sha = parts.next()?;
    let identity = parts.next()?;
    Some((term, sha, identity))
}

impl Leading {
    /// Campaigns through `client` until it leads the election `name`, as `candidacy` says.
    pub(crate) async fn campaign(
        client: &Coordinator,
        name: &str,
        candidacy: Candidacy,
    ) -> Result<Leading, Error> {
        if !client.config().fencing {
            return Err(ConfigError::FencingOff.into());
        }
        let identity = candidacy.identity_or_default()?;
        let ttl = client.config().ttl;
        candidacy.keep.check(ttl)?;
        // A day per call; the loop below makes it forever.
        let retry = Retry::within(Duration::from_secs(86_400))
            .delay(candidacy.retry_delay)
            .jitter(candidacy.retry_jitter);
        let (lock_key, identity_key) = election_keys(client, name);
        loop {
            let lock = match client.lock_all_with(&[name], ttl, retry).await {
                Ok(lock) => lock,
                Err(e) if e.is_retryable() => continue,
                Err(e) => return Err(e),
            };
            let kept = lock.keep_alive(candidacy.keep)?;
            let term = match kept.fencing_token().await {
                Ok(term) => term,
                Err(e) => {
                    tracing::debug!(election = name, error = %e, "no term recorded; campaigning again");
                    let _ = kept.release().await;
                    tokio::time::sleep(candidacy.retry_delay).await;
                    continue;
                }
            };
            let record = record(term, kept.handle().token().as_str(), &identity);
            let token = kept.handle().token().as_str().to_string();
            if let Err(e) = identify(client, &lock_key, &identity_key, &token, &record).await {
                tracing::debug!(election = name, error = %e, "identity not recorded; campaigning again");
                let _ = kept.release().await;
                tokio::time::sleep(candidacy.retry_delay).await;
                continue;
            }
            if !kept.is_held() {
                continue;
            }
            tracing::debug!(election = name, term, %identity, "leading");
            let keys = (lock_key, identity_key);
            let (refresh, refresher) =
                refresh(client.clone(), kept.handle(), keys, token, record).remote_handle();
            tokio::spawn(refresh);
            return Ok(Leading {
                kept,
                term,
                identity,
                refresher,
            });
        }
    }
}

/// Writes the identity record on a majority of the nodes that hold our lock.
async fn identify(
    client: &Coordinator,
    lock_key: &Key,
    identity_key: &Key,
    token: &str,
    record: &str,
) -> Result<(), Error> {
    let ttl_ms = i64::try_from(client.config().ttl.as_millis()).unwrap_or(i64::MAX);
    let keys = vec![lock_key.clone(), identity_key.clone()];
    let args = vec![
        Value::from(token),
        Value::from(record),
        Value::Integer(ttl_ms),
    ];
    let round = client
        .machinery()
        .fanout
        .round_marking(None, Stake::Held, |node| {
            node.eval(&IDENTIFY, keys.clone(), args.clone(), |reply| match reply {
                Value::Integer(n) => Ok(n == 1),
                other => Err(crate::node::unexpected("IDENTIFY", &other)),
            })
        })
        .await;
    let resource = lock_key.as_str().unwrap_or("");
    held::confirmed(resource, round.tally, round.failures).map(drop)
}

/// Rewrites the identity record every third of the ttl while the lock is kept, so that it
/// lives as long as the lock (which the keeper extends) and comes back on a node that
/// restarted empty. Failures are logged: the record only informs observers.
async fn refresh(
    client: Coordinator,
    handle: KeptHandle,
    keys: (Key, Key),
    token: String,
    record: String,
) {
    let every = client.config().ttl / 3;
    let lost = handle.lost();
    tokio::pin!(lost);
    loop {
        tokio::select! {
            _ = &mut lost => return,
            () = tokio::time::sleep(every) => {}
        }
        if let Err(e) = identify(&client, &keys.0, &keys.1, &token, &record).await {
            tracing::debug!(election = %handle.resource(), error = %e, "identity not refreshed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_whatever_the_identity_holds() {
        let r = record(42, "abc", "host:a:b");
        let (term, sha, identity) = parse_record(&r).expect("parses");
        assert_eq!(term, 42);
        assert_eq!(sha, fred::util::sha1_hash("abc"));
        assert_eq!(identity, "host:a:b");
        assert_eq!(parse_record("x:y:z"), None);
        assert_eq!(parse_record("1:y"), None);
    }
}
