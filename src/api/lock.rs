//! A held lock: [`Lock`], a thin face over `engine::held`.

use crate::engine::held::Held;

/// A lock held on a majority of nodes, valid until [`valid_until`](Self::valid_until).
///
/// The holder may act as the only holder of the resource until that instant, and not after
/// it: the keys expire on the nodes by themselves. Extend it with [`extend`](Self::extend)
/// before then (or let [`keep_alive`](Self::keep_alive) do it), and
/// [`release`](Self::release) it when done.
///
/// # Dropping
/// Dropping a `Lock` without calling [`release`](Self::release) never blocks: it starts the
/// release in a background task on the current Tokio runtime, or, on a thread without one, on
/// the runtime the client was built in, and returns at once. If that runtime has shut down,
/// nothing is sent and the keys expire after the ttl.
#[derive(Debug)]
#[must_use = "a lock is released in the background as soon as it is dropped"]
pub struct Lock(pub(super) Held);

impl Lock {
    /// The locked resource's name; for a lock on several resources, their names joined by
    /// commas.
    pub fn resource(&self) -> &str {
        self.0.resource()
    }

    /// The locked resources' names, in the order given.
    pub fn resources(&self) -> &[String] {
        self.0.resources()
    }

    crate::api::held_face::held_face! {
        "lock";
        token;
        /// The fencing token: greater than every fencing token handed out for the resource (for
        /// each resource, for a lock on several) before this lock was acquired, so that storage can
        /// refuse writes from an older holder whose lock has expired.
        ///
        /// The first call records the token on a majority of nodes (one parallel round trip,
        /// decided at the quorum; two for the first token of a client) and hands it out only if
        /// the lock is still valid when that round ends; later calls return the same token
        /// without sending anything. Once a client's tokens are asked for, its acquisitions
        /// record the token they expect next in the same round, and then the first call sends
        /// nothing either: it only checks the validity. A lock whose holder never asks costs no
        /// more than a lock without fencing. Concurrent first calls may each send the round; they
        /// get the same token.
        ///
        /// Tokens are below 2^53 (Lua's exact integers) for any realistic number of acquisitions.
        /// See docs/design.md, section 2.6, for the argument, and 2.6a for nodes that lose data.
        ///
        /// ```no_run
        /// # async fn f(redlock: quorumlock::RedLock) -> Result<(), quorumlock::Error> {
        /// let lock = redlock.lock("ledger").await?;
        /// let token = lock.fencing_token().await?; // sent with every write to storage
        /// # let _ = token;
        /// lock.release().await?;
        /// # Ok(()) }
        /// ```
        ///
        /// # Errors
        /// - [`Error::Expired`](crate::Error::Expired) if the lock's validity has run out, before
        ///   the call (nothing is sent, and this holds for a token asked before too) or before the
        ///   round ended.
        /// - [`Error::NotHeld`](crate::Error::NotHeld) if so many nodes answered that our token is
        ///   not there that it is not on a majority: the lock is lost.
        /// - [`Error::NoQuorum`](crate::Error::NoQuorum) if too few nodes answered to record the
        ///   token; a later call may succeed.
        /// - [`Error::Config`](crate::Error::Config)
        ///   ([`ConfigError::FencingOff`](crate::ConfigError::FencingOff)) if fencing is off
        ///   ([`RedLockBuilder::fencing`](crate::RedLockBuilder::fencing)).
        fencing_token;
        ttl;
        valid_until;
        validity;
        is_valid;
        acquired_on;
        /// Every node that did not vote yes to the acquisition, as far as known when it was decided
        /// (a minority the lock did without):
        ///
        /// - the nodes that failed (timeout, connection, refused by the connection check:
        ///   [`Quarantined`](crate::NodeErrorKind::Quarantined),
        ///   [`Auth`](crate::NodeErrorKind::Auth), ...);
        /// - the nodes that answered no ([`Refused`](crate::NodeErrorKind::Refused): another
        ///   owner's key is there);
        /// - the nodes whose answer the lock did not wait for (it was decided at the quorum) and
        ///   that could not have voted yes: not connected (the kind of the last connection error,
        ///   [`Io`](crate::NodeErrorKind::Io) when none is known yet: a node that is down is
        ///   listed), not counted ([`Unchecked`](crate::NodeErrorKind::Unchecked) while its new
        ///   connection is being checked, ...), or not answering its previous command either
        ///   ([`NotAwaited`](crate::NodeErrorKind::NotAwaited)).
        ///
        /// Not listed: a node that is connected, counted and answering, whose answer simply was not
        /// awaited; its command runs to its end in the background. On healthy nodes this is empty,
        /// and `acquired_on() + failures().len()` is less than the number of nodes by the nodes not
        /// awaited. [`Error::NoQuorum`](crate::Error::NoQuorum) lists its nodes the same way.
        failures;
        extend;
        /// Resets the keys' ttl to `ttl` on every node where they still hold our token, and returns
        /// the new validity. It counts only with a majority and positive validity, computed as for
        /// an acquisition.
        ///
        /// A node that lost the keys (it restarted empty, or missed the acquisition) does not count
        /// towards the majority, since it did not hold the lock all along. When the extension
        /// succeeds, the keys are set again there in the background, where nobody else holds them,
        /// so that the node counts again at the next extension.
        ///
        /// # Errors
        /// - [`Error::Expired`](crate::Error::Expired) if the validity had already run out (nothing
        ///   is sent): an extension cannot make up for the time the lock was not safely held.
        /// - [`Error::NotHeld`](crate::Error::NotHeld) when the lock is lost (as that variant
        ///   says); its validity becomes zero.
        /// - [`Error::NoQuorum`](crate::Error::NoQuorum) (too few nodes answered to tell either
        ///   way) or [`Error::ValidityExpired`](crate::Error::ValidityExpired): the lock keeps its
        ///   previous validity, or less if the nodes that did extend were given a shorter ttl.
        /// - [`Error::Config`](crate::Error::Config) for a ttl that is zero or not above its drift
        ///   allowance.
        extend_for;
        /// Deletes our key on every node (compare-and-delete: a key that holds someone else's token
        /// is left alone). Returns once a majority confirmed the delete, or once the answers show
        /// that it cannot (the nodes not heard from by then still get the delete, in the
        /// background).
        ///
        /// When another caller of this [`RedLock`](crate::RedLock) waits for the same resource, the
        /// lock is handed straight to it instead, the key never free in between
        /// ([`Stats::handed_over`](crate::Stats::handed_over); docs/design.md, section 2.4b, gives
        /// the rules): `Released` then counts the nodes that took the waiter's new token.
        ///
        /// # Errors
        /// - [`Error::NotHeld`](crate::Error::NotHeld) when the lock had expired or was lost (as
        ///   that variant says: with five nodes, three answered that our token was not there).
        /// - [`Error::NoQuorum`](crate::Error::NoQuorum) if too few nodes answered to tell either
        ///   way (timeouts, connection errors, each listed); our keys on those nodes are deleted
        ///   when the delete gets through, or expire after the ttl.
        /// - [`Error::ShutDown`](crate::Error::ShutDown) if the client's
        ///   [shutdown](crate::RedLock::shutdown) released the lock already (nothing is sent).
        release;
        /// Lets go of the lock without releasing it: its keys stay on the nodes until their ttl
        /// runs out, and neither a drop nor the client's [shutdown](crate::RedLock::shutdown)
        /// releases them. With [`extend_for`](Self::extend_for) first, this keeps a resource taken
        /// for at least a given time after a job that ended sooner (ShedLock's "lock at least
        /// for"): other hosts' schedulers do not run the job again meanwhile.
        ///
        /// ```no_run
        /// # async fn f(redlock: quorumlock::RedLock) -> Result<(), quorumlock::Error> {
        /// let mut lock = redlock.lock("hourly-report").await?;
        /// // ... the job, done in seconds ...
        /// lock.extend_for(std::time::Duration::from_secs(50 * 60)).await?;
        /// lock.leave(); // nobody runs the hourly report again for 50 minutes
        /// # Ok(()) }
        /// ```
        leave;
        /// Keeps the lock alive in the background until it is released or dropped; see
        /// [`KeptLock`](crate::KeptLock). The first kept lock of a client starts its keeper task on
        /// the current Tokio runtime; the task ends when the client keeps no lock any more.
        ///
        /// # Errors
        /// [`Error::Config`](crate::Error::Config) if `keep` does not fit the lock's ttl (the
        /// margin must be shorter than the validity left when extensions start); the lock is then
        /// released in the background. [`Error::ShutDown`](crate::Error::ShutDown) if the client
        /// was [shut down](crate::RedLock::shutdown).
        ///
        /// ```no_run
        /// # async fn f(redlock: quorumlock::RedLock) -> Result<(), quorumlock::Error> {
        /// let kept = redlock.lock("report").await?.keep_alive(quorumlock::KeepAlive::new())?;
        /// let handle = kept.handle();
        /// tokio::select! {
        ///     _ = async { /* long work, handle.fencing_token().await? in each write */ } => {}
        ///     reason = handle.lost() => eprintln!("lock lost: {reason}; stopping"),
        /// }
        /// kept.release().await?;
        /// # Ok(()) }
        /// ```
        keep_alive;
    }
}
