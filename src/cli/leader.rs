//! `quorumlock leader`: who leads an election, as a majority of nodes reports it. Read-only.

use clap::Args;
use quorumlock::{ConfigError, Error, Leader};
use serde::Serialize;

use super::exit::{code_of, unavailable_for, Failure, NO_LEADER, SOFTWARE};
use super::options::{NodesArg, Vars, NODES};

/// `quorumlock leader`.
#[derive(Debug, Args)]
#[command(after_long_help = AFTER_HELP)]
pub(crate) struct LeaderArgs {
    #[command(flatten)]
    nodes: NodesArg,

    /// Print one JSON document instead of the line (same exit status)
    #[arg(long)]
    json: bool,

    /// The election: its lock's Redis key, after $QUORUMLOCK_KEY_PREFIX
    #[arg(value_name = "NAME")]
    name: String,
}

const AFTER_HELP: &str = "\
Prints `IDENTITY term TERM (N of M nodes)` when a majority of nodes holds the lock of NAME
and the identity its leader wrote beside it (under quorumlock:leader: + the lock's key),
`no leader` otherwise. Runs one read-only script per node. The answer is advisory: the
leader it names may lose its lock right after; of two answers, the greater term is the
more recent.

With --json, one document: election, leader (identity, term, nodes; or null), nodes,
quorum, verdict (leader, none or unknown), error (or null) and exit_code.

Exit status (the same with --json):
  0   a leader is named
  1   no leader: no majority agrees on one (none, or one still writing its identity)
  64  usage or configuration error
  69  too few nodes answered to tell";

/// The JSON document.
#[derive(Debug, Serialize)]
struct LeaderDocument<'a> {
    election: &'a str,
    leader: Option<LeaderJson<'a>>,
    nodes: usize,
    quorum: usize,
    verdict: &'static str,
    error: Option<String>,
    exit_code: u8,
}

#[derive(Debug, Serialize)]
struct LeaderJson<'a> {
    identity: &'a str,
    term: u64,
    nodes: usize,
}

pub(crate) async fn leader(args: LeaderArgs) -> Result<u8, Failure> {
    if args.name.is_empty() {
        return Err(ConfigError::EmptyResource.into());
    }
    let mut vars = Vars::from_env()?;
    vars.flag(NODES, args.nodes.nodes.clone());
    let redlock = vars.builder()?.build()?;
    redlock
        .wait_for_quorum(redlock.config().connect_timeout())
        .await;
    let seen = redlock.leader(&args.name).await;
    let (verdict, code) = match &seen {
        Ok(Some(_)) => ("leader", 0),
        Ok(None) => ("none", NO_LEADER),
        Err(e @ Error::NoQuorum { .. }) => ("unknown", code_of(e)),
        Err(e) => return Err(Failure::new(code_of(e), e)),
    };
    if args.json {
        let leader = seen.as_ref().ok().and_then(Option::as_ref);
        let document = LeaderDocument {
            election: &args.name,
            leader: leader.map(|l: &Leader| LeaderJson {
                identity: &l.identity,
                term: l.term,
                nodes: l.nodes,
            }),
            nodes: redlock.nodes(),
            quorum: redlock.quorum(),
            verdict,
            error: seen.as_ref().err().map(ToString::to_string),
            exit_code: code,
        };
        let text =
            serde_json::to_string_pretty(&document).map_err(|e| Failure::new(SOFTWARE, e))?;
        println!("{text}");
        return Ok(code);
    }
    match seen {
        Ok(Some(l)) => println!(
            "{} term {} ({} of {} nodes)",
            l.identity,
            l.term,
            l.nodes,
            redlock.nodes()
        ),
        Ok(None) => println!("no leader"),
        Err(e) => return Err(unavailable_for(&redlock, Failure::new(code, e))),
    }
    Ok(code)
}
