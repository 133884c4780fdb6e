//! Releasing a held claim: handed straight to the next caller of this client waiting for
//! it where one waits (`engine/handover.rs`), else deleted on every node with the RELEASE
//! script, which announces it to the waiters of every client.

use std::sync::Arc;

use fred::types::{Key, Value};

use crate::algo::quorum::Stake;
use crate::engine::handover::{self, Handover};
use crate::engine::held::{self, Held, Released};
use crate::error::Error;
use crate::node::scripts::release_args;

impl Held {
    /// Releases the claim on every node (or hands it over): [`Released`] once a majority
    /// confirmed it; [`Error::ShutDown`] if the client's shutdown released it first.
    pub(crate) async fn release(self) -> Result<Released, Error> {
        let ident = self.ident();
        if !ident.start_release() {
            return Err(Error::ShutDown);
        }
        ident.machinery().held().remove(ident.entry());
        let (mut tokens, mut claimed) = (vec![ident.value()], None);
        match handover::hand_over(ident.machinery(), ident).await {
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
            .machinery()
            .fanout()
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
        // alone, as the other clients' waiters are (`engine/handover.rs`).
        if !handover::yields(ident) {
            // The payloads the nodes publish: each token's SHA1, hashed once in `args`.
            for key in ident.lock_keys() {
                let Some(key) = key.as_str() else { continue };
                for hash in args.iter().skip(1).step_by(2) {
                    if let Some(hash) = hash.as_str() {
                        ident.machinery().wakeups().released(key, &hash);
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
