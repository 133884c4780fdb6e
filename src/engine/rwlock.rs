//! Read-write locks (design 2.9: many readers or one writer, writers first, a refused
//! writer's intent keeping new readers out). A side is a [`Held`] whose claim is `r:token` or
//! `w:token` in the lock's sorted set, run through the lock's rounds with the semaphores'
//! scripts; it is taken by the semaphores' claim kind ([`Seat`]) with the RW_ACQUIRE script,
//! in the lock's loop (`Acquiring`), and a writer's intent is dropped when its call ends
//! ([`Intent`]).

use std::sync::Arc;
use std::time::Duration;

use fred::types::{Key, Value};

use crate::config::{Config, Retry};
use crate::engine::acquire::{self, Acquiring, Resources};
use crate::engine::coordinator::Coordinator;
use crate::engine::held::{Held, Token};
use crate::engine::machinery::Machinery;
use crate::engine::semaphore::{Ask, Seat};
use crate::error::{ConfigError, Error};
use crate::node::Primitive;

/// A read-write lock's name and keys, checked once.
#[derive(Debug, Clone)]
pub(crate) struct RwSpec {
    /// The lock's name, and its key, then (with fencing) its fencing counter.
    target: Resources,
}

impl RwSpec {
    pub(crate) fn name(&self) -> &str {
        &self.target.name
    }

    /// The lock's key on the nodes.
    pub(crate) fn key(&self) -> &str {
        self.target.keys.all[0].as_str().unwrap_or_default()
    }
}

/// What a waiter for either side of a read-write lock carries in its client's line: never
/// handed a lock's or a semaphore's release (`0` is no semaphore's number of permits).
const READ_WRITE: Option<u32> = Some(0);

/// Drops a writer's intent on every node when its call ends, granted, refused or cancelled
/// (unless disarmed: it recorded none).
///
/// A writer that ends without the write side (it gave up, or was cancelled) announces the
/// drop as a release is announced (PERMIT_RELEASE of the member `i:waiter`, on the lock's
/// release channel): readers of other clients that only the intent kept out are waiting for
/// a release, and attempt at once instead of after their pause. A writer granted drops it
/// silently: readers wait for its release.
struct Intent {
    client: Arc<Machinery>,
    keys: Vec<Key>,
    waiter: Value,
    armed: bool,
    /// Whether the writer got the write side.
    granted: bool,
}

impl Drop for Intent {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if self.granted {
            let args = vec![self.waiter.clone(), Value::from("")];
            self.client.fanout.detached(u64::MAX, |node| {
                node.discard(Primitive::Permit, self.keys.clone(), args.clone())
            });
        } else {
            let waiter = self.waiter.as_str().unwrap_or_default();
            let intent = Value::from(format!("i:{waiter}"));
            self.client
                .fanout
                .release_detached(Primitive::Permit, self.keys.clone(), intent);
        }
    }
}

impl RwSpec {
    /// Checks a read-write lock's name, before anything is sent.
    pub(crate) fn new(config: &Config, name: &str) -> Result<RwSpec, ConfigError> {
        Ok(RwSpec {
            target: Resources::new(config, &[name])?,
        })
    }

    /// Takes the read side (`reader`) or the write side for `ttl` through `client`,
    /// retrying as `retry` says and waiting in line for a release as a lock does.
    pub(crate) async fn acquire(
        &self,
        client: &Coordinator,
        reader: bool,
        ttl: Duration,
        retry: Retry,
    ) -> Result<Held, Error> {
        client.machinery().held.refuse()?;
        let ttl = client.config().check_ttl(ttl)?;
        retry.validate()?;
        let mut retry = retry;
        let mut intent = None;
        if !reader {
            // Each attempt renews the intent, which lives one ttl.
            retry.delay = retry.delay.min(ttl.ttl / 3);
            retry.jitter = retry.jitter.min(ttl.ttl / 6);
            intent = Some(Intent {
                client: Arc::clone(client.machinery()),
                keys: self.target.keys.locks().to_vec(),
                waiter: Value::from(Token::generate()?.as_str()),
                armed: true,
                granted: false,
            });
        }
        let waiter = intent
            .as_ref()
            .map_or_else(|| Value::from(""), |i| i.waiter.clone());
        let key = self.key().to_string();
        let mut attempts = 0u32;
        let machinery = client.machinery();
        let held = Acquiring::new(machinery)
            .run(self.name(), (Some(key), READ_WRITE), ttl, retry, || {
                attempts += 1;
                let waiter = waiter.clone();
                let seat = Seat::new(Ask::Side { reader, waiter });
                acquire::attempt(machinery, &self.target, ttl, seat)
            })
            .await;
        // A writer granted at its first attempt, with no node heard refusing it, recorded
        // no intent on the nodes heard: nothing to drop (an uncontended writer then costs
        // no more scripts than a reader). A node not heard from that refused it keeps the
        // intent until it expires, which delays readers there, never wrongly admits one.
        let refused = |held: &Held| {
            held.failures()
                .iter()
                .any(|f| f.kind == crate::NodeErrorKind::Refused)
        };
        if let (Ok(held), Some(mut dropped)) = (&held, intent.take()) {
            dropped.granted = true;
            if attempts == 1 && !refused(held) {
                dropped.armed = false;
            }
        }
        held
    }
}
