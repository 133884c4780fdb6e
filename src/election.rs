//! Leader election on a kept lock (design 2.8): [`RedLock::campaign`] waits for the lock of
//! an election, keeps it, takes a fencing token as the term, and writes the leader's
//! identity beside the lock; [`RedLock::leader`] and [`RedLock::observe`] (`leader.rs`) read
//! who leads.

use std::future::Future;
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use fred::types::{Key, Value};

use crate::config::Retry;
use crate::error::{ConfigError, Error};
use crate::keep::{KeepAlive, KeptLock, LockHandle, LostReason};
use crate::lock::Released;
use crate::node::Node;
use crate::quorum::{Decision, Stake};
use crate::redlock::RedLock;
use crate::scripts::{self, Script};

/// The prefix of the identity keys: `quorumlock:leader:` + the lock's key (its key prefix
/// and the election's name).
pub(crate) const IDENTITY_PREFIX: &str = "quorumlock:leader:";

/// The longest identity accepted, in bytes.
const MAX_IDENTITY: usize = 1024;

static IDENTIFY: LazyLock<Script> = LazyLock::new(|| Script::new(scripts::IDENTIFY));
pub(crate) static OBSERVE: LazyLock<Script> = LazyLock::new(|| Script::new(scripts::OBSERVE));

/// How a candidate campaigns: the identity it shows to observers, how its leadership is
/// kept, and how often it tries again while another leads.
///
/// ```
/// use std::time::Duration;
/// let candidacy = quorumlock::Candidacy::new()
///     .identity("scheduler@host-a")
///     .keep(quorumlock::KeepAlive::new().margin(Duration::from_secs(2)));
/// ```
#[derive(Debug, Clone, PartialEq)]
#[must_use]
pub struct Candidacy {
    identity: Option<String>,
    keep: KeepAlive,
    retry_delay: Duration,
    retry_jitter: Duration,
}

impl Default for Candidacy {
    fn default() -> Self {
        Candidacy {
            identity: None,
            keep: KeepAlive::new(),
            retry_delay: Duration::from_millis(100),
            retry_jitter: Duration::from_millis(100),
        }
    }
}

impl Candidacy {
    /// The defaults: the identity `PID@HOST`, [`KeepAlive::new`], another attempt 100 ms +
    /// up to 100 ms after a refusal (or at once when the leader resigns).
    pub fn new() -> Self {
        Self::default()
    }

    /// The identity observers see while this candidate leads (1 to 1024 bytes). Defaults
    /// to `PID@HOST`.
    pub fn identity(mut self, identity: impl Into<String>) -> Self {
        self.identity = Some(identity.into());
        self
    }

    /// How the leadership's lock is kept; its margin is how long before the lock's validity
    /// ends the leader is told that it lost. Defaults to [`KeepAlive::new`].
    pub fn keep(mut self, keep: KeepAlive) -> Self {
        self.keep = keep;
        self
    }

    /// The pause between two attempts while another candidate leads: `delay` plus up to
    /// `jitter`. A leader that resigns wakes the waiting candidates at once (its release is
    /// announced on every node); one that dies is followed within the ttl plus one pause.
    /// Defaults to 100 ms + up to 100 ms.
    pub fn retry_delay(mut self, delay: Duration, jitter: Duration) -> Self {
        self.retry_delay = delay;
        self.retry_jitter = jitter;
        self
    }

    fn identity_or_default(&self) -> Result<String, ConfigError> {
        let identity = match &self.identity {
            Some(identity) => identity.clone(),
            None => default_identity(),
        };
        if identity.is_empty() || identity.len() > MAX_IDENTITY {
            return Err(ConfigError::InvalidIdentity(format!(
                "it must be 1 to {MAX_IDENTITY} bytes long, got {}",
                identity.len()
            )));
        }
        Ok(identity)
    }
}

/// `PID@HOST`, or `PID` where the host name cannot be read.
fn default_identity() -> String {
    let pid = std::process::id();
    match std::fs::read_to_string("/proc/sys/kernel/hostname") {
        Ok(host) if !host.trim().is_empty() => format!("{pid}@{}", host.trim()),
        _ => pid.to_string(),
    }
}

/// This process's leadership of an election, won by [`RedLock::campaign`].
///
/// The lock behind it is kept alive in the background. If it cannot be kept,
/// [`lost`](Self::lost) resolves at least the keep-alive margin before the lock's validity
/// ends: stop acting as the leader then. The next leader's [`term`](Self::term) is greater.
/// Dropping a `Leadership` resigns in the background; [`resign`](Self::resign) waits for
/// the nodes.
#[derive(Debug)]
#[must_use = "leadership is given up as soon as it is dropped"]
pub struct Leadership {
    kept: KeptLock,
    term: u64,
    identity: String,
    /// Rewrites the identity record while the lock is kept.
    refresher: AbortOnDrop,
}

/// A background task that ends when this is dropped.
#[derive(Debug)]
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Leadership {
    /// The election's name (the lock's resource).
    pub fn name(&self) -> &str {
        self.kept.resource()
    }

    /// The term: the lock's fencing token, recorded on a majority before the campaign
    /// returned, greater than the term of every earlier leader of this election.
    pub fn term(&self) -> u64 {
        self.term
    }

    /// The identity observers see.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Whether this process still leads: the lock is neither lost nor expired.
    pub fn is_leader(&self) -> bool {
        self.kept.is_held()
    }

    /// The instant until which the leadership can be relied on, as of the last extension.
    pub fn valid_until(&self) -> Instant {
        self.kept.valid_until()
    }

    /// A cloneable view of the lock, with its loss signal.
    pub fn handle(&self) -> LockHandle {
        self.kept.handle()
    }

    /// Resolves when the leadership is lost, at least the keep-alive margin before its
    /// validity ends; see [`KeptLock::lost`].
    ///
    /// # Cancel safety
    /// Cancel-safe: dropping the future changes nothing.
    pub fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
        self.kept.lost()
    }

    /// Gives the leadership up: releases the lock, which wakes the waiting candidates at
    /// once. The identity record is left to expire: observers ignore it as
    /// soon as the lock is released (it no longer matches the lock's token).
    ///
    /// # Errors
    /// As [`KeptLock::release`].
    pub async fn resign(self) -> Result<Released, Error> {
        drop(self.refresher);
        self.kept.release().await
    }

    /// Runs `work` while leading, then resigns, whichever way `work` ends. If the leadership
    /// is lost first, `work` is cancelled (dropped at its next await) before the lock's
    /// validity ends, and the result is [`Error::Lost`].
    ///
    /// # Errors
    /// As [`KeptLock::run`].
    pub async fn run<F, Fut, T>(self, work: F) -> Result<T, Error>
    where
        F: FnOnce(LockHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        // The identity is refreshed while `work` runs.
        let Leadership {
            kept, refresher, ..
        } = self;
        let outcome = kept.run(work).await;
        drop(refresher);
        outcome
    }
}

/// The keys of an election: its lock key and identity key.
pub(crate) fn election_keys(redlock: &RedLock, name: &str) -> (Key, Key) {
    let lock = format!("{}{name}", redlock.config().key_prefix);
    let identity = format!("{IDENTITY_PREFIX}{lock}");
    (Key::from(lock), Key::from(identity))
}

/// The identity record: `TERM:SHA1(token):IDENTITY`.
fn record(term: u64, token: &str, identity: &str) -> String {
    format!("{term}:{}:{identity}", fred::util::sha1_hash(token))
}

/// A record's term, token hash and identity, if it has that shape.
pub(crate) fn parse_record(record: &str) -> Option<(u64, &str, &str)> {
    let mut parts = record.splitn(3, ':');
    let term = parts.next()?.parse().ok()?;
    let sha = parts.next()?;
    let identity = parts.next()?;
    Some((term, sha, identity))
}

impl RedLock {
    /// Campaigns for leadership of the election `name` with [`Candidacy::new`]'s defaults;
    /// see [`campaign_with`](Self::campaign_with).
    ///
    /// ```no_run
    /// # async fn f(redlock: quorumlock::RedLock) -> Result<(), quorumlock::Error> {
    /// let leadership = redlock.campaign("scheduler").await?;
    /// println!("leading in term {}", leadership.term());
    /// tokio::select! {
    ///     _ = async { /* run the scheduler, passing leadership.term() to storage */ } => {}
    ///     reason = leadership.lost() => eprintln!("no longer leading: {reason}"),
    /// }
    /// leadership.resign().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`campaign_with`](Self::campaign_with).
    pub async fn campaign(&self, name: &str) -> Result<Leadership, Error> {
        self.campaign_with(name, Candidacy::new()).await
    }

    /// Waits until this candidate leads the election `name`, and returns its
    /// [`Leadership`]: the election's lock, taken with the configured ttl and kept alive,
    /// its fencing token recorded as the term, and the identity written beside it on a
    /// majority. While another candidate leads, it waits in line for a release (woken at
    /// once when the leader resigns) and attempts again after each pause.
    /// Failures to reach a quorum are retried too: the call returns only as a leader or on
    /// an error no retry can cure.
    ///
    /// # Errors
    /// [`Error::Config`] when fencing is off (the term is a fencing token), for an empty or
    /// reserved name, an invalid identity or keep-alive settings that do not fit the ttl;
    /// [`Error::Entropy`] when no token can be drawn.
    ///
    /// # Cancel safety
    /// Dropping the future gives up: a lock taken meanwhile is released in the background.
    pub async fn campaign_with(
        &self,
        name: &str,
        candidacy: Candidacy,
    ) -> Result<Leadership, Error> {
        if !self.config().fencing {
            return Err(ConfigError::FencingOff.into());
        }
        let identity = candidacy.identity_or_default()?;
        let ttl = self.config().ttl;
        candidacy.keep.check(ttl)?;
        // A day per call; the loop below makes it forever.
        let retry = Retry::within(Duration::from_secs(86_400))
            .delay(candidacy.retry_delay)
            .jitter(candidacy.retry_jitter);
        let (lock_key, identity_key) = election_keys(self, name);
        loop {
            let lock = match self.lock_with(name, ttl, retry).await {
                Ok(lock) => lock,
                Err(e) if e.is_retryable() => continue,
                Err(e) => return Err(e),
            };
            let kept = lock.keep_alive(candidacy.keep)?;
            let term = match kept.fencing_token().await {
                Ok(term) => term,
                Err(e) => {
                    tracing::debug!(election = name, error = %e, "no term recorded; campaigning again");
                    let _ = kept.release().await;
                    tokio::time::sleep(candidacy.retry_delay).await;
                    continue;
                }
            };
            let record = record(term, kept.handle().token().as_str(), &identity);
            let token = kept.handle().token().as_str().to_string();
            if let Err(e) = identify(self, &lock_key, &identity_key, &token, &record).await {
                tracing::debug!(election = name, error = %e, "identity not recorded; campaigning again");
                let _ = kept.release().await;
                tokio::time::sleep(candidacy.retry_delay).await;
                continue;
            }
            if !kept.is_held() {
                continue;
            }
            tracing::debug!(election = name, term, %identity, "leading");
            let refresher = AbortOnDrop(tokio::spawn(refresh(
                self.clone(),
                kept.handle(),
                (lock_key, identity_key),
                token,
                record,
            )));
            return Ok(Leadership {
                kept,
                term,
                identity,
                refresher,
            });
        }
    }
}

/// Writes the identity record on a majority of the nodes that hold our lock.
async fn identify(
    redlock: &RedLock,
    lock_key: &Key,
    identity_key: &Key,
    token: &str,
    record: &str,
) -> Result<(), Error> {
    let ttl_ms = i64::try_from(redlock.config().ttl.as_millis()).unwrap_or(i64::MAX);
    let keys = vec![lock_key.clone(), identity_key.clone()];
    let args = vec![
        Value::from(token),
        Value::from(record),
        Value::Integer(ttl_ms),
    ];
    let round = redlock
        .round_marking(None, Stake::Held, |node| {
            node.eval(&IDENTIFY, keys.clone(), args.clone(), |reply| match reply {
                Value::Integer(n) => Ok(n == 1),
                other => Err(Node::unexpected("IDENTIFY", &other)),
            })
        })
        .await;
    match round.tally.decision() {
        Decision::Won => Ok(()),
        _ => Err(redlock.lost(lock_key.as_str().unwrap_or(""), round.tally, round.failures)),
    }
}

/// Rewrites the identity record every third of the ttl while the lock is kept, so that it
/// lives as long as the lock (which the keeper extends) and comes back on a node that
/// restarted empty. Failures are logged: the record only informs observers.
async fn refresh(
    redlock: RedLock,
    handle: LockHandle,
    keys: (Key, Key),
    token: String,
    record: String,
) {
    let every = redlock.config().ttl / 3;
    let lost = handle.lost();
    tokio::pin!(lost);
    loop {
        tokio::select! {
            _ = &mut lost => return,
            () = tokio::time::sleep(every) => {}
        }
        if let Err(e) = identify(&redlock, &keys.0, &keys.1, &token, &record).await {
            tracing::debug!(election = %handle.resource(), error = %e, "identity not refreshed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_whatever_the_identity_holds() {
        let r = record(42, "abc", "host:a:b");
        let (term, sha, identity) = parse_record(&r).expect("parses");
        assert_eq!(term, 42);
        assert_eq!(sha, fred::util::sha1_hash("abc"));
        assert_eq!(identity, "host:a:b");
        assert_eq!(parse_record("x:y:z"), None);
        assert_eq!(parse_record("1:y"), None);
    }

    #[test]
    fn identities_are_checked() {
        assert!(Candidacy::new().identity("").identity_or_default().is_err());
        let long = "x".repeat(MAX_IDENTITY + 1);
        assert!(Candidacy::new()
            .identity(long)
            .identity_or_default()
            .is_err());
        assert!(!Candidacy::new()
            .identity_or_default()
            .expect("default")
            .is_empty());
    }
}
