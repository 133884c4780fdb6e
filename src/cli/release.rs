//! `quorumlock release --force`: breaks a lock whose holder is gone, after saying what it
//! will delete, and refuses while the holder keeps it alive unless told twice.

use std::fmt::Write as _;
use std::time::Duration;

use clap::Args;
use humantime::format_duration;
use quorumlock::{Config, ConfigError, Error, RedLock};
use serde::Serialize;

use super::exit::{code_of, Failure, SOFTWARE, TAKEN, USAGE};
use super::holder::holder_id;
use super::options::{duration, NodesArg, Vars, NODES};
use super::status::{expiry, probe, Seen};

/// `quorumlock release`.
#[derive(Debug, Args)]
#[command(after_long_help = AFTER_HELP)]
pub(crate) struct ReleaseArgs {
    #[command(flatten)]
    nodes: NodesArg,

    /// Break the lock, whoever holds it (required); twice (-ff) breaks it even while its
    /// holder keeps it alive
    #[arg(short, long, action = clap::ArgAction::Count)]
    force: u8,

    /// How long to watch the key for a holder that keeps it alive before breaking it
    #[arg(long, value_name = "DURATION", value_parser = duration, default_value = "3s")]
    watch: Duration,

    /// Print one JSON document instead of the lines (same exit status)
    #[arg(long)]
    json: bool,

    /// The resource: its Redis key, after $QUORUMLOCK_KEY_PREFIX
    #[arg(value_name = "RESOURCE")]
    resource: String,
}

const AFTER_HELP: &str = "\
Breaks the lock of a holder that is gone for good (a crashed process whose lock has a long
ttl). First reads the key on every node and prints what it will delete (each token by the
start of its SHA1, the nodes holding it, the ttl left); then watches the key for --watch:
if its ttl runs down slower than the clock meanwhile (someone extended it), a holder keeps
it alive, and nothing is deleted unless --force was given twice. Then deletes the key wherever it still holds a token it read
(compare-and-delete, never a bare DEL), announcing the release to waiting clients. A holder
that extends its lock less often than --watch is not seen: break only a lock you know to be
abandoned, and let storage check fencing tokens.

With --json, one document: resource, key, tokens (sha1, nodes, ttl_ms), kept_alive,
released (per token: sha1 and released_on, or error), exit_code.

Exit status (the same with --json):
  0   broken, or the resource was not held
  64  usage or configuration error, or --force missing
  69  too few nodes answered
  75  the holder keeps the lock alive (give --force twice to break it anyway)";

/// One token as the nodes hold it.
#[derive(Debug, Serialize)]
struct Token {
    #[serde(skip)]
    token: String,
    sha1: String,
    nodes: Vec<usize>,
    ttl_ms: i64,
}

#[derive(Debug, Serialize)]
struct Outcome {
    sha1: String,
    released_on: Option<usize>,
    error: Option<String>,
}

#[derive(Debug, Serialize)]
struct ReleaseDocument<'a> {
    resource: &'a str,
    key: &'a str,
    tokens: &'a [Token],
    kept_alive: bool,
    released: Vec<Outcome>,
    exit_code: u8,
}

pub(crate) async fn release(args: ReleaseArgs) -> Result<u8, Failure> {
    if args.force == 0 {
        return Err(Failure::new(
            USAGE,
            "release breaks another holder's lock: give --force (and check that its holder is gone)",
        ));
    }
    if args.resource.is_empty() {
        return Err(ConfigError::EmptyResource.into());
    }
    let mut vars = Vars::from_env()?;
    vars.flag(NODES, args.nodes.nodes.clone());
    let builder = vars.builder()?;
    let config = builder.validate()?;
    let key = config.lock_key(&args.resource);
    let first_read = std::time::Instant::now();
    let before = read(&config, &key).await?;
    only_a_lock(&before, &args.resource)?;
    let tokens = tokens(&before);
    let mut said = Said::new(&args, &key);
    for token in &tokens {
        said.line(format_args!(
            "`{}` is held by {} on nodes {:?} ({})",
            args.resource,
            token.sha1,
            token.nodes,
            expiry(token.ttl_ms)
        ));
    }
    if tokens.is_empty() {
        said.line(format_args!(
            "`{}` is not held: nothing to release",
            args.resource
        ));
        return said.report(&tokens, false, Vec::new(), 0);
    }

    tokio::time::sleep(args.watch).await;
    let elapsed = first_read.elapsed();
    let after = read(&config, &key).await?;
    let kept_alive = extended(&before, &after, elapsed);
    if kept_alive && args.force < 2 {
        said.line(format_args!(
            "its ttl grew within {}: a holder keeps it alive; nothing deleted (give --force twice to break it anyway)",
            format_duration(args.watch)
        ));
        return said.report(&tokens, true, Vec::new(), TAKEN);
    }

    let client = builder.connect().await?;
    let mut released = Vec::new();
    let mut code = 0;
    for token in &tokens {
        let (outcome, failed) = break_one(&client, &args.resource, token, &mut said).await;
        code = code.max(failed);
        released.push(outcome);
    }
    client.shutdown().await;
    said.report(&tokens, kept_alive, released, code)
}

/// Reads the key on every node, at once.
async fn read(config: &Config, key: &str) -> Result<Vec<Seen>, Failure> {
    let clients = (0..config.nodes().len())
        .map(|i| config.node_client_config(i).transpose())
        .collect::<Result<Vec<_>, _>>()?;
    let timeout = config.connect_timeout();
    let reads = clients
        .into_iter()
        .flatten()
        .map(|client| probe(client, key, timeout));
    Ok(futures::future::join_all(reads).await)
}

/// Refuses a semaphore or a read-write lock: `release --force` breaks a lock only.
fn only_a_lock(seen: &[Seen], resource: &str) -> Result<(), Failure> {
    let kind = seen.iter().find_map(|s| match s {
        Seen::Semaphore { permits, .. } => Some(format!(
            "a semaphore of {permits} permits: release --force breaks a lock only \
             (`quorumlock status {resource}` lists its holders; their permits expire by their ttl)"
        )),
        Seen::ReadWrite { .. } => Some(format!(
            "a read-write lock: release --force breaks a lock only \
             (`quorumlock status {resource}` lists its holders; they expire by their ttl)"
        )),
        _ => None,
    });
    match kind {
        Some(kind) => Err(Failure::usage(format!("`{resource}` is {kind}"))),
        None => Ok(()),
    }
}

/// Breaks one token's lock; says what happened and returns it with the exit code it
/// calls for (0 unless the nodes failed).
async fn break_one(
    client: &RedLock,
    resource: &str,
    token: &Token,
    said: &mut Said<'_>,
) -> (Outcome, u8) {
    let sha1 = token.sha1.clone();
    match client.break_lock(resource, &token.token).await {
        Ok(done) => {
            said.line(format_args!(
                "released {} on {} of {} nodes",
                token.sha1, done.released, done.nodes
            ));
            let released_on = Some(done.released);
            (
                Outcome {
                    sha1,
                    released_on,
                    error: None,
                },
                0,
            )
        }
        Err(e) => {
            said.line(format_args!("{}: {e}", token.sha1));
            let code = match e {
                Error::NotHeld { .. } => 0,
                ref e => code_of(e),
            };
            let error = Some(e.to_string());
            (
                Outcome {
                    sha1,
                    released_on: None,
                    error,
                },
                code,
            )
        }
    }
}

/// What `release` says: its lines, or with `--json` one document at the end.
struct Said<'a> {
    args: &'a ReleaseArgs,
    key: &'a str,
    lines: String,
}

impl<'a> Said<'a> {
    fn new(args: &'a ReleaseArgs, key: &'a str) -> Said<'a> {
        Said {
            args,
            key,
            lines: String::new(),
        }
    }

    fn line(&mut self, line: std::fmt::Arguments<'_>) {
        let _ = writeln!(self.lines, "{line}");
    }

    /// Prints what was said (or the document) and returns the exit code.
    fn report(
        self,
        tokens: &[Token],
        kept_alive: bool,
        released: Vec<Outcome>,
        code: u8,
    ) -> Result<u8, Failure> {
        if !self.args.json {
            print!("{}", self.lines);
            return Ok(code);
        }
        let document = ReleaseDocument {
            resource: &self.args.resource,
            key: self.key,
            tokens,
            kept_alive,
            released,
            exit_code: code,
        };
        let text =
            serde_json::to_string_pretty(&document).map_err(|e| Failure::new(SOFTWARE, e))?;
        println!("{text}");
        Ok(code)
    }
}

/// The tokens the nodes hold, the one on the most nodes first.
fn tokens(seen: &[Seen]) -> Vec<Token> {
    let mut tokens: Vec<Token> = Vec::new();
    for (i, s) in seen.iter().enumerate() {
        let Seen::Held { token, pttl } = s else {
            continue;
        };
        match tokens.iter_mut().find(|t| t.token == *token) {
            Some(t) => {
                t.nodes.push(i);
                t.ttl_ms = t.ttl_ms.min(*pttl);
            }
            None => tokens.push(Token {
                token: token.clone(),
                sha1: holder_id(token),
                nodes: vec![i],
                ttl_ms: *pttl,
            }),
        }
    }
    tokens.sort_by_key(|t| std::cmp::Reverse(t.nodes.len()));
    tokens
}

/// How much longer a ttl may read than expected without counting as extended: the two reads
/// of a node do not start exactly `elapsed` apart.
const SLACK_MS: i64 = 100;

/// Whether a node's ttl for the same token reads longer than the first read, less the time
/// between the reads, would leave: someone extended it.
fn extended(before: &[Seen], after: &[Seen], elapsed: Duration) -> bool {
    let elapsed = i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX);
    before.iter().zip(after).any(|(b, a)| match (b, a) {
        (
            Seen::Held { token, pttl: first },
            Seen::Held {
                token: same,
                pttl: then,
            },
        ) => token == same && *then > first.saturating_sub(elapsed).saturating_add(SLACK_MS),
        _ => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(token: &str, pttl: i64) -> Seen {
        Seen::Held {
            token: token.into(),
            pttl,
        }
    }

    #[test]
    fn a_ttl_that_runs_down_slower_than_the_clock_means_a_live_holder() {
        let before = [held("a", 5_000), held("a", 4_990), Seen::Free];
        let second = Duration::from_secs(1);
        // One second later, a second less: nobody extended it.
        assert!(!extended(
            &before,
            &[held("a", 4_000), held("a", 3_990), Seen::Free],
            second
        ));
        // Extended on one node (even to less than it read the first time).
        assert!(extended(
            &before,
            &[held("a", 4_000), held("a", 4_500), Seen::Free],
            second
        ));
        // Another token with a longer ttl is a new holder, not an extension.
        assert!(!extended(
            &before,
            &[held("b", 9_000), held("a", 1_000), Seen::Free],
            second
        ));
    }

    #[test]
    fn tokens_are_grouped_by_node_most_first() {
        let seen = [held("b", 10), held("a", 30), held("a", 20), Seen::Free];
        let tokens = tokens(&seen);
        assert_eq!(tokens.len(), 2);
        assert_eq!(
            (
                tokens[0].token.as_str(),
                &tokens[0].nodes[..],
                tokens[0].ttl_ms
            ),
            ("a", &[1, 2][..], 20)
        );
        assert_eq!(
            (tokens[1].token.as_str(), &tokens[1].nodes[..]),
            ("b", &[0][..])
        );
    }
}
