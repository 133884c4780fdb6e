//! The chaos suite without Docker: contending workers on a local quorum of five
//! `redis-server` processes while nodes are killed, restarted and frozen, each run checked
//! by the history checker of tests/chaos/ (overlapping critical sections, lost counter
//! updates, fencing-token regressions, stuck calls). The counter lives in a sixth server
//! outside the quorum. Each scenario lasts a few seconds; tests/chaos.rs runs the longer
//! ones against Docker Compose (docs/chaos.md).
//!
//! A negative control breaks the delayed-restart assumption on purpose and must be caught.

#[path = "chaos/mod.rs"]
mod chaos;

use std::path::PathBuf;
use std::time::Duration;

use chaos::checker::Report;
use chaos::history::mono_ns;
use chaos::run::{self, Run, Target};
use chaos::workload::Settings;
use quorumlock::testkit::{LocalQuorum, NodeOptions, Persistence};

const NODES: usize = 5;

/// One scenario at a time: they measure availability and latency on a small machine, and
/// each one runs six servers and a dozen workers.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Local test settings: a node timeout with room for a loaded CI machine.
fn settings() -> Settings {
    Settings {
        node_timeout: Duration::from_millis(250),
        ..Settings::fast()
    }
}

/// The histories go to the target directory, for a look after a failure.
fn out_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("chaos-local")
}

/// The local servers and the faults injected into them.
struct Local {
    quorum: LocalQuorum,
    _counter: LocalQuorum,
}

impl Local {
    /// Starts five nodes and a counter server, and a run on them: three clients, two workers
    /// per client and resource, for `duration`.
    async fn start(
        name: &str,
        description: &str,
        persistence: Persistence,
        settings: Settings,
        duration: Duration,
    ) -> (Local, Run) {
        let options = NodeOptions {
            persistence,
            ..NodeOptions::default()
        };
        let quorum = LocalQuorum::start_with(NODES, options)
            .await
            .expect("start the quorum");
        let counter = LocalQuorum::start(1).await.expect("start the counter");
        let target = Target {
            nodes: quorum.urls(),
            counter: counter.urls()[0].clone(),
            persistent: persistence == Persistence::AofAlways,
        };
        let run = Run::start(name, description, target, settings, 3, 2, duration)
            .await
            .expect("start the run");
        let local = Local {
            quorum,
            _counter: counter,
        };
        (local, run)
    }

    async fn kill(&mut self, run: &mut Run, nodes: &[usize]) {
        run.fault_begins("kill", nodes);
        for &i in nodes {
            self.quorum.node_mut(i).kill().await.expect("kill");
        }
    }

    /// Starts `nodes` again; they come back empty unless they persist.
    async fn restart(&mut self, run: &mut Run, nodes: &[usize]) {
        for &i in nodes {
            self.quorum.node_mut(i).restart().await.expect("restart");
        }
        run.restarted(nodes, mono_ns());
    }

    fn freeze(&mut self, run: &mut Run, nodes: &[usize]) {
        run.fault_begins("pause", nodes);
        for &i in nodes {
            self.quorum.node_mut(i).freeze().expect("freeze");
        }
    }

    fn resume(&mut self, run: &mut Run, nodes: &[usize]) {
        for &i in nodes {
            self.quorum.node_mut(i).resume().expect("resume");
        }
        run.fault_ends(nodes, mono_ns());
    }
}

fn assert_clean(report: &Report) {
    assert!(report.is_clean(), "{report}");
    assert!(report.ok > 0, "nobody ever held a lock: {report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_while_a_minority_is_killed_and_restarted() {
    let _serial = SERIAL.lock().await;
    let (mut local, mut run) = Local::start(
        "local_kill_minority",
        "nodes 0 and 1 killed at 0.8 s, restarted empty at 2 s (quarantined for the 1 s max ttl)",
        Persistence::None,
        settings(),
        Duration::from_secs(4),
    )
    .await;
    run.at(0.8).await;
    local.kill(&mut run, &[0, 1]).await;
    run.at(2.0).await;
    local.restart(&mut run, &[0, 1]).await;
    let report = run.finish(&out_dir()).await;
    assert_clean(&report);
    assert!(report.availability() > Some(0.9), "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_while_a_minority_is_frozen() {
    let _serial = SERIAL.lock().await;
    let (mut local, mut run) = Local::start(
        "local_freeze_minority",
        "nodes 1 and 3 frozen (SIGSTOP) from 0.8 s to 2.3 s",
        Persistence::None,
        settings(),
        Duration::from_secs(3),
    )
    .await;
    run.at(0.8).await;
    local.freeze(&mut run, &[1, 3]);
    run.at(2.3).await;
    local.resume(&mut run, &[1, 3]);
    let report = run.finish(&out_dir()).await;
    assert_clean(&report);
    assert!(report.availability() > Some(0.9), "{report}");
}

/// The nodes persist every write: a majority that comes back empty would lose the fencing
/// counters, and tokens could then go backwards (design 2.6 requires `appendfsync always`
/// for tokens; the lock keys themselves are covered by the quarantine either way).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fails_fast_while_a_majority_is_down_and_recovers() {
    let _serial = SERIAL.lock().await;
    let (mut local, mut run) = Local::start(
        "local_majority_down",
        "nodes 0, 1 and 2 (appendfsync always) killed at 0.8 s, restarted at 2 s",
        Persistence::AofAlways,
        settings(),
        Duration::from_secs(5),
    )
    .await;
    run.at(0.8).await;
    local.kill(&mut run, &[0, 1, 2]).await;
    run.at(2.0).await;
    local.restart(&mut run, &[0, 1, 2]).await;
    let report = run.finish(&out_dir()).await;
    // No stuck call is part of clean: every attempt failed within its deadline.
    assert_clean(&report);
    assert!(report.no_quorum > 0, "the outage was never seen: {report}");
    assert!(report.majority_down_ms > 0, "{report}");
    assert!(
        report.recoveries_ms.iter().all(Option::is_some),
        "no lock after the nodes came back: {report}"
    );
}

/// The negative control's schedule (`run::hold_long`): workers contend for 0.4 s, then a
/// separate client holds r0 for 1.2 s (ttl 2 s) while nodes 0, 1 and 2 restart empty at
/// once, and the workers contend for r0 again.
async fn restart_a_majority_under_a_held_lock(name: &str, quarantine: bool) -> Report {
    let settings = Settings {
        ttl: Duration::from_secs(2),
        quarantine,
        ..settings()
    };
    let (mut local, mut run) = Local::start(
        name,
        "workers contend for 0.4 s; then a client holds r0 for 1.2 s (ttl 2 s), meanwhile \
         nodes 0, 1 and 2 restart empty at once and workers contend for r0 again",
        Persistence::None,
        settings,
        Duration::from_millis(400),
    )
    .await;
    let holding = run::hold_long(&mut run, Duration::from_millis(1_200)).await;
    local.kill(&mut run, &[0, 1, 2]).await;
    local.restart(&mut run, &[0, 1, 2]).await;
    run::contend_while_held(&mut run, holding, Duration::ZERO).await;
    run.finish(&out_dir()).await
}

/// The negative control: clients without quarantine, nodes without persistence, and a
/// majority restarted with no delay while a lock is held. This breaks assumption 2, and the
/// checker must see the second holder; otherwise the suite could not tell.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn negative_control_an_undelayed_majority_restart_without_quarantine_is_caught() {
    let _serial = SERIAL.lock().await;
    let report = restart_a_majority_under_a_held_lock("local_negative_control", false).await;
    assert!(
        report.exclusion_violated(),
        "the checker missed a double grant: {report}"
    );
}

/// The same restart with the client's quarantine on: the restarted majority does not count
/// until it has been up for the max ttl, so the held lock stays exclusive. (The run ends
/// before the quarantine does: after it, the fencing counters the majority lost could let
/// tokens go backwards, which design 2.6 rules out only with `appendfsync always`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undelayed_majority_restart_is_harmless_with_quarantine() {
    let _serial = SERIAL.lock().await;
    let report =
        restart_a_majority_under_a_held_lock("local_majority_restart_quarantined", true).await;
    assert_clean(&report);
}
