//! `quorumlock ls`: the locks held on the nodes, the semaphores and the read-write locks,
//! without taking any. Read-only: `SCAN` for the lock keys, then `GET` and `PTTL` of each and
//! `GET` of its fencing counter; `SCAN` for the sorted sets of the semaphores and read-write
//! locks, then one pipeline of `TIME` (the node's clock that their claims expire by),
//! `ZRANGE` and `PTTL` of each; over a connection of its own per node.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use clap::Args;
use fred::prelude::{ClientLike, Config as FredConfig, KeysInterface, Value};
use fred::types::CustomCommand;
use humantime::format_duration;
use quorumlock::{quorum, Config};
use serde::Serialize;

use super::exit::{Failure, SOFTWARE, UNAVAILABLE};
use super::holder::holder_id;
use super::options::{NodesArg, Vars, NODES};
use super::status::{describe, reader};

mod sets;

use sets::{aggregate_sets, read_set, Counts, SetEntry, SetListed};

/// `quorumlock ls`.
#[derive(Debug, Args)]
#[command(after_long_help = AFTER_HELP)]
pub(crate) struct LsArgs {
    #[command(flatten)]
    nodes: NodesArg,

    /// Print one JSON document instead of the lines (same exit status)
    #[arg(long)]
    json: bool,

    /// Only the resources whose name starts with PREFIX (after $QUORUMLOCK_KEY_PREFIX)
    #[arg(value_name = "PREFIX", default_value = "")]
    prefix: String,
}

const AFTER_HELP: &str = "\
Lists every lock held on the nodes, one line per resource: the SHA1 of its holder's token
(the first 12 hex digits; the token itself stays secret: whoever has it can release the
lock), its fencing token (the greatest recorded on a node, - if none), the ttl left (the
shortest on the nodes that agree), and how many nodes hold that token. A resource whose
key is on nodes with different tokens shows the token on the most nodes and says
`split`. Takes no lock and writes nothing: SCAN, GET and PTTL only, each node under
$QUORUMLOCK_CONNECT_TIMEOUT (default 1s). Lists string keys with a ttl under
$QUORUMLOCK_KEY_PREFIX, and none of quorumlock's own (fencing counters, election records,
node markers).

Semaphores (run --permits) follow, one line per resource: its number of permits N (as
recorded on the most nodes), how many permits are held (claims unexpired by the nodes'
clocks on a quorum of nodes), its fencing token, and how many nodes hold its key. Then
read-write locks (run --shared, --exclusive), one line per resource: how many readers and
writers hold it (on a quorum of nodes), how many writers wait (their intent on a node),
its fencing token, and how many nodes hold its key. TIME, ZRANGE and PTTL only;
`quorumlock status RESOURCE` lists the holders of one.

With --json, one document: prefix, nodes (index, node with any password hidden, error or
null), answered, quorum, locks (resource, key, holder_sha1, fencing_token, ttl_ms, agreeing,
tokens: sha1 and the node indexes holding it), semaphores (resource, key, kind: semaphore,
permits, held, fencing_token, nodes: the node indexes holding its key, holders), rwlocks
(resource, key, kind: rwlock, readers, writers, waiting, fencing_token, nodes, holders) and
exit_code. A holder is a semaphore's slot, or a read-write lock's access (read or write)
and waiting (a writer's intent), then sha1, the node indexes recording the claim, and
ttl_ms: how long a majority of the nodes still records it by their clocks (0 on fewer
than a quorum, null if it never expires).

Exit status (the same with --json):
  0   listed (possibly nothing)
  64  usage or configuration error
  69  fewer than a quorum of nodes answered: the list may miss locks";

/// What one node holds under the prefix.
#[derive(Debug, Default)]
struct Scanned {
    locks: Vec<Entry>,
    /// The semaphores and the read-write locks.
    sets: Vec<SetEntry>,
}

/// One lock key as one node holds it.
#[derive(Debug, Clone)]
struct Entry {
    key: String,
    token: String,
    pttl: i64,
    fence: Option<u64>,
}

pub(crate) async fn ls(args: LsArgs) -> Result<u8, Failure> {
    let mut vars = Vars::from_env()?;
    vars.flag(NODES, args.nodes.nodes.clone());
    let config = vars.builder()?.validate()?;
    let pattern = glob_escape(&config.lock_key(&args.prefix)) + "*";
    let timeout = config.connect_timeout();
    let clients = (0..config.nodes().len())
        .map(|i| config.node_client_config(i).transpose())
        .collect::<Result<Vec<_>, _>>()?;
    let scans = clients
        .into_iter()
        .flatten()
        .map(|client| scan(client, &config, &pattern, timeout));
    let seen: Vec<Result<Scanned, String>> = futures::future::join_all(scans).await;

    let nodes = seen.len();
    let answered = seen.iter().filter(|s| s.is_ok()).count();
    let code = if answered >= quorum(nodes) {
        0
    } else {
        UNAVAILABLE
    };
    let locks = aggregate(&config, &seen);
    let (semaphores, rwlocks): (Vec<SetListed>, Vec<SetListed>) =
        aggregate_sets(&config, &seen, quorum(nodes))
            .into_iter()
            .partition(|set| matches!(set.counts, Counts::Semaphore { .. }));
    if !args.json {
        print!("{}", lines(&config, &seen, &locks, &semaphores, &rwlocks));
        return Ok(code);
    }
    let document = LsDocument {
        prefix: &args.prefix,
        nodes: config
            .nodes()
            .iter()
            .zip(&seen)
            .enumerate()
            .map(|(index, (node, seen))| LsNode {
                index,
                node: node.redacted(),
                error: seen.as_ref().err().map(String::as_str),
            })
            .collect(),
        answered,
        quorum: quorum(nodes),
        locks: &locks,
        semaphores: &semaphores,
        rwlocks: &rwlocks,
        exit_code: code,
    };
    let text = serde_json::to_string_pretty(&document).map_err(|e| Failure::new(SOFTWARE, e))?;
    println!("{text}");
    Ok(code)
}

/// What `ls` prints without `--json`: the nodes that did not answer, a line a lock, a line a
/// semaphore or read-write lock, and the count.
fn lines(
    config: &Config,
    seen: &[Result<Scanned, String>],
    locks: &[Listed],
    semaphores: &[SetListed],
    rwlocks: &[SetListed],
) -> String {
    let nodes = seen.len();
    let mut out = String::new();
    for (i, seen) in seen.iter().enumerate() {
        if let Err(why) = seen {
            let _ = writeln!(out, "node {i} {}: unreachable: {why}", config.nodes()[i]);
        }
    }
    let or_dash = |t: Option<u64>| t.map_or_else(|| "-".to_string(), |t| t.to_string());
    for lock in locks {
        let ttl = u64::try_from(lock.ttl_ms)
            .map(|ms| format_duration(Duration::from_millis(ms)).to_string())
            .unwrap_or_else(|_| "-".to_string());
        let split = if lock.tokens.len() > 1 { ", split" } else { "" };
        let _ = writeln!(
            out,
            "{}  holder {}  fencing {}  ttl {ttl}  on {} of {nodes} nodes{split}",
            lock.resource,
            lock.holder_sha1,
            or_dash(lock.fencing_token),
            lock.agreeing
        );
    }
    for set in semaphores.iter().chain(rwlocks) {
        let counts = match set.counts {
            Counts::Semaphore { permits, held } => {
                format!("semaphore of {permits} permits  held {held}")
            }
            Counts::Rwlock {
                readers,
                writers,
                waiting,
            } => {
                format!("read-write lock  readers {readers}  writers {writers}  waiting {waiting}")
            }
        };
        let _ = writeln!(
            out,
            "{}  {counts}  fencing {}  on {} of {nodes} nodes",
            set.resource,
            or_dash(set.fencing_token),
            set.nodes.len()
        );
    }
    let plural = |n: usize| if n == 1 { "" } else { "s" };
    let mut also = String::new();
    if !semaphores.is_empty() {
        let n = semaphores.len();
        let _ = write!(also, ", {n} semaphore{}", plural(n));
    }
    if !rwlocks.is_empty() {
        let n = rwlocks.len();
        let _ = write!(also, ", {n} read-write lock{}", plural(n));
    }
    let answered = seen.iter().filter(|s| s.is_ok()).count();
    let _ = writeln!(
        out,
        "{} lock{}{also} on the {answered} of {nodes} nodes that answered (quorum {})",
        locks.len(),
        plural(locks.len()),
        quorum(nodes)
    );
    out
}

/// Every key of `kind` matching `pattern` on one node but quorumlock's own.
async fn scan_keys(
    client: &fred::clients::Client,
    pattern: &str,
    kind: &str,
) -> Result<Vec<String>, fred::error::Error> {
    let mut found = Vec::new();
    let mut cursor = "0".to_string();
    loop {
        let page: Value = client
            .custom(
                CustomCommand::new_static("SCAN", None, false),
                vec![
                    cursor.as_str(),
                    "MATCH",
                    pattern,
                    "COUNT",
                    "1000",
                    "TYPE",
                    kind,
                ],
            )
            .await?;
        let (next, keys) = match page {
            Value::Array(mut parts) if parts.len() == 2 => {
                let keys = parts.pop().unwrap_or(Value::Null);
                let next = parts.pop().and_then(|c| c.as_string()).unwrap_or_default();
                (next, keys.into_array())
            }
            other => {
                return Err(fred::error::Error::new(
                    fred::error::ErrorKind::Protocol,
                    format!("unexpected SCAN reply: {other:?}"),
                ))
            }
        };
        let keys = keys.into_iter().filter_map(|k| k.as_string());
        found.extend(keys.filter(|key| !Config::is_internal_key(key)));
        if next == "0" || next.is_empty() {
            return Ok(found);
        }
        cursor = next;
    }
}

/// Every lock key matching `pattern` on one node, with its token, ttl and fencing counter,
/// and every semaphore and read-write lock with its claims.
async fn scan(
    node: FredConfig,
    config: &Config,
    pattern: &str,
    timeout: Duration,
) -> Result<Scanned, String> {
    let read = async {
        let client = reader(node, timeout).await?;
        let mut scanned = Scanned::default();
        for key in scan_keys(&client, pattern, "string").await? {
            let token: Option<String> = client.get(&key).await?;
            let pttl: i64 = client.pttl(&key).await?;
            // A key without a ttl is not a lock's; one gone meanwhile is free.
            let (Some(token), true) = (token, pttl > 0) else {
                continue;
            };
            let resource = key.strip_prefix(config.key_prefix()).unwrap_or(&key);
            let fence: Option<String> = client.get(config.fencing_key(resource)).await?;
            scanned.locks.push(Entry {
                key,
                token,
                pttl,
                fence: fence.and_then(|f| f.parse().ok()),
            });
        }
        for key in scan_keys(&client, pattern, "zset").await? {
            if let Some(entry) = read_set(&client, config, key).await? {
                scanned.sets.push(entry);
            }
        }
        let _ = client.quit().await;
        Ok::<_, fred::error::Error>(scanned)
    };
    // A whole scan may take a while on a node with many keys: a timeout per command, and
    // ten for the scan.
    match tokio::time::timeout(timeout * 10, read).await {
        Ok(Ok(entries)) => Ok(entries),
        Ok(Err(e)) => Err(describe(&e)),
        Err(_) => Err(format!(
            "the scan took longer than {}",
            format_duration(timeout * 10)
        )),
    }
}

/// One held lock, across the nodes.
#[derive(Debug, Serialize)]
struct Listed {
    resource: String,
    key: String,
    /// The holder id (`holder.rs`) of the token on the most nodes.
    holder_sha1: String,
    /// The greatest fencing counter of the resource on the nodes that answered.
    fencing_token: Option<u64>,
    /// The shortest ttl left on the nodes holding the holder's token.
    ttl_ms: i64,
    /// How many nodes hold the holder's token.
    agreeing: usize,
    tokens: Vec<Holding>,
}

/// A token of a resource and the nodes that hold it.
#[derive(Debug, Serialize)]
struct Holding {
    sha1: String,
    nodes: Vec<usize>,
}

/// The locks, by resource name: the token on the most nodes first.
fn aggregate(config: &Config, seen: &[Result<Scanned, String>]) -> Vec<Listed> {
    let mut by_key: BTreeMap<&str, Vec<(usize, &Entry)>> = BTreeMap::new();
    for (i, scanned) in seen.iter().enumerate() {
        for entry in scanned.iter().flat_map(|s| &s.locks) {
            by_key.entry(&entry.key).or_default().push((i, entry));
        }
    }
    by_key
        .into_iter()
        .map(|(key, held)| {
            let mut tokens: BTreeMap<&str, Vec<(usize, &Entry)>> = BTreeMap::new();
            for (i, entry) in &held {
                tokens.entry(&entry.token).or_default().push((*i, entry));
            }
            let mut tokens: Vec<(&str, Vec<(usize, &Entry)>)> = tokens.into_iter().collect();
            tokens.sort_by_key(|(_, nodes)| std::cmp::Reverse(nodes.len()));
            let (agreeing, ttl_ms) = tokens.first().map_or((0, 0), |(_, nodes)| {
                let ttl = nodes.iter().map(|(_, e)| e.pttl).min().unwrap_or(0);
                (nodes.len(), ttl)
            });
            Listed {
                resource: key
                    .strip_prefix(config.key_prefix())
                    .unwrap_or(key)
                    .to_string(),
                key: key.to_string(),
                holder_sha1: tokens
                    .first()
                    .map(|(token, _)| holder_id(token))
                    .unwrap_or_default(),
                fencing_token: held.iter().filter_map(|(_, e)| e.fence).max(),
                ttl_ms,
                agreeing,
                tokens: tokens
                    .iter()
                    .map(|(token, nodes)| Holding {
                        sha1: holder_id(token),
                        nodes: nodes.iter().map(|(i, _)| *i).collect(),
                    })
                    .collect(),
            }
        })
        .collect()
}

/// `text` with the glob characters of `SCAN MATCH` escaped.
fn glob_escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

/// The JSON document, fields in this order.
#[derive(Debug, Serialize)]
struct LsDocument<'a> {
    prefix: &'a str,
    nodes: Vec<LsNode<'a>>,
    answered: usize,
    quorum: usize,
    locks: &'a [Listed],
    semaphores: &'a [SetListed],
    rwlocks: &'a [SetListed],
    exit_code: u8,
}

#[derive(Debug, Serialize)]
struct LsNode<'a> {
    index: usize,
    node: &'a str,
    error: Option<&'a str>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_characters_are_escaped() {
        assert_eq!(glob_escape("app:*[x]?\\"), "app:\\*\\[x\\]\\?\\\\");
        assert_eq!(glob_escape("plain:key"), "plain:key");
    }
}
