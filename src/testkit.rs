//! Test fixture that runs real `redis-server` processes on loopback ports.
//!
//! [`LocalQuorum`] starts N independent Redis masters, each on a free
//! `127.0.0.1` port with its own data directory inside a temporary directory.
//! By default they persist every write (`appendfsync always`), and each is marked as new
//! when it first starts (design 2.6a), so a client with the default configuration uses them
//! at once;
//! [`NodeOptions::volatile`] gives nodes that come back empty from a restart.
//! Tests can then [kill](LocalNode::kill), [freeze](LocalNode::freeze),
//! [resume](LocalNode::resume) and [restart](LocalNode::restart) single nodes
//! to simulate crashes, stalls and recoveries. Dropping the quorum SIGKILLs
//! and reaps every process (also during a panic unwind) and removes the
//! temporary directory.
//!
//! The binary is taken from `QUORUMLOCK_REDIS_SERVER` if set, otherwise
//! `redis-server` is looked up on `PATH`. The temporary directory is made inside
//! `QUORUMLOCK_TESTKIT_DIR` if that names a directory, otherwise in the system's temporary
//! directory. This repository's `.cargo/config.toml` points it at `/dev/shm`: there a
//! node's `fsync` costs nothing, while on a shared disk one can stall for a quarter of a
//! second (measured on the CI machine: 5 of 29,116 fsyncs over 100 ms during a test run,
//! the worst 233 ms), longer than the tests' node timeout. A node killed and restarted still
//! finds every acknowledged write: the files outlive the process either way.
//!
//! ```no_run
//! use quorumlock::testkit::{LocalQuorum, Reply};
//!
//! # async fn demo() -> Result<(), quorumlock::testkit::TestkitError> {
//! let mut quorum = LocalQuorum::start(3).await?;
//! let urls = quorum.urls(); // ["redis://127.0.0.1:PORT", ...]
//! assert_eq!(urls.len(), 3);
//!
//! quorum.node_mut(0).freeze()?; // SIGSTOP: accepts TCP but never answers
//! quorum.node_mut(0).resume()?;
//! quorum.node_mut(1).kill().await?; // connections are now refused
//! quorum.node_mut(1).restart().await?; // same port, ready again
//! assert_eq!(quorum.node(1).command(&["PING"]).await?, Reply::Status("PONG".into()));
//! # Ok(())
//! # }
//! ```

use std::collections::VecDeque;
use std::ffi::OsString;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;
use tempfile::TempDir;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};

const ENV_BINARY: &str = "QUORUMLOCK_REDIS_SERVER";
/// Where the quorums' temporary directories are made, if it names a directory.
const ENV_DIR: &str = "QUORUMLOCK_TESTKIT_DIR";
const READY_MARKER: &str = "Ready to accept connections";
const ADDR_IN_USE_MARKER: &str = "Address already in use";
const READY_TIMEOUT: Duration = Duration::from_secs(10);
const FRESH_PORT_ATTEMPTS: u32 = 10;
const SAME_PORT_ATTEMPTS: u32 = 5;
const LOG_LINES_KEPT: usize = 200;
const LOG_TAIL_LINES: usize = 20;

type Log = Arc<Mutex<VecDeque<String>>>;

/// Errors produced by the test fixture.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TestkitError {
    /// No usable `redis-server` binary was found.
    #[error(
        "redis-server not found (tried {tried}); set QUORUMLOCK_REDIS_SERVER or install it: \
         `sudo apt-get install -y redis-server` on Debian/Ubuntu, `brew install redis` on macOS"
    )]
    RedisServerNotFound {
        /// What was looked at.
        tried: String,
    },
    /// The binary exists but could not be spawned.
    #[error("failed to spawn {binary}: {source}", binary = .binary.display())]
    Spawn {
        /// The binary that was executed.
        binary: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// The server exited or timed out before printing "Ready to accept connections".
    #[error(
        "redis-server on port {port} did not become ready ({reason}); last log lines:\n{log_tail}"
    )]
    NotReady {
        /// The port the server was started on.
        port: u16,
        /// Why it is considered failed.
        reason: String,
        /// The last lines of its stdout/stderr.
        log_tail: String,
    },
    /// A signal was requested for a node that is killed; restart it first.
    #[error("node on port {port} is killed")]
    NodeKilled {
        /// The node's port.
        port: u16,
    },
    /// The server rejected the configured password.
    #[error("AUTH rejected by 127.0.0.1:{port}: {message}")]
    Auth {
        /// The node's port.
        port: u16,
        /// The server's error reply.
        message: String,
    },
    /// Sending a signal to a server process failed.
    #[error("failed to send {signal} to pid {pid}: {source}")]
    Signal {
        /// Process id of the server.
        pid: u32,
        /// The signal that was sent.
        signal: Signal,
        /// The underlying error.
        source: nix::Error,
    },
    /// An I/O error (temp dir, TCP connect/read/write, process wait).
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
    /// The server sent something that is not valid RESP2, or closed early.
    #[error("RESP protocol error: {0}")]
    Protocol(String),
}

impl TestkitError {
    /// Whether this is a TCP "connection refused" error, i.e. nothing listens on the port.
    pub fn is_connection_refused(&self) -> bool {
        matches!(self, Self::Io(e) if e.kind() == io::ErrorKind::ConnectionRefused)
    }
}

/// How a node persists data across [`LocalNode::restart`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Persistence {
    /// No persistence at all (`--save "" --appendonly no`): a restart loses every key, the
    /// node's marker included.
    None,
    /// AOF with `--appendfsync everysec`.
    AofEverysec,
    /// AOF with `--appendfsync always`: every acknowledged write survives a SIGKILL. The
    /// default. A client quarantines a restarted node whatever its persistence (design
    /// 2.6a); the testkit marks the nodes it starts empty as new, so they count at once.
    #[default]
    AofAlways,
}

/// Per-node server options shared by every node of a [`LocalQuorum`]. The default persists
/// every write ([`Persistence::AofAlways`]), with no password and no extra arguments.
#[derive(Debug, Clone, Default)]
pub struct NodeOptions {
    /// Password passed as `--requirepass`; [`LocalNode::command`] authenticates with it.
    pub requirepass: Option<String>,
    /// Persistence mode.
    pub persistence: Persistence,
    /// Extra command-line arguments appended verbatim, e.g. `["--maxmemory", "10mb"]`.
    pub extra_args: Vec<String>,
}

impl NodeOptions {
    /// Nodes that persist every write (`appendfsync always`). The same as
    /// [`NodeOptions::default()`].
    pub fn persistent() -> Self {
        NodeOptions {
            persistence: Persistence::AofAlways,
            ..NodeOptions::default()
        }
    }

    /// Nodes that keep nothing across a restart ([`Persistence::None`]), for tests of what a
    /// node that comes back empty does. A client with quarantine on (the default) does not
    /// count a restarted node (of any persistence) until the longest ttl has passed: such
    /// tests either wait that long or build their client with `quarantine(false)`.
    pub fn volatile() -> Self {
        NodeOptions {
            persistence: Persistence::None,
            ..NodeOptions::default()
        }
    }
}

/// Lifecycle state of a [`LocalNode`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeState {
    /// The server process is running and serving requests.
    Running,
    /// The process is stopped with SIGSTOP: connections are accepted, nothing is answered.
    Frozen,
    /// The process was killed and reaped; connections are refused.
    Killed,
}

/// A RESP2 reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Simple string, e.g. `OK` or `PONG`.
    Status(String),
    /// Error reply, e.g. `ERR unknown command`.
    Error(String),
    /// Integer reply.
    Integer(i64),
    /// Bulk string; `None` is the nil bulk string.
    Bulk(Option<Vec<u8>>),
    /// Array; `None` is the nil array.
    Array(Option<Vec<Reply>>),
}

impl Reply {
    /// The text of a status reply or of a UTF-8 bulk string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Self::Status(s) => Some(s),
            Self::Bulk(Some(b)) => std::str::from_utf8(b).ok(),
            _ => None,
        }
    }

    /// The value of an integer reply.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Self::Integer(i) => Some(*i),
            _ => None,
        }
    }

    /// Whether this is a nil bulk string or nil array.
    pub fn is_nil(&self) -> bool {
        matches!(self, Self::Bulk(None) | Self::Array(None))
    }
}

/// N independent `redis-server` processes sharing one temporary directory.
///
/// Dropping it SIGKILLs and reaps every process (frozen ones included), then
/// removes the temporary directory.
#[derive(Debug)]
pub struct LocalQuorum {
    // Declared before `_dir` so the processes die before their data dirs are removed.
    nodes: Vec<LocalNode>,
    _dir: TempDir,
}

impl LocalQuorum {
    /// Starts `n` servers with [`NodeOptions::default()`] (persisting every write), marked
    /// as new so that a default client counts them at once.
    ///
    /// # Errors
    /// See [`LocalQuorum::start_with`].
    pub async fn start(n: usize) -> Result<Self, TestkitError> {
        Self::start_with(n, NodeOptions::default()).await
    }

    /// Starts `n` servers concurrently and resolves once all are ready.
    ///
    /// # Errors
    /// [`TestkitError::RedisServerNotFound`] if no binary is found, [`TestkitError::NotReady`]
    /// if a server exits or is not ready within 10 s (after up to 10 fresh ports when the port
    /// is taken), [`TestkitError::Io`] if the temporary directory cannot be created. Servers
    /// that did start are killed before the error is returned.
    pub async fn start_with(n: usize, opts: NodeOptions) -> Result<Self, TestkitError> {
        let binary = resolve_binary(std::env::var_os(ENV_BINARY), std::env::var_os("PATH"))?;
        let mut dir = tempfile::Builder::new();
        dir.prefix("quorumlock-testkit-");
        let dir = match std::env::var_os(ENV_DIR).map(PathBuf::from) {
            Some(base) if base.is_dir() => dir.tempdir_in(base)?,
            _ => dir.tempdir()?,
        };
        let tasks: Vec<_> = (0..n)
            .map(|i| {
                let data_dir = dir.path().join(format!("node-{i}"));
                let (binary, opts) = (binary.clone(), opts.clone());
                tokio::spawn(async move {
                    std::fs::create_dir(&data_dir)?;
                    LocalNode::launch(binary, data_dir, opts).await
                })
            })
            .collect();
        let mut nodes = Vec::with_capacity(n);
        let mut first_err = None;
        for task in tasks {
            match task.await.map_err(io::Error::from) {
                Ok(Ok(node)) => nodes.push(node),
                Ok(Err(e)) => drop(first_err.get_or_insert(e)),
                Err(e) => drop(first_err.get_or_insert(e.into())),
            }
        }
        match first_err {
            Some(e) => Err(e), // `nodes` is dropped here: its processes are killed
            None => Ok(Self { nodes, _dir: dir }),
        }
    }

    /// `redis://127.0.0.1:PORT` for every node, never with a password.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(LocalNode::url).collect()
    }

    /// Like [`urls`](Self::urls) but `redis://:PASS@127.0.0.1:PORT` when `requirepass` is set.
    pub fn urls_with_password(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(LocalNode::url_with_password)
            .collect()
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the quorum has no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The `i`-th node.
    ///
    /// # Panics
    /// If `i >= self.len()`, like slice indexing.
    pub fn node(&self, i: usize) -> &LocalNode {
        &self.nodes[i]
    }

    /// The `i`-th node, mutably.
    ///
    /// # Panics
    /// If `i >= self.len()`, like slice indexing.
    pub fn node_mut(&mut self, i: usize) -> &mut LocalNode {
        &mut self.nodes[i]
    }

    /// All nodes.
    pub fn nodes(&self) -> &[LocalNode] {
        &self.nodes
    }

    /// All nodes, mutably.
    pub fn nodes_mut(&mut self) -> &mut [LocalNode] {
        &mut self.nodes
    }
}

/// One `redis-server` process (or the slot for it while killed).
///
/// Dropping a node SIGKILLs and reaps its process.
#[derive(Debug)]
pub struct LocalNode {
    port: u16,
    binary: PathBuf,
    data_dir: PathBuf,
    opts: NodeOptions,
    child: Option<Child>,
    pid: Option<u32>,
    state: NodeState,
    log: Log,
}

/// Outcome of one failed spawn attempt.
enum SpawnError {
    AddrInUse(TestkitError),
    Fatal(TestkitError),
}

impl LocalNode {
    /// The TCP port on `127.0.0.1`; stable across restarts.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// `redis://:PASS@127.0.0.1:PORT` (password percent-encoded) if `requirepass` is set,
    /// otherwise the same as [`url`](Self::url).
    pub fn url_with_password(&self) -> String {
        match &self.opts.requirepass {
            Some(pass) => format!("redis://:{}@127.0.0.1:{}", percent_encode(pass), self.port),
            None => self.url(),
        }
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    /// Current lifecycle state as driven through this handle.
    pub fn state(&self) -> NodeState {
        self.state
    }

    /// Process id of the server, `None` while killed.
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// This node's data directory (holds the AOF when persistence is on).
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The last (up to 200) lines the current or last server process wrote.
    pub fn log_lines(&self) -> Vec<String> {
        lock(&self.log).iter().cloned().collect()
    }

    /// SIGKILLs the process (running or frozen) and waits until it has been reaped.
    /// The data directory is kept. Killing a killed node is a no-op.
    ///
    /// # Errors
    /// [`TestkitError::Io`] if the signal cannot be sent or waiting for the process fails.
    pub async fn kill(&mut self) -> Result<(), TestkitError> {
        if let Some(mut child) = self.child.take() {
            match child.start_kill() {
                // InvalidInput: tokio already collected its exit status.
                Err(e) if e.kind() != io::ErrorKind::InvalidInput => {
                    self.child = Some(child);
                    return Err(e.into());
                }
                _ => {}
            }
            child.wait().await?;
        }
        self.state = NodeState::Killed;
        self.pid = None;
        Ok(())
    }

    /// Sends SIGSTOP. On Linux it returns only once the process is actually stopped.
    /// A frozen server accepts TCP connections but answers nothing until [`resume`](Self::resume).
    ///
    /// # Errors
    /// [`TestkitError::NodeKilled`] if the node is killed, [`TestkitError::Signal`] if the
    /// signal cannot be delivered.
    pub fn freeze(&mut self) -> Result<(), TestkitError> {
        let pid = self.signal(Signal::SIGSTOP)?;
        #[cfg(target_os = "linux")]
        {
            use nix::sys::wait::{waitid, Id, WaitPidFlag};
            // Observe the stop without consuming any status (WNOWAIT); WEXITED avoids
            // blocking forever if the process dies instead.
            let flags = WaitPidFlag::WSTOPPED | WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT;
            loop {
                match waitid(Id::Pid(pid), flags) {
                    Err(Errno::EINTR) => continue,
                    Err(e) => {
                        return Err(signal_error(
                            pid.as_raw().unsigned_abs(),
                            Signal::SIGSTOP,
                            e,
                        ))
                    }
                    Ok(_) => break,
                }
            }
        }
        self.state = NodeState::Frozen;
        Ok(())
    }

    /// Sends SIGCONT; the server answers queued requests again.
    ///
    /// # Errors
    /// [`TestkitError::NodeKilled`] if the node is killed, [`TestkitError::Signal`] if the
    /// signal cannot be delivered.
    pub fn resume(&mut self) -> Result<(), TestkitError> {
        self.signal(Signal::SIGCONT)?;
        self.state = NodeState::Running;
        Ok(())
    }

    /// Kills the process if it is running or frozen, then starts a new one on the same port
    /// with the same data directory and options; resolves once it is ready. With AOF
    /// persistence the data survives; with [`Persistence::None`] it is gone.
    ///
    /// # Errors
    /// Those of [`kill`](Self::kill), and [`TestkitError::NotReady`] if the server does not
    /// come up (the port stays taken after 5 attempts with backoff, early exit, or 10 s timeout).
    pub async fn restart(&mut self) -> Result<(), TestkitError> {
        self.kill().await?;
        let mut attempt = 0;
        loop {
            match self.spawn().await {
                Ok(()) => return Ok(()),
                Err(SpawnError::AddrInUse(e)) if attempt + 1 >= SAME_PORT_ATTEMPTS => {
                    return Err(e)
                }
                Err(SpawnError::AddrInUse(_)) => {
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(100 * u64::from(attempt))).await;
                }
                Err(SpawnError::Fatal(e)) => return Err(e),
            }
        }
    }

    /// [`restart`](Self::restart) with other options from now on (say, persistence switched
    /// on): what a server restarted with another configuration does. A server that starts
    /// with AOF on loads only its AOF, so a node that had none comes back empty.
    ///
    /// # Errors
    /// Those of [`restart`](Self::restart).
    pub async fn restart_with(&mut self, opts: NodeOptions) -> Result<(), TestkitError> {
        self.opts = opts;
        self.restart().await
    }

    /// Sends one command over a fresh TCP connection and returns the reply. If `requirepass`
    /// is set, `AUTH` is sent first. Error replies are returned as `Ok(Reply::Error(_))`.
    /// There is no internal timeout: against a frozen node this waits until it is resumed.
    ///
    /// # Errors
    /// [`TestkitError::Io`] if connecting or I/O fails (see
    /// [`TestkitError::is_connection_refused`]), [`TestkitError::Auth`] if the password is
    /// rejected, [`TestkitError::Protocol`] for an empty `args` or a malformed reply.
    pub async fn command(&self, args: &[&str]) -> Result<Reply, TestkitError> {
        command_at(self.addr(), self.opts.requirepass.as_deref(), args).await
    }

    /// Starts a node on a fresh free port, retrying with new ports if one is taken.
    async fn launch(
        binary: PathBuf,
        data_dir: PathBuf,
        opts: NodeOptions,
    ) -> Result<Self, TestkitError> {
        let (child, pid, state, log) = (None, None, NodeState::Killed, Log::default());
        let mut node = Self {
            port: 0,
            binary,
            data_dir,
            opts,
            child,
            pid,
            state,
            log,
        };
        let mut attempt = 0;
        loop {
            node.port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
                .local_addr()?
                .port();
            attempt += 1;
            match node.spawn().await {
                Ok(()) => {
                    node.provision().await?;
                    return Ok(node);
                }
                Err(SpawnError::AddrInUse(_)) if attempt < FRESH_PORT_ATTEMPTS => {}
                Err(SpawnError::AddrInUse(e) | SpawnError::Fatal(e)) => return Err(e),
            }
        }
    }

    /// Marks a server just started empty as new (design 2.6a): a marker of its own run_id,
    /// floor 0, `new`, so that a client neither quarantines it nor waits to re-seed it. Only
    /// the first start does this; a restart leaves whatever the server loaded, as in
    /// production, where a node that restarts is quarantined and re-seeded.
    async fn provision(&self) -> Result<(), TestkitError> {
        mark_new_at(self.addr(), self.opts.requirepass.as_deref()).await
    }

    /// One attempt to start the server on `self.port`, waiting for its readiness line.
    async fn spawn(&mut self) -> Result<(), SpawnError> {
        lock(&self.log).clear();
        let mut child = Command::new(&self.binary)
            .args(self.server_args())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| SpawnError::Fatal(spawn_error(&self.binary, e)))?;
        let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
            let e = io::Error::other("child stdio was not piped");
            return Err(SpawnError::Fatal(e.into()));
        };
        let stderr_task = tokio::spawn(drain(BufReader::new(stderr).lines(), self.log.clone()));
        let mut stdout = BufReader::new(stdout).lines();
        let log = self.log.clone();
        let ready = tokio::time::timeout(READY_TIMEOUT, async {
            while let Some(line) = stdout.next_line().await? {
                let found = line.contains(READY_MARKER);
                push_line(&log, line);
                if found {
                    return Ok(true);
                }
            }
            Ok::<_, io::Error>(false)
        })
        .await;
        if let Ok(Ok(true)) = ready {
            // Keep draining so a full pipe can never block the server.
            tokio::spawn(drain(stdout, self.log.clone()));
            self.pid = child.id();
            self.child = Some(child);
            self.state = NodeState::Running;
            return Ok(());
        }
        let _ = child.start_kill();
        let status = child.wait().await;
        let _ = tokio::time::timeout(Duration::from_secs(1), stderr_task).await;
        let reason = match (ready, status) {
            (Err(_), _) => format!("no {READY_MARKER:?} within {READY_TIMEOUT:?}"),
            (Ok(Err(e)), _) => format!("reading its output failed: {e}"),
            (_, Ok(status)) => format!("exited early: {status}"),
            (_, Err(e)) => format!("exited early; waiting for it failed: {e}"),
        };
        let lines = lock(&self.log);
        let addr_in_use = lines.iter().any(|l| l.contains(ADDR_IN_USE_MARKER));
        let tail: Vec<&str> = lines
            .iter()
            .skip(lines.len().saturating_sub(LOG_TAIL_LINES))
            .map(String::as_str)
            .collect();
        let log_tail = tail.join("\n");
        let wrap = if addr_in_use {
            SpawnError::AddrInUse
        } else {
            SpawnError::Fatal
        };
        Err(wrap(TestkitError::NotReady {
            port: self.port,
            reason,
            log_tail,
        }))
    }

    fn server_args(&self) -> Vec<OsString> {
        let port = self.port.to_string();
        let mut args: Vec<OsString> = ["--port", &port, "--bind", "127.0.0.1"]
            .into_iter()
            .chain(["--daemonize", "no", "--save", "", "--logfile", ""])
            .chain(["--protected-mode", "no", "--dir"])
            .map(OsString::from)
            .collect();
        args.push(self.data_dir.clone().into_os_string());
        let persistence: &[&str] = match self.opts.persistence {
            Persistence::None => &["--appendonly", "no"],
            Persistence::AofEverysec => &["--appendonly", "yes", "--appendfsync", "everysec"],
            Persistence::AofAlways => &["--appendonly", "yes", "--appendfsync", "always"],
        };
        args.extend(persistence.iter().map(OsString::from));
        if let Some(pass) = &self.opts.requirepass {
            args.extend(["--requirepass", pass].map(OsString::from));
        }
        args.extend(self.opts.extra_args.iter().map(OsString::from));
        args
    }

    /// Sends `sig` to the live process and returns its pid.
    fn signal(&self, sig: Signal) -> Result<Pid, TestkitError> {
        let pid = match (self.state, self.pid) {
            (NodeState::Killed, _) | (_, None) => {
                return Err(TestkitError::NodeKilled { port: self.port })
            }
            (_, Some(pid)) => pid,
        };
        let raw = i32::try_from(pid).map_err(|_| signal_error(pid, sig, Errno::EINVAL))?;
        signal::kill(Pid::from_raw(raw), sig).map_err(|e| signal_error(pid, sig, e))?;
        Ok(Pid::from_raw(raw))
    }
}

impl Drop for LocalNode {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SIGKILL also ends stopped processes. Reap synchronously (bounded to ~5 s) so
            // nothing outlives the test even during a panic unwind; `kill_on_drop` and
            // tokio's orphan reaper remain as a fallback.
            if child.start_kill().is_ok() {
                for _ in 0..5000 {
                    match child.try_wait() {
                        Ok(None) => std::thread::sleep(Duration::from_millis(1)),
                        _ => break,
                    }
                }
            }
        }
    }
}

/// Finds the server binary: `env_override` (a path, or a bare name looked up on `path_var`),
/// else `redis-server` on `path_var`.
fn resolve_binary(
    env: Option<OsString>,
    path_var: Option<OsString>,
) -> Result<PathBuf, TestkitError> {
    let tried = match &env {
        Some(v) => format!("{ENV_BINARY}={}", Path::new(v).display()),
        None => "`redis-server` on PATH".to_owned(),
    };
    let name = PathBuf::from(env.unwrap_or_else(|| "redis-server".into()));
    let is_exe = |p: &Path| {
        use std::os::unix::fs::PermissionsExt;
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    let found = if name.components().count() > 1 {
        is_exe(&name).then_some(name)
    } else {
        let dirs: Vec<PathBuf> = path_var
            .map(|p| std::env::split_paths(&p).collect())
            .unwrap_or_default();
        dirs.into_iter().map(|d| d.join(&name)).find(|p| is_exe(p))
    };
    found.ok_or(TestkitError::RedisServerNotFound { tried })
}

fn spawn_error(binary: &Path, source: io::Error) -> TestkitError {
    match source.kind() {
        io::ErrorKind::NotFound => TestkitError::RedisServerNotFound {
            tried: binary.display().to_string(),
        },
        _ => TestkitError::Spawn {
            binary: binary.to_path_buf(),
            source,
        },
    }
}

fn lock(log: &Mutex<VecDeque<String>>) -> MutexGuard<'_, VecDeque<String>> {
    log.lock().unwrap_or_else(PoisonError::into_inner)
}

fn push_line(log: &Mutex<VecDeque<String>>, line: String) {
    let mut lines = lock(log);
    if lines.len() == LOG_LINES_KEPT {
        lines.pop_front();
    }
    lines.push_back(line);
}

async fn drain<R: AsyncBufRead + Unpin>(mut lines: Lines<R>, log: Log) {
    while let Ok(Some(line)) = lines.next_line().await {
        push_line(&log, line);
    }
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Marks the server at `addr`, just started empty by the caller, as new (design 2.6a): a
/// `quorumlock:node` marker of its own run_id, floor 0, `new`. A client then neither
/// quarantines it nor waits to re-seed it. [`LocalQuorum`] does this for the servers it
/// starts; this is for servers a test starts otherwise (containers, say). Only for servers
/// that really hold nothing: a node marked new after it granted locks or recorded fencing
/// tokens would let a lock be granted twice and a token repeat.
///
/// # Errors
/// [`TestkitError::Io`] if the server cannot be reached, [`TestkitError::Protocol`] if it
/// does not tell its run_id or refuses the `SET`.
pub async fn mark_new(addr: SocketAddr) -> Result<(), TestkitError> {
    mark_new_at(addr, None).await
}

async fn mark_new_at(addr: SocketAddr, requirepass: Option<&str>) -> Result<(), TestkitError> {
    let info = command_at(addr, requirepass, &["INFO", "server"]).await?;
    let run_id = info
        .as_str()
        .and_then(|text| {
            text.lines()
                .find_map(|l| l.trim_end_matches('\r').strip_prefix("run_id:"))
        })
        .map(str::to_string)
        .ok_or_else(|| protocol("INFO server told no run_id"))?;
    let marker = format!("{run_id}:0:new");
    match command_at(
        addr,
        requirepass,
        &["SET", crate::algo::keys::NODE_KEY, &marker],
    )
    .await?
    {
        Reply::Status(ok) if ok == "OK" => Ok(()),
        other => Err(protocol(format!("SET of the marker answered {other:?}"))),
    }
}

/// Sends one command over a fresh TCP connection, after `AUTH` if `requirepass` is set.
async fn command_at(
    addr: SocketAddr,
    requirepass: Option<&str>,
    args: &[&str],
) -> Result<Reply, TestkitError> {
    if args.is_empty() {
        return Err(protocol("empty command"));
    }
    let mut stream = TcpStream::connect(addr).await?;
    let mut out = Vec::new();
    if let Some(pass) = requirepass {
        encode_command(&mut out, &["AUTH", pass]);
    }
    encode_command(&mut out, args);
    stream.write_all(&out).await?;
    let mut buf = Vec::new();
    if requirepass.is_some() {
        if let Reply::Error(message) = read_reply(&mut stream, &mut buf).await? {
            return Err(TestkitError::Auth {
                port: addr.port(),
                message,
            });
        }
    }
    read_reply(&mut stream, &mut buf).await
}

fn protocol(msg: impl Into<String>) -> TestkitError {
    TestkitError::Protocol(msg.into())
}

fn signal_error(pid: u32, signal: Signal, source: Errno) -> TestkitError {
    TestkitError::Signal {
        pid,
        signal,
        source,
    }
}

fn encode_command(out: &mut Vec<u8>, args: &[&str]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
}

async fn read_reply(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Result<Reply, TestkitError> {
    loop {
        if let Some((reply, used)) = parse_reply(buf)? {
            buf.drain(..used);
            return Ok(reply);
        }
        if stream.read_buf(buf).await? == 0 {
            return Err(protocol("connection closed before a complete reply"));
        }
    }
}

/// Parses one RESP2 reply from the start of `buf`: `Ok(None)` if more bytes are needed,
/// otherwise the reply and the number of bytes it used.
fn parse_reply(buf: &[u8]) -> Result<Option<(Reply, usize)>, TestkitError> {
    let Some(end) = buf.windows(2).position(|w| w == b"\r\n") else {
        return Ok(None);
    };
    let (kind, line) = buf[..end]
        .split_first()
        .ok_or_else(|| protocol("empty line"))?;
    let line = String::from_utf8_lossy(line).into_owned();
    let mut used = end + 2;
    let int = || {
        line.parse::<i64>()
            .map_err(|_| protocol(format!("invalid integer {line:?}")))
    };
    let reply = match kind {
        b'+' => Reply::Status(line),
        b'-' => Reply::Error(line),
        b':' => Reply::Integer(int()?),
        b'$' => match usize::try_from(int()?) {
            Err(_) => Reply::Bulk(None),
            Ok(len) => {
                let data_end = used
                    .checked_add(len)
                    .ok_or_else(|| protocol("bulk too long"))?;
                let Some(data) = buf.get(used..data_end) else {
                    return Ok(None);
                };
                match buf.get(data_end..data_end + 2) {
                    None => return Ok(None),
                    Some(b"\r\n") => {}
                    Some(_) => return Err(protocol("bulk string not terminated by CRLF")),
                }
                let data = data.to_vec();
                used = data_end + 2;
                Reply::Bulk(Some(data))
            }
        },
        b'*' => match usize::try_from(int()?) {
            Err(_) => Reply::Array(None),
            Ok(n) => {
                let mut items = Vec::with_capacity(n.min(1024));
                for _ in 0..n {
                    let Some((item, len)) = parse_reply(&buf[used..])? else {
                        return Ok(None);
                    };
                    items.push(item);
                    used += len;
                }
                Reply::Array(Some(items))
            }
        },
        other => {
            return Err(protocol(format!(
                "unknown reply type {:?}",
                char::from(*other)
            )))
        }
    };
    Ok(Some((reply, used)))
}

/// The Lua scripts the client sends, with the SHA1 it calls them by, so that tests can check
/// the hashes against a real `SCRIPT LOAD`.
pub fn scripts() -> Vec<(&'static str, String)> {
    crate::node::scripts::ALL
        .into_iter()
        .map(|body| (body, crate::node::scripts::Script::new(body).sha))
        .collect()
}

/// The batch script that carries concurrent calls to one node (design 4.3), and the scripts
/// it runs by number (`BATCHED[op - 1]`), so that tests can compare a batched call with the
/// same call alone.
pub fn batch_script() -> (String, Vec<&'static str>) {
    (
        crate::node::scripts::batch(),
        crate::node::scripts::BATCHED.to_vec(),
    )
}

/// The script a lone `SET NX` vote goes as (`KEYS = [key]`, `ARGV = [token, ttl_ms]`), which
/// answers as the batch script does for that one call: its answer, then the node's marker
/// and quarantine record.
pub fn set_nx_alone_script() -> &'static str {
    crate::node::scripts::batched::SET_NX_ALONE
}

/// The arguments that announce one call in the batch script of [`batch_script`], before the
/// call's own: for a call of script number `number` (1-based in the list it returns) with
/// `keys` keys and `args` arguments, as the client writes them for a node that runs the
/// commands `natives` names (upper case, e.g. `&["DELIFEQ"]`). With `DELIFEQ`, the release
/// or discard of one key deletes with it (or with `GET` and `DEL` where it fails). `MSETEX`
/// changes no call's header: the client sends the `SET NX` calls it sets together as one
/// group at the head of the batch (`M`, their count, `key token` for each, `NX PX ttl`).
pub fn batch_header(number: usize, keys: usize, args: usize, natives: &[&str]) -> Vec<String> {
    let natives = crate::node::scripts::Natives {
        delifeq: natives.contains(&"DELIFEQ"),
        msetex: natives.contains(&"MSETEX"),
    };
    match crate::node::scripts::batch_header(number, keys, args, natives) {
        crate::node::scripts::BatchHeader::Inline(letter) => vec![letter.to_string()],
        crate::node::scripts::BatchHeader::Call(numbers) => {
            numbers.iter().map(usize::to_string).collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_complete_and_partial_replies() {
        let full = b"*3\r\n$3\r\nfoo\r\n$-1\r\n:42\r\n+OK\r\n";
        let expected = Reply::Array(Some(vec![
            Reply::Bulk(Some(b"foo".to_vec())),
            Reply::Bulk(None),
            Reply::Integer(42),
        ]));
        let parsed = parse_reply(full).ok().flatten();
        assert_eq!(parsed, Some((expected, full.len() - 5)));
        for cut in 0..full.len() - 5 {
            assert!(
                matches!(parse_reply(&full[..cut]), Ok(None)),
                "cut at {cut}"
            );
        }
        assert!(matches!(
            parse_reply(b"?x\r\n"),
            Err(TestkitError::Protocol(_))
        ));
    }

    #[test]
    fn missing_binary_error_says_how_to_install() {
        let missing = Some(OsString::from("/nonexistent/redis-server"));
        let err = resolve_binary(missing, None)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.contains("QUORUMLOCK_REDIS_SERVER=/nonexistent/redis-server"),
            "{err}"
        );
        assert!(
            err.contains("sudo apt-get install -y redis-server"),
            "{err}"
        );
        assert!(err.contains("brew install redis"), "{err}");
        let err = resolve_binary(None, Some(OsString::new()))
            .err()
            .map(|e| e.to_string());
        assert!(err.is_some_and(|e| e.contains("`redis-server` on PATH")));
    }
}
