//! `quorumlock status`: who holds a resource's lock, node by node, as lines or as JSON, and
//! whether `run` could take it now. Reads the key with TYPE, then GET and PTTL per node,
//! over a connection of its own; beside it, a client checks the nodes as `run`'s does
//! (`counting.rs`), so that a quarantine or a quorum that does not count is told, not
//! `free`. Where the nodes hold a semaphore or a read-write lock instead, its holders are
//! read with the library's census ([`Semaphore::holders`](quorumlock::Semaphore::holders)).
//! Every holder is named by its holder id (`holder.rs`), never by its token.

use std::fmt::{self, Write as _};
use std::time::Duration;

use clap::Args;
use fred::prelude::{Builder, ClientLike, Config, KeysInterface, Value};
use fred::types::CustomCommand;
use humantime::format_duration;
use quorumlock::{ConfigError, NodeUrl};

use super::exit::Failure;
use super::holder::holder_id;
use super::options::{NodesArg, Vars, NODES};

mod census;
mod counting;
mod document;
mod lock;

use census::{read_write, rw_status, semaphore_of, semaphore_status};
use counting::Counting;
pub(super) use document::Claimed;
use lock::lock_status;

/// `quorumlock status`.
#[derive(Debug, Args)]
#[command(after_long_help = AFTER_HELP)]
pub(crate) struct StatusArgs {
    #[command(flatten)]
    nodes: NodesArg,

    /// Print one JSON document instead of the lines (same exit status)
    #[arg(long)]
    json: bool,

    /// The resource: its Redis key, after $QUORUMLOCK_KEY_PREFIX
    #[arg(value_name = "RESOURCE")]
    resource: String,
}

const AFTER_HELP: &str = "\
Prints one line per node (whether the key exists, its holder and its remaining ttl), then
a summary. A holder is named by the first 12 hex digits of the SHA1 of its token, as ls and
release name it; the token itself stays secret (whoever has it can release the lock).
Reads the key with TYPE, GET and PTTL, each node under $QUORUMLOCK_CONNECT_TIMEOUT
(default 1s). Beside it, checks the nodes' connections as run does (waiting up to the same
timeout for a quorum), which loads the scripts and, on a node that may have lost data,
records its quarantine as any client does; it takes no lock. Where the nodes' quarantine,
or too few nodes that count, would keep run from the lock, the summary says so instead of
free or held (exit 69, as run -n); -v shows each node's reason.

When the nodes hold a semaphore at the key (run --permits), each node's line gives its
number of permits N, then one line per holder: its slot, its holder id, on how many nodes,
and its ttl left (how long a majority still records it, by the nodes' clocks); then a
summary. A read-write lock (run --shared, --exclusive) lists its readers, writer and
writers waiting alike. The holders are read with one read-only script per node.

With --json, one document: resource, key (with the prefix), kind (lock, semaphore or
rwlock), nodes (index, node with any password hidden, state: free, held, semaphore, rwlock
or unreachable, holder_sha1: the holder id there, pttl_ms as PTTL answered it, -1 for a
key without expiry, permits: a semaphore's N on that node, error), quorum, quorum_in_s
(seconds until a quorum of nodes counts: 0 now, null when none can, as in doctor --json),
held_on, free_on, holder_sha1 (the holder id on a quorum, or null), permits (a
semaphore's N, or null), holders (a semaphore's or read-write lock's: slot, or access and
waiting; sha1: the holder id; nodes, ttl_ms, held: on a quorum; null for a lock), verdict
(free, held or unknown for a lock; available, full or unknown for a semaphore; free, read,
written or unknown for a read-write lock; quarantined or no_quorum for any), error (why
the holders could not be read, or null) and exit_code.

Exit status (the same with --json):
  0   free: a majority of nodes has no key and counts (a lock attempt would not be
      refused); for a semaphore, available: fewer than N permits are held on a majority;
      for a read-write lock, no writer holds it
  64  usage or configuration error (two URLs of one server, as run)
  69  what run -n exits with: the nodes' quarantine keeps them from a quorum (quarantined:
      the summary says when it ends), too few nodes count (no_quorum), or too few answered
      to tell (unknown)
  75  held: a majority of nodes has a key; for a semaphore, full: all N permits are held;
      for a read-write lock, a writer holds it";

/// What one node said about the key.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Seen {
    Free,
    Held {
        /// The holder's token: never printed (its holder id is), and kept for
        /// `release --force`, which breaks the lock with it.
        token: String,
        pttl: i64,
    },
    /// The key is a semaphore of `permits` permits (`run --permits`).
    Semaphore {
        permits: u32,
        pttl: i64,
    },
    /// The key is a read-write lock (`run --shared`, `--exclusive`).
    ReadWrite {
        pttl: i64,
    },
    Failed(String),
}

/// What `status` found before it looks at the kind of key: the nodes' answers, and whether
/// a quorum of them counts for `run`.
#[derive(Debug)]
struct Found<'a> {
    args: &'a StatusArgs,
    /// The resource's key, with the prefix.
    key: &'a str,
    nodes: &'a [NodeUrl],
    seen: &'a [Seen],
    counting: Counting,
}

pub(crate) async fn status(args: StatusArgs) -> Result<u8, Failure> {
    if args.resource.is_empty() {
        return Err(ConfigError::EmptyResource.into());
    }
    let mut vars = Vars::from_env()?;
    vars.flag(NODES, args.nodes.nodes.clone());
    let builder = vars.builder()?;
    let config = builder.validate()?;
    let key = config.lock_key(&args.resource);
    let timeout = config.connect_timeout();
    let clients = (0..config.nodes().len())
        .map(|i| config.node_client_config(i).transpose())
        .collect::<Result<Vec<_>, _>>()?;
    // The client `run` would be, checking the nodes while the key is read.
    let redlock = builder.build()?;
    let (seen, counting) = tokio::join!(
        futures::future::join_all(
            clients
                .into_iter()
                .flatten()
                .map(|client| probe(client, &key, timeout)),
        ),
        Counting::of(&redlock)
    );
    let found = Found {
        args: &args,
        key: &key,
        nodes: config.nodes(),
        seen: &seen,
        counting: counting?,
    };
    if let Some(permits) = semaphore_of(&seen) {
        return semaphore_status(&found, &redlock, permits).await;
    }
    if read_write(&seen) {
        return rw_status(&found, &redlock).await;
    }
    lock_status(&found)
}

/// Reads the key on one node; never writes.
pub(super) async fn probe(config: Config, key: &str, timeout: Duration) -> Seen {
    let read = async {
        let client = reader(config, timeout).await?;
        if let Some(seen) = semaphore_record(&client, key).await? {
            let _ = client.quit().await;
            return Ok(seen);
        }
        let value: Value = client.get(key).await?;
        let seen = match value.as_bytes() {
            None => Seen::Free,
            Some(token) => match client.pttl::<i64, _>(key).await? {
                -2 => Seen::Free, // expired between the two commands
                pttl => Seen::Held {
                    token: String::from_utf8_lossy(token).into_owned(),
                    pttl,
                },
            },
        };
        let _ = client.quit().await;
        Ok::<_, fred::error::Error>(seen)
    };
    match tokio::time::timeout(timeout, read).await {
        Ok(Ok(seen)) => seen,
        Ok(Err(e)) => Seen::Failed(describe(&e)),
        Err(_) => Seen::Failed(format!("no answer within {}", format_duration(timeout))),
    }
}

/// The semaphore at `key`, if the key is one (a sorted set with the record of its number of
/// permits, the member `#` scored `-N`); `None` for any other key, or none.
async fn semaphore_record(
    client: &fred::clients::Client,
    key: &str,
) -> Result<Option<Seen>, fred::error::Error> {
    let kind: Value = client
        .custom(CustomCommand::new_static("TYPE", None, false), vec![key])
        .await?;
    if kind.as_str().as_deref() != Some("zset") {
        return Ok(None);
    }
    let record: Value = client
        .custom(
            CustomCommand::new_static("ZSCORE", None, false),
            vec![key, "#"],
        )
        .await?;
    let permits = record
        .as_f64()
        .filter(|score| *score < 0.0 && score.fract() == 0.0 && -score <= f64::from(u32::MAX))
        .map(|score| -score as u32);
    let Some(permits) = permits else {
        let read_write: Value = client
            .custom(
                CustomCommand::new_static("ZSCORE", None, false),
                vec![key, "#rw"],
            )
            .await?;
        if read_write.is_null() {
            return Ok(None);
        }
        let pttl: i64 = client.pttl(key).await?;
        return Ok(Some(Seen::ReadWrite { pttl }));
    };
    let pttl: i64 = client.pttl(key).await?;
    Ok(Some(Seen::Semaphore { permits, pttl }))
}

/// A node's line: `lock` says whether the status is a lock's (a lock's key on a node of a
/// semaphore is named as such).
fn node_line(out: &mut String, i: usize, node: &NodeUrl, seen: &Seen, lock: bool) -> fmt::Result {
    match seen {
        Seen::Free => writeln!(out, "node {i} {node}: free"),
        Seen::Held { token, pttl } => writeln!(
            out,
            "node {i} {node}: {}held by {} ({})",
            if lock { "" } else { "a lock's key, " },
            holder_id(token),
            expiry(*pttl)
        ),
        Seen::Semaphore { permits, pttl } => writeln!(
            out,
            "node {i} {node}: semaphore of {permits} permits ({})",
            expiry(*pttl)
        ),
        Seen::ReadWrite { pttl } => {
            writeln!(out, "node {i} {node}: read-write lock ({})", expiry(*pttl))
        }
        Seen::Failed(why) => writeln!(out, "node {i} {node}: unreachable: {why}"),
    }
}

/// A connection of its own to one node, for reading: the timeout on every command, no
/// command re-sent after a reconnect.
pub(super) async fn reader(
    config: Config,
    timeout: Duration,
) -> Result<fred::clients::Client, fred::error::Error> {
    let client = Builder::from_config(config)
        .with_connection_config(|c| {
            c.connection_timeout = timeout;
            c.internal_command_timeout = timeout;
            c.max_command_attempts = 1;
        })
        .with_performance_config(|p| p.default_command_timeout = timeout)
        .build()?;
    let _connection = client.init().await?;
    Ok(client)
}

/// A fred error in a few words: an I/O error's OS message rather than its `Debug` form.
pub(super) fn describe(e: &fred::error::Error) -> String {
    let details = e.details();
    let os_message = details
        .split_once("message: \"")
        .and_then(|(_, rest)| rest.split_once('"'))
        .map(|(message, _)| message);
    match (e.kind(), os_message) {
        (fred::error::ErrorKind::IO, Some(message)) => message.to_lowercase(),
        _ => e.to_string(),
    }
}

pub(super) fn expiry(pttl: i64) -> String {
    match u64::try_from(pttl) {
        Ok(ms) => format!("expires in {}", format_duration(Duration::from_millis(ms))),
        Err(_) => "no expiry: not a lock's key?".to_string(),
    }
}
