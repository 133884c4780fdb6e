//! The chaos suite on Docker Compose: the five Redis masters and the counter of
//! docker-compose.yml, contending workers, and faults injected with the Docker CLI (kill,
//! pause, network disconnect, a partition that gives two clients in containers different
//! majorities), each run checked by the history checker of tests/chaos/. docs/chaos.md
//! describes every scenario and its results.
//!
//! Every scenario is `#[ignore]`d ("needs a Docker engine; run by scripts/chaos"), so that a
//! plain `cargo test` lists them as ignored rather than passed; scripts/chaos runs them with
//! `--include-ignored` and `QUORUMLOCK_CHAOS=compose` (builds the images and writes a
//! summary). Run without `QUORUMLOCK_CHAOS=compose`, a scenario fails. It
//! needs the images `QUORUMLOCK_REDIS_IMAGE` (scripts/build-redis-image) and, for the
//! scenarios with clients in containers (the partition, the election, the read-write
//! locks), `QUORUMLOCK_CHAOS_CLIENT_IMAGE` (scripts/build-client-image). It brings the
//! project up for each scenario and down again (`down -v`) afterwards, also when the
//! scenario fails, and uses the fixed host ports 7000-7005: one run per Docker host.

#[path = "chaos/mod.rs"]
mod chaos;
#[path = "chaos/compose.rs"]
mod compose;

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use chaos::checker::Report;
use chaos::history::{ns, Outcome, Record, Side as RwSide};
use chaos::run::{self, Run};
use chaos::workload::Settings;
use compose::{Compose, Side, SERVICES};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The scenarios share the compose project and its host ports: one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The reason every scenario is `#[ignore]`d: a plain `cargo test` must not count a scenario
/// that could not run as passed. scripts/chaos runs them with `--include-ignored`.
const NEEDS_DOCKER: &str = "needs a Docker engine; run by scripts/chaos";

/// Fails the scenario unless the suite was asked for (`QUORUMLOCK_CHAOS=compose`, which
/// scripts/chaos sets after checking that a Docker engine answers): a scenario run by hand
/// with `--ignored` must not pass without running.
fn require_enabled() {
    assert_eq!(
        std::env::var("QUORUMLOCK_CHAOS").as_deref(),
        Ok("compose"),
        "the Docker Compose chaos suite runs only with QUORUMLOCK_CHAOS=compose: \
         run scripts/chaos (docs/chaos.md); {NEEDS_DOCKER}"
    );
}

/// The last panic of each thread, as the panic hook saw it: where, and its message.
static PANICS: std::sync::Mutex<Vec<(std::thread::ThreadId, String, String)>> =
    std::sync::Mutex::new(Vec::new());

/// Writes why a scenario failed to `<out>/<scenario>.failed.md`, for scripts/chaos's summary
/// (a failing assertion's message is otherwise only in the test's output, far above the
/// summary): made at the start of a scenario, it removes what an earlier run left there,
/// and when it is dropped while its thread panics (the test fails), it writes the test, the
/// panic's location and its message. The first line is the gist, for the script's last
/// line; the whole message follows.
struct FailureNote {
    scenario: &'static str,
}

impl FailureNote {
    fn new(scenario: &'static str) -> FailureNote {
        static HOOK: std::sync::Once = std::sync::Once::new();
        HOOK.call_once(|| {
            let default = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                let payload = info.payload();
                let message = payload
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "(a panic without a message)".to_owned());
                let at = info
                    .location()
                    .map_or_else(String::new, ToString::to_string);
                let me = std::thread::current().id();
                if let Ok(mut panics) = PANICS.lock() {
                    panics.retain(|(thread, ..)| *thread != me);
                    panics.push((me, at, message));
                }
                default(info);
            }));
        });
        let _ = std::fs::remove_file(FailureNote::path(scenario));
        FailureNote { scenario }
    }

    fn path(scenario: &str) -> PathBuf {
        out_dir().join(format!("{scenario}.failed.md"))
    }
}

impl Drop for FailureNote {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let me = std::thread::current();
        let (at, message) = PANICS
            .lock()
            .ok()
            .and_then(|panics| {
                let (_, at, message) = panics.iter().find(|(thread, ..)| *thread == me.id())?;
                Some((at.clone(), message.clone()))
            })
            .unwrap_or_default();
        let test = match me.name() {
            Some(test) if test != self.scenario => format!("{test} ({})", self.scenario),
            _ => self.scenario.to_owned(),
        };
        let gist: String = message
            .lines()
            .next()
            .unwrap_or("")
            .chars()
            .take(400)
            .collect();
        let note = format!(
            "**{test}** failed at {at}: {gist}\n\n```text\n{}\n```\n",
            message.trim_end()
        );
        let path = FailureNote::path(self.scenario);
        let written = std::fs::create_dir_all(out_dir()).and_then(|()| std::fs::write(&path, note));
        if let Err(e) = written {
            eprintln!(
                "the failure note was not written to {}: {e}",
                path.display()
            );
        }
    }
}

/// Histories and results: `QUORUMLOCK_CHAOS_OUT`, else target/chaos in the repository.
fn out_dir() -> PathBuf {
    std::env::var_os("QUORUMLOCK_CHAOS_OUT")
        .map(PathBuf::from)
        .unwrap_or_else(|| compose::repo().join("target").join("chaos"))
}

/// Compose settings: one-second locks (and quarantine), short critical sections.
fn settings() -> Settings {
    Settings::fast()
}

/// Brings the project up and starts a run on it: three clients on the host, two workers per
/// client and resource, until the schedule ends (`Compose::end_after`: a time after its last
/// event, however late the events come on a loaded machine).
async fn start(
    name: &str,
    description: &str,
    persistent: bool,
    settings: Settings,
) -> (Compose, Run) {
    let compose = Compose::up(persistent).await;
    eprintln!("{name}: {description}");
    let run = Run::start_until_end(name, description, compose.target(), settings, 3, 2)
        .await
        .expect("start the run");
    (compose, run)
}

/// As [`start`], with workers that contend for `duration` only: the first phase of the
/// restart scenarios, whose later phases start their own (`run::contend_beside`).
async fn start_for(
    name: &str,
    description: &str,
    persistent: bool,
    settings: Settings,
    duration: Duration,
) -> (Compose, Run) {
    let compose = Compose::up(persistent).await;
    eprintln!("{name}: {description}");
    let run = Run::start(
        name,
        description,
        compose.target(),
        settings,
        3,
        2,
        duration,
    )
    .await
    .expect("start the run");
    (compose, run)
}

/// Seconds, for the schedules.
fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

/// The bound of `--stop-at` for the clients in containers, from the start of the run: they
/// stop when the driver ends the schedule (`Compose::end_after`), and at this time only if
/// it never does (a driver that fails removes them anyway). Far beyond any schedule, however
/// loaded the machine (the mixed one took 167 s beside two busy loops).
const CONTAINER_BOUND: Duration = Duration::from_secs(3600);

/// Waits until every host client of `run` counts every node again (connected, checked, out
/// of quarantine), as after a restart: the next fault of a schedule that says so waits for
/// it.
async fn wait_admitted(run: &Run) {
    for (name, redlock) in &run.clients {
        let probe = format!("chaos-probe:{name}");
        let admitted =
            chaos::workload::wait_admitted(redlock, &probe, Duration::from_secs(10)).await;
        assert!(
            admitted,
            "client {name} did not count every node again within 10 s"
        );
    }
    run.note("every host client counts every node");
}

fn assert_clean(report: &Report) {
    assert!(report.is_clean(), "{report}");
    assert!(report.ok > 0, "nobody ever held a lock: {report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a Docker engine; run by scripts/chaos"]
async fn a_kill_minority_and_restart() {
    require_enabled();
    let _failure = FailureNote::new("a_kill_minority");
    let _serial = SERIAL.lock().await;
    let (compose, mut run) = start(
        "a_kill_minority",
        "docker kill redis1, redis2 at 2 s, docker start 4 s later (empty, quarantined \
         1 s); docker kill redis5 at 9 s, or once the host clients count redis1 and redis2 \
         again if later, start 2 s later; the clients stop 3 s after the last event",
        false,
        settings(),
    )
    .await;
    run.at(2.0).await;
    compose.kill(&mut run, &[0, 1]).await;
    tokio::time::sleep(secs(4.0)).await;
    compose.start(&mut run, &[0, 1]).await;
    wait_admitted(&run).await;
    run.at(9.0).await;
    compose.kill(&mut run, &[4]).await;
    tokio::time::sleep(secs(2.0)).await;
    compose.start(&mut run, &[4]).await;
    compose.end_after(&mut run, secs(3.0)).await;
    let report = run.finish(&out_dir()).await;
    assert_clean(&report);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a Docker engine; run by scripts/chaos"]
async fn b_freeze_minority() {
    require_enabled();
    let _failure = FailureNote::new("b_freeze_minority");
    let _serial = SERIAL.lock().await;
    let (compose, mut run) = start(
        "b_freeze_minority",
        "docker pause redis1, redis2 for 4 s from 2 s; redis3, redis4 for 3 s from 7 s; the \
         clients stop 2 s after the last event",
        false,
        settings(),
    )
    .await;
    run.at(2.0).await;
    compose.pause(&mut run, &[0, 1]).await;
    tokio::time::sleep(secs(4.0)).await;
    compose.unpause(&mut run, &[0, 1]).await;
    run.at(7.0).await;
    compose.pause(&mut run, &[2, 3]).await;
    tokio::time::sleep(secs(3.0)).await;
    compose.unpause(&mut run, &[2, 3]).await;
    compose.end_after(&mut run, secs(2.0)).await;
    let report = run.finish(&out_dir()).await;
    assert_clean(&report);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a Docker engine; run by scripts/chaos"]
async fn c_cut_minority_off_the_network() {
    require_enabled();
    let _failure = FailureNote::new("c_network_minority");
    let _serial = SERIAL.lock().await;
    let (compose, mut run) = start(
        "c_network_minority",
        "docker network disconnect redis2, redis3 for 4 s from 2 s, redis5 for 2 s from 8 s \
         (connect again with --ip and --alias); the clients stop 2 s after the last event",
        false,
        settings(),
    )
    .await;
    run.at(2.0).await;
    compose.disconnect(&mut run, &[1, 2]).await;
    tokio::time::sleep(secs(4.0)).await;
    compose.connect(&mut run, &[1, 2]).await;
    run.at(8.0).await;
    compose.disconnect(&mut run, &[4]).await;
    tokio::time::sleep(secs(2.0)).await;
    compose.connect(&mut run, &[4]).await;
    compose.end_after(&mut run, secs(2.0)).await;
    let report = run.finish(&out_dir()).await;
    assert_clean(&report);
}

/// Client `a` reaches the nodes on network quorumlock-a, client `b` on quorumlock-b; each
/// node is on both. The partition takes redis4 and redis5 off quorumlock-a and redis1 and
/// redis2 off quorumlock-b: `a` sees {redis1, redis2, redis3}, `b` sees {redis3, redis4,
/// redis5}, two majorities that overlap in redis3 only. A third client on the host sees
/// all five. Packets across the cut are dropped silently, as in a real partition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a Docker engine; run by scripts/chaos"]
async fn d_partition_gives_two_clients_different_majorities() {
    require_enabled();
    let _failure = FailureNote::new("d_partition");
    let _serial = SERIAL.lock().await;
    let image = compose::client_image().await;
    let mut compose = Compose::up(false).await;
    let (a, b) = (Side { name: "a", n: 1 }, Side { name: "b", n: 2 });
    // Each side loses a different pair.
    let cuts = [(a, [3, 4]), (b, [0, 1])];
    let (cut_at, cut_for, tail) = (5.0, 4.0, 8.0);
    for side in [a, b] {
        compose.add_network(side).await;
    }
    let description = "clients a and b in containers reach the nodes on their own networks, \
                       client h0 on the host; partition for 4 s from 5 s, or from when both \
                       container clients have made an attempt if later: a sees redis1-3, b \
                       sees redis3-5; the clients stop 8 s after the heal";
    eprintln!("d_partition: {description}");
    let settings = settings();
    let mut run = Run::start_until_end(
        "d_partition",
        description,
        compose.target(),
        settings.clone(),
        1,
        2,
    )
    .await
    .expect("start the run");
    // The containers start on the shared monotonic clock, once they have had time to come
    // up and check their connections, and run until the driver ends the schedule.
    let start_at = run.t0() + ns(Duration::from_secs(3));
    let bound = run.t0() + ns(CONTAINER_BOUND);
    let args = client_args(
        [
            ("--resources", run.resources.join(",")),
            ("--workers", "2".to_owned()),
            ("--start-at", start_at.to_string()),
            ("--stop-at", bound.to_string()),
        ],
        &settings,
    );
    for side in [a, b] {
        compose.start_client(&image, side, &args).await;
    }
    let (host, redlock) = run.clients[0].clone();
    let observer = tokio::spawn(chaos::workload::observe_until(
        std::sync::Arc::clone(&run.ctx),
        redlock,
        host,
        start_at,
        run.until_end(),
    ));

    // No partition before both container clients work.
    for side in [a, b] {
        compose
            .wait_attempting(&side.container(), Duration::from_secs(20))
            .await;
    }
    run.at(cut_at).await;
    let mut faults = Vec::new();
    for (side, nodes) in cuts {
        faults.push(run.fault_begins_for("partition", &nodes, &[side.name]));
        compose.cut(side, &nodes).await;
    }
    tokio::time::sleep(secs(cut_for)).await;
    let healed = chaos::history::mono_ns();
    for (side, nodes) in cuts {
        compose.rejoin(side, &nodes).await;
    }
    for id in faults {
        run.fault_id_ends(id);
    }

    compose.end_after(&mut run, secs(tail)).await;
    observer.await.expect("the observer panicked");
    for side in [a, b] {
        let (records, stderr) = compose.collect(side).await;
        let ops: Vec<Outcome> = records
            .iter()
            .filter_map(|r| match r {
                Record::Op(op) => Some(op.outcome),
                _ => None,
            })
            .collect();
        let locked = ops.iter().filter(|&&o| o == Outcome::Ok).count();
        eprintln!(
            "client {}: {} attempts, {locked} locked; {}",
            side.name,
            ops.len(),
            stderr.trim()
        );
        assert!(
            locked > 0,
            "client {} never got a lock:\n{stderr}",
            side.name
        );
        run.merge(records);
    }
    // The partition was real: each container client saw exactly its side of it, and all
    // five nodes again some time after the heal (when TCP retransmits on the connections
    // the partition stalled: the client does not reconnect them itself).
    let views = run.ctx.history.records();
    for (client, side) in [("a", [0, 1, 2]), ("b", [2, 3, 4])] {
        let seen = |want: &[usize], after: u64| {
            views.iter().find_map(|r| match r {
                Record::View {
                    client: c,
                    at,
                    reachable,
                } if c.starts_with(client) && *at > after && reachable.as_slice() == want => {
                    Some(*at)
                }
                _ => None,
            })
        };
        assert!(
            seen(&side, 0).is_some(),
            "client {client} never saw exactly nodes {side:?}"
        );
        let back = seen(&[0, 1, 2, 3, 4], healed).expect("the partition never healed");
        eprintln!(
            "client {client} reached all five nodes again {:.1} s after the heal",
            (back - healed) as f64 / 1e9
        );
    }
    let report = run.finish(&out_dir()).await;
    drop(compose);
    assert_clean(&report);
}

/// Semaphores in containers: workers on two semaphores of 2 permits (six on each) while a
/// minority is killed and started empty, then, once it counts again, another is paused. The checker bounds the
/// holders of each semaphore, treats each slot as a mutex with its own counter, and checks
/// the order of the fencing tokens (tests/chaos/checker.rs; the local suite has the
/// semaphore's negative control).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a Docker engine; run by scripts/chaos"]
async fn j_semaphore_kill_and_pause_minority() {
    require_enabled();
    let _failure = FailureNote::new("j_semaphore_minority");
    let _serial = SERIAL.lock().await;
    let (compose, mut run) = start(
        "j_semaphore_minority",
        "semaphores of 2 permits, 6 workers each; docker kill redis1, redis2 at 1.5 s, \
         docker start 2.5 s later (empty, quarantined 1 s); docker pause redis4, redis5 for \
         2 s from 7 s, or from when the host clients count redis1 and redis2 again if \
         later; the clients stop 2 s after the last event",
        false,
        settings().semaphore(2),
    )
    .await;
    run.at(1.5).await;
    compose.kill(&mut run, &[0, 1]).await;
    tokio::time::sleep(secs(2.5)).await;
    compose.start(&mut run, &[0, 1]).await;
    // After the quarantine of redis1 and redis2 (1 s from each client's reconnection).
    wait_admitted(&run).await;
    run.at(7.0).await;
    compose.pause(&mut run, &[3, 4]).await;
    tokio::time::sleep(secs(2.0)).await;
    compose.unpause(&mut run, &[3, 4]).await;
    compose.end_after(&mut run, secs(2.0)).await;
    let report = run.finish(&out_dir()).await;
    assert_clean(&report);
    assert_eq!(report.permit_sections, report.ok, "{report}");
    assert_eq!(report.max_holders, 2, "{report}");
}

/// The read-write scenario's workers take the write side once in this many attempts, as
/// the local suite's do.
const WRITE_ONE_IN: u32 = 4;

/// Read-write locks on the host and in a container: workers on two read-write locks (six
/// on the host and two in client `c`'s container on each, the write side one attempt in
/// four) while a minority is killed and started empty, then, once it counts again, another
/// is paused. The merged history is checked as read-write locks (tests/chaos/checker.rs):
/// no writer beside any other section, the counter exact and every read the last write
/// before it, the tokens in order. The local suite has the read-write lock's negative
/// control.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a Docker engine; run by scripts/chaos"]
async fn k_rwlock_kill_and_pause_minority() {
    require_enabled();
    let _failure = FailureNote::new("k_rwlock_minority");
    let _serial = SERIAL.lock().await;
    let image = compose::client_image().await;
    let description = "read-write locks, the write side 1 attempt in 4, 6 workers on the host \
                       and 2 in a container (client c) on each; docker kill redis1, redis2 \
                       at 3 s, or once client c has made an attempt if later, docker start \
                       2.5 s later (empty, quarantined 1 s); docker pause redis4, redis5 for \
                       2 s from 8.5 s, or from when the host clients count redis1 and redis2 \
                       again if later; the clients stop 2.5 s after the last event";
    let (kill_at, down_for, pause_at, pause_for, tail) = (3.0, 2.5, 8.5, 2.0, 2.5);
    let settings = settings().read_write(WRITE_ONE_IN);
    let (mut compose, mut run) =
        start("k_rwlock_minority", description, false, settings.clone()).await;
    // The container's workers start 2 s in, once it has had time to come up and check its
    // connections, and stop with the host's, when the driver ends the schedule.
    let begin = run.t0() + ns(Duration::from_secs(2));
    let bound = run.t0() + ns(CONTAINER_BOUND);
    let args = client_args(
        [
            ("--resources", run.resources.join(",")),
            ("--workers", "2".to_owned()),
            ("--write-one-in", WRITE_ONE_IN.to_string()),
            ("--start-at", begin.to_string()),
            ("--stop-at", bound.to_string()),
        ],
        &settings,
    );
    compose.start_workers(&image, "c", 0, &args).await;
    // No fault before the container's client works: every node must count for it first (it
    // gives up otherwise), and it must have made attempts before the faults.
    compose
        .wait_attempting("quorumlock-chaos-c", Duration::from_secs(20))
        .await;
    run.at(kill_at).await;
    let killed = chaos::history::mono_ns();
    compose.kill(&mut run, &[0, 1]).await;
    tokio::time::sleep(secs(down_for)).await;
    compose.start(&mut run, &[0, 1]).await;
    // Not before the host clients count redis1 and redis2 again: their quarantine runs
    // 1 s from each client's reconnection, which its backoff can put 2 s after the start.
    wait_admitted(&run).await;
    run.at(pause_at).await;
    compose.pause(&mut run, &[3, 4]).await;
    tokio::time::sleep(secs(pause_for)).await;
    compose.unpause(&mut run, &[3, 4]).await;
    let unpaused = chaos::history::mono_ns();
    compose.end_after(&mut run, secs(tail)).await;

    let (records, stderr) = compose.collect_workers("c").await;
    eprintln!("client c: {}", stderr.trim());
    let sections = |records: &[Record], side: RwSide| {
        records
            .iter()
            .filter(|r| {
                matches!(r, Record::Op(op)
                    if op.outcome == Outcome::Ok && op.hold.is_some() && op.side == Some(side))
            })
            .count()
    };
    let (c_reads, c_writes) = (
        sections(&records, RwSide::Read),
        sections(&records, RwSide::Write),
    );
    // The container's workers ran across both faults, on both sides.
    let spans: Vec<(u64, u64)> = records
        .iter()
        .filter_map(|r| match r {
            Record::Op(op) => Some((op.start, op.end)),
            _ => None,
        })
        .collect();
    let first = spans.iter().map(|s| s.0).min();
    let last = spans.iter().map(|s| s.1).max();
    run.merge(records);
    let ctx = std::sync::Arc::clone(&run.ctx);
    let report = run.finish(&out_dir()).await;
    drop(compose);
    eprintln!("client c: {c_reads} read and {c_writes} write sections");
    assert_clean(&report);
    assert!(
        c_reads > 0 && c_writes > 0,
        "client c: {c_reads} reads, {c_writes} writes"
    );
    assert!(
        first.is_some_and(|f| f < killed) && last.is_some_and(|l| l > unpaused),
        "client c did not run across the faults: attempts from {first:?} to {last:?}, \
         kill at {killed}, unpause at {unpaused}"
    );
    // Every granted section ran under a side, and the checker counted them all.
    let history = ctx.history.records();
    assert_eq!(
        report.read_sections,
        sections(&history, RwSide::Read),
        "{report}"
    );
    assert_eq!(
        report.write_sections,
        sections(&history, RwSide::Write),
        "{report}"
    );
    assert_eq!(
        report.read_sections + report.write_sections,
        report.ok,
        "{report}"
    );
    assert_eq!(report.permit_sections, 0, "{report}");
    assert!(report.write_sections > 0, "no writer ran: {report}");
    assert!(
        report.max_readers >= 2,
        "readers were never held at once: {report}"
    );
}

/// Settings for the restart scenarios: locks long enough to be held across a restart of
/// three containers and the clients' reconnection, `ttl` long (and, with the quarantine,
/// the restarted nodes quarantined as long).
fn long_settings(ttl: Duration, quarantine: bool) -> Settings {
    Settings {
        ttl,
        quarantine,
        ..settings()
    }
}

/// The ttl of e1 and e2, and their quarantine.
const RESTART_TTL: Duration = Duration::from_secs(8);

/// The ttl of the negative control: as its clients quarantine nothing, a longer ttl costs
/// no time, and its lock outlasts a restart that takes longer than e1's and e2's ttl allows
/// (on a loaded machine, the three containers' restart and the reconnection took 7.2 s of
/// the 8 s once).
const NEGATIVE_TTL: Duration = Duration::from_secs(20);

/// How long the workers contend for the held resource beside its holder, once their
/// clients have checked their connections to the restarted nodes (`run::contend_beside`).
const BESIDE: Duration = Duration::from_secs(2);

/// Kills three nodes and starts them again at once.
async fn restart_majority(compose: &Compose, run: &mut Run) {
    compose.kill(run, &[0, 1, 2]).await;
    compose.start(run, &[0, 1, 2]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a Docker engine; run by scripts/chaos"]
async fn e1_restart_with_persistence() {
    require_enabled();
    let _failure = FailureNote::new("e1_restart_persistent");
    let _serial = SERIAL.lock().await;
    let (compose, mut run) = start_for(
        "e1_restart_persistent",
        "appendfsync always; workers contend 1 s; a client holds r0 (ttl 8 s) while redis1-3 \
         are killed and started at once, and until the workers have contended for r0 beside \
         it for 2 s once their clients reconnected (at most until 1 s before its lock \
         expires); then the workers contend 3 s on both",
        true,
        long_settings(RESTART_TTL, true),
        Duration::from_secs(1),
    )
    .await;
    let holding = run::hold_until_released(&mut run).await;
    restart_majority(&compose, &mut run).await;
    run::contend_beside(&mut run, holding, BESIDE).await;
    let all = run.resources.clone();
    run.spawn_workers_until_end(&all);
    compose.end_after(&mut run, secs(3.0)).await;
    let report = run.finish(&out_dir()).await;
    assert_clean(&report);
}

/// The same schedule on nodes that keep nothing, with the clients' quarantine: the
/// restarted majority does not count for the max ttl (8 s), so the held lock stays
/// exclusive; locks work again after it. The majority lost its fencing counters: they are
/// re-seeded after the quarantine (from the nodes' clocks, no intact majority being left,
/// design 2.6a), and tokens keep growing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a Docker engine; run by scripts/chaos"]
async fn e2_restart_without_persistence_with_quarantine() {
    require_enabled();
    let _failure = FailureNote::new("e2_restart_volatile_quarantine");
    let _serial = SERIAL.lock().await;
    let (compose, mut run) = start_for(
        "e2_restart_volatile_quarantine",
        "no persistence, quarantine on; workers contend 1 s; a client holds r0 (ttl 8 s) \
         while redis1-3 are killed and started empty at once (quarantined 8 s), and until \
         the workers have contended for r0 beside it for 2 s once their clients reconnected \
         (at most until 1 s before its lock expires); then the workers contend on both until \
         their clients count redis1-3 again, and 3 s more",
        false,
        long_settings(RESTART_TTL, true),
        Duration::from_secs(1),
    )
    .await;
    let holding = run::hold_until_released(&mut run).await;
    restart_majority(&compose, &mut run).await;
    let restarted = chaos::history::mono_ns();
    run::contend_beside(&mut run, holding, BESIDE).await;
    let all = run.resources.clone();
    run.spawn_workers_until_end(&all);
    // Until the quarantine is over for every client.
    wait_admitted(&run).await;
    compose.end_after(&mut run, secs(3.0)).await;
    let report = run.finish(&out_dir()).await;
    assert_clean(&report);
    assert!(
        !report.recoveries_ms.is_empty(),
        "no majority outage seen: {report}"
    );
    assert!(
        report.recoveries_ms.iter().all(Option::is_some),
        "no lock after the quarantine: {report}"
    );
    assert!(
        report.token_starts.iter().any(|t| *t > restarted),
        "no token after the restart: {report}"
    );
}

/// A rolling restart of nodes that keep nothing, one at a time, each back before the next
/// goes: every node loses its fencing counters; tokens grow all the same (design 2.6a).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a Docker engine; run by scripts/chaos"]
async fn i_rolling_restart_without_persistence() {
    require_enabled();
    let _failure = FailureNote::new("i_rolling_restart_volatile");
    let _serial = SERIAL.lock().await;
    let (compose, mut run) = start(
        "i_rolling_restart_volatile",
        "no persistence, quarantine on (1 s); redis1-5 killed and started empty one at a \
         time, every 0.5 s from 1 s (or as soon as the one before is back, if later); the \
         clients stop 5 s after the last is back",
        false,
        settings(),
    )
    .await;
    let mut last = 0;
    for (i, at) in [1.0, 1.5, 2.0, 2.5, 3.0].into_iter().enumerate() {
        run.at(at).await;
        compose.kill(&mut run, &[i]).await;
        compose.start(&mut run, &[i]).await;
        last = chaos::history::mono_ns();
    }
    compose.end_after(&mut run, secs(5.0)).await;
    let report = run.finish(&out_dir()).await;
    assert_clean(&report);
    assert!(
        report.token_starts.iter().any(|t| *t > last),
        "no token after the last restart: {report}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a Docker engine; run by scripts/chaos"]
async fn f_kill_majority_fails_fast_and_recovers() {
    require_enabled();
    let _failure = FailureNote::new("f_kill_majority");
    let _serial = SERIAL.lock().await;
    let (compose, mut run) = start(
        "f_kill_majority",
        "appendfsync always; docker kill redis1-3 at 2 s, docker start 4 s later; the \
         clients stop 6 s after the start",
        true,
        settings(),
    )
    .await;
    run.at(2.0).await;
    compose.kill(&mut run, &[0, 1, 2]).await;
    tokio::time::sleep(secs(4.0)).await;
    compose.start(&mut run, &[0, 1, 2]).await;
    compose.end_after(&mut run, secs(6.0)).await;
    let report = run.finish(&out_dir()).await;
    // Clean includes no stuck call: every attempt failed within its deadline.
    assert_clean(&report);
    assert!(report.no_quorum > 0, "the outage was never seen: {report}");
    assert!(
        !report.recoveries_ms.is_empty(),
        "no majority outage seen: {report}"
    );
    assert!(
        report.recoveries_ms.iter().all(Option::is_some),
        "no lock after the nodes came back: {report}"
    );
}

/// One fault of the mixed schedule.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Kill,
    Pause,
    Disconnect,
}

/// A seeded random schedule of (inject at, heal at, kind, nodes), every node in at most one
/// fault at a time. Up to three nodes are out at once (so there are moments without a
/// majority); nodes that lose their data (killed, then quarantined for the max ttl and a
/// reconnection) stay a minority. Everything is healed 3 s before the end.
fn mixed_schedule(seed: u64, duration: f64, max_ttl: f64) -> Vec<(f64, f64, Kind, Vec<usize>)> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut busy_until = [0.0f64; 5];
    let mut lost_until = [0.0f64; 5];
    let mut faults = Vec::new();
    let mut t = 1.5;
    while t < duration - 5.0 {
        let free: Vec<usize> = (0..5).filter(|&i| busy_until[i] <= t).collect();
        let out = 5 - free.len();
        let kind = match rng.random_range(0..3) {
            0 => Kind::Kill,
            1 => Kind::Pause,
            _ => Kind::Disconnect,
        };
        let want = rng.random_range(1..=2usize).min(3usize.saturating_sub(out));
        let lost = (0..5).filter(|&i| lost_until[i] > t).count();
        let allowed = if kind == Kind::Kill {
            want.min(2usize.saturating_sub(lost))
        } else {
            want
        };
        if allowed > 0 && free.len() >= allowed {
            let mut nodes = free.clone();
            for i in (1..nodes.len()).rev() {
                nodes.swap(i, rng.random_range(0..=i));
            }
            nodes.truncate(allowed);
            nodes.sort_unstable();
            let heal = (t + rng.random_range(1.5..4.0)).min(duration - 3.0);
            for &i in &nodes {
                busy_until[i] = heal + 0.3;
                if kind == Kind::Kill {
                    // Back after the heal, quarantined for the max ttl, plus a reconnection.
                    lost_until[i] = heal + max_ttl + 2.5;
                }
            }
            faults.push((t, heal, kind, nodes));
        }
        t += rng.random_range(0.8..2.0);
    }
    faults
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a Docker engine; run by scripts/chaos"]
async fn g_mixed_random_schedule() {
    require_enabled();
    let _failure = FailureNote::new("g_mixed");
    let _serial = SERIAL.lock().await;
    let seed = match std::env::var("QUORUMLOCK_CHAOS_SEED") {
        Ok(s) => s.parse().expect("QUORUMLOCK_CHAOS_SEED: a number"),
        Err(_) => rand::rng().random(),
    };
    let duration = 24.0;
    let settings = settings();
    let faults = mixed_schedule(seed, duration, settings.ttl.as_secs_f64());
    let _ = writeln!(
        std::io::stderr(),
        "g_mixed: seed {seed} (QUORUMLOCK_CHAOS_SEED={seed} repeats this schedule)"
    );
    let mut description = format!("seed {seed}:");
    for (at, heal, kind, nodes) in &faults {
        let names: Vec<&str> = nodes.iter().map(|&i| SERVICES[i]).collect();
        description.push_str(&format!(
            " {kind:?} {} {at:.1}-{heal:.1} s;",
            names.join("+")
        ));
    }
    // The clients stop as long after the last event as planned (`duration` in all).
    let tail = duration - faults.iter().map(|f| f.1).fold(0.0, f64::max);
    description.push_str(&format!(
        " a late event delays those after it as much; the clients stop {tail:.1} s after the \
         last event"
    ));
    let (compose, mut run) = start("g_mixed", &description, false, settings).await;
    run.seed = Some(seed);
    // Every inject and heal, in time order.
    let mut events: Vec<(f64, bool, Kind, Vec<usize>)> = Vec::new();
    for (at, heal, kind, nodes) in faults {
        events.push((at, true, kind, nodes.clone()));
        events.push((heal, false, kind, nodes));
    }
    events.sort_by(|x, y| x.0.total_cmp(&y.0).then(x.1.cmp(&y.1)));
    // (planned, when it was done) of the event before: a late event delays those after it,
    // so that faults keep the spacing the schedule was planned with (up to three nodes out,
    // nodes that lost data quarantined before others go).
    let mut before: Option<(f64, u64)> = None;
    for (at, inject, kind, nodes) in events {
        let due = run.t0() + ns(secs(at));
        let due = before.map_or(due, |(planned, done)| {
            due.max(done + ns(secs(at - planned)))
        });
        chaos::workload::sleep_until(due).await;
        match (kind, inject) {
            (Kind::Kill, true) => compose.kill(&mut run, &nodes).await,
            (Kind::Kill, false) => compose.start(&mut run, &nodes).await,
            (Kind::Pause, true) => compose.pause(&mut run, &nodes).await,
            (Kind::Pause, false) => compose.unpause(&mut run, &nodes).await,
            (Kind::Disconnect, true) => compose.disconnect(&mut run, &nodes).await,
            (Kind::Disconnect, false) => compose.connect(&mut run, &nodes).await,
        }
        before = Some((at, chaos::history::mono_ns()));
    }
    compose.end_after(&mut run, secs(tail)).await;
    let report = run.finish(&out_dir()).await;
    assert_clean(&report);
}

/// The negative control: the schedule of e2 with clients that do not quarantine (and a
/// longer ttl, [`NEGATIVE_TTL`]), and nothing after the holder. The restarted majority
/// grants the held resource to the workers: the checker must report it. That the workers
/// contended beside the holder is asserted first: without it there is nothing to catch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a Docker engine; run by scripts/chaos"]
async fn negative_control_undelayed_majority_restart_without_quarantine() {
    require_enabled();
    let _failure = FailureNote::new("negative_control");
    let _serial = SERIAL.lock().await;
    let (compose, mut run) = start_for(
        "negative_control",
        "no persistence, quarantine OFF, ttl 20 s; workers contend 1 s; a client holds r0 \
         while redis1-3 are killed and started empty at once, and until the workers have \
         contended for r0 beside it for 2 s once their clients reconnected (at most until \
         1 s before its lock expires)",
        false,
        long_settings(NEGATIVE_TTL, false),
        Duration::from_secs(1),
    )
    .await;
    let holding = run::hold_until_released(&mut run).await;
    restart_majority(&compose, &mut run).await;
    let beside = run::contend_beside(&mut run, holding, BESIDE).await;
    let report = run.finish(&out_dir()).await;
    // Without contention beside the holder there is no double grant to catch.
    assert!(
        beside,
        "the holder's lock (ttl {NEGATIVE_TTL:?}) was about to expire before the workers had \
         contended beside it for {BESIDE:?}: the restart and the reconnection took that long"
    );
    assert!(
        report.exclusion_violated(),
        "the checker missed the double grant: {report}"
    );
}

/// The candidate leading now by its own records: its latest term began after `after` and has
/// not ended. Waits (at most 20 s) until one does.
async fn leading(compose: &Compose, names: &[&str], after: u64) -> (String, u64) {
    let give_up = chaos::history::mono_ns() + ns(Duration::from_secs(20));
    loop {
        let mut latest: Option<(String, u64)> = None;
        for name in names {
            let records = compose.candidate_records(name).await;
            for r in &records {
                let Record::Lead { term, start, .. } = r else {
                    continue;
                };
                let ended = records.iter().any(|o| {
                    matches!(o, Record::Op(op) if op.hold.as_ref().and_then(|h| h.token) == Some(*term))
                });
                if !ended && *start > after && latest.as_ref().is_none_or(|(_, s)| start > s) {
                    latest = Some((name.to_string(), *start));
                }
            }
        }
        if let Some(found) = latest {
            return found;
        }
        if chaos::history::mono_ns() > give_up {
            let mut logs = String::new();
            for name in names {
                let out = tokio::process::Command::new("docker")
                    .args(["logs", &format!("quorumlock-chaos-{name}")])
                    .output()
                    .await;
                if let Ok(out) = out {
                    logs.push_str(&format!(
                        "--- {name}\n{}{}",
                        String::from_utf8_lossy(&out.stdout),
                        String::from_utf8_lossy(&out.stderr)
                    ));
                }
            }
            panic!("no leader within 20 s\n{logs}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Leader election (docs/chaos.md, h): three candidates in containers campaign for one
/// election while the leader's container is killed and started again, a minority of nodes
/// is paused, a majority is killed and started again (they persist every write: the terms
/// go on growing), and a minority node restarts under a new leader. The terms are checked
/// for overlaps and regressions; a term that began while a healthy leader held (flapping)
/// and the time to the next leader after each kill are reported, not asserted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a Docker engine; run by scripts/chaos"]
async fn h_election() {
    require_enabled();
    let _failure = FailureNote::new("h_election");
    let _serial = SERIAL.lock().await;
    let image = compose::client_image().await;
    let mut compose = Compose::up(true).await;
    let description = "candidates e1-e3 in containers (ttl 1 s); the leader's container killed \
                       at 3 s and started 1.5 s later, redis1-2 paused for 3 s from 6.5 s, \
                       redis1-3 killed for 1.5 s from 10.5 s, the new leader killed at 15 s \
                       while redis5 restarts, and started 1.5 s later (each event at its \
                       time or, when a new leader is awaited, once it leads, if later); the \
                       candidates stop 5.5 s after the last event";
    eprintln!("h_election: {description}");
    let settings = settings();
    // The run records the node faults; it has no workers of its own.
    let mut run = Run::start(
        "h_election",
        description,
        compose.target(),
        settings.clone(),
        1,
        0,
        Duration::ZERO,
    )
    .await
    .expect("start the run");
    let names = ["e1", "e2", "e3"];
    // They campaign until the driver ends the schedule.
    let bound = run.t0() + ns(CONTAINER_BOUND);
    let args = client_args(
        [
            ("--elect", "h_election".to_owned()),
            ("--stop-at", bound.to_string()),
        ],
        &settings,
    );
    for (n, name) in names.iter().enumerate() {
        compose.start_candidate(&image, name, n as u8, &args).await;
    }
    let now = chaos::history::mono_ns;
    let mut kills: Vec<(String, u64)> = Vec::new();
    let mut quiet: Vec<(u64, u64, &str)> = Vec::new();
    let mut failovers: Vec<(u64, &str)> = Vec::new();

    leading(&compose, &names, 0).await;
    let from = now();
    run.at(3.0).await;
    quiet.push((from, now(), "healthy leader"));
    // The leader now: on a loaded machine the first one may have lost its term since
    // (a flap, reported below), and killing it would not make the others elect anyone.
    let (first, _) = leading(&compose, &names, 0).await;
    run.note(&format!("kill the leader {first}"));
    let killed = compose.kill_candidate(&first).await;
    kills.push((first.clone(), killed));
    failovers.push((killed, "leader killed"));
    chaos::workload::sleep_until(killed + ns(secs(1.5))).await;
    compose.restart_candidate(&first).await;
    leading(&compose, &names, killed).await;

    run.at(6.5).await;
    let from = now();
    compose.pause(&mut run, &[0, 1]).await;
    tokio::time::sleep(secs(3.0)).await;
    compose.unpause(&mut run, &[0, 1]).await;
    quiet.push((from, now(), "minority paused"));

    run.at(10.5).await;
    compose.kill(&mut run, &[0, 1, 2]).await;
    tokio::time::sleep(secs(1.5)).await;
    // A leader may win as soon as the first of the three answers again: measured from the
    // `docker start`.
    let restarting = now();
    compose.start(&mut run, &[0, 1, 2]).await;
    failovers.push((restarting, "majority restarted"));
    leading(&compose, &names, restarting).await;

    run.at(15.0).await;
    let (leader, _) = leading(&compose, &names, restarting).await;
    run.note(&format!("kill the leader {leader}"));
    let killed = compose.kill_candidate(&leader).await;
    kills.push((leader.clone(), killed));
    failovers.push((killed, "leader killed again"));
    compose.kill(&mut run, &[4]).await;
    compose.start(&mut run, &[4]).await;
    leading(&compose, &names, killed).await;
    chaos::workload::sleep_until(killed + ns(secs(1.5))).await;
    compose.restart_candidate(&leader).await;
    compose.end_after(&mut run, secs(5.5)).await;
    let stop = now();

    let mut records = Vec::new();
    for name in names {
        records.extend(compose.collect_candidate(name).await);
    }
    let mut problems = Vec::new();
    let mut history = chaos::election::terms(&records, &kills, &mut problems);
    run.ctx.history.close_open_faults();
    history.extend(run.ctx.history.records());
    history.push(Record::Meta {
        scenario: "h_election".into(),
        nodes: 5,
        description: description.into(),
        seed: None,
        start: run.t0(),
        stop,
    });
    let report = chaos::checker::check_terms(&history);
    let starts = chaos::election::starts(&history);
    // Flapping is reported, not asserted: a timing figure of the machine (issue 20).
    let flapped = chaos::election::flaps(&starts, &quiet);
    let next = chaos::election::next_leader(&starts, &failovers);
    let gaps: Vec<String> = next
        .iter()
        .map(|(what, ms)| match ms {
            Some(ms) => format!("{what}: {ms} ms"),
            None => format!("{what}: never"),
        })
        .collect();
    let summary = format!(
        "{report}\n  terms: {}; time to the next leader: {}; flapping: {flapped:?}",
        starts.len(),
        gaps.join(", ")
    );
    eprintln!("{summary}");
    let out = out_dir();
    let written = chaos::history::write_jsonl(&out.join("h_election.jsonl"), &history)
        .and_then(|()| std::fs::write(out.join("h_election.txt"), &summary))
        .and_then(|()| {
            // The last column holds the time to the next leader after each kill, not an
            // acquire latency (a term's op spans the whole term).
            let row = report.markdown_row();
            let cells = row.trim_end_matches('|').trim_end();
            let cells = &cells[..cells.rfind('|').unwrap_or(cells.len())];
            let next: Vec<String> = next
                .iter()
                .map(|(_, ms)| ms.map_or("never".into(), |ms| ms.to_string()))
                .collect();
            let row = format!("{cells}| next leader {} ms |", next.join(" / "));
            let table = format!("{}\n{row}\n", Report::markdown_header());
            std::fs::write(out.join("h_election.row.md"), table)
        });
    if let Err(e) = written {
        eprintln!("  history not written to {}: {e}", out.display());
    }
    drop(compose);
    assert!(problems.is_empty(), "{problems:?}\n{summary}");
    assert_clean(&report);
    assert!(!next.is_empty(), "no leader was killed: {summary}");
    assert!(
        next.iter().all(|(_, ms)| ms.is_some()),
        "no leader after a kill: {summary}"
    );
}

/// The chaos client's flags: `flags`, then the run's ttl and node timeout.
fn client_args<const N: usize>(flags: [(&str, String); N], settings: &Settings) -> Vec<String> {
    let common = [
        ("--ttl-ms", settings.ttl.as_millis().to_string()),
        (
            "--node-timeout-ms",
            settings.node_timeout.as_millis().to_string(),
        ),
    ];
    flags
        .into_iter()
        .chain(common)
        .flat_map(|(flag, value)| [flag.to_owned(), value])
        .collect()
}
