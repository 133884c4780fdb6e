//! One scenario's run, whatever injects the faults: the clients and workers, the fault
//! intervals recorded as the driver injects them, and the check at the end.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use quorumlock::RedLock;
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;

use super::checker::{check, Report};
use super::history::{mono_ns, ns, FaultId, History, Record, Side};
use super::workload::{self, Counter, Ctx, Section, Settings, Until};

/// Where a scenario's clients find the nodes and the counter.
#[derive(Debug, Clone)]
pub struct Target {
    pub nodes: Vec<String>,
    pub counter: String,
    /// Whether the nodes persist every write (`appendfsync always`): the clients never
    /// quarantine them, and a restart loses nothing.
    pub persistent: bool,
}

#[derive(Debug)]
pub struct Run {
    pub name: String,
    pub description: String,
    pub target: Target,
    pub ctx: Arc<Ctx>,
    pub clients: Vec<(String, RedLock)>,
    pub resources: Vec<String>,
    pub seed: Option<u64>,
    /// Workers per client and resource.
    pub per_client: usize,
    workers: Vec<JoinHandle<()>>,
    t0: u64,
    /// When the workers were told to stop (so far: the latest such time known).
    stop: u64,
    /// The end of the schedule, for the workers that run until it ([`Run::end`]).
    end: watch::Sender<bool>,
    /// Whether any run until it.
    until_end: bool,
    /// The open fault of each node, if any.
    open: Vec<Option<FaultId>>,
    /// Tasks that record faults once their end is known.
    background: Vec<JoinHandle<()>>,
}

impl Run {
    /// Connects `clients` clients (waiting until every node counts, quarantine included)
    /// and the counter, resets the counters of the run's two resources (`<name>:r0` and
    /// `<name>:r1`; locks, or semaphores if `settings.permits` says so), and starts
    /// `per_client` workers per client and resource for `duration`.
    pub async fn start(
        name: &str,
        description: &str,
        target: Target,
        settings: Settings,
        clients: usize,
        per_client: usize,
        duration: Duration,
    ) -> Result<Run, String> {
        let mut run = Run::open(name, description, target, settings, clients, per_client).await?;
        let all = run.resources.clone();
        run.spawn_workers(&all, duration);
        Ok(run)
    }

    /// As [`Run::start`], with workers that run until the schedule ends ([`Run::end_after`]
    /// or [`Run::end`]), however late its events come, rather than for a fixed time.
    pub async fn start_until_end(
        name: &str,
        description: &str,
        target: Target,
        settings: Settings,
        clients: usize,
        per_client: usize,
    ) -> Result<Run, String> {
        let mut run = Run::open(name, description, target, settings, clients, per_client).await?;
        let all = run.resources.clone();
        run.spawn_workers_until_end(&all);
        Ok(run)
    }

    /// Connects the clients and the counter and resets the counters, as [`Run::start`]
    /// says, and starts no worker.
    async fn open(
        name: &str,
        description: &str,
        target: Target,
        settings: Settings,
        clients: usize,
        per_client: usize,
    ) -> Result<Run, String> {
        let counter = Counter::connect(&target.counter).await?;
        let resources: Vec<String> = (0..2).map(|r| format!("{name}:r{r}")).collect();
        for resource in &resources {
            for (_, key) in settings.counter_keys(resource) {
                counter.reset(&key).await?;
            }
        }
        let ctx = Arc::new(Ctx {
            settings,
            counter,
            history: History::default(),
        });
        // The first check of a young node can take up to the max ttl (quarantine).
        let within = ctx.settings.ttl + Duration::from_secs(15);
        let clients =
            workload::connect_clients(&ctx.settings, &target.nodes, "h", clients, within).await?;
        let t0 = mono_ns();
        let nodes = target.nodes.len();
        Ok(Run {
            name: name.to_owned(),
            description: description.to_owned(),
            target,
            ctx,
            clients,
            resources,
            seed: None,
            per_client,
            workers: Vec::new(),
            t0,
            stop: t0,
            end: watch::channel(false).0,
            until_end: false,
            open: vec![None; nodes],
            background: Vec::new(),
        })
    }

    /// Starts workers in every client on each of `resources`, from now for `duration`.
    pub fn spawn_workers(&mut self, resources: &[String], duration: Duration) {
        let start = mono_ns();
        let stop = start + ns(duration);
        self.stop = self.stop.max(stop);
        self.spawn_workers_from(resources, start, &Until::At(stop));
    }

    /// Starts workers in every client on each of `resources`, from now until the schedule
    /// ends ([`Run::end`]).
    pub fn spawn_workers_until_end(&mut self, resources: &[String]) {
        let until = self.until_end();
        self.spawn_workers_from(resources, mono_ns(), &until);
    }

    fn spawn_workers_from(&mut self, resources: &[String], start: u64, until: &Until) {
        let workers = workload::spawn_workers_until(
            &self.ctx,
            &self.clients,
            resources,
            self.per_client,
            start,
            until,
            None,
        );
        self.workers.extend(workers);
    }

    /// The end of the schedule, for whatever else runs until it (an observer; clients in
    /// other processes learn it from the scenario's driver). The run then ends only when
    /// told to ([`Run::end_after`], [`Run::end`]), or in [`Run::finish`].
    pub fn until_end(&mut self) -> Until {
        self.until_end = true;
        Until::End(self.end.subscribe())
    }

    /// The schedule's last event has happened: the workers go on for `tail` (to show the
    /// recovery after it), then the schedule ends ([`Run::end`]).
    pub async fn end_after(&mut self, tail: Duration) {
        tokio::time::sleep(tail).await;
        self.end();
    }

    /// Ends the schedule now: whatever runs until its end stops (at once, or after the
    /// attempt under way).
    pub fn end(&mut self) {
        if !*self.end.borrow() {
            self.stop = self.stop.max(mono_ns());
            self.end.send_replace(true);
            self.note("end of the schedule");
        }
    }

    /// When the run started, on `CLOCK_MONOTONIC`.
    pub fn t0(&self) -> u64 {
        self.t0
    }

    /// Waits until the workers started so far have stopped.
    pub async fn join_workers(&mut self) {
        for w in self.workers.drain(..) {
            w.await.expect("a worker panicked");
        }
    }

    /// Sleeps until `secs` after the start.
    pub async fn at(&self, secs: f64) {
        workload::sleep_until(self.t0 + ns(Duration::from_secs_f64(secs))).await;
    }

    /// Prints `what` with the time since the start.
    pub fn note(&self, what: &str) {
        let at = mono_ns().saturating_sub(self.t0) as f64 / 1e9;
        eprintln!("  {at:6.2} s  {what}");
    }

    /// Records that a fault of `kind` on `nodes` begins now.
    pub fn fault_begins(&mut self, kind: &str, nodes: &[usize]) {
        self.note(&format!("{kind} {nodes:?}"));
        let id = self.ctx.history.begin_fault(kind, nodes);
        for &i in nodes {
            self.open[i] = Some(id);
        }
    }

    /// Records that a fault of `kind` on `nodes` begins now for the clients whose id
    /// starts with one of `clients` only (a partition); end it with [`Run::fault_id_ends`].
    pub fn fault_begins_for(&mut self, kind: &str, nodes: &[usize], clients: &[&str]) -> FaultId {
        self.note(&format!("{kind} {nodes:?} for {clients:?}"));
        self.ctx.history.begin_fault_for(kind, nodes, clients)
    }

    /// Records that the fault `id` ends now.
    pub fn fault_id_ends(&mut self, id: FaultId) {
        self.note("healed");
        self.ctx.history.end_fault(id);
    }

    /// Adds records made elsewhere (clients in other processes).
    pub fn merge(&mut self, records: Vec<Record>) {
        self.ctx.history.extend(records);
    }

    /// Records that the faults of `nodes` end at `at`.
    pub fn fault_ends(&mut self, nodes: &[usize], at: u64) {
        self.note(&format!("back {nodes:?}"));
        for &i in nodes {
            if let Some(id) = self.open[i].take() {
                self.ctx.history.end_fault_at(id, at);
            }
        }
    }

    /// Records that `nodes`, started again at `at` after losing their data (they do not
    /// persist), are quarantined by the clients for the max ttl, if the clients quarantine.
    ///
    /// The clients count a quarantine from when they notice the restart (when they
    /// reconnect, which their backoff can delay by up to 2 s), so its end is asked of the
    /// clients themselves (`RedLock::inspect`) in the background; the last client's end is
    /// recorded.
    pub fn restarted(&mut self, nodes: &[usize], at: u64) {
        self.fault_ends(nodes, at);
        // Whatever the nodes' persistence: a restart is told by the node's marker (design
        // 2.6a).
        if self.ctx.settings.quarantine {
            let clients: Vec<RedLock> = self.clients.iter().map(|(_, r)| r.clone()).collect();
            let history = self.ctx.history.clone();
            let nodes = nodes.to_vec();
            let fallback = at + ns(self.ctx.settings.ttl);
            self.background.push(tokio::spawn(async move {
                let end = quarantine_end(&clients, &nodes, fallback).await;
                history.fault_between("quarantine", &nodes, at, end);
            }));
        }
    }

    /// Waits until every client has a checked connection to every node.
    pub async fn wait_reconnected(&self, within: Duration) {
        for (_, redlock) in &self.clients {
            redlock.wait_for_nodes(within).await;
        }
    }

    /// Ends the schedule if the workers run until it and it has not ended yet, waits for the
    /// workers, records the counters, checks the history, and writes it to
    /// `out` as `<name>.jsonl`, with the report in `<name>.txt` and a results table of one
    /// row in `<name>.row.md` (scripts/chaos joins them).
    pub async fn finish(mut self, out: &Path) -> Report {
        workload::sleep_until(self.stop).await;
        if self.until_end {
            self.end();
        }
        self.join_workers().await;
        for task in self.background.drain(..) {
            task.await.expect("a recording task panicked");
        }
        workload::record_counters(&self.ctx, &self.resources)
            .await
            .expect("read the counters");
        self.ctx.history.close_open_faults();
        self.ctx.history.push(Record::Meta {
            scenario: self.name.clone(),
            nodes: self.target.nodes.len(),
            description: self.description.clone(),
            seed: self.seed,
            start: self.t0,
            stop: self.stop,
        });
        // Two workers of a client on one resource take turns by handovers (design 2.4b): the
        // checker then judges those too.
        let handed_over: u64 = self
            .clients
            .iter()
            .map(|(_, r)| r.stats().handed_over)
            .sum();
        self.note(&format!("locks handed over within a client: {handed_over}"));
        let records = self.ctx.history.records();
        let report = check(&records);
        let path = out.join(format!("{}.jsonl", self.name));
        let written = super::history::write_jsonl(&path, &records)
            .and_then(|()| {
                std::fs::write(out.join(format!("{}.txt", self.name)), report.to_string())
            })
            .and_then(|()| {
                let table = format!("{}\n{}\n", Report::markdown_header(), report.markdown_row());
                std::fs::write(out.join(format!("{}.row.md", self.name)), table)
            });
        eprintln!("{report}");
        match written {
            Ok(()) => eprintln!("  history: {}", path.display()),
            Err(e) => eprintln!("  history not written to {}: {e}", path.display()),
        }
        report
    }
}

/// When the quarantine of `nodes` ends, as the clients see it: polls each client until it
/// reports them quarantined (for at most 5 s) and returns the latest end; `fallback` if no
/// client ever does.
async fn quarantine_end(clients: &[RedLock], nodes: &[usize], fallback: u64) -> u64 {
    let give_up = mono_ns() + ns(Duration::from_secs(5));
    let mut seen = vec![false; clients.len()];
    let mut end = None;
    while mono_ns() < give_up && seen.iter().any(|s| !s) {
        for (i, redlock) in clients.iter().enumerate() {
            if seen[i] {
                continue;
            }
            let reports = redlock.inspect(Duration::from_millis(5)).await;
            let left: Option<Vec<Duration>> = nodes
                .iter()
                .map(|&n| reports.get(n).and_then(|r| r.quarantined_for))
                .collect();
            if let Some(left) = left {
                seen[i] = true;
                let until = mono_ns() + ns(left.into_iter().max().unwrap_or_default());
                end = Some(end.map_or(until, |e: u64| e.max(until)));
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    end.unwrap_or(fallback)
}

/// Attempts until one critical section of `cs` has run; notifies `entered` when it begins.
/// On read-write locks it takes the write side.
pub async fn hold_once(
    ctx: Arc<Ctx>,
    redlock: RedLock,
    resource: String,
    cs: Duration,
    entered: Arc<Notify>,
) {
    hold_section(ctx, redlock, resource, Section::For(cs), entered).await;
}

/// [`hold_once`] with a critical section as long as `section` says.
async fn hold_section(
    ctx: Arc<Ctx>,
    redlock: RedLock,
    resource: String,
    section: Section<'_>,
    entered: Arc<Notify>,
) {
    for _ in 0..50 {
        let side = ctx.settings.write_one_in.map(|_| Side::Write);
        let op = workload::attempt_section(
            &ctx,
            &redlock,
            "holder",
            &resource,
            section,
            Some(&entered),
            side,
        )
        .await;
        let held = op.hold.is_some();
        ctx.history.push(Record::Op(op));
        if held {
            return;
        }
    }
}

/// A separate client's long critical section, under way.
#[derive(Debug)]
pub struct Holding {
    task: JoinHandle<()>,
    entered_at: u64,
    resource: String,
    cs: Duration,
    /// Ends the critical section of [`hold_until_released`].
    release: Arc<Notify>,
}

/// How long before its lock's validity ends the holder of [`hold_until_released`] ends its
/// critical section if it has not been told to by then: time for its write and its record.
pub const HOLD_MARGIN: Duration = Duration::from_secs(1);

/// The first half of the schedule of the negative control (and of the restart scenarios
/// that pass): the workers of `run` have contended for a while; once they stop, a separate
/// client takes the first resource for a critical section of `cs`. Returns when it is
/// inside; the caller then restarts a majority of nodes at once and calls
/// [`contend_while_held`].
pub async fn hold_long(run: &mut Run, cs: Duration) -> Holding {
    hold(run, Some(cs)).await
}

/// [`hold_long`] with a critical section that lasts until [`contend_beside`] ends it, or
/// until [`HOLD_MARGIN`] before the holder's lock's validity ends if that comes first: the
/// faults between the two halves may take any part of the validity, and the workers still
/// contend beside the holder for as long as asked, if they can within it.
pub async fn hold_until_released(run: &mut Run) -> Holding {
    hold(run, None).await
}

/// The holder of [`hold_long`] (`Some(cs)`) or of [`hold_until_released`] (`None`).
async fn hold(run: &mut Run, cs: Option<Duration>) -> Holding {
    let holder = workload::connect_clients(
        &run.ctx.settings,
        &run.target.nodes,
        "holder",
        1,
        Duration::from_secs(10),
    )
    .await
    .expect("the holder's client")
    .remove(0)
    .1;
    run.join_workers().await;
    let entered = Arc::new(Notify::new());
    let release = Arc::new(Notify::new());
    let resource = run.resources[0].clone();
    let task = tokio::spawn({
        let (ctx, resource, entered) =
            (Arc::clone(&run.ctx), resource.clone(), Arc::clone(&entered));
        let release = Arc::clone(&release);
        async move {
            let section = match cs {
                Some(cs) => Section::For(cs),
                None => Section::Until {
                    release: &release,
                    margin: HOLD_MARGIN,
                },
            };
            hold_section(ctx, holder, resource, section, entered).await;
        }
    });
    tokio::time::timeout(Duration::from_secs(10), entered.notified())
        .await
        .expect("the holder never got the lock");
    Holding {
        task,
        entered_at: mono_ns(),
        resource,
        cs: cs.unwrap_or_default(),
        release,
    }
}

/// The second half: once every client has checked its new connections, the workers contend
/// for the held resource until the holder is done, then for `after` on every resource.
///
/// Waiting for the checks matters: attempts sent while a client still checks a new
/// connection can leave keys on the restarted nodes that block the resource for a ttl
/// (docs/chaos.md, "Findings"), which would hide the double grant this schedule provokes.
pub async fn contend_while_held(run: &mut Run, holding: Holding, after: Duration) {
    run.wait_reconnected(Duration::from_secs(5)).await;
    let left = (holding.entered_at + ns(holding.cs)).saturating_sub(mono_ns());
    run.spawn_workers(
        std::slice::from_ref(&holding.resource),
        Duration::from_nanos(left) + Duration::from_millis(300),
    );
    holding.task.await.expect("the holder panicked");
    run.join_workers().await;
    if !after.is_zero() {
        let all = run.resources.clone();
        run.spawn_workers(&all, after);
    }
}

/// The second half for a holder of [`hold_until_released`]: once every client has checked
/// its new connections, the workers contend for the held resource beside the holder for
/// `beside`; then the holder is told to release, and the workers stop 300 ms after it has.
/// Prints how long they contended beside it, and returns whether that was for all of
/// `beside` (else the holder's lock came within [`HOLD_MARGIN`] of its end first: the
/// faults before took that long).
pub async fn contend_beside(run: &mut Run, holding: Holding, beside: Duration) -> bool {
    run.wait_reconnected(Duration::from_secs(5)).await;
    let (stop, until) = watch::channel(false);
    let from = mono_ns();
    run.spawn_workers_from(
        std::slice::from_ref(&holding.resource),
        from,
        &Until::End(until),
    );
    let mut task = holding.task;
    let lapsed = tokio::select! {
        () = tokio::time::sleep(beside) => None,
        // Its lock came within the margin of its validity's end first: the faults took
        // that long.
        joined = &mut task => Some(joined),
    };
    holding.release.notify_one();
    let released = mono_ns();
    let told = lapsed.is_none();
    let why = match lapsed {
        Some(joined) => {
            joined.expect("the holder panicked");
            "its lock was about to expire"
        }
        None => {
            task.await.expect("the holder panicked");
            "told to"
        }
    };
    run.note(&format!(
        "the holder released ({why}); the workers had contended beside it for {:.2} s",
        released.saturating_sub(from) as f64 / 1e9
    ));
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.send_replace(true);
    run.stop = run.stop.max(mono_ns());
    run.join_workers().await;
    told
}
