//! A held lock: what it locks, how long it can be relied on, and how to extend or release it.

use std::time::{Duration, Instant};

use fred::types::{Key, Value};

use crate::error::{Error, NodeError};
use crate::node::Extended;
use crate::quorum::{validity, Decision};
use crate::redlock::RedLock;
use crate::token::Token;

/// The keys of one lock: the lock keys, then (with fencing) their fencing counters.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    pub(crate) all: Vec<Key>,
    /// How many of `all` are lock keys; the rest are fencing counters.
    pub(crate) locks: usize,
}

impl Keys {
    pub(crate) fn locks(&self) -> &[Key] {
        &self.all[..self.locks]
    }

    pub(crate) fn fencing(&self) -> bool {
        self.all.len() > self.locks
    }
}

/// What a successful acquisition hands to [`Lock::new`].
#[derive(Debug)]
pub(crate) struct Acquisition {
    pub(crate) redlock: RedLock,
    pub(crate) name: String,
    pub(crate) resources: Vec<String>,
    pub(crate) keys: Keys,
    pub(crate) token: Token,
    pub(crate) value: Value,
    pub(crate) fence: Option<u64>,
    pub(crate) ttl: Duration,
    pub(crate) valid_until: Instant,
    pub(crate) acquired_on: usize,
    pub(crate) failures: Vec<NodeError>,
}

/// A lock held on a majority of nodes, valid until [`valid_until`](Self::valid_until).
///
/// The holder may act as the only holder of the resource until that instant, and not after
/// it: the keys expire on the nodes by themselves. Extend it with [`extend`](Self::extend)
/// before then (or let [`keep_alive`](Self::keep_alive) do it), and
/// [`release`](Self::release) it when done.
///
/// # Dropping
/// Dropping a `Lock` without calling [`release`](Self::release) never blocks: it starts the
/// release in a background task on the current Tokio runtime and returns at once. Without a
/// runtime (or if the runtime shuts down first), nothing is sent and the keys expire after
/// the ttl.
#[derive(Debug)]
#[must_use = "a lock is released in the background as soon as it is dropped"]
pub struct Lock {
    held: Acquisition,
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
    pub(crate) fn new(held: Acquisition) -> Lock {
        Lock {
            held,
            released: false,
        }
    }

    /// The locked resource's name; for a lock on several resources, their names joined by
    /// commas.
    pub fn resource(&self) -> &str {
        &self.held.name
    }

    /// The locked resources' names, in the order given.
    pub fn resources(&self) -> &[String] {
        &self.held.resources
    }

    /// This acquisition's unguessable token, as stored on the nodes.
    pub fn token(&self) -> &Token {
        &self.held.token
    }

    /// The fencing token: greater than that of every earlier successful acquisition of the
    /// resource (of each resource, for a lock on several), so that storage can refuse
    /// writes from an older holder whose lock has expired. `None` when fencing is off
    /// ([`RedLockBuilder::fencing`](crate::RedLockBuilder::fencing)).
    ///
    /// Tokens are below 2^53 (Lua's exact integers) for any realistic number of
    /// acquisitions. See docs/design.md for the argument and its assumption: nodes do not
    /// lose acknowledged writes (`appendfsync always`, or delayed restarts).
    pub fn fencing_token(&self) -> Option<u64> {
        self.held.fence
    }

    /// The ttl of the last acquisition or extension.
    pub fn ttl(&self) -> Duration {
        self.held.ttl
    }

    /// The instant (client's monotonic clock) until which the lock can be relied on:
    /// `start + ttl − drift`, where `start` is taken before the first request is sent.
    pub fn valid_until(&self) -> Instant {
        self.held.valid_until
    }

    /// The validity left: zero once [`valid_until`](Self::valid_until) has passed. Never
    /// more than the nodes' keys are guaranteed to live, drift allowance included.
    pub fn validity(&self) -> Duration {
        self.held
            .valid_until
            .saturating_duration_since(Instant::now())
    }

    /// Whether the validity has not yet run out.
    pub fn is_valid(&self) -> bool {
        Instant::now() < self.held.valid_until
    }

    /// How many nodes had confirmed the lock when it was granted: the quorum, since the
    /// decision is taken at the quorum-th yes (the others may confirm a moment later).
    pub fn acquired_on(&self) -> usize {
        self.held.acquired_on
    }

    /// The nodes that failed during the acquisition (a minority the lock did without).
    pub fn failures(&self) -> &[NodeError] {
        &self.held.failures
    }

    /// Extends the lock by its ttl, measured from now. See [`extend_for`](Self::extend_for).
    ///
    /// # Errors
    /// As [`extend_for`](Self::extend_for).
    pub async fn extend(&mut self) -> Result<Duration, Error> {
        self.extend_for(self.held.ttl).await
    }

    /// Resets the keys' ttl to `ttl` on every node where they still hold our token, and
    /// returns the new validity. It counts only with a majority and positive validity,
    /// computed as for an acquisition.
    ///
    /// A node that lost the keys (it restarted empty, or missed the acquisition) does not
    /// count towards the majority, since it did not hold the lock all along. When the
    /// extension succeeds, the keys are set again there in the background, where nobody
    /// else holds them, so that the node counts again at the next extension.
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
        let held = &self.held;
        let ttl = held.redlock.config().check_ttl(ttl)?;
        let now = Instant::now();
        if now >= held.valid_until {
            return Err(Error::Expired {
                resource: held.name.clone(),
                ago: now - held.valid_until,
            });
        }
        let start = Instant::now();
        let round = held
            .redlock
            .round(|node| node.extend(held.keys.locks().to_vec(), held.value.clone(), ttl.px))
            .await;
        let elapsed = start.elapsed();
        let extended_until = start + ttl.usable;
        match round.tally.decision() {
            Decision::Won => match validity(ttl.ttl, elapsed, ttl.drift) {
                Some(left) => {
                    self.restore_missing(&round.answers, ttl.px);
                    self.held.ttl = ttl.ttl;
                    self.held.valid_until = extended_until;
                    Ok(left)
                }
                None => {
                    self.held.valid_until = self.held.valid_until.min(extended_until);
                    Err(Error::ValidityExpired {
                        resource: self.held.name.clone(),
                        elapsed,
                        ttl: ttl.ttl,
                        drift: ttl.drift,
                    })
                }
            },
            _ if round.tally.lost_to_contention() => {
                self.held.valid_until = self.held.valid_until.min(start);
                Err(self.not_held(round.tally.yes))
            }
            _ => {
                self.held.valid_until = self.held.valid_until.min(extended_until);
                Err(self
                    .held
                    .redlock
                    .lost(&self.held.name, round.tally, round.failures))
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
        let held = &self.held;
        let round = held
            .redlock
            .round(|node| node.release(held.keys.locks().to_vec(), held.value.clone()))
            .await;
        match round.tally.decision() {
            Decision::Won => Ok(Released {
                released: round.tally.yes,
                nodes: round.tally.nodes,
            }),
            _ if round.tally.lost_to_contention() => Err(self.not_held(round.tally.yes)),
            _ => Err(held.redlock.lost(&held.name, round.tally, round.failures)),
        }
    }

    /// Sets our keys again, in the background, on the nodes that answered that they lost
    /// them, and on those that had not answered when the extension was decided (their
    /// answer is not awaited; where our keys are there, this only extends them again). Only
    /// after a majority that held the lock all along extended it: restoring strengthens a
    /// lock we hold, it never revives one we lost.
    fn restore_missing(&self, answers: &[(usize, Extended)], ttl_ms: i64) {
        let nodes = self.held.redlock.nodes();
        let all = if nodes == 64 {
            u64::MAX
        } else {
            (1u64 << nodes) - 1
        };
        let settled = answers
            .iter()
            .filter(|(_, a)| *a != Extended::Missing)
            .fold(0u64, |mask, (i, _)| mask | 1 << i);
        let restore = all & !settled;
        if restore == 0 {
            return;
        }
        let held = &self.held;
        let fence = held.fence.unwrap_or(0);
        held.redlock.detached(restore, |node| {
            node.restore(
                held.keys.all.clone(),
                held.keys.locks,
                held.value.clone(),
                ttl_ms,
                fence,
            )
        });
    }

    fn not_held(&self, held: usize) -> Error {
        Error::NotHeld {
            resource: self.held.name.clone(),
            held,
            nodes: self.held.redlock.nodes(),
        }
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        if !self.released {
            self.held
                .redlock
                .release_detached(self.held.keys.locks().to_vec(), self.held.value.clone());
        }
    }
}
