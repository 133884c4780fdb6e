//! Leader election under chaos, locally: four `quorumlock elect` candidates, each a separate
//! process, campaign for one election on five `redis-server` processes while the leader's
//! process is killed and restarted, frozen and resumed, and nodes are frozen, killed and
//! restarted (ttl 2 s). Each candidate's command records when it began and ended and in which
//! term (`$QUORUMLOCK_TERM`); the term checker of tests/chaos/ reads those intervals: at most one
//! command at a time, terms strictly increasing. The driver also measures how long the
//! election went without a leader after each kill, and reports (without asserting: a timing
//! figure of the machine) any new term that began while a healthy leader held.
//!
//! A negative control runs two candidates that do not share their nodes: the checker must
//! see two leaders at once.
//!
//! Times are `CLOCK_REALTIME` (bash's `$EPOCHREALTIME` in the commands, the same clock in the
//! driver): one machine, a run of seconds.

#[path = "chaos/mod.rs"]
mod chaos;
mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use chaos::checker::{check_terms, Report};
use chaos::election::{flaps, next_leader, starts, term_op};
use chaos::history::{write_jsonl, Record};
use common::cli::binary;
use quorumlock::testkit::LocalQuorum;
use quorumlock::RedLock;
use tokio::process::{Child, Command};

const ELECTION: &str = "scheduler";
/// Long enough that a loaded machine's slow `appendfsync always` nodes do not make a healthy
/// leader miss its extension window (between half the ttl left and the margin, 2 x ttl/10).
const TTL: Duration = Duration::from_secs(2);
/// The retry pause of a candidate: 100 ms + up to 100 ms (`Candidacy`'s default).
const RETRY: Duration = Duration::from_millis(200);

/// One scenario at a time: each runs five servers and four candidates.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The command each candidate runs while leading: appends `start TERM TIME` to `log`, and
/// `end TERM TIME` when it gets SIGTERM (from `elect`, or from the watchdog when `elect`
/// died), then exits.
const COMMAND: &str = r#"echo "start $QUORUMLOCK_TERM $EPOCHREALTIME" >> log
trap 'echo "end $QUORUMLOCK_TERM $EPOCHREALTIME" >> log; exit 0' TERM
i=0; while [ $i -lt 3000 ]; do sleep 0.02; i=$((i+1)); done"#;

/// Now, in nanoseconds of `CLOCK_REALTIME`.
fn now_ns() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
}

fn out_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("chaos-elect")
}

/// One candidate process, `quorumlock elect`, in a directory of its own per start.
struct Candidate {
    name: String,
    dir: PathBuf,
    child: Child,
}

fn start_candidate(urls: &[String], root: &Path, name: &str) -> Candidate {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).expect("candidate directory");
    let mut c: Command = binary(urls);
    c.env("QUORUMLOCK_NODE_TIMEOUT", "250ms")
        .args([
            "elect",
            "--ttl",
            &humantime::format_duration(TTL).to_string(),
        ])
        .args(["--identity", name, ELECTION])
        .args(["--", "bash", "-c", COMMAND])
        .current_dir(&dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let child = c.spawn().expect("start a candidate");
    Candidate {
        name: name.to_string(),
        dir,
        child,
    }
}

/// Reads every term a candidate's commands recorded, as history records: one `Op` per
/// term. A term without its end is a command that was not stopped: a problem.
fn terms_of(candidate: &str, dir: &Path, problems: &mut Vec<String>) -> Vec<Record> {
    let log = std::fs::read_to_string(dir.join("log")).unwrap_or_default();
    let mut records = Vec::new();
    let mut open: Option<(u64, u64)> = None;
    for line in log.lines() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        let (Some(what), Some(term), Some(at)) = (parts.first(), parts.get(1), parts.get(2)) else {
            problems.push(format!("{candidate}: unreadable line {line:?}"));
            continue;
        };
        let term: u64 = term.parse().unwrap_or(0);
        let at = (at.parse::<f64>().unwrap_or(0.0) * 1e9) as u64;
        match (*what, open.take()) {
            ("start", None) => open = Some((term, at)),
            ("end", Some((started, start))) if started == term => {
                records.push(term_op(candidate, ELECTION, term, start, at, true));
            }
            _ => problems.push(format!("{candidate}: unexpected line {line:?}")),
        }
    }
    if let Some((term, _)) = open {
        problems.push(format!(
            "{candidate}: the command of term {term} never ended"
        ));
    }
    records
}

/// Whose command runs now (its log's last line is a start; the latest start if several
/// run, which the checker then reports), waiting (at most 20 s) until one does. What
/// observers read (`RedLock::leader`) is advisory and may name a leader that just lost; the
/// command's own record is what the run checks.
async fn current_leader(candidates: &[Candidate]) -> usize {
    for _ in 0..1000 {
        let running = candidates.iter().enumerate().filter_map(|(i, c)| {
            let log = std::fs::read_to_string(c.dir.join("log")).unwrap_or_default();
            let last = log.lines().last()?.to_string();
            let at = last.strip_prefix("start ")?.split_whitespace().nth(1)?;
            Some((at.parse::<f64>().ok()?, i))
        });
        if let Some((_, i)) = running.max_by(|a, b| a.0.total_cmp(&b.0)) {
            return i;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no leader within 20 s");
}

/// Whose command started after `after` and runs now, waiting (at most 20 s).
async fn current_leader_after(candidates: &[Candidate], after: u64) -> usize {
    for _ in 0..1000 {
        let i = current_leader(candidates).await;
        let log = std::fs::read_to_string(candidates[i].dir.join("log")).unwrap_or_default();
        let started = log.lines().last().and_then(|l| l.split_whitespace().nth(2));
        let started = started.and_then(|t| t.parse::<f64>().ok()).unwrap_or(0.0);
        if (started * 1e9) as u64 > after {
            return i;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no new leader within 20 s");
}

/// Whether an observer names a leader now, waiting (at most 20 s) until it does.
async fn observed(redlock: &RedLock) -> String {
    for _ in 0..400 {
        if let Ok(Some(leader)) = redlock.leader(ELECTION).await {
            return leader.identity;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no leader observed within 20 s");
}

/// Stops every candidate with SIGTERM (relayed to its command, which records its end) and
/// waits for them.
async fn stop_all(candidates: &mut [Candidate]) {
    for c in candidates.iter() {
        if let Some(pid) = c.child.id() {
            let pid = nix::unistd::Pid::from_raw(pid as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        }
    }
    for c in candidates.iter_mut() {
        let _ = tokio::time::timeout(Duration::from_secs(10), c.child.wait()).await;
    }
}

fn assert_clean(report: &Report, problems: &[String]) {
    assert!(problems.is_empty(), "{problems:?}\n{report}");
    assert!(report.is_clean(), "{report}");
    assert!(report.ok > 0, "nobody ever led: {report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_at_a_time_while_leaders_and_nodes_die() {
    let _serial = SERIAL.lock().await;
    let mut q = LocalQuorum::start(5).await.expect("start the quorum");
    let urls = q.urls();
    let root = tempfile::tempdir().expect("scratch directory");
    let observer = RedLock::builder()
        .nodes(urls.clone())
        .node_timeout(Duration::from_millis(250))
        .build()
        .expect("observer");
    observer.wait_for_nodes(Duration::from_secs(5)).await;
    let mut candidates: Vec<Candidate> = (0..4)
        .map(|i| start_candidate(&urls, root.path(), &format!("c{i}")))
        .collect();
    let began = now_ns();
    let mut quiet: Vec<(u64, u64, &str)> = Vec::new();
    let mut failovers: Vec<(u64, &str)> = Vec::new();

    // A healthy leader holds: no new term.
    let i = current_leader(&candidates).await;
    let first = candidates[i].name.clone();
    assert_eq!(observed(&observer).await, first);
    let from = now_ns();
    tokio::time::sleep(Duration::from_secs(2)).await;
    quiet.push((from, now_ns(), "healthy leader"));

    // The leader's process is killed (SIGKILL: nothing released), and started again.
    let i = candidates
        .iter()
        .position(|c| c.name == first)
        .expect("the leader");
    let killed = now_ns();
    candidates[i].child.kill().await.expect("kill the leader");
    failovers.push((killed, "leader process killed"));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let restarted = format!("{first}-again");
    candidates.push(start_candidate(&urls, root.path(), &restarted));
    let second = current_leader_after(&candidates, killed).await;
    assert_ne!(candidates[second].name, first);
    tokio::time::sleep(Duration::from_millis(500)).await;

    // A minority of nodes freezes, then resumes: the leader holds.
    let from = now_ns();
    for n in [0, 1] {
        q.node_mut(n).freeze().expect("freeze");
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    for n in [0, 1] {
        q.node_mut(n).resume().expect("resume");
    }
    quiet.push((from, now_ns(), "minority frozen"));
    tokio::time::sleep(Duration::from_millis(500)).await;

    // A majority of nodes is killed: the leader must stop; they restart (they persist every
    // write, fencing counters included) and a new term begins.
    for n in [0, 1, 2] {
        q.node_mut(n).kill().await.expect("kill a node");
    }
    // Long enough that the leader's validity runs out.
    tokio::time::sleep(TTL + Duration::from_millis(500)).await;
    // A leader may win as soon as the first of the three answers again.
    let restarting = now_ns();
    for n in [0, 1, 2] {
        q.node_mut(n).restart().await.expect("restart a node");
    }
    failovers.push((restarting, "majority restarted"));
    let old = current_leader_after(&candidates, restarting).await;

    // The leader's process is killed once more, and a minority node restarts meanwhile.
    let i = old;
    let killed = now_ns();
    candidates[i].child.kill().await.expect("kill the leader");
    failovers.push((killed, "leader process killed"));
    q.node_mut(4).kill().await.expect("kill a node");
    q.node_mut(4).restart().await.expect("restart a node");
    current_leader_after(&candidates, killed).await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    // The leader's process freezes (SIGSTOP) past its lock's validity, then resumes. Frozen,
    // it neither extends the lock nor stops its command; its watchdog does, when the lease
    // it was given runs out, before the validity ends: the next leader's command must not
    // overlap the frozen leader's.
    let i = current_leader(&candidates).await;
    let pid = nix::unistd::Pid::from_raw(candidates[i].child.id().expect("running") as i32);
    let frozen = now_ns();
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).expect("freeze the leader");
    failovers.push((frozen, "leader process frozen"));
    let next = current_leader_after(&candidates, frozen).await;
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).expect("resume the leader");
    assert_ne!(next, i, "the frozen leader's command still runs");
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop_all(&mut candidates).await;

    let mut problems = Vec::new();
    let mut records = vec![Record::Meta {
        scenario: "local_election".into(),
        nodes: 5,
        description: "4 candidates (quorumlock elect, ttl 2s); leader killed and restarted, \
                      minority frozen, majority killed and restarted, leader killed again, \
                      leader process frozen"
            .into(),
        seed: None,
        start: began,
        stop: now_ns(),
    }];
    for c in &candidates {
        records.extend(terms_of(&c.name, &c.dir, &mut problems));
    }
    let _ = write_jsonl(&out_dir().join("local_election.jsonl"), &records);
    let report = check_terms(&records);
    assert_clean(&report, &problems);

    // Flapping (a term that began while a healthy leader held) is reported, not asserted: a
    // healthy leader misses its extension window only when the machine stalls it, which says
    // how loaded the machine was, not whether the election is safe (issue 20).
    let starts = starts(&records);
    let flapped = flaps(&starts, &quiet);
    if !flapped.is_empty() {
        eprintln!("flapping (reported, not asserted): {flapped:?}");
    }
    // A new leader after each kill, and how long it took.
    let mut gaps = Vec::new();
    for (what, ms) in next_leader(&starts, &failovers) {
        let ms = ms.unwrap_or_else(|| panic!("no leader after the {what}"));
        gaps.push(format!("{what}: {ms} ms"));
    }
    eprintln!(
        "{report}\n  terms: {}; time to the next leader: {}; ttl {} ms + retry up to {} ms",
        starts.len(),
        gaps.join(", "),
        TTL.as_millis(),
        RETRY.as_millis()
    );
}

/// Two candidates whose nodes are disjoint both lead: the checker must see it, or it could
/// not tell a broken election from a working one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn negative_control_two_candidates_on_disjoint_nodes_are_caught() {
    let _serial = SERIAL.lock().await;
    let (q1, q2) = (
        LocalQuorum::start(3).await.unwrap(),
        LocalQuorum::start(3).await.unwrap(),
    );
    let root = tempfile::tempdir().expect("scratch directory");
    let mut candidates = vec![
        start_candidate(&q1.urls(), root.path(), "left"),
        start_candidate(&q2.urls(), root.path(), "right"),
    ];
    let (r1, r2) = (common::client(&q1).await, common::client(&q2).await);
    observed(&r1).await;
    observed(&r2).await;
    // Both commands run.
    for c in &candidates {
        let log = c.dir.join("log");
        common::eventually("the command starts", || async { log.exists() }).await;
    }
    stop_all(&mut candidates).await;
    let mut problems = Vec::new();
    let mut records = Vec::new();
    for c in &candidates {
        records.extend(terms_of(&c.name, &c.dir, &mut problems));
    }
    assert!(problems.is_empty(), "{problems:?}");
    let report = check_terms(&records);
    assert!(
        report.overlaps > 0,
        "the checker missed two leaders: {report}"
    );
}
