//! A blocking face over the client, for programs without an async runtime: build tools,
//! command-line programs, synchronous services (what `reqwest::blocking` and redis-rs's
//! synchronous API serve).
//!
//! [`RedLock`] starts a Tokio runtime of its own, on a thread of its own, and every call
//! blocks the caller's thread until the async operation it wraps has finished there. The
//! keeper of a [`KeptLock`] runs on that thread too, so a kept lock is kept however long the
//! caller's thread blocks (docs/design.md, section 3.4a). Its semaphores ([`Semaphore`],
//! [`Permit`]) and read-write locks ([`RwLock`], [`RwGuard`]) are the async ones with
//! blocking calls in the same way.
//!
//! ```no_run
//! use quorumlock::blocking;
//! use quorumlock::KeepAlive;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let builder = quorumlock::RedLock::builder()
//!     .nodes(["redis://10.0.0.1", "redis://10.0.0.2", "redis://10.0.0.3"]);
//! let redlock = blocking::RedLock::connect(&builder)?;
//! let kept = redlock.lock("nightly-export")?.keep_alive(KeepAlive::new())?;
//! let token = kept.fencing_token()?;
//! std::thread::sleep(std::time::Duration::from_secs(30)); // blocking work, token in each write
//! if kept.is_held() {
//!     kept.release()?;
//! } else {
//!     eprintln!("lost while working: {:?}", kept.lost_reason());
//! }
//! # let _ = token;
//! # Ok(()) }
//! ```
//!
//! A call from a thread of a Tokio runtime (a `spawn_blocking` closure, say) works too: it is
//! run on a helper thread for its duration, since the runtime's own `block_on` cannot nest.
//! On a runtime's worker thread it still blocks that worker and every task waiting for it:
//! use the async API there.

mod election;
mod lock;
mod rwlock;
mod semaphore;

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::oneshot;

pub use self::election::Leadership;
pub use self::lock::{KeptLock, Lock};
pub use self::rwlock::{RwGuard, RwLock};
pub use self::semaphore::{Permit, Semaphore};
use crate::config::{Candidacy, Config, KeepAlive, RedLockBuilder, Retry};
use crate::engine::machinery::Shutdown;
use crate::engine::observe::Leader;
use crate::error::{ConfigError, Error, LostReason};
use crate::stats::Stats;

/// The runtime thread and the client on it, shared by the client and its locks: the runtime
/// lives while any of them does.
struct Driver {
    handle: Handle,
    redlock: crate::RedLock,
    /// Tells the runtime thread to finish the client's background work and stop.
    stop: Mutex<Option<oneshot::Sender<crate::RedLock>>>,
}

impl fmt::Debug for Driver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Driver")
            .field("redlock", &self.redlock)
            .finish_non_exhaustive()
    }
}

impl Driver {
    /// Starts the runtime thread and builds the client there (`connect` waits for the nodes
    /// as [`RedLockBuilder::connect`] does).
    fn start(builder: &RedLockBuilder, connect: bool) -> Result<Arc<Driver>, ConfigError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| ConfigError::ThreadStart(e.to_string()))?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = oneshot::channel::<crate::RedLock>();
        std::thread::Builder::new()
            .name("quorumlock".into())
            .spawn(move || {
                runtime.block_on(async move {
                    // Until the last handle is dropped; then the releases it started get the
                    // time they need (each ends within about a node timeout).
                    if let Ok(redlock) = stopped.await {
                        let within = redlock.config().node_timeout() * 2;
                        redlock.settle(within).await;
                    }
                });
            })
            .map_err(|e| ConfigError::ThreadStart(e.to_string()))?;
        let redlock = if connect {
            run_blocking(&handle, builder.connect())?
        } else {
            let _entered = handle.enter();
            builder.build()
        };
        // On an error the sender is dropped here and the thread ends.
        let redlock = redlock?;
        Ok(Arc::new(Driver {
            handle,
            redlock,
            stop: Mutex::new(Some(stop)),
        }))
    }

    /// Runs `work` to its end, blocking the caller ([`run_blocking`]).
    fn block_on<F>(&self, work: F) -> Result<F::Output, ConfigError>
    where
        F: Future + Send,
        F::Output: Send,
    {
        run_blocking(&self.handle, work)
    }

    /// Blocks until `handle`'s lock is lost or `within` has passed: why it was lost, or `None`.
    fn wait_lost(
        &self,
        handle: &crate::LockHandle,
        within: Duration,
    ) -> Result<Option<LostReason>, ConfigError> {
        let lost = handle.lost();
        let waited = self.block_on(async move { tokio::time::timeout(within, lost).await.ok() })?;
        Ok(waited.or_else(|| handle.lost_reason()))
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let stop = self.stop.lock().map(|mut s| s.take()).unwrap_or_default();
        if let Some(stop) = stop {
            let _ = stop.send(self.redlock.clone());
        }
    }
}

/// Runs `work` to its end on `handle`'s runtime, blocking the caller: polled on the caller's
/// thread in the runtime's context (its I/O and timers are driven by the runtime thread, and
/// what it spawns runs there). On a thread where a Tokio runtime is current (a worker, inside
/// `block_on`, a `spawn_blocking` closure), where `Handle::block_on` may panic, it is polled
/// on a helper thread of its own for the call.
fn run_blocking<F>(handle: &Handle, work: F) -> Result<F::Output, ConfigError>
where
    F: Future + Send,
    F::Output: Send,
{
    if Handle::try_current().is_err() {
        return Ok(handle.block_on(work));
    }
    std::thread::scope(|scope| {
        let helper = std::thread::Builder::new()
            .name("quorumlock-call".into())
            .spawn_scoped(scope, || handle.block_on(work))
            .map_err(|e| ConfigError::ThreadStart(e.to_string()))?;
        match helper.join() {
            Ok(output) => Ok(output),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

/// The calls of a held handle of this module ([`Lock`], [`Permit`], [`RwGuard`]) that pass
/// on to the async handle it wraps (its field `inner`), blocking on the client's runtime
/// (its field `driver`): written once, named in the docs by `$noun` and the async type's
/// path `$path`. Invoked inside the handle's `impl` block; the calls that do not block come
/// from `held_face!`.
macro_rules! held_calls {
    ($noun:literal, $path:literal) => {
        #[doc = concat!("The fencing token; see [`", $path, "::fencing_token`].")]
        ///
        /// # Errors
        #[doc = concat!("As [`", $path, "::fencing_token`];")]
        /// [`Error::Config`](crate::Error::Config) with
        /// [`ConfigError::ThreadStart`](crate::ConfigError::ThreadStart) if the call needed a
        /// helper thread and none could start.
        pub fn fencing_token(&self) -> Result<u64, $crate::error::Error> {
            self.driver.block_on(self.inner.fencing_token())?
        }

        #[doc = concat!("Extends the ", $noun, " by its ttl, measured from now; see")]
        #[doc = concat!("[`", $path, "::extend`].")]
        ///
        /// # Errors
        #[doc = concat!("As [`", $path, "::extend`], and as")]
        /// [`fencing_token`](Self::fencing_token).
        pub fn extend(&mut self) -> Result<std::time::Duration, $crate::error::Error> {
            self.driver.block_on(self.inner.extend())?
        }

        #[doc = concat!("Extends the ", $noun, " to `ttl` from now; see")]
        #[doc = concat!("[`", $path, "::extend_for`].")]
        ///
        /// # Errors
        #[doc = concat!("As [`", $path, "::extend_for`], and as")]
        /// [`fencing_token`](Self::fencing_token).
        pub fn extend_for(
            &mut self,
            ttl: std::time::Duration,
        ) -> Result<std::time::Duration, $crate::error::Error> {
            self.driver.block_on(self.inner.extend_for(ttl))?
        }

        #[doc = concat!("Releases the ", $noun, " on every node and waits for a majority; see")]
        #[doc = concat!("[`", $path, "::release`].")]
        ///
        /// # Errors
        #[doc = concat!("As [`", $path, "::release`], and as")]
        #[doc = concat!("[`fencing_token`](Self::fencing_token) (the ", $noun, " is then released")]
        /// in the background).
        pub fn release(self) -> Result<$crate::engine::held::Released, $crate::error::Error> {
            let Self { inner, driver, .. } = self;
            driver.block_on(inner.release())?
        }

        #[doc = concat!("Keeps the ", $noun, " alive on the client's runtime thread, while the")]
        #[doc = concat!("caller's thread does what it likes; see [`", $path, "::keep_alive`].")]
        ///
        /// # Errors
        #[doc = concat!("As [`", $path, "::keep_alive`].")]
        pub fn keep_alive(
            self,
            keep: $crate::config::KeepAlive,
        ) -> Result<$crate::api::blocking::KeptLock, $crate::error::Error> {
            let Self { inner, driver, .. } = self;
            // In the runtime's context, so that what it spawns (a client's keeper, the first
            // time) runs on the runtime thread.
            let kept = {
                let _entered = driver.handle.enter();
                inner.keep_alive(keep)
            }?;
            Ok($crate::api::blocking::KeptLock::new(kept, driver))
        }
    };
}
use held_calls;

/// A Redlock client whose calls block: [`crate::RedLock`] on a runtime thread of its own.
///
/// Cheap to clone; share one per process. Dropping the last clone and the last lock stops
/// its thread once the releases they started have been sent (each within about a node
/// timeout); call [`shutdown`](Self::shutdown) before the process exits to release every lock
/// still held and wait for the nodes.
#[derive(Debug, Clone)]
pub struct RedLock {
    driver: Arc<Driver>,
}

impl RedLock {
    /// Builds the client, as [`RedLockBuilder::build`] does, without waiting for the nodes.
    ///
    /// # Errors
    /// As [`RedLockBuilder::build`]; [`ConfigError::ThreadStart`] if the runtime thread cannot
    /// start.
    pub fn build(builder: &RedLockBuilder) -> Result<RedLock, ConfigError> {
        Driver::start(builder, false).map(|driver| RedLock { driver })
    }

    /// Builds the client and waits for its nodes, as [`RedLockBuilder::connect`] does.
    ///
    /// # Errors
    /// As [`RedLockBuilder::connect`], and as [`build`](Self::build).
    pub fn connect(builder: &RedLockBuilder) -> Result<RedLock, ConfigError> {
        Driver::start(builder, true).map(|driver| RedLock { driver })
    }

    /// The async client underneath, for the operations this face does not wrap (elections,
    /// inspection, waiting for nodes); run them on a runtime of your own.
    pub fn as_async(&self) -> &crate::RedLock {
        &self.driver.redlock
    }

    /// The validated configuration.
    pub fn config(&self) -> &Config {
        self.driver.redlock.config()
    }

    /// What this client has done since it was built; see [`crate::RedLock::stats`].
    pub fn stats(&self) -> Stats {
        self.driver.redlock.stats()
    }

    /// How many nodes are configured.
    pub fn nodes(&self) -> usize {
        self.driver.redlock.nodes()
    }

    /// How many nodes must agree: `nodes / 2 + 1`.
    pub fn quorum(&self) -> usize {
        self.driver.redlock.quorum()
    }

    /// How many nodes are connected, with their connection checked, right now.
    pub fn connected_nodes(&self) -> usize {
        self.driver.redlock.connected_nodes()
    }

    /// How long until quarantine lets enough nodes count to decide a lock; see
    /// [`crate::RedLock::quarantine_left`].
    pub fn quarantine_left(&self) -> Option<Duration> {
        self.driver.redlock.quarantine_left()
    }

    /// Blocks on `locking` and wraps the lock it returns.
    fn wrap(
        &self,
        locking: impl Future<Output = Result<crate::Lock, Error>> + Send,
    ) -> Result<Lock, Error> {
        Ok(Lock {
            inner: self.driver.block_on(locking)??,
            driver: Arc::clone(&self.driver),
        })
    }

    /// Locks `resource` with the configured ttl and retry policy; see
    /// [`crate::RedLock::lock`].
    ///
    /// # Errors
    /// As [`crate::RedLock::lock`]; [`Error::Config`] with [`ConfigError::ThreadStart`] if the
    /// call needed a helper thread (see the module) and none could start.
    pub fn lock(&self, resource: &str) -> Result<Lock, Error> {
        self.wrap(self.driver.redlock.lock(resource))
    }

    /// A semaphore of `permits` permits on the resource `name`, with blocking calls: at most
    /// `permits` holders at once across every client; see [`crate::RedLock::semaphore`].
    /// Nothing is sent until a permit is asked for.
    ///
    /// # Errors
    /// As [`crate::RedLock::semaphore`] (0 permits, too many, or a bad name).
    pub fn semaphore(&self, name: &str, permits: u32) -> Result<Semaphore, ConfigError> {
        Ok(Semaphore {
            inner: self.driver.redlock.semaphore(name, permits)?,
            driver: Arc::clone(&self.driver),
        })
    }

    /// A read-write lock on the resource `name`, with blocking calls: many readers or one
    /// writer at once across every client, writers first; see [`crate::RedLock::rw_lock`].
    /// Nothing is sent until a side is asked for.
    ///
    /// # Errors
    /// As [`crate::RedLock::rw_lock`] (a bad name).
    pub fn rw_lock(&self, name: &str) -> Result<RwLock, ConfigError> {
        Ok(RwLock {
            inner: self.driver.redlock.rw_lock(name)?,
            driver: Arc::clone(&self.driver),
        })
    }

    /// Makes one attempt to lock `resource` with the configured ttl.
    ///
    /// # Errors
    /// As [`lock`](Self::lock).
    pub fn try_lock(&self, resource: &str) -> Result<Lock, Error> {
        self.wrap(self.driver.redlock.try_lock(resource))
    }

    /// Locks `resource` for `ttl`, retrying by `retry`; see [`crate::RedLock::lock_with`].
    ///
    /// # Errors
    /// As [`crate::RedLock::lock_with`], and as [`lock`](Self::lock).
    pub fn lock_with(&self, resource: &str, ttl: Duration, retry: Retry) -> Result<Lock, Error> {
        self.wrap(self.driver.redlock.lock_with(resource, ttl, retry))
    }

    /// Locks several resources at once, all or nothing; see [`crate::RedLock::lock_all`].
    ///
    /// # Errors
    /// As [`crate::RedLock::lock_all`], and as [`lock`](Self::lock).
    pub fn lock_all<S: AsRef<str> + Sync>(&self, resources: &[S]) -> Result<Lock, Error> {
        self.wrap(self.driver.redlock.lock_all(resources))
    }

    /// Runs `work` on the caller's thread while holding `resource`, kept alive with
    /// [`KeepAlive::new`]'s defaults, then releases the lock.
    ///
    /// Blocking work cannot be cancelled: if the lock was lost while `work` ran, the result
    /// is [`Error::Lost`], never `work`'s output. `work` gets the [`KeptLock`] to ask for the
    /// fencing token or check [`is_held`](KeptLock::is_held) between steps.
    ///
    /// # Errors
    /// As [`lock`](Self::lock) when the lock cannot be taken (`work` does not run);
    /// [`Error::Lost`] when it was lost before `work` ended.
    pub fn with_lock<T>(
        &self,
        resource: &str,
        work: impl FnOnce(&KeptLock) -> T,
    ) -> Result<T, Error> {
        let kept = self.lock(resource)?.keep_alive(KeepAlive::new())?;
        run_kept(kept, work)
    }

    /// Blocks until this candidate leads the election `name`, with [`Candidacy::new`]'s
    /// defaults; see [`crate::RedLock::campaign`].
    ///
    /// # Errors
    /// As [`crate::RedLock::campaign`], and as [`lock`](Self::lock).
    pub fn campaign(&self, name: &str) -> Result<Leadership, Error> {
        self.campaign_with(name, Candidacy::new())
    }

    /// Blocks until this candidate leads the election `name`; see
    /// [`crate::RedLock::campaign_with`]. The leadership's lock is kept alive on the client's
    /// runtime thread.
    ///
    /// # Errors
    /// As [`crate::RedLock::campaign_with`], and as [`lock`](Self::lock).
    pub fn campaign_with(&self, name: &str, candidacy: Candidacy) -> Result<Leadership, Error> {
        let campaign = self.driver.redlock.campaign_with(name, candidacy);
        let inner = self.driver.block_on(campaign)??;
        Ok(Leadership {
            handle: inner.handle(),
            inner,
            driver: Arc::clone(&self.driver),
        })
    }

    /// Who leads the election `name`, as a majority of nodes reports it; see
    /// [`crate::RedLock::leader`].
    ///
    /// # Errors
    /// As [`crate::RedLock::leader`], and as [`lock`](Self::lock).
    pub fn leader(&self, name: &str) -> Result<Option<Leader>, Error> {
        self.driver.block_on(self.driver.redlock.leader(name))?
    }

    /// Waits until the client's background work has finished, or until `within` has
    /// passed; see [`crate::RedLock::settle`].
    ///
    /// # Errors
    /// [`ConfigError::ThreadStart`] if the call needed a helper thread and none could start.
    pub fn settle(&self, within: Duration) -> Result<bool, ConfigError> {
        self.driver.block_on(self.driver.redlock.settle(within))
    }

    /// Releases every lock this client holds and stops its work; see
    /// [`crate::RedLock::shutdown`].
    ///
    /// # Errors
    /// [`ConfigError::ThreadStart`] if the call needed a helper thread and none could start.
    pub fn shutdown(&self) -> Result<Shutdown, ConfigError> {
        self.driver.block_on(self.driver.redlock.shutdown())
    }
}

/// Runs `work` under `kept`, then releases it: `work`'s output, or [`Error::Lost`] if the
/// lock (or permit) was lost meanwhile. `with_lock` and `Semaphore::with_permit`.
pub(super) fn run_kept<T>(kept: KeptLock, work: impl FnOnce(&KeptLock) -> T) -> Result<T, Error> {
    let output = work(&kept);
    if let Some(reason) = kept.lost_reason() {
        let resource = kept.resource().to_string();
        drop(kept);
        return Err(Error::Lost { resource, reason });
    }
    // A failure to release is not the work's: the keys expire by themselves.
    let _ = kept.release();
    Ok(output)
}
