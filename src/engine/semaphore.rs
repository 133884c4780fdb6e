//! Semaphores (design 2.9: `N` slots, each held the way a lock is, a permit granted on a slot
//! a majority recorded). A permit is a [`Held`] whose claim is `slot:token` in the
//! semaphore's sorted set, run through the lock's rounds with the semaphore's scripts
//! (`node::Primitive::Permit`); only its acquisition differs: a claim kind of its own
//! ([`Seat`]) in the one attempt of every claim, in the lock's loop (`engine/acquire.rs`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use fred::types::Value;
use futures::future::Either;

use crate::algo::quorum::{Stake, Tally};
use crate::algo::slots;
use crate::config::{Config, Retry, Ttl};
use crate::engine::acquire::{self, Acquiring, ClaimKind, Grant, Heard, Resources};
use crate::engine::coordinator::Coordinator;
use crate::engine::fanout::Round;
use crate::engine::held::{Fencing, Held, Member, PermitSlot, Token};
use crate::engine::machinery::Machinery;
use crate::error::{ConfigError, Error, MAX_PERMITS};
use crate::node::{Node, Primitive, SlotAnswer};

/// A semaphore's name, number of permits and keys, checked once.
#[derive(Debug, Clone)]
pub(crate) struct SemaphoreSpec {
    /// The semaphore's name, and its key, then (with fencing) its fencing counter.
    target: Resources,
    permits: u32,
}

impl SemaphoreSpec {
    pub(crate) fn name(&self) -> &str {
        &self.target.name
    }

    pub(crate) fn permits(&self) -> u32 {
        self.permits
    }

    /// The semaphore's key on the nodes (the resource name, after the key prefix).
    pub(crate) fn key(&self) -> &str {
        self.target.keys.all[0].as_str().unwrap_or_default()
    }
}

/// What a claim in a sorted set asks each node for.
#[derive(Debug, Clone)]
pub(crate) enum Ask {
    /// A permit of a semaphore of `permits`, the free slot first in `order`
    /// (`algo::slots::preference`).
    Permit { permits: u32, order: (u32, u32) },
    /// A read-write lock's read side (`reader`) or write side, a writer recording the
    /// intent `waiter` where it is refused.
    Side { reader: bool, waiter: Value },
}

/// A claim in a sorted set (a permit, or a read-write lock's side): every node records a
/// claim for the attempt's token (a slot, answered); granted on a slot that a majority
/// recorded, as the claim `slot:token` (`r:token`, `w:token`). The claims of a failed
/// attempt, and those of a granted one on other slots, are discarded silently.
#[derive(Debug)]
pub(crate) struct Seat {
    ask: Ask,
    /// Tells the nodes that answer after the round was decided which slot was granted
    /// (their answers are not counted): one that recorded another slot drops that claim.
    granted_slot: Option<watch::Sender<Option<Option<u32>>>>,
    /// The slot most nodes recorded, and by how many.
    best: Option<(u32, usize)>,
    /// What DISCARD gets to drop every claim of the attempt's token.
    discard_all: Vec<Value>,
}

impl Seat {
    pub(crate) fn new(ask: Ask) -> Seat {
        Seat {
            ask,
            granted_slot: None,
            best: None,
            discard_all: Vec::new(),
        }
    }
}

impl ClaimKind for Seat {
    type Answer = SlotAnswer;

    fn primitive(&self) -> Primitive {
        Primitive::Permit
    }

    fn noun(&self) -> Option<&'static str> {
        Some("permit")
    }

    fn discard(&self, value: &Value) -> Option<Vec<Value>> {
        Some(vec![value.clone(), Value::from("")])
    }

    async fn send(
        &mut self,
        client: &Machinery,
        target: &Resources,
        token: &Token,
        ttl: Ttl,
    ) -> Round<SlotAnswer> {
        let value = Value::from(token.as_str());
        let locks = target.keys.locks();
        self.discard_all = vec![value.clone(), Value::from("")];
        let discard_all = &self.discard_all;
        let key = &locks[0];
        let (granted_slot, verdict_rx) = watch::channel(None::<Option<u32>>);
        self.granted_slot = Some(granted_slot);
        let decided = Arc::new(AtomicBool::new(false));
        // Decided on one slot, not on a majority of yes: nodes that recorded different slots
        // do not end the round while those still to answer could make one slot a majority.
        let decide = |tally: &Tally, answers: &[(usize, SlotAnswer)]| {
            slots::decision(tally, recorded(answers))
        };
        let ask = &self.ask;
        let send = |node: &Node| match ask {
            Ask::Permit { permits, order } => Either::Left(node.acquire_permit(
                key.clone(),
                value.clone(),
                ttl.px,
                *permits,
                *order,
            )),
            Ask::Side { reader, waiter } => Either::Right(node.acquire_rw(
                key.clone(),
                value.clone(),
                ttl.px,
                *reader,
                (waiter.clone(), ttl.px),
            )),
        };
        client
            .fanout
            .round_deciding(
                Some(&decided),
                Stake::Taking,
                |node| {
                    let answer = send(node);
                    let (decided, mut verdict) = (Arc::clone(&decided), verdict_rx.clone());
                    // The node records at most one claim per attempt: dropping every claim of
                    // the token there drops the one on the wrong slot. Sent only if awaited.
                    let discard =
                        node.discard(Primitive::Permit, locks.to_vec(), discard_all.clone());
                    async move {
                        let answer = answer.await;
                        if let (Ok(SlotAnswer::Granted(recorded, _)), true) =
                            (&answer, decided.load(Ordering::SeqCst))
                        {
                            let granted = match verdict.wait_for(Option::is_some).await {
                                Ok(granted) => granted.flatten(),
                                Err(_) => None,
                            };
                            if granted.is_some_and(|slot| slot != *recorded) {
                                let _ = discard.await;
                            }
                        }
                        answer
                    }
                },
                decide,
            )
            .await
    }

    fn read(&mut self, target: &Resources, round: &Round<SlotAnswer>) -> Heard {
        // Another kind at the key is a kind mismatch only on more nodes than a majority may
        // do without; on fewer, those nodes refused, and the others may grant the claim.
        let found = slots::kind_in_the_way(
            &round.tally,
            round.answers.iter().filter_map(|(_, a)| match a {
                SlotAnswer::Other(found) => Some(*found),
                _ => None,
            }),
        );
        self.best = slots::most_recorded(recorded(&round.answers));
        Heard {
            // Judged on the nodes that recorded the slot most did: with none, no majority.
            tally: slots::narrowed(&round.tally, self.best.map_or(0, |(_, n)| n)),
            refusal: found.map(|found| Error::KindMismatch {
                resource: target.name.clone(),
                found,
            }),
        }
    }

    fn granted(
        &mut self,
        client: &Machinery,
        target: &Resources,
        round: &Round<SlotAnswer>,
    ) -> Grant {
        // Granted on a majority, so some slot was recorded by one.
        let slot = self.best.map_or(0, |(slot, _)| slot);
        // Nodes heard from that recorded another slot drop that claim; those heard later do
        // so themselves (above).
        if let Some(granted_slot) = &self.granted_slot {
            granted_slot.send_replace(Some(Some(slot)));
        }
        let elsewhere = round
            .answers
            .iter()
            .filter(|(_, a)| matches!(a, SlotAnswer::Granted(s, _) if *s != slot))
            .fold(0u64, |mask, (i, _)| mask | 1 << i);
        let (locks, discard_all) = (target.keys.locks(), &self.discard_all);
        client.fanout.detached(elsewhere, |node| {
            node.discard(Primitive::Permit, locks.to_vec(), discard_all.clone())
        });
        let quorum = slots::narrowed(&round.tally, self.best.map_or(0, |(_, n)| n)).quorum();
        Grant {
            fencing: client.config.fencing.then(|| Fencing::new(None, None)),
            member: Some(match self.ask {
                Ask::Permit { permits, .. } => Member::Permit(PermitSlot { slot, permits }),
                Ask::Side { reader: true, .. } => Member::Reader,
                Ask::Side { reader: false, .. } => Member::Writer,
            }),
            handovers: 0,
            room: round
                .answers
                .iter()
                .filter(|(_, a)| *a == SlotAnswer::Granted(slot, true))
                .count()
                >= quorum,
        }
    }

    fn refused(&mut self, _round: &Round<SlotAnswer>) {
        if let Some(granted_slot) = &self.granted_slot {
            granted_slot.send_replace(Some(None));
        }
    }
}

impl SemaphoreSpec {
    /// Checks a semaphore's name and number of permits, before anything is sent.
    pub(crate) fn new(config: &Config, name: &str, permits: u32) -> Result<Self, ConfigError> {
        if permits == 0 || permits > MAX_PERMITS {
            return Err(ConfigError::InvalidPermits { permits });
        }
        Ok(SemaphoreSpec {
            target: Resources::new(config, &[name])?,
            permits,
        })
    }

    /// Takes a permit for `ttl` through `client`, retrying as `retry` says and waiting in
    /// line for a release as a lock does.
    pub(crate) async fn acquire(
        &self,
        client: &Coordinator,
        ttl: Duration,
        retry: Retry,
    ) -> Result<Held, Error> {
        let client = client.machinery();
        client.held.refuse()?;
        let ttl = client.config.check_ttl(ttl)?;
        retry.validate()?;
        let key = self.key().to_string();
        let permits = self.permits;
        Acquiring::new(client)
            .run(self.name(), (Some(key), Some(permits)), ttl, retry, || {
                let order = slots::preference(permits, rand::random(), rand::random());
                let seat = Seat::new(Ask::Permit { permits, order });
                acquire::attempt(client, &self.target, ttl, seat)
            })
            .await
    }
}

/// The slot recorded by each node that recorded one, among a round's answers.
fn recorded(answers: &[(usize, SlotAnswer)]) -> impl Iterator<Item = u32> + '_ {
    answers.iter().filter_map(|(_, a)| match a {
        SlotAnswer::Granted(slot, _) => Some(*slot),
        _ => None,
    })
}
