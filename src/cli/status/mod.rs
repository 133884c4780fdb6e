//! `quorumlock status`: who holds a resource's lock, node by node, as lines or as JSON.
//! Read-only: TYPE, then GET and PTTL per node, over a connection of its own (a `RedLock`
//! would load its scripts). Where the nodes hold a semaphore instead, its holders are read
//! with the library's census ([`Semaphore::holders`](quorumlock::Semaphore::holders)).

use std::collections::BTreeMap;
use std::fmt::{self, Write as _};
use std::time::Duration;

use clap::Args;
use fred::prelude::{Builder, ClientLike, Config, KeysInterface, Value};
use fred::types::CustomCommand;
use humantime::format_duration;
use quorumlock::{quorum, Access, ConfigError, PermitHolder, RwHolder};
use serde::Serialize;

use super::exit::{Failure, SOFTWARE, TAKEN, UNAVAILABLE};
use super::options::{NodesArg, Vars, NODES};

mod census;

pub(super) use census::Claimed;
use census::{read_write, rw_status, semaphore_of, semaphore_status};

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
Prints one line per node (whether the key exists, its holder's token, shortened, and its
remaining ttl), then a summary. Sends only TYPE, GET and PTTL, each node under
$QUORUMLOCK_CONNECT_TIMEOUT (default 1s).

When the nodes hold a semaphore at the key (run --permits), each node's line gives its
number of permits N, then one line per holder: its slot, the first 12 hex digits of the
SHA1 of its token (the token stays secret), on how many nodes, and its ttl left (how long
a majority still records it, by the nodes' clocks); then a summary. The holders are read
with one read-only script per node (ZSCORE of the record of N besides).

With --json, one document: resource, key (with the prefix), kind (lock, or semaphore when
the nodes hold one), nodes (index, node with any password hidden, state: free, held,
semaphore or unreachable, token in full, pttl_ms as PTTL answered it, -1 for a key without
expiry, permits: a semaphore's N on that node, error), quorum, held_on, free_on, holder
(the token on a quorum, or null), permits (a semaphore's N, or null), holders (a
semaphore's: slot, token_sha1, nodes, ttl_ms, held: on a quorum; null for a lock),
verdict (free, held or unknown for a lock; available, full or unknown for a semaphore),
error (why a semaphore's holders could not be read, or null) and exit_code.

Exit status (the same with --json):
  0   free: a majority of nodes has no key (a lock attempt would not be refused); for a
      semaphore, available: fewer than N permits are held on a majority
  64  usage or configuration error
  69  too few nodes answered to tell (for a semaphore, or they disagree on its N)
  75  held: a majority of nodes has a key; for a semaphore, full: all N permits are held";

/// What one node said about the key.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Seen {
    Free,
    Held {
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

pub(crate) async fn status(args: StatusArgs) -> Result<u8, Failure> {
    if args.resource.is_empty() {
        return Err(ConfigError::EmptyResource.into());
    }
    let mut vars = Vars::from_env()?;
    vars.flag(NODES, args.nodes.nodes.clone());
    let config = vars.builder()?.validate()?;
    let key = config.lock_key(&args.resource);
    let timeout = config.connect_timeout();
    let clients = (0..config.nodes().len())
        .map(|i| config.node_client_config(i).transpose())
        .collect::<Result<Vec<_>, _>>()?;
    let seen = futures::future::join_all(
        clients
            .into_iter()
            .flatten()
            .map(|client| probe(client, &key, timeout)),
    )
    .await;

    if let Some(permits) = semaphore_of(&seen) {
        return semaphore_status(&args, &vars, &key, &seen, permits).await;
    }
    if read_write(&seen) {
        return rw_status(&args, &vars, &key, &seen).await;
    }
    let summary = summarize(&args.resource, &seen);
    if args.json {
        let document = to_json(&args.resource, &key, config.nodes(), &seen, &summary);
        let text =
            serde_json::to_string_pretty(&document).map_err(|e| Failure::new(SOFTWARE, e))?;
        println!("{text}");
        return Ok(summary.code);
    }
    let mut out = String::new();
    for (i, (node, seen)) in config.nodes().iter().zip(&seen).enumerate() {
        let _ = match seen {
            Seen::Free => writeln!(out, "node {i} {node}: free"),
            Seen::Held { token, pttl } => writeln!(
                out,
                "node {i} {node}: held by {} ({})",
                short(token),
                expiry(*pttl)
            ),
            other => node_line(&mut out, i, node, other),
        };
    }
    out.push_str(&summary.line);
    print!("{out}");
    Ok(summary.code)
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

/// A node's line, for the kinds of key a status of another kind shows too.
fn node_line(out: &mut String, i: usize, node: &quorumlock::NodeUrl, seen: &Seen) -> fmt::Result {
    match seen {
        Seen::Free => writeln!(out, "node {i} {node}: free"),
        Seen::Held { token, pttl } => writeln!(
            out,
            "node {i} {node}: a lock's key, held by {} ({})",
            short(token),
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

/// The verdict across the nodes.
#[derive(Debug)]
struct Summary<'a> {
    /// `free`, `held` or `unknown`.
    verdict: &'static str,
    code: u8,
    quorum: usize,
    held_on: usize,
    free_on: usize,
    /// The token held on a quorum, if one is.
    holder: Option<&'a str>,
    /// The summary line, with its newline.
    line: String,
}

/// The summary: held or free when a majority says so.
fn summarize<'a>(resource: &str, seen: &'a [Seen]) -> Summary<'a> {
    let nodes = seen.len();
    let needed = quorum(nodes);
    let held: Vec<&str> = seen
        .iter()
        .filter_map(|s| match s {
            Seen::Held { token, .. } => Some(token.as_str()),
            _ => None,
        })
        .collect();
    let free = seen.iter().filter(|s| **s == Seen::Free).count();
    let counts = format!("key on {} of {nodes} nodes, quorum {needed}", held.len());
    let mut summary = Summary {
        verdict: "unknown",
        code: UNAVAILABLE,
        quorum: needed,
        held_on: held.len(),
        free_on: free,
        holder: None,
        line: String::new(),
    };
    if held.len() >= needed {
        let mut top = (held[0], 0);
        for token in &held {
            let n = held.iter().filter(|t| *t == token).count();
            if n > top.1 {
                top = (token, n);
            }
        }
        let by = if top.1 >= needed {
            summary.holder = Some(top.0);
            format!("by {}", short(top.0))
        } else {
            "by several owners, none on a quorum".to_string()
        };
        summary.line = format!("`{resource}`: held {by} ({counts})\n");
        (summary.verdict, summary.code) = ("held", TAKEN);
    } else if free >= needed {
        summary.line = format!("`{resource}`: free ({counts})\n");
        (summary.verdict, summary.code) = ("free", 0);
    } else {
        let answered = free + held.len();
        summary.line = format!(
            "`{resource}`: unknown: only {answered} of {nodes} nodes answered ({counts})\n"
        );
    }
    summary
}

/// The JSON document, fields in this order.
#[derive(Debug, Serialize)]
struct StatusDocument<'a> {
    resource: &'a str,
    key: &'a str,
    /// `lock`, or `semaphore` when the nodes hold one at the key.
    kind: &'static str,
    nodes: Vec<StatusNode<'a>>,
    quorum: usize,
    held_on: usize,
    free_on: usize,
    holder: Option<&'a str>,
    /// A semaphore's number of permits.
    permits: Option<u32>,
    /// A semaphore's or a read-write lock's holders; `null` for a lock.
    holders: Option<Vec<HolderJson<'a>>>,
    verdict: &'static str,
    /// Why a semaphore's holders could not be read.
    error: Option<String>,
    exit_code: u8,
}

/// One holder of a semaphore's permit, or of a read-write lock's side.
#[derive(Debug, Serialize)]
struct HolderJson<'a> {
    /// A semaphore's `slot`, or a read-write lock's `access` and `waiting`.
    #[serde(flatten)]
    claimed: Claimed,
    token_sha1: &'a str,
    nodes: usize,
    ttl_ms: u128,
    /// On a quorum of nodes: the claim holds its slot.
    held: bool,
}

/// One node: `token` and `pttl_ms` when held, `error` when unreachable, `null` otherwise.
#[derive(Debug, Serialize)]
struct StatusNode<'a> {
    index: usize,
    node: &'a str,
    /// `free`, `held` or `unreachable`.
    state: &'static str,
    token: Option<&'a str>,
    pttl_ms: Option<i64>,
    /// A semaphore's number of permits, as this node records it.
    permits: Option<u32>,
    error: Option<&'a str>,
}

fn to_json<'a>(
    resource: &'a str,
    key: &'a str,
    nodes: &'a [quorumlock::NodeUrl],
    seen: &'a [Seen],
    summary: &Summary<'a>,
) -> StatusDocument<'a> {
    StatusDocument {
        resource,
        key,
        kind: "lock",
        nodes: json_nodes(nodes, seen),
        quorum: summary.quorum,
        held_on: summary.held_on,
        free_on: summary.free_on,
        holder: summary.holder,
        permits: None,
        holders: None,
        verdict: summary.verdict,
        error: None,
        exit_code: summary.code,
    }
}

/// Every node's line of the JSON document.
fn json_nodes<'a>(nodes: &'a [quorumlock::NodeUrl], seen: &'a [Seen]) -> Vec<StatusNode<'a>> {
    nodes
        .iter()
        .zip(seen)
        .enumerate()
        .map(|(index, (node, seen))| {
            let node = node.redacted();
            let (state, token, pttl_ms, permits, error) = match seen {
                Seen::Free => ("free", None, None, None, None),
                Seen::Held { token, pttl } => {
                    ("held", Some(token.as_str()), Some(*pttl), None, None)
                }
                Seen::Semaphore { permits, pttl } => {
                    ("semaphore", None, Some(*pttl), Some(*permits), None)
                }
                Seen::ReadWrite { pttl } => ("rwlock", None, Some(*pttl), None, None),
                Seen::Failed(why) => ("unreachable", None, None, None, Some(why.as_str())),
            };
            StatusNode {
                index,
                node,
                state,
                token,
                pttl_ms,
                permits,
                error,
            }
        })
        .collect()
}

/// The first 8 characters of a token.
pub(super) fn short(token: &str) -> String {
    match token.char_indices().nth(8) {
        Some((end, _)) => format!("{}…", &token[..end]),
        None => token.to_string(),
    }
}

pub(super) fn expiry(pttl: i64) -> String {
    match u64::try_from(pttl) {
        Ok(ms) => format!("expires in {}", format_duration(Duration::from_millis(ms))),
        Err(_) => "no expiry: not a lock's key?".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(token: &str) -> Seen {
        Seen::Held {
            token: token.into(),
            pttl: 1000,
        }
    }

    #[test]
    fn a_majority_decides_held_or_free() {
        let down = || Seen::Failed("down".into());
        let seen = [held("aaaaaaaaaaaa"), held("aaaaaaaaaaaa"), down()];
        let s = summarize("r", &seen);
        assert_eq!((s.code, s.verdict), (TAKEN, "held"));
        assert_eq!(s.holder, Some("aaaaaaaaaaaa"));
        assert!(s.line.contains("held by aaaaaaaa…"), "{}", s.line);
        let seen = [held("a"), held("b"), Seen::Free];
        let s = summarize("r", &seen);
        assert_eq!((s.code, s.verdict, s.holder), (TAKEN, "held", None));
        assert!(s.line.contains("several owners"), "{}", s.line);
        let seen = [held("a"), Seen::Free, Seen::Free];
        let s = summarize("r", &seen);
        assert_eq!((s.code, s.verdict, s.held_on, s.free_on), (0, "free", 1, 2));
        let seen = [held("a"), Seen::Free, down()];
        let s = summarize("r", &seen);
        assert_eq!((s.code, s.verdict), (UNAVAILABLE, "unknown"));
        let seen = [down(), Seen::Free, down()];
        assert_eq!(summarize("r", &seen).code, UNAVAILABLE);
    }

    #[test]
    fn tokens_are_shortened_to_eight_characters() {
        assert_eq!(short("0123456789abcdef"), "01234567…");
        assert_eq!(short("01234567"), "01234567");
        assert_eq!(short("é1234567x"), "é1234567…");
    }
}
