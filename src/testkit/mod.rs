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
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::Signal;
use tempfile::TempDir;

mod node;
mod resp;

use node::resolve_binary;
pub use node::LocalNode;
pub use resp::Reply;
use resp::{command_at, protocol};

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
