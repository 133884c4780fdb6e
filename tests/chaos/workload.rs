//! The workload: workers that lock a resource (or take a permit of a semaphore of that
//! name, when [`Settings::permits`] says so, or a side of a read-write lock of that name,
//! when [`Settings::write_one_in`] does), run a read-sleep-write critical section on the
//! resource's counter (a permit: its slot's counter; the read side of a read-write lock:
//! read-sleep, no write) in a Redis outside the quorum, release, pause, and record every
//! attempt in the history.

use std::path::PathBuf;
use std::sync::{Arc, Once};
use std::time::{Duration, Instant};

use fred::interfaces::{ClientLike, KeysInterface};
use fred::types::config::{Config as FredConfig, ReconnectPolicy};
use fred::types::Builder;
use quorumlock::{Access, Lock, Permit, RedLock, RedLockBuilder, Retry, RwGuard};
use rand::Rng;
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;

use super::history::{mono_ns, ns, History, Hold, Op, Outcome, Record, Side};

/// How the workers lock and what they do under the lock.
#[derive(Debug, Clone)]
pub struct Settings {
    pub ttl: Duration,
    /// How long one acquire call keeps retrying.
    pub retry_within: Duration,
    pub retry_delay: Duration,
    pub retry_jitter: Duration,
    pub node_timeout: Duration,
    /// The critical section sleeps between reading and writing the counter: from, to (ms).
    pub cs_sleep_ms: (u64, u64),
    /// Pause between one worker's attempts: from, to (ms).
    pub pause_ms: (u64, u64),
    /// The request budget: attempts per worker at most. A bound against a runaway, not
    /// what ends a run: a worker makes about 5 attempts a second under the scenarios'
    /// contention, and runs until its schedule ends, however late that is.
    pub max_ops: usize,
    /// Whether the clients quarantine restarted nodes (the library's default is on).
    pub quarantine: bool,
    /// `None`: the workers lock each resource. `Some(n)`: they take permits of a semaphore
    /// of `n` permits named after the resource, and each slot has its own counter.
    pub permits: Option<u32>,
    /// `None`: as `permits` says. `Some(n)`: the workers take a side of a read-write lock
    /// named after the resource, the write side once in `n` attempts (at random) and the
    /// read side otherwise; the lock has one counter, written only under the write side.
    pub write_one_in: Option<u32>,
}

impl Settings {
    /// Short locks, short critical sections: many attempts per second under contention.
    pub fn fast() -> Settings {
        Settings {
            ttl: Duration::from_secs(1),
            retry_within: Duration::from_millis(600),
            retry_delay: Duration::from_millis(20),
            retry_jitter: Duration::from_millis(40),
            node_timeout: Duration::from_millis(200),
            cs_sleep_ms: (2, 5),
            pause_ms: (10, 30),
            max_ops: 10_000,
            quarantine: true,
            permits: None,
            write_one_in: None,
        }
    }

    /// The same workers on semaphores of `permits` permits instead of locks.
    pub fn semaphore(self, permits: u32) -> Settings {
        Settings {
            permits: Some(permits),
            ..self
        }
    }

    /// The same workers on read-write locks, taking the write side once in `write_one_in`
    /// attempts.
    pub fn read_write(self, write_one_in: u32) -> Settings {
        Settings {
            permits: None,
            write_one_in: Some(write_one_in.max(1)),
            ..self
        }
    }

    /// A side at random, for read-write locks (`None` otherwise).
    pub fn random_side(&self) -> Option<Side> {
        self.write_one_in.map(|n| {
            if rand::rng().random_range(0..n) == 0 {
                Side::Write
            } else {
                Side::Read
            }
        })
    }

    /// The counters of `resource`: one for a lock; one per slot, with its slot, for a
    /// semaphore.
    pub fn counter_keys(&self, resource: &str) -> Vec<(Option<u32>, String)> {
        match self.permits {
            None => vec![(None, counter_key(resource))],
            Some(n) => (0..n)
                .map(|slot| (Some(slot), slot_counter_key(resource, slot)))
                .collect(),
        }
    }

    pub fn retry(&self) -> Retry {
        Retry::within(self.retry_within)
            .delay(self.retry_delay)
            .jitter(self.retry_jitter)
    }

    /// The longest an acquire or a release may take before it counts as stuck: the retry
    /// budget, plus a ttl, plus four node timeouts (an attempt's round, the cleanup after a
    /// failed one, one for a connection still being checked, and one to spare).
    pub fn deadline(&self) -> Duration {
        self.retry_within + self.ttl + 4 * self.node_timeout
    }

    /// A client builder for `urls` with these settings.
    pub fn builder(&self, urls: &[String]) -> RedLockBuilder {
        RedLock::builder()
            .nodes(urls.iter().cloned())
            .ttl(self.ttl)
            .node_timeout(self.node_timeout)
            .retry(self.retry())
            .quarantine(self.quarantine)
    }
}

/// The shared counters, in a Redis that is not a lock node.
#[derive(Clone)]
pub struct Counter {
    client: fred::clients::Client,
}

impl std::fmt::Debug for Counter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Counter")
    }
}

const COUNTER_TIMEOUT: Duration = Duration::from_secs(2);

impl Counter {
    pub async fn connect(url: &str) -> Result<Counter, String> {
        let config = FredConfig::from_url(url).map_err(|e| e.to_string())?;
        let client = Builder::from_config(config)
            .set_policy(ReconnectPolicy::new_constant(0, 100))
            .build()
            .map_err(|e| e.to_string())?;
        tokio::time::timeout(COUNTER_TIMEOUT, client.init())
            .await
            .map_err(|_| format!("no connection to the counter at {url}"))?
            .map_err(|e| e.to_string())?;
        Ok(Counter { client })
    }

    /// The value under `key`; 0 when it does not exist.
    pub async fn get(&self, key: &str) -> Result<i64, String> {
        let value: Option<i64> = tokio::time::timeout(COUNTER_TIMEOUT, self.client.get(key))
            .await
            .map_err(|_| "counter GET timed out".to_owned())?
            .map_err(|e| e.to_string())?;
        Ok(value.unwrap_or(0))
    }

    pub async fn set(&self, key: &str, value: i64) -> Result<(), String> {
        tokio::time::timeout(
            COUNTER_TIMEOUT,
            self.client.set::<(), _, _>(key, value, None, None, false),
        )
        .await
        .map_err(|_| "counter SET timed out".to_owned())?
        .map_err(|e| e.to_string())
    }

    pub async fn reset(&self, key: &str) -> Result<(), String> {
        tokio::time::timeout(COUNTER_TIMEOUT, self.client.del::<i64, _>(key))
            .await
            .map_err(|_| "counter DEL timed out".to_owned())?
            .map(drop)
            .map_err(|e| e.to_string())
    }
}

/// The counter key of `resource`.
pub fn counter_key(resource: &str) -> String {
    format!("chaos-counter:{resource}")
}

/// The counter key of one slot of the semaphore `resource`.
pub fn slot_counter_key(resource: &str, slot: u32) -> String {
    format!("chaos-counter:{resource}:slot{slot}")
}

/// What a granted call holds: a lock, a permit of a semaphore, or a side of a read-write
/// lock.
#[derive(Debug)]
pub enum Granted {
    Lock(Lock),
    Permit(Permit),
    Rw(RwGuard),
}

impl Granted {
    async fn fencing_token(&self) -> Result<u64, quorumlock::Error> {
        match self {
            Granted::Lock(l) => l.fencing_token().await,
            Granted::Permit(p) => p.fencing_token().await,
            Granted::Rw(g) => g.fencing_token().await,
        }
    }

    fn is_valid(&self) -> bool {
        match self {
            Granted::Lock(l) => l.is_valid(),
            Granted::Permit(p) => p.is_valid(),
            Granted::Rw(g) => g.is_valid(),
        }
    }

    fn valid_until(&self) -> Instant {
        match self {
            Granted::Lock(l) => l.valid_until(),
            Granted::Permit(p) => p.valid_until(),
            Granted::Rw(g) => g.valid_until(),
        }
    }

    fn failures(&self) -> &[quorumlock::NodeError] {
        match self {
            Granted::Lock(l) => l.failures(),
            Granted::Permit(p) => p.failures(),
            Granted::Rw(g) => g.failures(),
        }
    }

    /// The permit's slot; `None` for a lock.
    fn slot(&self) -> Option<u32> {
        match self {
            Granted::Lock(_) | Granted::Rw(_) => None,
            Granted::Permit(p) => Some(p.slot()),
        }
    }

    async fn release(self) -> Result<(), quorumlock::Error> {
        match self {
            Granted::Lock(l) => l.release().await.map(drop),
            Granted::Permit(p) => p.release().await.map(drop),
            Granted::Rw(g) => g.release().await.map(drop),
        }
    }
}

/// One acquisition of `resource` as `settings` says: a lock, a permit, or `side` of a
/// read-write lock.
async fn acquire(
    settings: &Settings,
    redlock: &RedLock,
    resource: &str,
    side: Option<Side>,
) -> Result<Granted, quorumlock::Error> {
    if let Some(side) = side {
        let access = match side {
            Side::Read => Access::Read,
            Side::Write => Access::Write,
        };
        return redlock
            .rw_lock(resource)?
            .acquire(access, settings.ttl, settings.retry())
            .await
            .map(Granted::Rw);
    }
    match settings.permits {
        None => redlock
            .lock_with(resource, settings.ttl, settings.retry())
            .await
            .map(Granted::Lock),
        Some(n) => redlock
            .semaphore(resource, n)?
            .acquire_with(settings.ttl, settings.retry())
            .await
            .map(Granted::Permit),
    }
}

/// What every worker shares.
#[derive(Debug)]
pub struct Ctx {
    pub settings: Settings,
    pub counter: Counter,
    pub history: History,
}

/// Sleeps until `CLOCK_MONOTONIC` reads `at`.
pub async fn sleep_until(at: u64) {
    let now = mono_ns();
    if at > now {
        tokio::time::sleep(Duration::from_nanos(at - now)).await;
    }
}

/// The environment variable that names, to a client in another process (a container), the
/// file whose appearance ends its run: the driver writes it once its schedule's last event
/// has happened (tests/chaos/compose.rs, `Compose::end`). Unset, the client runs until its
/// stop time.
pub const END_FILE_VAR: &str = "QUORUMLOCK_CHAOS_END_FILE";

/// What a client in another process says on stderr once its first attempt has returned
/// (`spawn_workers`): the driver waits for it before its first fault.
pub const FIRST_ATTEMPT: &str = "first attempt made";

/// When workers, observers and candidates stop.
#[derive(Debug, Clone)]
pub enum Until {
    /// At this reading of `CLOCK_MONOTONIC`.
    At(u64),
    /// When the driver ends the run: the flag turns true, or its sender is dropped (the
    /// driver is gone).
    End(watch::Receiver<bool>),
}

impl Until {
    /// The stop of a client in another process: `stop_at`, or earlier when the file that
    /// [`END_FILE_VAR`] names appears (looked for every 50 ms).
    pub fn stop_at_or_end_file(stop_at: u64) -> Until {
        let Some(path) = std::env::var_os(END_FILE_VAR).map(PathBuf::from) else {
            return Until::At(stop_at);
        };
        let (ended, until) = watch::channel(false);
        tokio::spawn(async move {
            while mono_ns() < stop_at && !path.exists() {
                tokio::select! {
                    () = ended.closed() => return,
                    () = tokio::time::sleep(Duration::from_millis(50)) => {}
                }
            }
            ended.send_replace(true);
        });
        Until::End(until)
    }

    /// Whether it has come.
    pub fn reached(&self) -> bool {
        match self {
            Until::At(at) => mono_ns() >= *at,
            Until::End(until) => *until.borrow() || until.has_changed().is_err(),
        }
    }

    /// Returns when it has come.
    pub async fn wait(&self) {
        match self {
            Until::At(at) => sleep_until(*at).await,
            Until::End(until) => {
                // An error: the sender is gone, which ends the run too.
                let _ = until.clone().wait_for(|&ended| ended).await;
            }
        }
    }
}

fn random_ms((from, to): (u64, u64)) -> Duration {
    Duration::from_millis(rand::rng().random_range(from..=to.max(from)))
}

/// How long a critical section waits between its read and its write.
#[derive(Debug, Clone, Copy)]
pub enum Section<'a> {
    /// This long.
    For(Duration),
    /// Until `release` is notified, or until `margin` before the lock's validity ends,
    /// whichever comes first.
    Until {
        release: &'a Notify,
        margin: Duration,
    },
}

/// One acquire call by `client` on `resource` (a lock, a permit of the semaphore
/// `resource`, or a side of the read-write lock `resource`, chosen at random); when
/// granted, a critical section that sleeps `cs` between its read and its write (the read
/// side: after its read), then a release. `entered` is notified when the critical section
/// begins.
pub async fn attempt(
    ctx: &Ctx,
    redlock: &RedLock,
    client: &str,
    resource: &str,
    cs: Duration,
    entered: Option<&Notify>,
) -> Op {
    let side = ctx.settings.random_side();
    attempt_side(ctx, redlock, client, resource, cs, entered, side).await
}

/// [`attempt`] on `side` of the read-write lock `resource` (`None`: a lock or a permit, as
/// the settings say).
pub async fn attempt_side(
    ctx: &Ctx,
    redlock: &RedLock,
    client: &str,
    resource: &str,
    cs: Duration,
    entered: Option<&Notify>,
    side: Option<Side>,
) -> Op {
    let section = Section::For(cs);
    attempt_section(ctx, redlock, client, resource, section, entered, side).await
}

/// [`attempt_side`] with a critical section as long as `section` says.
pub async fn attempt_section(
    ctx: &Ctx,
    redlock: &RedLock,
    client: &str,
    resource: &str,
    section: Section<'_>,
    entered: Option<&Notify>,
    side: Option<Side>,
) -> Op {
    let settings = &ctx.settings;
    let deadline = settings.deadline();
    // Past the deadline the call already counts as stuck; waiting twice as long tells a
    // slow call from one that never returns.
    let hard_limit = 2 * deadline;
    let start = mono_ns();
    let result = tokio::time::timeout(hard_limit, acquire(settings, redlock, resource, side)).await;
    let end = mono_ns();
    let mut op = Op {
        client: client.to_owned(),
        resource: resource.to_owned(),
        op: match (side, settings.permits) {
            (Some(Side::Read), _) => "acquire_read",
            (Some(Side::Write), _) => "acquire_write",
            (None, None) => "acquire",
            (None, Some(_)) => "acquire_permit",
        }
        .to_owned(),
        permits: settings.permits.filter(|_| side.is_none()),
        side,
        outcome: Outcome::Ok,
        start,
        end,
        deadline_ms: u64::try_from(deadline.as_millis()).unwrap_or(u64::MAX),
        hold: None,
        error: None,
        failed_nodes: Vec::new(),
        quarantined_nodes: Vec::new(),
    };
    match result {
        Err(_) => {
            op.outcome = Outcome::Stuck;
            op.error = Some(format!("no answer within {hard_limit:?}"));
        }
        Ok(Err(e)) => {
            op.outcome = Outcome::of(&e);
            op.error = Some(describe(&e));
            if let quorumlock::Error::Taken { failures, .. }
            | quorumlock::Error::NoQuorum { failures, .. } = &e
            {
                op.failed_nodes = failures.iter().map(|f| f.index).collect();
                op.quarantined_nodes = quarantined(failures);
            }
        }
        Ok(Ok(lock)) => {
            op.failed_nodes = lock.failures().iter().map(|f| f.index).collect();
            op.quarantined_nodes = quarantined(lock.failures());
            op.hold = Some(
                critical_section(ctx, lock, resource, side, section, hard_limit, entered).await,
            );
        }
    }
    op
}

/// The nodes of `failures` that failed as quarantined, in order.
fn quarantined(failures: &[quorumlock::NodeError]) -> Vec<usize> {
    failures
        .iter()
        .filter(|f| f.kind == quorumlock::NodeErrorKind::Quarantined)
        .map(|f| f.index)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// The error, with the failed nodes that `Taken` does not show in its message.
fn describe(e: &quorumlock::Error) -> String {
    match e {
        quorumlock::Error::Taken { failures, .. } if !failures.is_empty() => {
            let nodes: Vec<String> = failures
                .iter()
                .map(|f| format!("node {}: {}", f.index, f.kind))
                .collect();
            format!("{e}; failed: {}", nodes.join(", "))
        }
        _ => e.to_string(),
    }
}

async fn critical_section(
    ctx: &Ctx,
    lock: Granted,
    resource: &str,
    side: Option<Side>,
    section: Section<'_>,
    hard_limit: Duration,
    entered: Option<&Notify>,
) -> Hold {
    let slot = lock.slot();
    let key = match slot {
        None => counter_key(resource),
        Some(slot) => slot_counter_key(resource, slot),
    };
    // Half the holders, chosen at random, ask for their fencing token (recorded on a
    // majority when asked): the others use none, and must not let a later token go back.
    let (token, token_asked) = if rand::rng().random_bool(0.5) {
        let asked = mono_ns();
        (lock.fencing_token().await.ok(), Some(asked))
    } else {
        (None, None)
    };
    let cs_start = mono_ns();
    if let Some(entered) = entered {
        entered.notify_one();
    }
    // A careful holder checks its lock before each protected step (assumption 5). The read
    // side of a read-write lock only reads.
    let writes = side != Some(Side::Read);
    let mut read = None;
    let mut wrote = None;
    if lock.is_valid() {
        read = ctx.counter.get(&key).await.ok();
        match section {
            Section::For(cs) => tokio::time::sleep(cs).await,
            Section::Until { release, margin } => {
                let bound = lock.valid_until().checked_sub(margin);
                let bound = tokio::time::Instant::from_std(bound.unwrap_or_else(Instant::now));
                tokio::select! {
                    () = release.notified() => {}
                    () = tokio::time::sleep_until(bound) => {}
                }
            }
        }
        if let (Some(r), true, true) = (read, writes, lock.is_valid()) {
            wrote = ctx.counter.set(&key, r + 1).await.ok().map(|()| r + 1);
        }
    }
    let cs_end = mono_ns();
    let valid_at_end = lock.is_valid();
    let release = match tokio::time::timeout(hard_limit, lock.release()).await {
        Ok(Ok(())) => "ok".to_owned(),
        Ok(Err(e)) => e.to_string(),
        Err(_) => format!("no answer within {hard_limit:?}"),
    };
    Hold {
        token,
        token_asked: token.and(token_asked),
        slot,
        cs_start,
        cs_end,
        read,
        wrote,
        valid_at_end,
        released_at: mono_ns(),
        release,
    }
}

/// Attempts from `start_at` on, until `until` or the request budget is spent. The first
/// attempt of all that share `first` (if any) says so on stderr ([`FIRST_ATTEMPT`]) once it
/// has returned.
pub async fn worker(
    ctx: Arc<Ctx>,
    redlock: RedLock,
    client: String,
    resource: String,
    start_at: u64,
    until: Until,
    first: Option<Arc<Once>>,
) {
    sleep_until(start_at).await;
    for _ in 0..ctx.settings.max_ops {
        if until.reached() {
            break;
        }
        let cs = random_ms(ctx.settings.cs_sleep_ms);
        let op = attempt(&ctx, &redlock, &client, &resource, cs, None).await;
        ctx.history.push(Record::Op(op));
        if let Some(first) = &first {
            first.call_once(|| eprintln!("{client}: {FIRST_ATTEMPT}"));
        }
        tokio::time::sleep(random_ms(ctx.settings.pause_ms)).await;
    }
}

/// Starts `per_client` workers per resource in each client, from `start_at` to `stop_at`,
/// or until the file named by [`END_FILE_VAR`] appears if that is earlier: the workers of a
/// client in another process (examples/chaos_client.rs), which also says on stderr when its
/// first attempt has returned ([`FIRST_ATTEMPT`]). Worker ids are
/// `<client>.<resource index>.w<n>`.
pub fn spawn_workers(
    ctx: &Arc<Ctx>,
    clients: &[(String, RedLock)],
    resources: &[String],
    per_client: usize,
    start_at: u64,
    stop_at: u64,
) -> Vec<JoinHandle<()>> {
    let until = Until::stop_at_or_end_file(stop_at);
    let first = Some(Arc::new(Once::new()));
    spawn_workers_until(ctx, clients, resources, per_client, start_at, &until, first)
}

/// Starts `per_client` workers per resource in each client, from `start_at` until `until`.
pub fn spawn_workers_until(
    ctx: &Arc<Ctx>,
    clients: &[(String, RedLock)],
    resources: &[String],
    per_client: usize,
    start_at: u64,
    until: &Until,
    first: Option<Arc<Once>>,
) -> Vec<JoinHandle<()>> {
    let mut tasks = Vec::new();
    for (name, redlock) in clients {
        for (r, resource) in resources.iter().enumerate() {
            for w in 0..per_client {
                tasks.push(tokio::spawn(worker(
                    Arc::clone(ctx),
                    redlock.clone(),
                    format!("{name}.r{r}.w{w}"),
                    resource.clone(),
                    start_at,
                    until.clone(),
                    first.clone(),
                )));
            }
        }
    }
    tasks
}

/// Records which nodes `redlock` can reach, every half second from `start_at` to `stop_at`,
/// or until the file named by [`END_FILE_VAR`] appears if that is earlier (a client in
/// another process).
pub async fn observe(ctx: Arc<Ctx>, redlock: RedLock, client: String, start_at: u64, stop_at: u64) {
    let until = Until::stop_at_or_end_file(stop_at);
    observe_until(ctx, redlock, client, start_at, until).await;
}

/// Records which nodes `redlock` can reach, every half second from `start_at` until `until`.
pub async fn observe_until(
    ctx: Arc<Ctx>,
    redlock: RedLock,
    client: String,
    start_at: u64,
    until: Until,
) {
    sleep_until(start_at).await;
    while !until.reached() {
        let at = mono_ns();
        let reports = redlock.inspect(Duration::from_millis(5)).await;
        let reachable = reports
            .iter()
            .filter(|r| r.reachable)
            .map(|r| r.index)
            .collect();
        ctx.history.push(Record::View {
            client: client.clone(),
            at,
            reachable,
        });
        tokio::select! {
            () = sleep_until(at + ns(Duration::from_millis(500))) => {}
            () = until.wait() => {}
        }
    }
}

/// Waits until every node of `redlock` counts (connected, checked, out of quarantine) and a
/// lock on `probe` is granted with no node failing, or until `within` passes. Returns
/// whether that happened.
pub async fn wait_admitted(redlock: &RedLock, probe: &str, within: Duration) -> bool {
    let until = mono_ns() + ns(within);
    while mono_ns() < until {
        if redlock.connected_nodes() == redlock.nodes() {
            let reports = redlock.inspect(Duration::from_millis(10)).await;
            if reports.iter().all(|r| r.quarantined_for.is_none()) {
                if let Ok(lock) = redlock.try_lock(probe).await {
                    let clean = lock.failures().is_empty();
                    let _ = lock.release().await;
                    if clean {
                        return true;
                    }
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// `n` independent clients (one `RedLock` each, as separate services would have), named
/// `<prefix>0`, `<prefix>1`, ..., each waited for until every node counts.
pub async fn connect_clients(
    settings: &Settings,
    urls: &[String],
    prefix: &str,
    n: usize,
    within: Duration,
) -> Result<Vec<(String, RedLock)>, String> {
    let mut clients = Vec::new();
    for i in 0..n {
        let name = format!("{prefix}{i}");
        let redlock = settings
            .builder(urls)
            .build()
            .map_err(|e| format!("client {name}: {e}"))?;
        if !wait_admitted(&redlock, &format!("chaos-probe:{name}"), within).await {
            return Err(format!(
                "client {name}: not every node was usable within {within:?}"
            ));
        }
        clients.push((name, redlock));
    }
    Ok(clients)
}

/// Records the final value of each resource's counter (each slot's, for a semaphore).
pub async fn record_counters(ctx: &Ctx, resources: &[String]) -> Result<(), String> {
    for resource in resources {
        for (slot, key) in ctx.settings.counter_keys(resource) {
            let value = ctx.counter.get(&key).await?;
            ctx.history.push(Record::Counter {
                resource: resource.clone(),
                slot,
                value,
            });
        }
    }
    Ok(())
}
