//! The Lua scripts, in one place (design 3.1: what each does, and why none can touch a lock
//! that is not ours; the EVALSHA call and its EVAL fallback on NOSCRIPT).
//!
//! After the keys of design 3.1 (`KEYS[1..n]`, then the counters `KEYS[n+1..2n]`) come the
//! node's marker and its largest counter (`quorumlock:node`, `quorumlock:hwm`: `algo/lineage/`);
//! `n` is passed as an argument, and the scripts that read counters take the marker the
//! client checked as their last argument.
//!
//! The bodies live by kind: the locks' ([`lock`]), the semaphores' and read-write locks'
//! ([`permit`]), the records beside them ([`records`]: a leader's identity, a node's marker
//! and quarantine), and the batch script that runs several calls in one ([`batched`]). Every
//! script the client sends is declared here, once, as a [`Script`] with its SHA1.

use std::sync::LazyLock;

#[macro_use]
pub(crate) mod lock;
pub(crate) mod batched;
pub(crate) mod permit;
pub(crate) mod records;

#[cfg(any(test, feature = "testkit"))]
pub(crate) use batched::batch;
#[cfg(any(test, feature = "testkit"))]
pub(crate) use batched::ALL;
#[cfg(test)]
pub(crate) use batched::PERMIT;
pub(crate) use batched::{batch_header, BatchHeader, Natives, BATCHED};
pub(crate) use lock::release_args;

// The scripts the batch script runs by number, each also sent alone (`Op` in `node/batch/`).
pub(crate) static BATCHED_SCRIPTS: LazyLock<[Script; 17]> =
    LazyLock::new(|| BATCHED.map(Script::new));

// Read on its own (`engine/census.rs`).
pub(crate) static PERMIT_HOLDERS: LazyLock<Script> =
    LazyLock::new(|| Script::new(permit::PERMIT_HOLDERS));

// The batch script, and the lone `SET NX` vote that answers as it does.
pub(crate) static BATCH: LazyLock<Script> = LazyLock::new(|| Script::new(batched::batch()));
pub(crate) static SET_NX_ALONE: LazyLock<Script> =
    LazyLock::new(|| Script::new(batched::SET_NX_ALONE));

// The records beside the locks, each sent on its own.
pub(crate) static IDENTIFY: LazyLock<Script> = LazyLock::new(|| Script::new(records::IDENTIFY));
pub(crate) static OBSERVE: LazyLock<Script> = LazyLock::new(|| Script::new(records::OBSERVE));
pub(crate) static SEED: LazyLock<Script> = LazyLock::new(|| Script::new(records::SEED));
pub(crate) static QUARANTINE: LazyLock<Script> = LazyLock::new(|| Script::new(records::QUARANTINE));

/// A script and its SHA1, computed once.
#[derive(Debug)]
pub(crate) struct Script {
    pub(crate) body: std::borrow::Cow<'static, str>,
    pub(crate) sha: String,
}

impl Script {
    pub(crate) fn new(body: impl Into<std::borrow::Cow<'static, str>>) -> Script {
        let body = body.into();
        let sha = fred::util::sha1_hash(&body);
        Script { body, sha }
    }
}

/// Whether a node's error means "that SHA is not cached here" (fred has no ErrorKind for it).
pub(crate) fn is_noscript(err: &fred::error::Error) -> bool {
    err.details().starts_with("NOSCRIPT")
}

/// The Redis commands `script` calls, in order, as written: the name in each
/// `redis.call('name', ...)` and `redis.pcall('name', ...)`, with `true` for `pcall` (the
/// script goes on if the command fails). Where the name is not a string literal, what stands
/// in its place is returned, so that a check of the names against a list fails on it. The
/// permission probe's test reads every script with it (`node/probe.rs`).
#[cfg(test)]
pub(crate) fn commands(script: &str) -> impl Iterator<Item = (&str, bool)> + '_ {
    script.match_indices("redis.").filter_map(move |(at, _)| {
        let rest = &script[at + "redis.".len()..];
        let (rest, protected) = match rest.strip_prefix("pcall") {
            Some(rest) => (rest, true),
            None => (rest.strip_prefix("call")?, false),
        };
        let rest = rest.trim_start().strip_prefix('(')?.trim_start();
        let name = match rest.chars().next() {
            Some(quote @ ('\'' | '"')) => rest[1..].split(quote).next().unwrap_or_default(),
            _ => rest.split([',', ')']).next().unwrap_or_default().trim(),
        };
        Some((name, protected))
    })
}
