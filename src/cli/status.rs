//! `quorumlock status`: who holds a resource's lock, node by node. Read-only: one GET and
//! one PTTL per node, over a connection of its own (a `RedLock` would load its scripts).

use std::fmt::Write as _;
use std::time::Duration;

use clap::Args;
use fred::prelude::{Builder, ClientLike, Config, KeysInterface, Value};
use humantime::format_duration;
use quorumlock::{quorum, ConfigError};

use super::exit::{Failure, TAKEN, UNAVAILABLE};
use super::options::{NodesArg, Vars, NODES};

/// `quorumlock status`.
#[derive(Debug, Args)]
#[command(after_long_help = AFTER_HELP)]
pub(crate) struct StatusArgs {
    #[command(flatten)]
    nodes: NodesArg,

    /// The resource: its Redis key, after $QUORUMLOCK_KEY_PREFIX
    #[arg(value_name = "RESOURCE")]
    resource: String,
}

const AFTER_HELP: &str = "\
Prints one line per node (whether the key exists, its holder's token, shortened, and its
remaining ttl), then a summary. Sends only GET and PTTL, each node under
$QUORUMLOCK_CONNECT_TIMEOUT (default 1s).

Exit status:
  0   free: a majority of nodes has no key (a lock attempt would not be refused)
  64  usage or configuration error
  69  too few nodes answered to tell
  75  held: a majority of nodes has a key";

/// What one node said about the key.
#[derive(Debug, Clone, PartialEq)]
enum Seen {
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
    let key = format!("{}{}", config.key_prefix(), args.resource);
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
    let (summary, code) = summarize(&args.resource, &seen);
    out.push_str(&summary);
    print!("{out}");
    Ok(code)
}

/// Reads the key on one node; never writes.
async fn probe(config: Config, key: &str, timeout: Duration) -> Seen {
    let read = async {
        let client = Builder::from_config(config)
            .with_connection_config(|c| {
                c.connection_timeout = timeout;
                c.internal_command_timeout = timeout;
                c.max_command_attempts = 1;
            })
            .with_performance_config(|p| p.default_command_timeout = timeout)
            .build()?;
        let _connection = client.init().await?;
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

/// A fred error in a few words: an I/O error's OS message rather than its `Debug` form.
fn describe(e: &fred::error::Error) -> String {
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

/// The summary line and exit code: held or free when a majority says so.
fn summarize(resource: &str, seen: &[Seen]) -> (String, u8) {
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
    if held.len() >= needed {
        let mut top = (held[0], 0);
        for token in &held {
            let n = held.iter().filter(|t| *t == token).count();
            if n > top.1 {
                top = (token, n);
            }
        }
        let holder = if top.1 >= needed {
            format!("by {}", short(top.0))
        } else {
            "by several owners, none on a quorum".to_string()
        };
        (format!("`{resource}`: held {holder} ({counts})\n"), TAKEN)
    } else if free >= needed {
        (format!("`{resource}`: free ({counts})\n"), 0)
    } else {
        let answered = free + held.len();
        (
            format!(
                "`{resource}`: unknown: only {answered} of {nodes} nodes answered ({counts})\n"
            ),
            UNAVAILABLE,
        )
    }
}

/// The first 8 characters of a token.
fn short(token: &str) -> String {
    match token.char_indices().nth(8) {
        Some((end, _)) => format!("{}…", &token[..end]),
        None => token.to_string(),
    }
}

fn expiry(pttl: i64) -> String {
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
        let (line, code) = summarize("r", &[held("aaaaaaaaaaaa"), held("aaaaaaaaaaaa"), down()]);
        assert_eq!(code, TAKEN);
        assert!(line.contains("held by aaaaaaaa…"), "{line}");
        let (line, code) = summarize("r", &[held("a"), held("b"), Seen::Free]);
        assert_eq!(code, TAKEN);
        assert!(line.contains("several owners"), "{line}");
        assert_eq!(summarize("r", &[held("a"), Seen::Free, Seen::Free]).1, 0);
        assert_eq!(
            summarize("r", &[held("a"), Seen::Free, down()]).1,
            UNAVAILABLE
        );
        assert_eq!(summarize("r", &[down(), Seen::Free, down()]).1, UNAVAILABLE);
    }

    #[test]
    fn tokens_are_shortened_to_eight_characters() {
        assert_eq!(short("0123456789abcdef"), "01234567…");
        assert_eq!(short("01234567"), "01234567");
        assert_eq!(short("é1234567x"), "é1234567…");
    }
}
