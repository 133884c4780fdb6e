//! A held lock: what it locks, how long it can be relied on, and how to extend or release it.

use std::time::{Duration, Instant};

use fred::types::{Key, Value};

use crate::error::{Error, NodeError};
use crate::quorum::{validity, Decision};
use crate::redlock::RedLock;
use crate::token::Token;

/// A lock held on a majority of nodes, valid until [`valid_until`](Self::valid_until).
///
/// The holder may act as the only holder of the resource until that instant, and not after
/// it: the keys expire on the nodes by themselves. Extend it with [`extend`](Self::extend)
/// before then, and [`release`](Self::release) it when done.
///
/// # Dropping
/// Dropping a `Lock` without calling [`release`](Self::release) never blocks: it starts the
/// release in a background task on the current Tokio runtime and returns at once. Without a
/// runtime (or if the runtime shuts down first), nothing is sent and the keys expire after
/// the ttl.
#[derive(Debug)]
#[must_use = "a lock is released in the background as soon as it is dropped"]
pub struct Lock {
    redlock: RedLock,
    resource: String,
    key: Key,
    token: Token,
    value: Value,
    ttl: Duration,
    valid_until: Instant,
    acquired_on: usize,
    failures: Vec<NodeError>,
    released: bool,
}

/// The outcome of [`Lock::release`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Released {
    /// How many nodes confirmed that they deleted our key before `release` returned (the
    /// others still get the delete, in the background).
    pub released: usize,
    /// How many nodes are configured.
    pub nodes: usize,
}

impl Lock {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        redlock: RedLock,
        resource: &str,
        key: Key,
        token: Token,
        value: Value,
        ttl: Duration,
        valid_until: Instant,
        acquired_on: usize,
        failures: Vec<NodeError>,
    ) -> Lock {
        Lock {
            redlock,
            resource: resource.to_string(),
            key,
            token,
            value,
            ttl,
            valid_until,
            acquired_on,
            failures,
            released: false,
        }
    }

    /// The locked resource's name.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// This acquisition's unguessable token, as stored on the nodes.
    pub fn token(&self) -> &Token {
        &self.token
    }

    /// The ttl of the last acquisition or extension.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The instant (client's monotonic clock) until which the lock can be relied on:
    /// `start + ttl − drift`, where `start` is taken before the first request is sent.
    pub fn valid_until(&self) -> Instant {
        self.valid_until
    }

    /// The validity left: zero once [`valid_until`](Self::valid_until) has passed. Never
    /// more than the nodes' keys are guaranteed to live, drift allowance included.
    pub fn validity(&self) -> Duration {
        self.valid_until.saturating_duration_since(Instant::now())
    }

    /// Whether the validity has not yet run out.
    pub fn is_valid(&self) -> bool {
        Instant::now() < self.valid_until
    }

    /// How many nodes had confirmed the lock when it was granted: the quorum, since the
    /// decision is taken at the quorum-th yes (the others may confirm a moment later).
    pub fn acquired_on(&self) -> usize {
        self.acquired_on
    }

    /// The nodes that failed during the acquisition (a minority the lock did without).
    pub fn failures(&self) -> &[NodeError] {
        &self.failures
    }

    /// Extends the lock by its ttl, measured from now. See [`extend_for`](Self::extend_for).
    ///
    /// # Errors
    /// As [`extend_for`](Self::extend_for).
    pub async fn extend(&mut self) -> Result<Duration, Error> {
        self.extend_for(self.ttl).await
    }

    /// Resets the keys' ttl to `ttl` on every node where they still hold our token, and
    /// returns the new validity. It counts only with a majority and positive validity,
    /// computed as for an acquisition.
    ///
    /// # Errors
    /// - [`Error::Expired`] if the validity had already run out (nothing is sent): an
    ///   extension cannot make up for the time the lock was not safely held.
    /// - [`Error::NotHeld`] if a majority no longer has our token; the lock is lost and its
    ///   validity becomes zero.
    /// - [`Error::NoQuorum`] or [`Error::ValidityExpired`]: the lock keeps its previous
    ///   validity, or less if the nodes that did extend were given a shorter ttl.
    /// - [`Error::Config`] for a ttl that is zero or not above its drift allowance.
    pub async fn extend_for(&mut self, ttl: Duration) -> Result<Duration, Error> {
        let ttl = self.redlock.config().check_ttl(ttl)?;
        let now = Instant::now();
        if now >= self.valid_until {
            return Err(Error::Expired {
                resource: self.resource.clone(),
                ago: now - self.valid_until,
            });
        }
        let start = Instant::now();
        let round = self
            .redlock
            .round(|node| node.extend(self.key.clone(), self.value.clone(), ttl.px))
            .await;
        let elapsed = start.elapsed();
        let extended_until = start + ttl.usable;
        match round.tally.decision() {
            Decision::Won => match validity(ttl.ttl, elapsed, ttl.drift) {
                Some(left) => {
                    self.ttl = ttl.ttl;
                    self.valid_until = extended_until;
                    Ok(left)
                }
                None => {
                    self.valid_until = self.valid_until.min(extended_until);
                    Err(Error::ValidityExpired {
                        resource: self.resource.clone(),
                        elapsed,
                        ttl: ttl.ttl,
                        drift: ttl.drift,
                    })
                }
            },
            _ if round.tally.lost_to_contention() => {
                self.valid_until = self.valid_until.min(start);
                Err(self.not_held(round.tally.yes))
            }
            _ => {
                self.valid_until = self.valid_until.min(extended_until);
                Err(self
                    .redlock
                    .lost(&self.resource, round.tally, round.failures))
            }
        }
    }

    /// Deletes our key on every node (compare-and-delete: a key that holds someone else's
    /// token is left alone). Returns once a majority confirmed, or every node answered.
    ///
    /// # Errors
    /// - [`Error::NotHeld`] if a majority no longer had our token (the lock had expired).
    /// - [`Error::NoQuorum`] if too many nodes failed to answer; our keys there expire after
    ///   the ttl.
    pub async fn release(mut self) -> Result<Released, Error> {
        self.released = true;
        let round = self
            .redlock
            .round(|node| node.release(self.key.clone(), self.value.clone()))
            .await;
        match round.tally.decision() {
            Decision::Won => Ok(Released {
                released: round.tally.yes,
                nodes: round.tally.nodes,
            }),
            _ if round.tally.lost_to_contention() => Err(self.not_held(round.tally.yes)),
            _ => Err(self
                .redlock
                .lost(&self.resource, round.tally, round.failures)),
        }
    }

    fn not_held(&self, held: usize) -> Error {
        Error::NotHeld {
            resource: self.resource.clone(),
            held,
            nodes: self.redlock.nodes(),
        }
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        if !self.released {
            self.redlock
                .release_detached(self.key.clone(), self.value.clone());
        }
    }
}
