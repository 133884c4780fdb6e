//! Semaphores (design 2.9): at most `N` holders of a resource across every client, each
//! holding one of `N` slots the way a lock is held.
//!
//! A permit is a [`Held`] whose claim is `slot:token` in the semaphore's sorted set instead
//! of a lock key: extension, release, fencing, keep-alive and shutdown run the lock's rounds
//! with the semaphore's scripts (`node::Primitive::Permit`). Only the acquisition differs:
//! every node records the first slot free in the attempt's preference order
//! (`algo::slots`), and the permit is granted on a slot that a majority recorded, with the
//! lock's validity rule. The acquisition loop, waiting in line for a release included, is
//! the lock's ([`Coordinator::acquiring`]).

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use fred::types::{Key, Value};

use crate::algo::keys;
use crate::algo::quorum::{Stake, Tally};
use crate::algo::slots;
use crate::algo::verdict::{self, Timed};
use crate::config::{Retry, Ttl};
use crate::engine::coordinator::{CleanupOnDrop, Coordinator};
use crate::engine::fencing::Fencing;
use crate::engine::held::{Acquisition, Held, Keys, Member, PermitSlot};
use crate::engine::token::Token;
use crate::error::{ConfigError, Error, MAX_PERMITS};
use crate::node::{Node, NodeResult, Primitive, SlotAnswer};

/// A semaphore's name, number of permits and keys, checked once.
#[derive(Debug, Clone)]
pub(crate) struct Spec {
    name: String,
    permits: u32,
    /// The semaphore's key, then (with fencing) its fencing counter.
    keys: Keys,
}

impl Spec {
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn permits(&self) -> u32 {
        self.permits
    }

    /// The semaphore's key on the nodes (the resource name, after the key prefix).
    pub(crate) fn key(&self) -> &str {
        self.keys.all[0].as_str().unwrap_or_default()
    }
}

impl Coordinator {
    /// Checks a semaphore's name and number of permits, before anything is sent.
    pub(crate) fn semaphore(&self, name: &str, permits: u32) -> Result<Spec, ConfigError> {
        if permits == 0 || permits > MAX_PERMITS {
            return Err(ConfigError::InvalidPermits { permits });
        }
        let keys = self.set_keys(name)?;
        Ok(Spec {
            name: name.to_string(),
            permits,
            keys,
        })
    }

    /// The keys of the sorted set of `name` (a semaphore's, a read-write lock's): its key,
    /// then (with fencing) its fencing counter; the name checked as a lock's is.
    pub(crate) fn set_keys(&self, name: &str) -> Result<Keys, ConfigError> {
        if name.is_empty() {
            return Err(ConfigError::EmptyResource);
        }
        let key = keys::lock_key(&self.config().key_prefix, name);
        if keys::is_reserved(&key) {
            return Err(ConfigError::ReservedResource(key));
        }
        let mut all = vec![Key::from(key.as_str())];
        if self.config().fencing {
            all.push(Key::from(keys::fence_key(&key)));
        }
        Ok(Keys { all, locks: 1 })
    }

    /// Takes a permit of `spec` for `ttl`, retrying as `retry` says and waiting in line for
    /// a release as a lock does.
    pub(crate) async fn acquire_permit(
        &self,
        spec: &Spec,
        ttl: Duration,
        retry: Retry,
    ) -> Result<Held, Error> {
        self.refuse_if_shut_down()?;
        let ttl = self.config().check_ttl(ttl)?;
        retry.validate()?;
        let key = spec.key().to_string();
        self.acquiring(
            &spec.name,
            Some(key),
            Some(spec.permits),
            ttl,
            retry,
            || {
                let order = slots::preference(spec.permits, rand::random(), rand::random());
                let permits = spec.permits;
                self.attempt_member(
                    &spec.name,
                    &spec.keys,
                    ttl,
                    move |node, key, token| node.acquire_permit(key, token, ttl.px, permits, order),
                    move |slot| Member::Permit(PermitSlot { slot, permits }),
                )
            },
        )
        .await
    }

    /// One attempt at a claim in a sorted set (a permit, or a read-write lock's side): every
    /// node records a claim for a fresh token with `send` (a slot, answered); granted on a
    /// slot that a majority recorded, in time, as the claim `member(slot)`. The claims of a
    /// failed attempt, and those of a granted one on other slots, are discarded silently.
    ///
    /// Granted, it also says whether a majority of the nodes that recorded the slot had
    /// room for another claim: the next caller in this client's line may attempt at once.
    pub(crate) async fn attempt_member<S, Fut>(
        &self,
        name: &str,
        keys: &Keys,
        ttl: Ttl,
        send: S,
        member: impl Fn(u32) -> Member,
    ) -> Result<(Held, bool), Error>
    where
        S: Fn(&Node, Key, Value) -> Fut,
        Fut: Future<Output = NodeResult<SlotAnswer>> + Send + 'static,
    {
        let token = Token::generate()?;
        let value = Value::from(token.as_str());
        let locks = keys.locks();
        // Whatever happens to this attempt, no claim of its token is left behind.
        let discard_all = vec![value.clone(), Value::from("")];
        let mut guard = CleanupOnDrop::new(self, Primitive::Permit, locks, discard_all.clone());
        let key = &locks[0];
        // The slot granted, told to the nodes that answer after the round was decided (their
        // answers are not counted): one that recorded another slot drops that claim.
        let (granted_slot, verdict_rx) = watch::channel(None::<Option<u32>>);
        let decided = Arc::new(AtomicBool::new(false));
        let start = Instant::now();
        // Decided on one slot, not on a majority of yes: nodes that recorded different slots
        // do not end the round while those still to answer could make one slot a majority.
        let decide = |tally: &Tally, answers: &[(usize, SlotAnswer)]| {
            slots::decision(tally, recorded(answers))
        };
        let round = self
            .round_deciding(
                Some(&decided),
                Stake::Taking,
                |node| {
                    let answer = send(node, key.clone(), value.clone());
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
            .await;
        let elapsed = start.elapsed();
        // Another kind at the key is a kind mismatch only on more nodes than a majority may
        // do without; on fewer, those nodes refused, and the others may grant the claim.
        let found = slots::kind_in_the_way(
            &round.tally,
            round.answers.iter().filter_map(|(_, a)| match a {
                SlotAnswer::Other(found) => Some(*found),
                _ => None,
            }),
        );
        let best = slots::most_recorded(recorded(&round.answers));
        let tally = slots::narrowed(&round.tally, best.map_or(0, |(_, n)| n));
        let failure = match (
            found,
            best,
            verdict::timed(&tally, ttl.ttl, ttl.drift, elapsed),
        ) {
            (Some(found), ..) => Error::KindMismatch {
                resource: name.to_string(),
                found,
            },
            (None, Some((slot, _)), Timed::Valid(_)) => {
                guard.disarm();
                let claim = Value::from(format!("{slot}:{}", token.as_str()));
                // Nodes that recorded another slot, or that were not heard: their claims of
                // this token, if any, go; the granted claim stays.
                // Nodes heard from that recorded another slot drop that claim; those heard
                // later do so themselves (above).
                granted_slot.send_replace(Some(Some(slot)));
                let elsewhere = round
                    .answers
                    .iter()
                    .filter(|(_, a)| matches!(a, SlotAnswer::Granted(s, _) if *s != slot))
                    .fold(0u64, |mask, (i, _)| mask | 1 << i);
                self.detached(elsewhere, |node| {
                    node.discard(Primitive::Permit, locks.to_vec(), discard_all.clone())
                });
                for failure in &round.failures {
                    tracing::warn!(resource = %name, node = failure.index, error = %failure, "permit acquired without this node");
                }
                let fencing = self.config().fencing.then(|| Fencing::new(None, None));
                let room = round
                    .answers
                    .iter()
                    .filter(|(_, a)| *a == SlotAnswer::Granted(slot, true))
                    .count()
                    >= tally.quorum();
                let permit = Held::new(Acquisition {
                    redlock: self.clone(),
                    name: name.to_string(),
                    resources: vec![name.to_string()],
                    keys: keys.clone(),
                    token,
                    value: claim,
                    fencing,
                    ttl: ttl.ttl,
                    valid_until: start + ttl.usable,
                    acquired_on: tally.yes,
                    failures: round.failures,
                    handovers: 0,
                    member: Some(member(slot)),
                });
                return Ok((permit, room));
            }
            (None, Some(_), Timed::Late) => Error::ValidityExpired {
                resource: name.to_string(),
                elapsed,
                ttl: ttl.ttl,
                drift: ttl.drift,
            },
            _ => self.lost(name, tally, round.failures),
        };
        guard.disarm();
        granted_slot.send_replace(Some(None));
        self.discard_round(Primitive::Permit, locks, &discard_all, round.answered)
            .await;
        Err(failure)
    }
}

/// The slot recorded by each node that recorded one, among a round's answers.
fn recorded(answers: &[(usize, SlotAnswer)]) -> impl Iterator<Item = u32> + '_ {
    answers.iter().filter_map(|(_, a)| match a {
        SlotAnswer::Granted(slot, _) => Some(*slot),
        _ => None,
    })
}
