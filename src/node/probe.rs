//! Read-only questions to a node: who it is (`INFO`), how it is configured (`CONFIG GET`),
//! which of the commands the client needs it allows (how fast its clock runs: `node/clock.rs`).
//! Nothing here changes a node: the permission probe sends writes, in forms that do nothing.

use std::time::{Duration, Instant};

use fred::clients::Client;
use fred::error::{Error as FredError, ErrorKind};
use fred::interfaces::ClientLike;
use fred::types::{ClusterHash, CustomCommand, Value};

use crate::algo::keys::{self, FENCE_PREFIX, IDENTITY_PREFIX};
use crate::config::Config;
use crate::node::scripts::Natives;
use crate::report::facts::Facts;

/// Sends one command by name, under `timeout`.
pub(crate) async fn command(
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

/// Why the server refused a command, if it did for lack of permission (ACLs) or because the
/// command is disabled (renamed away), as opposed to failing it after its permission check.
fn refusal(e: &FredError) -> Option<Refusal> {
    let d = e.details();
    if d.contains("unknown command") {
        return Some(Refusal::Command);
    }
    if !d.starts_with("NOPERM") && !d.contains("no permissions") {
        return None;
    }
    // 6.2 and 7.0: "... to run the 'get' command [or its subcommand]" / "... to access one of
    // the keys used as arguments"; 7.2: "... to run the 'get' command" / "No permissions to
    // access a key". (A channel refusal cannot happen to the commands probed.)
    if d.contains("to run the") || !d.contains("key") {
        Some(Refusal::Command)
    } else {
        Some(Refusal::Key)
    }
}

/// What a permission refusal was about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    /// The command itself, whatever its keys.
    Command,
    /// The keys it was given.
    Key,
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
    let config_get = |params: &[&'static str]| {
        let args = std::iter::once("GET").chain(params.iter().copied());
        command(client, "CONFIG", args.map(Value::from).collect(), timeout)
    };
    match config_get(&params).await {
        Ok(reply) => facts.read_config(&pairs(reply)),
        Err(e) if unanswered(&e) => return Err(e),
        // Redis 6.2 takes one parameter per CONFIG GET (several came with 7.0).
        Err(e) if one_parameter_only(&e) => {
            let mut all = Vec::with_capacity(params.len());
            for param in params {
                match config_get(&[param]).await {
                    Ok(reply) => all.extend(pairs(reply)),
                    Err(e) if unanswered(&e) => return Err(e),
                    Err(e) => tracing::debug!(param, error = %e, "CONFIG GET refused"),
                }
            }
            facts.read_config(&all);
        }
        Err(e) => tracing::debug!(error = %e, "CONFIG GET refused"),
    }
    Ok(facts)
}

/// Whether `CONFIG GET` failed because the server takes one parameter only (before 7.0:
/// "ERR Unknown subcommand or wrong number of arguments for 'get'"), rather than refused it.
fn one_parameter_only(e: &FredError) -> bool {
    let d = e.details();
    d.contains("wrong number of arguments") && !d.starts_with("NOPERM")
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

/// Where the client's keys live: what the permission probe checks key patterns against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeySpace {
    /// The key prefix (`Config::key_prefix`).
    pub(crate) prefix: String,
    /// Whether fencing counters are used (under `quorumlock:fence:`).
    pub(crate) fencing: bool,
}

impl KeySpace {
    pub(crate) fn of(config: &Config) -> KeySpace {
        KeySpace {
            prefix: config.key_prefix.clone(),
            fencing: config.fencing,
        }
    }
}

/// What the permission probe found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Permissions {
    /// What the node refuses: a command (`EVALSHA`), or a command on the client's keys
    /// (`GET on app:*`). Empty when the client may do all it needs.
    pub(crate) refused: Vec<String>,
    /// The commands that got no answer (the node is slow or gone): try again.
    pub(crate) unanswered: Vec<String>,
    /// The commands the batch script uses where the node runs them for the client
    /// ([`Natives`], each asked once in a form that changes nothing: see [`natives`]).
    pub(crate) natives: Natives,
}

/// Which of the client's keys a command is run on, as the scripts run it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum On {
    /// The lock keys.
    Lock,
    /// The fencing counters (probed only with fencing on).
    Fence,
    /// Both.
    Both,
}

/// Every command the scripts run (`node/scripts/`), with the arguments after the key that make
/// it change nothing on a key that does not exist, and the keys it is run on; held to the
/// scripts by `the_probe_checks_every_command_the_scripts_run` (design 6.1, Permissions).
const SCRIPTED: [(&str, &[&str], On); 6] = [
    ("EXISTS", &[], On::Lock),
    ("GET", &[], On::Both),
    // XX: sets nothing, the key does not exist.
    ("SET", &["x", "XX"], On::Both),
    ("DEL", &[], On::Lock),
    ("PEXPIRE", &["1"], On::Lock),
    // The fencing counters, read at once.
    ("MGET", &[], On::Fence),
];

/// The commands the scripts call with `redis.pcall`, which they survive: not probed, since
/// a refusal costs only what the call is for. `PUBLISH`: the release's announcement to
/// waiting clients (design 2.4a); without it, they wait for their pause instead.
/// `DELIFEQ` and `MSETEX`: the batch script's delete of one key and its set of several, where
/// the node has them (probed apart, see [`Permissions::natives`]), which fall back to `GET`
/// and `DEL`, and to `SET NX`, when they fail.
#[cfg(test)]
const OPTIONAL: [&str; 3] = ["PUBLISH", "DELIFEQ", "MSETEX"];

/// Checks that the node lets the client do everything it needs, without changing anything
/// (design 6.1, Permissions: which forms, on which keys): the commands the client sends and
/// every command its scripts run ([`SCRIPTED`]).
pub(crate) async fn permissions(
    client: &Client,
    timeout: Duration,
    keys: &KeySpace,
) -> Permissions {
    let lock = keys::probe_key(&keys.prefix, rand::random::<u128>());
    let fence = keys::fence_key(&lock);
    let mut both = vec![Value::from(lock.as_str())];
    let mut both_pattern = format!("{}*", keys.prefix);
    if keys.fencing {
        both.push(Value::from(fence.as_str()));
        both_pattern = format!("{both_pattern} and {FENCE_PREFIX}{}*", keys.prefix);
    }
    let scripted = |first: Value| -> Vec<Value> {
        [first, Value::from(both.len() as i64)]
            .into_iter()
            .chain(both.iter().cloned())
            .collect()
    };
    let lock_pattern = format!("{}*", keys.prefix);
    let fence_pattern = format!("{FENCE_PREFIX}{}*", keys.prefix);
    let mut checks: Vec<(&'static str, &str, Vec<Value>)> = vec![
        // A SHA that is cached nowhere: NOSCRIPT when allowed.
        (
            "EVALSHA",
            &both_pattern,
            scripted(Value::from("0".repeat(40))),
        ),
        // A script that does not compile: refused before it could run or be cached.
        ("EVAL", &both_pattern, scripted(Value::from("("))),
    ];
    let mut fenced = Vec::new();
    for (name, rest, on) in SCRIPTED {
        if matches!(on, On::Lock | On::Both) {
            checks.push((name, &lock_pattern, on_key(&lock, rest)));
        }
        if keys.fencing && matches!(on, On::Fence | On::Both) {
            fenced.push((name, &*fence_pattern, on_key(&fence, rest)));
        }
    }
    checks.extend(fenced);
    let answers = send_checks(client, timeout, &checks);
    let (answers, natives) = tokio::join!(answers, natives(client, &lock, timeout));
    let mut found = read_refusals(&checks, answers, !keys.prefix.is_empty());
    found.natives = natives;
    found
}

/// `name`'s arguments on `key`: the key, then `rest`.
fn on_key(key: &str, rest: &[&str]) -> Vec<Value> {
    std::iter::once(key)
        .chain(rest.iter().copied())
        .map(Value::from)
        .collect()
}

/// Sends every permission check (a command, the key pattern it checks, its arguments) at
/// once.
async fn send_checks(
    client: &Client,
    timeout: Duration,
    checks: &[(&'static str, &str, Vec<Value>)],
) -> Vec<Result<Value, FredError>> {
    let sent = checks
        .iter()
        .map(|(name, _, args)| command(client, name, args.clone(), timeout));
    futures::future::join_all(sent).await
}

/// The commands the node runs that spare it work (see [`Natives`]; not permissions the client
/// needs), each counted where it answers 0 on the key `lock`, which cannot exist (`MSETEX ...
/// XX` sets only keys that exist).
async fn natives(client: &Client, lock: &str, timeout: Duration) -> Natives {
    let delifeq = command(client, "DELIFEQ", on_key(lock, &["x"]), timeout);
    let msetex = command(
        client,
        "MSETEX",
        ["1", lock, "x", "XX", "PX", "1"].map(Value::from).to_vec(),
        timeout,
    );
    let (delifeq, msetex) = tokio::join!(delifeq, msetex);
    Natives {
        delifeq: matches!(delifeq, Ok(Value::Integer(0))),
        msetex: matches!(msetex, Ok(Value::Integer(0))),
    }
}

/// Reads the answers to the permission `checks` (a command, the key pattern it was sent
/// on, its arguments): a command refused by name, a key refused as `NAME on PATTERN` (as
/// `NAME` on the pattern `*`; not at all where `keyed` is false: without a key prefix, the
/// probe key says nothing about the resources' keys), a command unanswered as unchecked.
fn read_refusals(
    checks: &[(&'static str, &str, Vec<Value>)],
    answers: Vec<Result<Value, FredError>>,
    keyed: bool,
) -> Permissions {
    let mut found = Permissions::default();
    for ((name, pattern, _), answer) in checks.iter().zip(answers) {
        let Err(e) = answer else { continue };
        let what = match refusal(&e) {
            Some(Refusal::Command) => name.to_string(),
            Some(Refusal::Key) if !keyed => continue,
            Some(Refusal::Key) if *pattern == "*" => name.to_string(),
            Some(Refusal::Key) => format!("{name} on {pattern}"),
            None if unanswered(&e) => {
                found.unanswered.push(name.to_string());
                continue;
            }
            // NOSCRIPT, a compile error, OOM, READONLY...: past the permission check.
            None => continue,
        };
        if !found.refused.contains(&what) {
            found.refused.push(what);
        }
    }
    found
}

/// What leader elections need besides a lock's permissions: `GET` and `SET` of the identity
/// key beside the election's lock (`quorumlock:leader:` + the lock's key, `engine/election.rs`),
/// checked as [`permissions`] checks, on a probe key that cannot exist. Not part of a node's
/// admission: a client that only locks never touches these keys. Answers like
/// `SET on quorumlock:leader:app:*`.
pub(crate) async fn election_permissions(
    client: &Client,
    timeout: Duration,
    keys: &KeySpace,
) -> Permissions {
    let identity = keys::identity_key(&keys::probe_key(&keys.prefix, rand::random::<u128>()));
    let pattern = format!("{IDENTITY_PREFIX}{}*", keys.prefix);
    let checks = [
        ("GET", &*pattern, on_key(&identity, &[])),
        // XX: sets nothing, the key does not exist.
        ("SET", &*pattern, on_key(&identity, &["x", "XX"])),
    ];
    read_refusals(&checks, send_checks(client, timeout, &checks).await, true)
}

/// The commands the semaphores' scripts run beyond a lock's (`scripts::PERMIT`), with the
/// arguments after the key that make each change nothing on a key that does not exist.
/// `TIME` takes no key.
const SEMAPHORE_SCRIPTED: [(&str, &[&str]); 9] = [
    ("TIME", &[]),
    ("TYPE", &[]),
    ("PTTL", &[]),
    ("ZCARD", &[]),
    ("ZSCORE", &["m"]),
    ("ZRANGE", &["0", "-1"]),
    // XX: adds nothing, the member does not exist.
    ("ZADD", &["XX", "1", "m"]),
    ("ZREM", &["m"]),
    ("ZREMRANGEBYSCORE", &["0", "1"]),
];

/// What semaphores need besides a lock's permissions ([`SEMAPHORE_SCRIPTED`]), checked as
/// [`permissions`] checks, on a probe key that cannot exist. Not part of a node's admission:
/// a client that only locks never sends them. Answers like `ZADD on app:*`.
pub(crate) async fn semaphore_permissions(
    client: &Client,
    timeout: Duration,
    keys: &KeySpace,
) -> Permissions {
    let key = keys::probe_key(&keys.prefix, rand::random::<u128>());
    let pattern = format!("{}*", keys.prefix);
    let mut checks: Vec<_> = SEMAPHORE_SCRIPTED[1..]
        .iter()
        .map(|(name, rest)| (*name, &*pattern, on_key(&key, rest)))
        .collect();
    // TIME, on no key.
    checks.push((SEMAPHORE_SCRIPTED[0].0, "*", Vec::new()));
    read_refusals(&checks, send_checks(client, timeout, &checks).await, true)
}

/// One `PING` round trip.
pub(crate) async fn round_trip(client: &Client, timeout: Duration) -> Result<Duration, FredError> {
    let start = Instant::now();
    command(client, "PING", Vec::new(), timeout).await?;
    Ok(start.elapsed())
}

/// A node's marker, read by its connection check: `Ok(None)` when it has none, `Err` with
/// the reason when the server refuses to tell (ACLs): the node then counts as one that may
/// have lost data. Fails only if the node does not answer.
pub(crate) async fn marker(
    client: &Client,
    timeout: Duration,
) -> Result<Result<Option<String>, String>, FredError> {
    match command(client, "GET", vec![Value::from(keys::NODE_KEY)], timeout).await {
        Ok(Value::Null) => Ok(Ok(None)),
        Ok(Value::String(s)) => Ok(Ok(Some(s.to_string()))),
        Ok(Value::Bytes(b)) => Ok(Ok(Some(String::from_utf8_lossy(&b).into_owned()))),
        Ok(other) => Ok(Err(format!(
            "its {} key holds no string ({other:?})",
            keys::NODE_KEY
        ))),
        Err(e) if unanswered(&e) => Err(e),
        Err(e) => Ok(Err(format!(
            "the server refuses to read its {} key ({}), so a loss of data cannot be detected",
            keys::NODE_KEY,
            e.details()
        ))),
    }
}

/// A node's record of its quarantine (`node/quarantine.rs`), as text, and its clock (`TIME`)
/// in milliseconds, read by its connection check: `None` when it has no record, or either
/// is refused (the client then does without the record) or unanswered.
pub(crate) async fn quarantine_record(client: &Client, timeout: Duration) -> Option<(String, u64)> {
    let (record, time) = tokio::join!(
        command(client, "GET", on_key(keys::QUARANTINE_KEY, &[]), timeout),
        command(client, "TIME", vec![], timeout)
    );
    let record = record.ok()?.as_string()?;
    let now = crate::node::clock::node_time(time.ok()?)?;
    Some((record, u64::try_from(now.as_millis()).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every script the client can send to lock: each on its own, and the batch that runs
    /// them (the batch's permit scripts aside, checked with the semaphores' probe; and
    /// QUARANTINE, whose refusal costs only the record on the node: the client then counts
    /// the quarantine from when it saw the loss, `node/quarantine.rs`).
    fn every_script() -> Vec<String> {
        let permit = crate::node::scripts::PERMIT;
        let scripts = crate::node::scripts::ALL
            .iter()
            .chain(crate::node::scripts::BATCHED.iter())
            .filter(|body| !permit.contains(body))
            .filter(|body| **body != crate::node::scripts::records::QUARANTINE);
        let mut all: Vec<String> = scripts.map(|body| body.to_string()).collect();
        all.push(crate::node::scripts::batch());
        all
    }

    /// Whether `name` (upper case) is probed by the admission's check or the semaphores'.
    fn probed(name: &str) -> (bool, bool) {
        (
            SCRIPTED.iter().any(|(listed, ..)| *listed == name),
            SEMAPHORE_SCRIPTED.iter().any(|(listed, _)| *listed == name),
        )
    }

    #[test]
    fn the_probe_checks_every_command_the_scripts_run() {
        let mut called = std::collections::BTreeSet::new();
        let batch = crate::node::scripts::batch();
        for body in every_script() {
            for (name, protected) in crate::node::scripts::commands(&body) {
                let name = name.to_ascii_uppercase();
                // The batch runs the permit scripts too: their commands are checked below.
                let (admission, semaphores) = probed(&name);
                let permit = body == batch && semaphores;
                assert!(
                    admission || permit || (protected && OPTIONAL.contains(&name.as_str())),
                    "a script calls {name}, which the permission probe does not check (add it \
                     to probe::SCRIPTED in a form that changes nothing):\n{body}"
                );
                called.insert(name);
            }
        }
        for (name, ..) in SCRIPTED {
            assert!(
                called.contains(name),
                "the permission probe checks {name}, which no script calls"
            );
        }
    }

    #[test]
    fn the_semaphores_probe_checks_every_command_their_scripts_run() {
        let mut called = std::collections::BTreeSet::new();
        for body in crate::node::scripts::PERMIT {
            for (name, protected) in crate::node::scripts::commands(body) {
                let name = name.to_ascii_uppercase();
                let (admission, semaphores) = probed(&name);
                assert!(
                    admission || semaphores || (protected && OPTIONAL.contains(&name.as_str())),
                    "a semaphore script calls {name}, which no permission probe checks (add it \
                     to probe::SEMAPHORE_SCRIPTED in a form that changes nothing):\n{body}"
                );
                called.insert(name);
            }
        }
        for (name, _) in SEMAPHORE_SCRIPTED {
            assert!(
                called.contains(name),
                "the semaphores' probe checks {name}, which no semaphore script calls"
            );
        }
    }

    #[test]
    fn command_names_are_read_out_of_a_script() {
        let names =
            |script: &'static str| crate::node::scripts::commands(script).collect::<Vec<_>>();
        assert_eq!(
            names(crate::node::scripts::lock::ACQUIRE),
            [
                ("get", false),
                ("mget", false),
                ("set", false),
                ("exists", false),
                ("set", false),
                ("get", false),
                ("set", false)
            ]
        );
        assert_eq!(
            names(crate::node::scripts::lock::RELEASE),
            [("get", false), ("del", false), ("publish", true)]
        );
        assert_eq!(
            names("redis.pcall (\"PUBLISH\", c) redis.sha1hex(v) redis.call( 'get', k)"),
            [("PUBLISH", true), ("get", false)]
        );
        // A name that is not a literal is returned as it stands, and fails the check above.
        assert_eq!(names("redis.call(cmd, KEYS[1])"), [("cmd", false)]);
    }

    fn server(message: &'static str) -> FredError {
        FredError::new(ErrorKind::Unknown, message)
    }

    #[test]
    fn config_get_of_several_parameters_is_retried_one_by_one_only_before_7_0() {
        assert!(one_parameter_only(&server(
            "ERR Unknown subcommand or wrong number of arguments for 'get'. Try CONFIG HELP."
        )));
        assert!(!one_parameter_only(&server(
            "NOPERM this user has no permissions to run the 'config|get' command"
        )));
        assert!(!one_parameter_only(&server("ERR unknown command 'CONFIG'")));
    }

    #[test]
    fn permission_refusals_of_each_redis_version_are_told_apart() {
        for (message, expected) in [
            // 6.2
            (
                "NOPERM this user has no permissions to run the 'evalsha' command or its subcommand",
                Some(Refusal::Command),
            ),
            // 6.2 and 7.0
            (
                "NOPERM this user has no permissions to access one of the keys used as arguments",
                Some(Refusal::Key),
            ),
            // 7.0
            (
                "NOPERM this user has no permissions to run the 'del' command",
                Some(Refusal::Command),
            ),
            // 7.2 and later, with a user name that says "key"
            (
                "NOPERM User keyless has no permissions to run the 'get' command",
                Some(Refusal::Command),
            ),
            ("NOPERM No permissions to access a key", Some(Refusal::Key)),
            // Renamed away.
            ("ERR unknown command 'EVALSHA', with args beginning with: ", Some(Refusal::Command)),
            // Past the permission check.
            ("NOSCRIPT No matching script. Please use EVAL.", None),
            ("ERR Error compiling script (new function): user_script:1: unexpected symbol", None),
            ("OOM command not allowed when used memory > 'maxmemory'.", None),
            ("READONLY You can't write against a read only replica.", None),
        ] {
            assert_eq!(refusal(&server(message)), expected, "{message}");
        }
    }
}
