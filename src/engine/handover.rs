//! Releasing a held claim ([`Held::release`]): handed straight to the next caller of this
//! client waiting for it where one waits (HANDOVER, claim kind [`HandingOver`]), else deleted
//! on every node with the RELEASE script, which announces it to the waiters of every client.
//! The steps, why a handover grants nobody a lock another holds, what a failed or cancelled
//! one leaves ([`ClaimedWaiter`]) and the bound [`MAX_HANDOVERS`]: design 2.4b.

use std::sync::Arc;

use fred::types::{Key, Value};

use crate::algo::quorum::Stake;
use crate::config::Ttl;
use crate::engine::acquire::{self, ClaimKind, Grant, Resources};
use crate::engine::fanout::Round;
use crate::engine::held::{self, Held, Ident, Keys, Member, Released, Token};
use crate::engine::machinery::Machinery;
use crate::engine::waiters::Ticket;
use crate::error::Error;
use crate::node::scripts::release_args;
use crate::node::{Acquired, Primitive};

/// Handovers in a row after which a release lets every client's waiters race for the lock.
pub(crate) const MAX_HANDOVERS: u32 = 16;

/// How a handover ended.
pub(crate) enum Handover {
    /// The waiter has the lock; the releaser's token is gone from a majority.
    Done(Released),
    /// No lock for the waiter: release `tokens` (the old one, and the new one if the round was
    /// sent), then [`ClaimedWaiter::sent`].
    Failed {
        claim: ClaimedWaiter,
        tokens: Vec<Value>,
    },
}

/// A waiter claimed for a handover that did not hand it a lock. Until the release that
/// follows is sent ([`ClaimedWaiter::sent`]), dropping this (the release was cancelled) releases the
/// tokens in the background; either way it unclaims the waiter, which otherwise would wait
/// for the handover forever.
pub(crate) struct ClaimedWaiter {
    ticket: Arc<Ticket>,
    /// What to release if this is dropped before the release is sent.
    cleanup: Option<Cleanup>,
    /// The waiter got its lock: nothing to do.
    done: bool,
}

/// The tokens to release on every node, with the fan-out and the primitive to do it with.
type Cleanup = (Arc<Machinery>, Primitive, Vec<Key>, Vec<Value>);

impl ClaimedWaiter {
    /// The release of the tokens is in every node's queue: unclaims the waiter.
    pub(crate) fn sent(mut self) {
        self.cleanup = None;
    }
}

impl Drop for ClaimedWaiter {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        if let Some((client, primitive, keys, tokens)) = self.cleanup.take() {
            let args = release_args(&tokens);
            client.fanout.detached(u64::MAX, |node| {
                node.release(primitive, keys.clone(), args.clone())
            });
        }
        self.ticket.unclaim();
    }
}

impl Held {
    /// Releases the claim on every node (or hands it over): [`Released`] once a majority
    /// confirmed it; [`Error::ShutDown`] if the client's shutdown released it first.
    pub(crate) async fn release(self) -> Result<Released, Error> {
        let ident = self.ident();
        if !ident.start_release() {
            return Err(Error::ShutDown);
        }
        let (mut tokens, mut claimed) = (vec![ident.value()], None);
        match hand_over(&ident.machinery, ident).await {
            None => {}
            Some(Handover::Done(released)) => return Ok(released),
            Some(Handover::Failed {
                claim,
                tokens: both,
            }) => {
                tokens = both;
                claimed = Some(claim);
            }
        }
        // Made once for every node.
        let args: Arc<[Value]> = release_args(&tokens).into();
        let keys: Arc<[Key]> = ident.lock_keys().into();
        let round = ident
            .machinery
            .fanout
            .round_marking(None, Stake::Held, |node| {
                node.release(ident.primitive(), &keys, &args)
            });
        tokio::pin!(round);
        // The first poll hands the delete to every node's queue. Whatever this client sends
        // a node after that runs there after the delete (one queue per node, in order): the
        // next waiter in this client's line can attempt now, without waiting for the answers.
        // (If the release fails, so does its attempt: it never gets a lock that is held.)
        let first = futures::poll!(round.as_mut());
        if let Some(claim) = claimed {
            claim.sent();
        }
        // After handovers in a row, this client's next waiter is woken by the nodes' messages
        // alone, as the other clients' waiters are (see the module doc).
        if !yields(ident) {
            // The payloads the nodes publish: each token's SHA1, hashed once in `args`.
            for key in ident.lock_keys() {
                let Some(key) = key.as_str() else { continue };
                for hash in args.iter().skip(1).step_by(2) {
                    if let Some(hash) = hash.as_str() {
                        ident.machinery.wakeups.seen(key, &hash, true);
                    }
                }
            }
        }
        let round = match first {
            std::task::Poll::Ready(round) => round,
            std::task::Poll::Pending => round.await,
        };
        held::confirmed(ident.name(), round.tally, round.failures)
    }
}

/// Whether the release of the lock `ident` should let every client race for it (after
/// [`MAX_HANDOVERS`] in a row).
pub(crate) fn yields(ident: &Ident) -> bool {
    ident.handovers >= MAX_HANDOVERS
}

/// Hands the lock `ident` of `client` over to the head of this client's line for its key,
/// if the head is waiting; `None` when there is nobody to hand it to (then release it as
/// usual).
pub(crate) async fn hand_over(client: &Arc<Machinery>, ident: &Ident) -> Option<Handover> {
    // A read-write lock's side is not handed over: a reader handed on would pass a
    // waiting writer's intent (design 2.9).
    let read_write = matches!(ident.member(), Some(Member::Reader | Member::Writer));
    if ident.locks != 1 || read_write || yields(ident) {
        return None;
    }
    let key = ident.lock_keys().first()?.as_str()?.to_string();
    // A permit goes to a waiter for a permit of the same semaphore, a lock to a waiter
    // for the lock.
    let permits = ident.permit_slot().map(|s| s.permits);
    let (ticket, ttl) = client.wakeups.claim_head(&key, permits)?;
    let token = Token::generate();
    let mut tokens = vec![ident.value()];
    if let Ok(token) = &token {
        tokens.push(ident.claim_of(token));
    }
    // Dropped from here on (the release cancelled), the claim releases both tokens.
    let mut claim = ClaimedWaiter {
        ticket,
        cleanup: Some((
            Arc::clone(client),
            ident.primitive(),
            ident.lock_keys().to_vec(),
            tokens.clone(),
        )),
        done: false,
    };
    let Ok(token) = token else {
        return Some(Handover::Failed { claim, tokens });
    };
    let target = Resources {
        name: ident.name().to_string(),
        resources: ident.resources.to_vec(),
        keys: Keys {
            all: ident.keys.to_vec(),
            locks: ident.locks,
        },
    };
    let kind = HandingOver {
        ident,
        token: Some(token),
        reads_counters: false,
    };
    let Ok((lock, _)) = acquire::attempt(client, &target, ttl, kind).await else {
        return Some(Handover::Failed { claim, tokens });
    };
    let released = Released {
        released: lock.acquired_on(),
        nodes: client.nodes(),
    };
    // If the waiter has gone meanwhile, the lock is dropped with its ticket, which
    // releases it.
    claim.done = true;
    claim.ticket.hand(lock);
    Some(Handover::Done(released))
}

/// A handover's claim: on each node, the releaser's token replaced by the waiter's new one
/// (HANDOVER), granted by the rule of every acquisition. Refused, nothing is discarded: the
/// release that follows deletes both tokens.
struct HandingOver<'a> {
    /// The lock handed over.
    ident: &'a Ident,
    /// The waiter's token, drawn before the round.
    token: Option<Token>,
    reads_counters: bool,
}

impl HandingOver<'_> {
    fn trace(&self, round: &Round<Acquired>, won: bool) {
        tracing::debug!(
            resource = %self.ident.name(),
            yes = round.tally.yes,
            refused = round.tally.no,
            failed = %crate::error::failed_nodes(&round.failures),
            won,
            "lock handed over"
        );
    }
}

impl ClaimKind for HandingOver<'_> {
    type Answer = Acquired;

    fn primitive(&self) -> Primitive {
        self.ident.primitive()
    }

    fn token(&mut self) -> Result<Token, Error> {
        self.token.take().map_or_else(Token::generate, Ok)
    }

    fn discard(&self, _value: &Value) -> Option<Vec<Value>> {
        None
    }

    async fn send(
        &mut self,
        client: &Machinery,
        target: &Resources,
        token: &Token,
        ttl: Ttl,
    ) -> Round<Acquired> {
        let (ident, keys) = (self.ident, &target.keys);
        // A permit's token is read when it is asked for, never at its acquisition: other
        // permits, held meanwhile, may be handed tokens between the two (design 2.9).
        self.reads_counters = ident.permit_slot().is_none() && client.reads_counters(keys);
        let sent = keys.sent(self.reads_counters).to_vec();
        let (old, new) = (ident.value(), ident.claim_of(token));
        let primitive = ident.primitive();
        client
            .fanout
            .round(|node| {
                node.handover(
                    primitive,
                    sent.clone(),
                    keys.locks,
                    old.clone(),
                    new.clone(),
                    ttl.px,
                )
            })
            .await
    }

    fn granted(
        &mut self,
        client: &Machinery,
        target: &Resources,
        round: &Round<Acquired>,
    ) -> Grant {
        self.trace(round, true);
        // Where the handover failed, the old token may still be there (a node that refused
        // the call, or never got it): delete it. A handover still on its way there runs
        // first.
        let failed = round
            .failures
            .iter()
            .fold(0u64, |mask, failure| mask | 1 << failure.index);
        if failed != 0 {
            let (primitive, locks) = (self.ident.primitive(), target.keys.locks().to_vec());
            let args = release_args(std::slice::from_ref(&self.ident.value()));
            client.fanout.detached(failed, |node| {
                node.release(primitive, locks.clone(), args.clone())
            });
        }
        let hints = (0, &client.hints);
        Grant {
            fencing: held::granted(&target.keys, self.reads_counters, round, hints),
            member: self.ident.member(),
            handovers: self.ident.handovers.saturating_add(1),
            room: false,
        }
    }

    fn refused(&mut self, round: &Round<Acquired>) {
        self.trace(round, false);
    }
}
