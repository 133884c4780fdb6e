//! `quorumlock doctor`: what each node is and which of the algorithm's assumptions it breaks,
//! from [`RedLockBuilder::inspect`](quorumlock::RedLockBuilder::inspect), as a table or as
//! JSON, with an overall verdict across the nodes. The inspection writes nothing to any node
//! but the record of a quarantine on a node that may have lost data (the countdown that every
//! client, and every later `doctor`, shares), and this adds no command of its own.

use std::time::Duration;

use clap::Args;
use quorumlock::{decoder_is_bounded, Finding, Severity};

use super::exit::{Failure, SOFTWARE};
use super::options::{positive_duration, NodesArg, Vars, NODES};

mod json;
mod table;
mod verdict;

use json::to_json;
use table::human;
use verdict::Overall;

/// Something is unsafe.
const UNSAFE: u8 = 1;
/// Nothing is unsafe, but something could not be checked.
const UNKNOWN: u8 = 2;
/// Every node is safe, but quarantine keeps them from a quorum for now: locks fail until then.
const UNAVAILABLE: u8 = 3;

/// `quorumlock doctor`.
#[derive(Debug, Args)]
#[command(after_long_help = AFTER_HELP)]
pub(crate) struct DoctorArgs {
    #[command(flatten)]
    nodes: NodesArg,

    /// How long to watch each node's clock, to compare its rate with this machine's: longer
    /// is more precise
    #[arg(long, value_name = "DURATION", value_parser = positive_duration, default_value = "1s")]
    window: Duration,

    /// Print one JSON document instead of the table (same exit status)
    #[arg(long)]
    json: bool,
}

const AFTER_HELP: &str = "\
Inspects every node without taking a lock and without writing anything: PING, INFO,
CONFIG GET, TIME twice (--window apart, for the node's clock rate), and permission probes
in forms that change nothing, on a random key under $QUORUMLOCK_KEY_PREFIX (EXISTS, GET,
SET XX, DEL and PEXPIRE of an absent key, an EVAL that does not compile, an EVALSHA of a
script cached nowhere). Prints one row per node, then the
findings node by node, then an overall verdict, which also says whether the safe nodes are
still a quorum and, if quarantine keeps them from one, for how long.

The library's QUORUMLOCK_* variables apply, with the library's defaults: nodes are connected
to under $QUORUMLOCK_CONNECT_TIMEOUT (1s) and asked under $QUORUMLOCK_NODE_TIMEOUT (100ms);
clock rates are checked against $QUORUMLOCK_DRIFT_FACTOR (0.01); a node that may have lost
data (a restart, a flush, a failover: told by its quorumlock:node marker, whatever its
persistence) is quarantined unless $QUORUMLOCK_QUARANTINE is false, for
$QUORUMLOCK_MAX_TTL (default: $QUORUMLOCK_TTL, or 10s as in the library and for
`quorumlock run`; set them as your clients do).

A node is unsafe if it is unreachable, a replica, the same server as an earlier node, can
evict keys (maxmemory with a policy other than noeviction), refuses commands the client
needs (or, with a key prefix, keys under it; clients do not count such a node), has a clock rate off by more than the drift factor, or does not persist every write
(appendonly yes with appendfsync always) while quarantine is off. What a server refuses to
tell (ACLs) is printed as `unknown` (null in JSON), never guessed.

Findings about the client rather than a node follow, as `client: ...` (`client` in JSON):
unsafe if this binary's RESP decoder does not bound the nesting of replies (one hostile node
could abort the process; the finding gives the Cargo.toml lines that fix it, and the verdict
names it), and notes about
fragile settings: fewer than three nodes, an even number of nodes, a node timeout large
against the validity of a lock of $QUORUMLOCK_TTL.

Exit status:
  0   every node is safe (with notes at most, such as a young node in quarantine), and a
      quorum of them counts now
  1   something is unsafe
  2   nothing is unsafe, but something could not be checked (unknown)
  3   every node is safe, but quarantine keeps them from a quorum for now: locks fail
      (`quorumlock run` exits 69) until the time printed. Persistence does not shorten
      it; QUORUMLOCK_QUARANTINE=false is only for nodes whose restarts are delayed some
      other way
  64  usage or configuration error

Example:
  QUORUMLOCK_NODES=redis://a:6379,redis://b:6379,redis://c:6379 quorumlock doctor --json";

pub(crate) async fn doctor(args: DoctorArgs) -> Result<u8, Failure> {
    let mut vars = Vars::from_env()?;
    vars.flag(NODES, args.nodes.nodes.clone());
    // The quarantine lasts the longest ttl: by default the library's, as for `quorumlock run`.
    let builder = vars.builder()?;
    let client = Client {
        decoder_bounded: decoder_is_bounded(),
        findings: builder.validate()?.findings(),
    };
    let reports = builder.inspect(args.window).await?;
    let overall = Overall::of(&reports, client.verdict(), client.decoder_bounded);
    if args.json {
        let document = to_json(&reports, &client, &overall);
        let text =
            serde_json::to_string_pretty(&document).map_err(|e| Failure::new(SOFTWARE, e))?;
        println!("{text}");
    } else {
        print!("{}", human(&reports, &client, &overall));
    }
    Ok(overall.code)
}

/// What is found about the client rather than a node: this binary's RESP decoder, and the
/// settings (`Config::findings`).
#[derive(Debug)]
pub(super) struct Client {
    pub(super) decoder_bounded: bool,
    pub(super) findings: Vec<Finding>,
}

impl Client {
    /// The most serious finding, if any.
    fn verdict(&self) -> Option<Severity> {
        self.findings.iter().map(|f| f.severity).max()
    }
}

/// Whole seconds, rounded up: a node still quarantined never shows `0s left`.
pub(super) fn ceil_secs(d: Duration) -> Duration {
    Duration::from_secs(d.as_secs() + u64::from(d.subsec_nanos() > 0))
}

/// A duration in its two largest units, to the second: `42s`, `5m 3s`, `2h 5m`, `3d 2h`.
pub(super) fn compact(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m {}s", s / 60, s % 60),
        3600..86400 => format!("{}h {}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d {}h", s / 86400, s % 86400 / 3600),
    }
}
