//! Extending a held claim: one round that sets its keys again for a ttl, judged by the
//! grant rule; the keys a node lost restored where a majority extended the claim. The round
//! runs detached from the claim ([`Extendable::extension`]) so that the keeper drives many at once,
//! and its outcome is applied apart ([`Extendable::settle_extension`]).

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tracing::Instrument;

use crate::algo::quorum::Stake;
use crate::algo::verdict::{self, Timed};
use crate::config::Ttl;
use crate::engine::acquire;
use crate::engine::fanout::Round;
use crate::engine::held::{self, Fencing, Held, Ident};
use crate::engine::keep_cycle::Extendable;
use crate::error::Error;
use crate::node::{Extended, Primitive};

/// An extension round that has run, detached from its lock (see
/// [`Extendable::extension`]): what [`Extendable::settle_extension`] judges.
#[derive(Debug)]
pub(crate) struct Extension {
    ttl: Ttl,
    start: Instant,
    elapsed: Duration,
    round: Round<Extended>,
    /// Tells the nodes that answer after the round was decided whether the extension stands
    /// (see [`Held::restore_missing`]); dropped unsent, it means no.
    stands: watch::Sender<Option<bool>>,
}

impl Held {
    pub(crate) async fn extend(&mut self) -> Result<Duration, Error> {
        self.extend_for(self.ttl()).await
    }

    pub(crate) async fn extend_for(&mut self, ttl: Duration) -> Result<Duration, Error> {
        let extension = self.extension(ttl)?.await;
        self.settle_extension(extension)
    }

    /// Sets our keys again, in the background, on the nodes that answered that they lost
    /// them. Those that answer so only after the extension was decided restore themselves
    /// once it stands (in [`Extendable::extension`]); those that answer that they kept
    /// them get nothing more. Only after a majority that held the lock all along extended
    /// it: restoring strengthens a lock we hold, it never revives one we lost.
    ///
    /// A permit is not restored: a node that lost its claim is one vote fewer until the
    /// permit is taken again.
    fn restore_missing(&self, answers: &[(usize, Extended)], ttl_ms: i64) {
        if self.ident().member().is_some() {
            return;
        }
        let restore = answers
            .iter()
            .filter(|(_, a)| *a == Extended::Missing)
            .fold(0u64, |mask, (i, _)| mask | 1 << i);
        if restore != 0 {
            self.ident().restore(restore, ttl_ms);
        }
    }
}

impl Extendable for Held {
    type Extension = Extension;

    fn resource(&self) -> &str {
        Held::resource(self)
    }

    fn ttl(&self) -> Duration {
        Held::ttl(self)
    }

    fn valid_until(&self) -> Instant {
        Held::valid_until(self)
    }

    fn validity(&self) -> Duration {
        Held::validity(self)
    }

    /// The checks of [`extend_for`](Held::extend_for), then its round (see the trait).
    fn extension(
        &self,
        ttl: Duration,
    ) -> Result<impl Future<Output = Extension> + Send + 'static, Error> {
        let ident = Arc::clone(self.ident());
        let ttl = ident.machinery.config.check_ttl(ttl)?;
        ident.valid(self.valid_until())?;
        let span = tracing::debug_span!(
            "quorumlock.extension",
            resource = %ident.name(),
            yes = tracing::field::Empty,
            refused = tracing::field::Empty,
            failed = tracing::field::Empty,
        );
        let round_span = span.clone();
        Ok(async move {
            let (stands, verdict) = watch::channel(None);
            let decided = Arc::new(AtomicBool::new(false));
            let (keys, value) = (ident.lock_keys().to_vec(), ident.value());
            let primitive = ident.primitive();
            let start = Instant::now();
            let round = ident
                .machinery
                .fanout
                .round_marking(Some(&decided), Stake::Held, |node| {
                    let extended = node.extend(primitive, keys.clone(), value.clone(), ttl.px);
                    let (index, decided, mut verdict) =
                        (node.index(), Arc::clone(&decided), verdict.clone());
                    let ident = Arc::clone(&ident);
                    async move {
                        let answer = extended.await;
                        if matches!(answer, Ok(Extended::Missing))
                            && decided.load(Ordering::SeqCst)
                            && primitive == Primitive::Lock
                        {
                            // Answered after the round was decided, so not counted: this
                            // node lost our keys, and is restored here if the extension
                            // stands (see `restore_missing`).
                            let stands = verdict.wait_for(Option::is_some).await;
                            if matches!(stands.as_deref(), Ok(Some(true))) {
                                ident.restore(1 << index, ttl.px);
                            }
                        }
                        answer
                    }
                })
                .instrument(round_span)
                .await;
            if !span.is_disabled() {
                span.record("yes", round.tally.yes);
                span.record("refused", round.tally.no);
                span.record("failed", crate::error::failed_nodes(&round.failures));
            }
            Extension {
                ttl,
                start,
                elapsed: start.elapsed(),
                round,
                stands,
            }
        })
    }

    fn settle_extension(&mut self, extension: Extension) -> Result<Duration, Error> {
        let Extension {
            ttl,
            start,
            elapsed,
            round,
            stands,
        } = extension;
        let extended_until = start + ttl.usable;
        match verdict::timed(&round.tally, ttl.ttl, ttl.drift, elapsed) {
            Timed::Valid(left) => {
                stands.send_replace(Some(true));
                self.restore_missing(&round.answers, ttl.px);
                self.extended(ttl.ttl, extended_until);
                Ok(left)
            }
            Timed::Late => {
                self.shortened(extended_until);
                Err(acquire::expired(self.resource(), elapsed, ttl))
            }
            timed => {
                let gone = timed == Timed::Gone;
                let since = if gone { start } else { extended_until };
                self.shortened(since);
                Err(held::unheld(
                    self.resource(),
                    round.tally,
                    round.failures,
                    gone,
                ))
            }
        }
    }
}

impl Ident {
    /// The fencing token handed out so far, 0 if none: what a restore raises the counters
    /// to.
    fn handed_fence(&self) -> u64 {
        self.fencing.as_ref().and_then(Fencing::handed).unwrap_or(0)
    }

    /// Sets our keys again on the nodes in `mask`, in the background (the RESTORE script),
    /// and raises their fencing counters to the fencing token handed out, if one was.
    ///
    /// Not once the lock's release has started: a node that answers an extension late runs
    /// the release after it, and a RESTORE queued after that would hold the resource there
    /// for a ttl in nobody's name, one vote fewer for every other client. The check and the
    /// queueing happen in one poll; a release that starts on another thread between the two
    /// is the one case left, with that cost and no other.
    fn restore(self: &Arc<Self>, mask: u64, ttl_ms: i64) {
        let (fence, value) = (self.handed_fence(), self.value());
        self.machinery.fanout.detached(mask, |node| {
            let restored =
                node.restore(self.keys.to_vec(), self.locks, value.clone(), ttl_ms, fence);
            let ident = Arc::clone(self);
            async move {
                if ident.is_released() {
                    None
                } else {
                    Some(restored.await)
                }
            }
        });
    }
}
