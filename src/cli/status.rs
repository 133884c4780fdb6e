//! `quorumlock status`: who holds a resource's lock, node by node, as lines or as JSON.
//! Read-only: one GET and one PTTL per node, over a connection of its own (a `RedLock` would
//! load its scripts).

use std::fmt::Write as _;
use std::time::Duration;

use clap::Args;
use fred::prelude::{Builder, ClientLike, Config, KeysInterface, Value};
use humantime::format_duration;
use quorumlock::{quorum, ConfigError};
use serde::Serialize;

use super::exit::{Failure, SOFTWARE, TAKEN, UNAVAILABLE};
use super::options::{NodesArg, Vars, NODES};

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
remaining ttl), then a summary. Sends only GET and PTTL, each node under
$QUORUMLOCK_CONNECT_TIMEOUT (default 1s).

With --json, one document: resource, key (with the prefix), nodes (index, node with any
password hidden, state: free, held or unreachable, token in full, pttl_ms as PTTL
answered it, -1 for a key without expiry, error), quorum, held_on, free_on, holder (the
token on a quorum, or null), verdict (free, held or unknown) and exit_code.

Exit status (the same with --json):
  0   free: a majority of nodes has no key (a lock attempt would not be refused)
  64  usage or configuration error
  69  too few nodes answered to tell
  75  held: a majority of nodes has a key";

/// What one node said about the key.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Seen {
    Free,
    Held { token: String, pttl: i64 },
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
            Seen::Failed(why) => writeln!(out, "node {i} {node}: unreachable: {why}"),
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
    nodes: Vec<StatusNode<'a>>,
    quorum: usize,
    held_on: usize,
    free_on: usize,
    holder: Option<&'a str>,
    verdict: &'static str,
    exit_code: u8,
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
    error: Option<&'a str>,
}

fn to_json<'a>(
    resource: &'a str,
    key: &'a str,
    nodes: &'a [quorumlock::NodeUrl],
    seen: &'a [Seen],
    summary: &Summary<'a>,
) -> StatusDocument<'a> {
    let nodes = nodes
        .iter()
        .zip(seen)
        .enumerate()
        .map(|(index, (node, seen))| {
            let node = node.redacted();
            let (state, token, pttl_ms, error) = match seen {
                Seen::Free => ("free", None, None, None),
                Seen::Held { token, pttl } => ("held", Some(token.as_str()), Some(*pttl), None),
                Seen::Failed(why) => ("unreachable", None, None, Some(why.as_str())),
            };
            StatusNode {
                index,
                node,
                state,
                token,
                pttl_ms,
                error,
            }
        })
        .collect();
    StatusDocument {
        resource,
        key,
        nodes,
        quorum: summary.quorum,
        held_on: summary.held_on,
        free_on: summary.free_on,
        holder: summary.holder,
        verdict: summary.verdict,
        exit_code: summary.code,
    }
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
