//! Waiting for a release instead of polling.
//!
//! A release deletes our keys with the RELEASE script, which also publishes, for each key it
//! deleted, a message on the key's release channel (`quorumlock:released:` + the key) whose
//! payload is the SHA1 of the released token (never the token). A client that found a lock
//! taken and may retry *arms* a wait before its next attempt: it subscribes to the channels of
//! the keys it wants on every node (one subscriber connection per node, opened the first time
//! it waits), waits until a majority confirmed the subscription (up to the node timeout), and
//! only then makes the attempt. If that attempt fails, it waits for a release message or its
//! usual jittered pause, whichever comes first, and tries again at once.
//!
//! No wake-up is missed: a release that the holder made on a majority after our subscription
//! was confirmed on a majority publishes on at least one node where we listen; a release made
//! before that was visible to the attempt that followed the subscription. The pause stays as
//! the fallback for what sends no message: a lock that expires, a release by another Redlock
//! client, a message lost with a connection.
//!
//! Within one process, waiters for a key share one subscription, and each release wakes one
//! waiter, the one waiting longest (a [`Notify`] permit, kept if nobody waits at that moment):
//! one release is one new attempt, not one per waiter. The messages of one release from the
//! several nodes that deleted the key wake one waiter in all (they carry the same payload).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures::future::{select_all, FutureExt};
use tokio::sync::Notify;

/// The prefix of the release channels: `quorumlock:released:` + the lock's key.
pub(crate) const CHANNEL_PREFIX: &str = "quorumlock:released:";

/// How many recent releases of a key are remembered to recognise their other messages.
const RECENT: usize = 8;

/// The waiters of one client, by key.
#[derive(Debug, Default)]
pub(crate) struct Wakeups {
    keys: Mutex<HashMap<String, Weak<Entry>>>,
}

/// The waiters for one key.
#[derive(Debug, Default)]
pub(crate) struct Entry {
    notify: Notify,
    /// Payloads of the latest releases seen, to count each release once.
    recent: Mutex<VecDeque<Box<str>>>,
}

impl Entry {
    /// A release with this payload was seen: wakes one waiter, once per release.
    fn released(&self, payload: &str) {
        let Ok(mut recent) = self.recent.lock() else {
            return;
        };
        if recent.iter().any(|p| &**p == payload) {
            return;
        }
        if recent.len() == RECENT {
            recent.pop_front();
        }
        recent.push_back(payload.into());
        drop(recent);
        self.notify.notify_one();
    }
}

impl Wakeups {
    /// The entries of `keys`, created for those that have none; each is kept alive by the
    /// waiters holding it.
    #[cfg(test)]
    fn entries(&self, keys: &[String]) -> Vec<Arc<Entry>> {
        self.arm(keys, |_| {})
    }

    fn entries_in(map: &mut HashMap<String, Weak<Entry>>, keys: &[String]) -> Vec<Arc<Entry>> {
        // Forget the keys nobody waits for any more.
        map.retain(|_, entry| entry.strong_count() > 0);
        keys.iter()
            .map(|key| {
                if let Some(entry) = map.get(key).and_then(Weak::upgrade) {
                    return entry;
                }
                let entry = Arc::<Entry>::default();
                map.insert(key.clone(), Arc::downgrade(&entry));
                entry
            })
            .collect()
    }

    /// The entries of `keys` for a new waiter; `subscribe` is called with the keys while no
    /// other waiter can arm or leave, so that subscriptions and unsubscriptions are ordered
    /// as the waiters came and went.
    pub(crate) fn arm(
        &self,
        keys: &[String],
        subscribe: impl FnOnce(&[String]),
    ) -> Vec<Arc<Entry>> {
        let Ok(mut map) = self.keys.lock() else {
            return keys.iter().map(|_| Arc::default()).collect();
        };
        let entries = Self::entries_in(&mut map, keys);
        subscribe(keys);
        entries
    }

    /// A waiter leaves: `unsubscribe` is called with the keys that nobody waits for any more.
    pub(crate) fn leave(
        &self,
        keys: &[String],
        entries: Vec<Arc<Entry>>,
        unsubscribe: impl FnOnce(Vec<String>),
    ) {
        let Ok(mut map) = self.keys.lock() else {
            return;
        };
        let mut idle = Vec::new();
        for (key, entry) in keys.iter().zip(entries) {
            if Arc::strong_count(&entry) == 1 {
                map.remove(key);
                idle.push(key.clone());
            }
        }
        if !idle.is_empty() {
            unsubscribe(idle);
        }
    }

    /// A release of `key` was seen (a message, or a release made by this client), with the
    /// payload that identifies it.
    pub(crate) fn released(&self, key: &str, payload: &str) {
        let entry = self
            .keys
            .lock()
            .ok()
            .and_then(|map| map.get(key).and_then(Weak::upgrade));
        if let Some(entry) = entry {
            entry.released(payload);
        }
    }

    /// A message on a release channel.
    pub(crate) fn message(&self, channel: &str, payload: &str) {
        if let Some(key) = channel.strip_prefix(CHANNEL_PREFIX) {
            self.released(key, payload);
        }
    }
}

/// Waits for a release of any of `entries`, or for `fallback`; says whether a release woke it.
pub(crate) async fn wait(entries: &[Arc<Entry>], fallback: Duration) -> bool {
    if entries.is_empty() {
        tokio::time::sleep(fallback).await;
        return false;
    }
    let released = select_all(entries.iter().map(|e| e.notify.notified().boxed()));
    tokio::select! {
        _ = released => true,
        () = tokio::time::sleep(fallback) => false,
    }
}

/// The payload of a release message for `token`: its SHA1, as the RELEASE script computes
/// it (`redis.sha1hex`).
pub(crate) fn payload(token: &str) -> String {
    fred::util::sha1_hash(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_release_wakes_one_waiter_once_whatever_the_number_of_messages() {
        let wakeups = Wakeups::default();
        let a = wakeups.entries(&["k".to_string()]);
        let b = wakeups.entries(&["k".to_string()]);
        assert!(Arc::ptr_eq(&a[0], &b[0]), "one entry per key");
        // Five nodes publish the same release, before anyone waits: one permit is kept.
        for _ in 0..5 {
            wakeups.message("quorumlock:released:k", "sha-of-token-1");
        }
        assert!(wait(&a, Duration::from_secs(3600)).await);
        // Nothing more for the second waiter from that release.
        tokio::time::pause();
        assert!(!wait(&b, Duration::from_secs(1)).await);
        // A second release wakes it.
        wakeups.message("quorumlock:released:k", "sha-of-token-2");
        assert!(wait(&b, Duration::from_secs(3600)).await);
    }

    #[tokio::test]
    async fn other_channels_and_keys_wake_nobody() {
        tokio::time::pause();
        let wakeups = Wakeups::default();
        let entries = wakeups.entries(&["k".to_string()]);
        wakeups.message("quorumlock:released:other", "x");
        wakeups.message("elsewhere:k", "x");
        wakeups.released("k2", "x");
        assert!(!wait(&entries, Duration::from_secs(1)).await);
    }

    #[test]
    fn the_payload_is_the_tokens_sha1_not_the_token() {
        let p = payload("secret-token");
        assert_eq!(p.len(), 40);
        assert!(!p.contains("secret"));
    }
}
