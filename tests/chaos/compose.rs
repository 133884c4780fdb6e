//! The Docker side of tests/chaos_compose.rs: the compose project of docker-compose.yml brought up
//! for one scenario and always brought down again, the faults injected into its containers
//! with the Docker CLI (each recorded in the run's history), and the client containers and
//! extra networks of the partition scenario.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

use crate::chaos::history::{mono_ns, ns, parse_jsonl, Record};
use crate::chaos::run::{Run, Target};

const PROJECT: &str = "quorumlock";
/// The compose network (docker-compose.yml).
pub const NETWORK: &str = "quorumlock";
pub const SERVICES: [&str; 5] = ["redis1", "redis2", "redis3", "redis4", "redis5"];
const PORTS: [u16; 5] = [7001, 7002, 7003, 7004, 7005];
/// Addresses on the `quorumlock` network (docker-compose.yml).
const IPS: [&str; 5] = [
    "172.28.0.11",
    "172.28.0.12",
    "172.28.0.13",
    "172.28.0.14",
    "172.28.0.15",
];
const COUNTER_FROM_HOST: &str = "redis://127.0.0.1:7000";
/// The counter as clients in containers on the `quorumlock` network reach it.
pub const COUNTER_IN_NETWORK: &str = "redis://172.28.0.10:6379";
const LOCAL_REDIS_IMAGE: &str = "quorumlock/redis:local";
const DEFAULT_CLIENT_IMAGE: &str = "quorumlock/chaos-client:local";

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn container(node: usize) -> String {
    format!("quorumlock-{}", SERVICES[node])
}

fn containers(nodes: &[usize]) -> Vec<String> {
    nodes.iter().map(|&i| container(i)).collect()
}

/// Runs `program args`, returns its stdout, or an error with its stderr.
async fn output(program: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(program)
        .args(args)
        .current_dir(repo())
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| format!("{program}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{program} {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

async fn docker(args: &[&str]) -> Result<String, String> {
    output("docker", args).await
}

/// The Redis image: `QUORUMLOCK_REDIS_IMAGE`, else the local one when it exists (no registry
/// here), else compose's default (redis:7).
fn redis_image() -> Option<String> {
    if let Ok(image) = std::env::var("QUORUMLOCK_REDIS_IMAGE") {
        return Some(image);
    }
    let local = std::process::Command::new("docker")
        .args(["image", "inspect", LOCAL_REDIS_IMAGE])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    local.then(|| LOCAL_REDIS_IMAGE.to_owned())
}

/// `docker-compose` (v1) when it is installed, else `docker compose` (v2).
fn compose_program() -> &'static (String, Vec<String>) {
    static PROGRAM: OnceLock<(String, Vec<String>)> = OnceLock::new();
    PROGRAM.get_or_init(|| {
        let v1 = std::process::Command::new("docker-compose")
            .arg("version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if v1 {
            ("docker-compose".to_owned(), Vec::new())
        } else {
            ("docker".to_owned(), vec!["compose".to_owned()])
        }
    })
}

/// The compose project, brought up for one scenario; brought down (`down -v`), with
/// whatever the scenario added, when dropped.
pub struct Compose {
    persistent: bool,
    image: Option<String>,
    networks: Vec<String>,
    clients: Vec<String>,
    /// The client containers started, which [`Compose::end_after`] tells that the schedule
    /// has ended.
    started: Vec<String>,
}

/// Where a client container looks for the file that ends its run (`workload::END_FILE_VAR`);
/// [`Compose::end_after`] copies it there.
const END_FILE: &str = "/tmp/chaos-end";

impl Compose {
    /// `up -d` with the nodes persisting every write or nothing, then waits until all six
    /// servers are healthy.
    pub async fn up(persistent: bool) -> Compose {
        let compose = Compose {
            persistent,
            image: redis_image(),
            networks: vec!["quorumlock-a".into(), "quorumlock-b".into()],
            clients: vec!["quorumlock-chaos-a".into(), "quorumlock-chaos-b".into()],
            started: Vec::new(),
        };
        // Whatever an interrupted earlier run left behind.
        compose.teardown();
        compose.compose(&["up", "-d"]).await.expect("compose up");
        let check = repo().join("scripts").join("compose-check");
        let checked = output(check.to_str().expect("utf-8 path"), &["--timeout", "60"]).await;
        checked.expect("the compose project did not become healthy");
        // The servers were just created, empty: say so, as an operator provisioning new
        // nodes would (design 2.6a), or every client would quarantine them for its max ttl.
        for port in PORTS {
            let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
            quorumlock::testkit::mark_new(addr)
                .await
                .expect("mark a new server");
        }
        compose
    }

    fn compose_command(&self, args: &[&str]) -> std::process::Command {
        let (program, pre) = compose_program();
        let mut cmd = std::process::Command::new(program);
        cmd.args(pre).args(["-p", PROJECT]).args(args);
        cmd.current_dir(repo()).stdin(Stdio::null());
        if let Some(image) = &self.image {
            cmd.env("QUORUMLOCK_REDIS_IMAGE", image);
        }
        let (aof, fsync) = if self.persistent {
            ("yes", "always")
        } else {
            ("no", "everysec")
        };
        cmd.env("QUORUMLOCK_APPENDONLY", aof)
            .env("QUORUMLOCK_APPENDFSYNC", fsync);
        cmd
    }

    async fn compose(&self, args: &[&str]) -> Result<String, String> {
        let out = Command::from(self.compose_command(args))
            .output()
            .await
            .map_err(|e| format!("compose: {e}"))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(format!(
                "compose {} failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }

    /// Removes the client containers, the project (containers, network, volumes) and the
    /// extra networks. Synchronous, for Drop: it runs once, at the end of a scenario.
    fn teardown(&self) {
        let quiet = |cmd: &mut std::process::Command| {
            let _ = cmd.stdout(Stdio::null()).stderr(Stdio::null()).status();
        };
        let mut rm = std::process::Command::new("docker");
        rm.args(["rm", "-f", "-v"]).args(&self.clients);
        quiet(&mut rm);
        quiet(&mut self.compose_command(&["down", "-v", "--remove-orphans", "-t", "1"]));
        for network in &self.networks {
            quiet(std::process::Command::new("docker").args(["network", "rm", network]));
        }
    }

    /// A target on the host ports.
    pub fn target(&self) -> Target {
        Target {
            nodes: PORTS
                .iter()
                .map(|p| format!("redis://127.0.0.1:{p}"))
                .collect(),
            counter: COUNTER_FROM_HOST.to_owned(),
            persistent: self.persistent,
        }
    }

    pub async fn kill(&self, run: &mut Run, nodes: &[usize]) {
        run.fault_begins("kill", nodes);
        let names = containers(nodes);
        let mut args = vec!["kill"];
        args.extend(names.iter().map(String::as_str));
        docker(&args).await.expect("docker kill");
    }

    /// Starts them again (empty unless persistent), then waits until they answer. `docker
    /// start` does what `docker-compose start` does for these containers, in a fraction of
    /// the time (compose v1 takes seconds on a loaded machine, which would blur the
    /// schedule).
    pub async fn start(&self, run: &mut Run, nodes: &[usize]) {
        let names = containers(nodes);
        let mut args = vec!["start"];
        args.extend(names.iter().map(String::as_str));
        docker(&args).await.expect("docker start");
        wait_ping(nodes).await;
        run.restarted(nodes, mono_ns());
    }

    pub async fn pause(&self, run: &mut Run, nodes: &[usize]) {
        run.fault_begins("pause", nodes);
        let names = containers(nodes);
        let mut args = vec!["pause"];
        args.extend(names.iter().map(String::as_str));
        docker(&args).await.expect("docker pause");
    }

    pub async fn unpause(&self, run: &mut Run, nodes: &[usize]) {
        let names = containers(nodes);
        let mut args = vec!["unpause"];
        args.extend(names.iter().map(String::as_str));
        docker(&args).await.expect("docker unpause");
        run.fault_ends(nodes, mono_ns());
    }

    pub async fn disconnect(&self, run: &mut Run, nodes: &[usize]) {
        run.fault_begins("disconnect", nodes);
        for name in containers(nodes) {
            docker(&["network", "disconnect", NETWORK, &name])
                .await
                .expect("docker network disconnect");
        }
    }

    /// Connects again with the fixed address and the service name (docker/README.md).
    pub async fn connect(&self, run: &mut Run, nodes: &[usize]) {
        for &i in nodes {
            let name = container(i);
            docker(&[
                "network",
                "connect",
                "--ip",
                IPS[i],
                "--alias",
                SERVICES[i],
                NETWORK,
                &name,
            ])
            .await
            .expect("docker network connect");
        }
        wait_ping(nodes).await;
        run.fault_ends(nodes, mono_ns());
    }
}

impl Drop for Compose {
    fn drop(&mut self) {
        self.teardown();
    }
}

/// The `--env` of a client container: where it finds the file that ends its run.
fn end_file_env() -> String {
    format!("{}={END_FILE}", crate::chaos::workload::END_FILE_VAR)
}

/// Waits until the nodes answer PING on their host ports.
async fn wait_ping(nodes: &[usize]) {
    for &i in nodes {
        let until = mono_ns() + ns(Duration::from_secs(30));
        while !ping(PORTS[i]).await {
            assert!(mono_ns() < until, "{} does not answer PING", SERVICES[i]);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

async fn ping(port: u16) -> bool {
    let attempt = async {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
        stream.write_all(b"PING\r\n").await?;
        let mut buf = [0u8; 16];
        let n = stream.read(&mut buf).await?;
        Ok::<_, std::io::Error>(buf[..n].starts_with(b"+PONG"))
    };
    matches!(
        tokio::time::timeout(Duration::from_millis(500), attempt).await,
        Ok(Ok(true))
    )
}

/// A client in a container that reaches the nodes over a network of its own, as the
/// partition scenario sets it up: client `name` is `quorumlock-chaos-<name>`, on network
/// `quorumlock-<name>` (172.29.<n>.0/24, nodes at .11-.15, the client at .2<n>), and on
/// `quorumlock` for the counter.
#[derive(Debug, Clone, Copy)]
pub struct Side {
    pub name: &'static str,
    pub n: u8,
}

impl Side {
    pub fn network(&self) -> String {
        format!("quorumlock-{}", self.name)
    }

    pub fn container(&self) -> String {
        format!("quorumlock-chaos-{}", self.name)
    }

    /// The address of node `i` on this side's network.
    pub fn node_ip(&self, i: usize) -> String {
        format!("172.29.{}.{}", self.n, 11 + i)
    }
}

/// The client image: `QUORUMLOCK_CHAOS_CLIENT_IMAGE`, else quorumlock/chaos-client:local.
pub async fn client_image() -> String {
    let image =
        std::env::var("QUORUMLOCK_CHAOS_CLIENT_IMAGE").unwrap_or(DEFAULT_CLIENT_IMAGE.into());
    if docker(&["image", "inspect", &image]).await.is_err() {
        panic!("the client image {image} does not exist: build it with scripts/build-client-image");
    }
    image
}

impl Compose {
    /// Creates `side`'s network and attaches every node to it, with fixed addresses.
    pub async fn add_network(&self, side: Side) {
        let subnet = format!("172.29.{}.0/24", side.n);
        let network = side.network();
        docker(&[
            "network", "create", "--driver", "bridge", "--subnet", &subnet, &network,
        ])
        .await
        .expect("docker network create");
        for i in 0..SERVICES.len() {
            self.attach(side, i).await;
        }
    }

    async fn attach(&self, side: Side, node: usize) {
        let (ip, network) = (side.node_ip(node), side.network());
        docker(&[
            "network",
            "connect",
            "--ip",
            &ip,
            "--alias",
            SERVICES[node],
            &network,
            &container(node),
        ])
        .await
        .expect("attach a node to a client network");
    }

    /// Starts `side`'s client container: `chaos_client` with `args`, the nodes at their
    /// addresses on the side's network, the counter on `quorumlock`.
    pub async fn start_client(&mut self, image: &str, side: Side, args: &[String]) {
        let name = side.container();
        let end = end_file_env();
        let client_ip = format!("172.28.0.{}", 20 + side.n);
        let nodes: Vec<String> = (0..SERVICES.len())
            .map(|i| format!("redis://{}:6379", side.node_ip(i)))
            .collect();
        let nodes = nodes.join(",");
        let mut create: Vec<&str> = vec!["create", "--name", &name, "--network", NETWORK];
        create.extend([
            "--ip",
            &client_ip,
            "--env",
            &end,
            image,
            "chaos_client",
            "--client",
            side.name,
        ]);
        create.extend(["--nodes", &nodes, "--counter", COUNTER_IN_NETWORK]);
        create.extend(args.iter().map(String::as_str));
        docker(&create).await.expect("docker create (client)");
        self.started.push(name.clone());
        let ip = format!("172.29.{}.{}", side.n, 20 + side.n);
        docker(&["network", "connect", "--ip", &ip, &side.network(), &name])
            .await
            .expect("connect a client to its network");
        docker(&["start", &name])
            .await
            .expect("docker start (client)");
    }

    /// Takes `nodes` off `side`'s network: that client's packets to them are dropped.
    pub async fn cut(&self, side: Side, nodes: &[usize]) {
        for &i in nodes {
            docker(&["network", "disconnect", &side.network(), &container(i)])
                .await
                .expect("partition");
        }
    }

    /// Puts `nodes` back on `side`'s network, at their addresses.
    pub async fn rejoin(&self, side: Side, nodes: &[usize]) {
        for &i in nodes {
            self.attach(side, i).await;
        }
    }

    /// Waits until `side`'s client has exited, checks that it succeeded, and returns its
    /// history and its stderr.
    pub async fn collect(&self, side: Side) -> (Vec<Record>, String) {
        collect_container(&side.container()).await
    }
}

/// A candidate of the election scenario: `chaos_client --elect` in container
/// `quorumlock-chaos-<name>` on the project's network (172.28.0.<30 + n>), reaching the nodes
/// at their addresses there.
impl Compose {
    pub async fn start_candidate(&mut self, image: &str, name: &str, n: u8, args: &[String]) {
        let container = format!("quorumlock-chaos-{name}");
        let ip = format!("172.28.0.{}", 30 + n);
        let nodes: Vec<String> = IPS.iter().map(|ip| format!("redis://{ip}:6379")).collect();
        let nodes = nodes.join(",");
        let end = end_file_env();
        let mut create: Vec<&str> = vec!["create", "--name", &container, "--network", NETWORK];
        create.extend(["--ip", &ip, "--env", &end]);
        create.extend([image, "chaos_client", "--client", name]);
        create.extend(["--nodes", &nodes]);
        create.extend(args.iter().map(String::as_str));
        docker(&create).await.expect("docker create (candidate)");
        self.clients.push(container.clone());
        self.started.push(container.clone());
        docker(&["start", &container])
            .await
            .expect("docker start (candidate)");
    }

    /// `docker kill` of a candidate; returns when the kill returned (`CLOCK_MONOTONIC`).
    pub async fn kill_candidate(&self, name: &str) -> u64 {
        docker(&["kill", &format!("quorumlock-chaos-{name}")])
            .await
            .expect("docker kill (candidate)");
        mono_ns()
    }

    /// `docker start` of a candidate killed before: the same arguments, a new process.
    pub async fn restart_candidate(&self, name: &str) {
        docker(&["start", &format!("quorumlock-chaos-{name}")])
            .await
            .expect("docker start (candidate)");
    }

    /// A candidate's records so far, from every process it ran (`docker logs`).
    pub async fn candidate_records(&self, name: &str) -> Vec<Record> {
        let logs = Command::new("docker")
            .args(["logs", &format!("quorumlock-chaos-{name}")])
            .output()
            .await
            .expect("docker logs");
        parse_jsonl(logs.stdout.as_slice()).expect("the candidate's records")
    }

    /// Waits until a candidate has exited, checks that it succeeded, and returns its
    /// records.
    pub async fn collect_candidate(&self, name: &str) -> Vec<Record> {
        let container = format!("quorumlock-chaos-{name}");
        let code = docker(&["wait", &container]).await.expect("docker wait");
        let records = self.candidate_records(name).await;
        if code.trim() != "0" {
            let logs = Command::new("docker")
                .args(["logs", &container])
                .output()
                .await;
            let stderr = logs.map(|l| String::from_utf8_lossy(&l.stderr).into_owned());
            panic!("candidate {name} failed:\n{}", stderr.unwrap_or_default());
        }
        records
    }
}

/// A client of contending workers (`chaos_client` without `--elect`) in container
/// `quorumlock-chaos-<name>` on the project's network, as a candidate is: at 172.28.0.<30 +
/// n>, reaching the nodes and the counter at their addresses there.
impl Compose {
    pub async fn start_workers(&mut self, image: &str, name: &str, n: u8, args: &[String]) {
        let mut args = args.to_vec();
        args.extend(["--counter".to_owned(), COUNTER_IN_NETWORK.to_owned()]);
        self.start_candidate(image, name, n, &args).await;
    }

    /// Waits until the workers' client in `container` has said on stderr that its first
    /// attempt returned (`workload::FIRST_ATTEMPT`: every node counted for it, and its
    /// workers run). Panics with its logs if it has not within `within`, or exited first.
    pub async fn wait_attempting(&self, container: &str, within: Duration) {
        let give_up = mono_ns() + ns(within);
        loop {
            let logs = Command::new("docker")
                .args(["logs", container])
                .output()
                .await
                .expect("docker logs");
            let stderr = String::from_utf8_lossy(&logs.stderr);
            if stderr.contains(crate::chaos::workload::FIRST_ATTEMPT) {
                return;
            }
            let running = docker(&["inspect", "--format", "{{.State.Running}}", container])
                .await
                .expect("docker inspect");
            assert!(
                running.trim() == "true" && mono_ns() < give_up,
                "client {container} made no attempt within {within:?} (running: {}):\n{stderr}",
                running.trim()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The schedule's last event has happened: the run's workers go on for `tail`
    /// ([`Run::end_after`]); then the schedule ends for them and for every client container,
    /// which finds the end file in its /tmp (`docker cp`) and stops: its workers after the
    /// attempt under way, its observer, its candidacy (resigning).
    pub async fn end_after(&self, run: &mut Run, tail: Duration) {
        run.end_after(tail).await;
        if self.started.is_empty() {
            return;
        }
        let host = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("chaos-end");
        std::fs::write(&host, b"").expect("write the end file");
        let host = host.to_str().expect("utf-8 path");
        for container in &self.started {
            docker(&["cp", host, &format!("{container}:{END_FILE}")])
                .await
                .expect("docker cp (the end file)");
        }
    }

    /// Waits until the client `name` has exited, checks that it succeeded, and returns its
    /// history and its stderr.
    pub async fn collect_workers(&self, name: &str) -> (Vec<Record>, String) {
        collect_container(&format!("quorumlock-chaos-{name}")).await
    }
}

/// Waits until the client in `container` has exited, checks that it succeeded, and returns
/// its history and its stderr.
async fn collect_container(container: &str) -> (Vec<Record>, String) {
    let code = docker(&["wait", container]).await.expect("docker wait");
    let logs = Command::new("docker")
        .args(["logs", container])
        .output()
        .await
        .expect("docker logs");
    let stderr = String::from_utf8_lossy(&logs.stderr).into_owned();
    assert_eq!(code.trim(), "0", "client {container} failed:\n{stderr}");
    let records = parse_jsonl(logs.stdout.as_slice()).expect("the client's history");
    (records, stderr)
}
