//! One `redis-server` process: started on a free port, killed, frozen, resumed, restarted.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, Command};

use super::resp::{command_at, Reply};
use super::{
    mark_new_at, Log, NodeOptions, NodeState, Persistence, TestkitError, ADDR_IN_USE_MARKER,
    ENV_BINARY, FRESH_PORT_ATTEMPTS, LOG_LINES_KEPT, LOG_TAIL_LINES, READY_MARKER, READY_TIMEOUT,
    SAME_PORT_ATTEMPTS,
};

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
    pub(super) async fn launch(
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
pub(super) fn resolve_binary(
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

pub(super) fn spawn_error(binary: &Path, source: io::Error) -> TestkitError {
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

pub(super) fn lock(log: &Mutex<VecDeque<String>>) -> MutexGuard<'_, VecDeque<String>> {
    log.lock().unwrap_or_else(PoisonError::into_inner)
}

pub(super) fn push_line(log: &Mutex<VecDeque<String>>, line: String) {
    let mut lines = lock(log);
    if lines.len() == LOG_LINES_KEPT {
        lines.pop_front();
    }
    lines.push_back(line);
}

pub(super) async fn drain<R: AsyncBufRead + Unpin>(mut lines: Lines<R>, log: Log) {
    while let Ok(Some(line)) = lines.next_line().await {
        push_line(&log, line);
    }
}

pub(super) fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

pub(super) fn signal_error(pid: u32, signal: Signal, source: Errno) -> TestkitError {
    TestkitError::Signal {
        pid,
        signal,
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
