//! Read-only questions to a node: who it is (`INFO`), how it is configured (`CONFIG GET`),
//! which of the commands the client needs it allows, and how fast its clock runs (`TIME`).
//! Nothing here writes to a node.

use std::time::{Duration, Instant};

use fred::clients::Client;
use fred::error::{Error as FredError, ErrorKind};
use fred::interfaces::ClientLike;
use fred::types::{ClusterHash, CustomCommand, Value};

use crate::health::Facts;

/// Sends one command by name, under `timeout`.
async fn command(
    client: &Client,
    name: &'static str,
    args: Vec<Value>,
    timeout: Duration,
) -> Result<Value, FredError> {
    let cmd = CustomCommand::new_static(name, ClusterHash::FirstKey, false);
    match tokio::time::timeout(timeout, client.custom::<Value, Value>(cmd, args)).await {
        Ok(reply) => reply,
        Err(_) => Err(FredError::new(ErrorKind::Timeout, "no answer")),
    }
}

/// Whether the server refused the command for lack of permission (ACLs) or because it is
/// disabled (renamed away), as opposed to a failure to answer.
pub(crate) fn refused(e: &FredError) -> bool {
    let d = e.details();
    d.starts_with("NOPERM") || d.contains("unknown command") || d.contains("no permissions")
}

/// Whether an error means the node did not answer (retry later) rather than refused.
pub(crate) fn unanswered(e: &FredError) -> bool {
    matches!(
        e.kind(),
        ErrorKind::Timeout | ErrorKind::IO | ErrorKind::Canceled | ErrorKind::Routing
    ) || e.details().starts_with("Failed to route command")
}

/// The facts the quarantine and the reports need: `INFO server`, `replication`,
/// `persistence`, and `CONFIG GET appendonly appendfsync maxmemory maxmemory-policy`.
/// A section or parameter the server refuses stays unknown. Fails only if the node does not
/// answer.
pub(crate) async fn facts(client: &Client, timeout: Duration) -> Result<Facts, FredError> {
    let mut facts = Facts::default();
    // Whether some INFO section was answered, and whether any answer was INFO output: a node
    // that answers and never with INFO output is not a Redis server (one that answers `+OK`
    // to everything would otherwise vote yes to every `SET NX`).
    let (mut answered, mut info) = (false, false);
    for section in ["server", "replication", "persistence"] {
        match command(client, "INFO", vec![Value::from(section)], timeout).await {
            Ok(reply) => {
                answered = true;
                if let Some(text) = reply.as_str() {
                    info |= facts.read_info(&text);
                }
            }
            Err(e) if unanswered(&e) => return Err(e),
            Err(e) => tracing::debug!(section, error = %e, "INFO section refused"),
        }
    }
    facts.not_redis = answered && !info;
    let params = ["appendonly", "appendfsync", "maxmemory", "maxmemory-policy"];
    match command(
        client,
        "CONFIG",
        std::iter::once("GET")
            .chain(params)
            .map(Value::from)
            .collect(),
        timeout,
    )
    .await
    {
        Ok(reply) => facts.read_config(&pairs(reply)),
        Err(e) if unanswered(&e) => return Err(e),
        Err(e) => tracing::debug!(error = %e, "CONFIG GET refused"),
    }
    Ok(facts)
}

/// `CONFIG GET`'s reply as (name, value) pairs: a flat array in RESP2, a map in RESP3.
fn pairs(reply: Value) -> Vec<(String, String)> {
    match reply {
        Value::Map(map) => map
            .inner()
            .into_iter()
            .filter_map(|(k, v)| Some((k.into_string()?, v.into_string()?)))
            .collect(),
        Value::Array(items) => items
            .chunks(2)
            .filter_map(|pair| match pair {
                [k, v] => Some((k.as_string()?, v.as_string()?)),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// The commands the client needs, checked without writing anything: each is sent in a form
/// that the server rejects or ignores after its permission check. Returns the names of those
/// refused, and of those that could not be checked.
pub(crate) async fn permissions(client: &Client, timeout: Duration) -> (Vec<String>, Vec<String>) {
    let absent_key = Value::from(format!("quorumlock:doctor:{:016x}", rand::random::<u64>()));
    let checks: [(&'static str, Vec<Value>); 3] = [
        // SET ... XX on a key that does not exist sets nothing.
        (
            "SET",
            vec![absent_key.clone(), Value::from("x"), Value::from("XX")],
        ),
        // A script that does not compile: refused before it could run or be cached.
        ("EVAL", vec![Value::from("("), Value::from(0)]),
        // A SHA that is cached nowhere: NOSCRIPT when allowed.
        ("EVALSHA", vec![Value::from("0".repeat(40)), Value::from(0)]),
    ];
    let (mut refused_names, mut unknown) = (Vec::new(), Vec::new());
    for (name, args) in checks {
        match command(client, name, args, timeout).await {
            Ok(_) => {}
            Err(e) if refused(&e) => refused_names.push(name.to_string()),
            Err(e) if unanswered(&e) => unknown.push(name.to_string()),
            // Compile error, NOSCRIPT: the command was allowed.
            Err(_) => {}
        }
    }
    (refused_names, unknown)
}

/// The node's clock rate relative to the client's monotonic clock over `window`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct ClockRate {
    /// The estimate: node seconds per client second (1.0 is perfect).
    pub(crate) rate: f64,
    /// The range the true rate lies in, given when the replies could have been made.
    pub(crate) low: f64,
    pub(crate) high: f64,
}

/// Measures the clock rate: the fastest of a few `TIME` round trips at the start and at the
/// end of `window`. A reading was taken somewhere between sending and receiving, so the rate
/// lies between `Δnode / (received₂ − sent₁)` and `Δnode / (sent₂ − received₁)`; a stall
/// widens that range instead of skewing the estimate unseen. `None` if `TIME` is refused or
/// unanswered.
pub(crate) async fn clock_rate(
    client: &Client,
    window: Duration,
    timeout: Duration,
) -> Option<ClockRate> {
    let first = fastest_time(client, timeout).await?;
    tokio::time::sleep(window).await;
    let second = fastest_time(client, timeout).await?;
    let node = second.node.checked_sub(first.node)?.as_secs_f64();
    let widest = second
        .received
        .checked_duration_since(first.sent)?
        .as_secs_f64();
    let narrowest = second
        .sent
        .checked_duration_since(first.received)?
        .as_secs_f64();
    let middle = second
        .mid()
        .checked_duration_since(first.mid())?
        .as_secs_f64();
    (narrowest > 0.0 && middle > 0.0).then(|| ClockRate {
        rate: node / middle,
        low: node / widest,
        high: node / narrowest,
    })
}

/// One `TIME` reading and when it was asked for and answered.
#[derive(Debug, Clone, Copy)]
struct Reading {
    node: Duration,
    sent: Instant,
    received: Instant,
}

impl Reading {
    fn mid(&self) -> Instant {
        self.sent + self.received.duration_since(self.sent) / 2
    }
}

/// The reading with the shortest round trip of three.
async fn fastest_time(client: &Client, timeout: Duration) -> Option<Reading> {
    let mut best: Option<Reading> = None;
    for _ in 0..3 {
        if let Some(r) = time(client, timeout).await {
            let rtt = r.received.duration_since(r.sent);
            if best.is_none_or(|b| rtt < b.received.duration_since(b.sent)) {
                best = Some(r);
            }
        }
    }
    best
}

async fn time(client: &Client, timeout: Duration) -> Option<Reading> {
    let sent = Instant::now();
    let reply = command(client, "TIME", Vec::new(), timeout).await.ok()?;
    let received = Instant::now();
    let parts = reply.into_array();
    let secs: u64 = parts.first()?.as_string()?.parse().ok()?;
    let micros: u64 = parts.get(1)?.as_string()?.parse().ok()?;
    Some(Reading {
        node: Duration::from_secs(secs) + Duration::from_micros(micros),
        sent,
        received,
    })
}

/// One `PING` round trip.
pub(crate) async fn round_trip(client: &Client, timeout: Duration) -> Result<Duration, FredError> {
    let start = Instant::now();
    command(client, "PING", Vec::new(), timeout).await?;
    Ok(start.elapsed())
}
