//! What `quorumlock status` says of a semaphore or a read-write lock: its holders, read with
//! the library's census ([`Semaphore::holders`](quorumlock::Semaphore::holders),
//! [`RwLock::holders`](quorumlock::RwLock::holders)), printed as lines or as JSON beside the
//! nodes.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use quorumlock::{quorum, Access, PermitHolder, RedLock, RwHolder};

use super::super::exit::{Failure, SOFTWARE, TAKEN, UNAVAILABLE};
use super::super::holder;
use super::document::{json_nodes, Claimed, HolderJson, StatusDocument};
use super::{node_line, Found, Seen};

/// The number of permits of the semaphore the nodes hold at the key, when more of them
/// hold a semaphore than a lock's token: the number recorded on the most nodes.
pub(super) fn semaphore_of(seen: &[Seen]) -> Option<u32> {
    let locks = seen
        .iter()
        .filter(|s| matches!(s, Seen::Held { .. }))
        .count();
    let mut counts: BTreeMap<u32, usize> = BTreeMap::new();
    for s in seen {
        if let Seen::Semaphore { permits, .. } = s {
            *counts.entry(*permits).or_default() += 1;
        }
    }
    let semaphores: usize = counts.values().sum();
    if semaphores == 0 || semaphores < locks {
        return None;
    }
    counts
        .into_iter()
        .max_by_key(|(permits, n)| (*n, std::cmp::Reverse(*permits)))
        .map(|(permits, _)| permits)
}

/// `status` of a semaphore of `permits` permits: the nodes as `found`, then its holders
/// read with the library's census through `redlock`.
pub(super) async fn semaphore_status(
    found: &Found<'_>,
    redlock: &RedLock,
    permits: u32,
) -> Result<u8, Failure> {
    let read = redlock
        .semaphore(&found.args.resource, permits)?
        .holders()
        .await;
    let needed = quorum(found.seen.len());
    let holders: Vec<Holder> = read
        .as_deref()
        .unwrap_or_default()
        .iter()
        .map(|h: &PermitHolder| Holder {
            claimed: Claimed::Slot { slot: h.slot },
            id: holder::of_sha1(&h.token_sha1),
            nodes: h.nodes,
            ttl: h.ttl,
            held: h.nodes >= needed,
        })
        .collect();
    let held = holders.iter().filter(|h| h.held).count();
    let verdict = if held >= permits as usize {
        ("full", TAKEN, format!(" of {permits} permits, all held"))
    } else {
        (
            "available",
            0,
            format!(" of {permits} permits, {held} held"),
        )
    };
    let census = Census {
        kind: Kind::Semaphore,
        permits: Some(permits),
        holders,
        verdict,
    };
    report(found, &census, read.as_ref().err())
}

/// Whether the nodes hold a read-write lock at the key: more of them than a lock's token.
pub(super) fn read_write(seen: &[Seen]) -> bool {
    let count = |f: fn(&Seen) -> bool| seen.iter().filter(|s| f(s)).count();
    let rw = count(|s| matches!(s, Seen::ReadWrite { .. }));
    rw > 0 && rw >= count(|s| matches!(s, Seen::Held { .. }))
}

/// `status` of a read-write lock: the nodes as `found`, then its readers, writer and writers
/// waiting, read with the library's census through `redlock`. Exit 75 while a writer holds
/// it (a reader would wait), 0 otherwise.
pub(super) async fn rw_status(found: &Found<'_>, redlock: &RedLock) -> Result<u8, Failure> {
    let read = redlock.rw_lock(&found.args.resource)?.holders().await;
    let needed = quorum(found.seen.len());
    let holders: Vec<Holder> = read
        .as_deref()
        .unwrap_or_default()
        .iter()
        .map(|h: &RwHolder| Holder {
            claimed: Claimed::side(h.access == Access::Write, h.waiting),
            id: holder::of_sha1(&h.token_sha1),
            nodes: h.nodes,
            ttl: h.ttl,
            held: !h.waiting && h.nodes >= needed,
        })
        .collect();
    let holding = |side: Claimed| {
        holders
            .iter()
            .filter(|h| h.held && h.claimed == side)
            .count()
    };
    let readers = holding(Claimed::side(false, false));
    let waiting = holders
        .iter()
        .any(|h| h.claimed == Claimed::side(true, true));
    let verdict = if holding(Claimed::side(true, false)) > 0 {
        ("written", TAKEN, ", held by a writer".to_string())
    } else {
        let behind = if waiting { ", a writer waiting" } else { "" };
        let verdict = if readers > 0 { "read" } else { "free" };
        (verdict, 0, format!(", {readers} readers{behind}"))
    };
    let census = Census {
        kind: Kind::ReadWrite,
        permits: None,
        holders,
        verdict,
    };
    report(found, &census, read.as_ref().err())
}

/// One holder of a semaphore's permit or of a read-write lock's side, as the census found it.
#[derive(Debug)]
struct Holder {
    claimed: Claimed,
    /// Its holder id (`holder.rs`).
    id: String,
    nodes: usize,
    ttl: Duration,
    /// On a quorum of nodes (and, for a read-write lock, not a writer waiting): it holds.
    held: bool,
}

/// The kinds of key whose holders `status` lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Semaphore,
    ReadWrite,
}

impl Kind {
    /// Its `kind` in the JSON document.
    fn json(self) -> &'static str {
        match self {
            Kind::Semaphore => "semaphore",
            Kind::ReadWrite => "rwlock",
        }
    }

    /// What the summary line calls it.
    fn words(self) -> &'static str {
        match self {
            Kind::Semaphore => "semaphore",
            Kind::ReadWrite => "read-write lock",
        }
    }

    /// Whether a node holds a key of this kind.
    fn on(self, seen: &Seen) -> bool {
        match self {
            Kind::Semaphore => matches!(seen, Seen::Semaphore { .. }),
            Kind::ReadWrite => matches!(seen, Seen::ReadWrite { .. }),
        }
    }
}

/// What `status` found of a semaphore or a read-write lock.
#[derive(Debug)]
struct Census {
    kind: Kind,
    permits: Option<u32>,
    holders: Vec<Holder>,
    /// Once its holders are read: the verdict, the exit code, and what the summary line says
    /// after the kind's name (` of 2 permits, all held`).
    verdict: (&'static str, u8, String),
}

/// Prints what `status` found, as lines or as JSON: the nodes as `found`, the holders, then
/// the summary: what `run` would meet where no quorum counts; `unknown` if the holders
/// could not be read, for `error`.
fn report(
    found: &Found<'_>,
    census: &Census,
    error: Option<&quorumlock::Error>,
) -> Result<u8, Failure> {
    let seen = found.seen;
    let on = seen.iter().filter(|s| census.kind.on(s)).count();
    let counts = format!(
        "key on {on} of {} nodes, quorum {}",
        seen.len(),
        quorum(seen.len())
    );
    let (resource, words) = (&found.args.resource, census.kind.words());
    let unavailable = found.counting.unavailable(quorum(seen.len()), seen.len());
    let (verdict, code, line) = match (unavailable, error) {
        (Some((verdict, code, says)), _) => (
            verdict,
            code,
            format!("`{resource}`: {words}: {says} ({counts})"),
        ),
        (None, None) => {
            let (verdict, code, says) = &census.verdict;
            let line = format!("`{resource}`: {words}{says} ({counts})");
            (*verdict, *code, line)
        }
        (None, Some(e)) => {
            let line = format!("`{resource}`: {words}: unknown: {e} ({counts})");
            ("unknown", UNAVAILABLE, line)
        }
    };
    if found.args.json {
        let document = StatusDocument {
            resource,
            key: found.key,
            kind: census.kind.json(),
            nodes: json_nodes(found.nodes, seen),
            quorum: quorum(seen.len()),
            quorum_in_s: found.counting.quorum_in_s(),
            held_on: on,
            free_on: seen.iter().filter(|s| **s == Seen::Free).count(),
            holder_sha1: None,
            permits: census.permits,
            holders: Some(
                census
                    .holders
                    .iter()
                    .map(|h| HolderJson {
                        claimed: h.claimed,
                        sha1: h.id.clone(),
                        nodes: h.nodes,
                        ttl_ms: h.ttl.as_millis(),
                        held: h.held,
                    })
                    .collect(),
            ),
            verdict,
            error: error.map(ToString::to_string),
            exit_code: code,
        };
        let text =
            serde_json::to_string_pretty(&document).map_err(|e| Failure::new(SOFTWARE, e))?;
        println!("{text}");
        return Ok(code);
    }
    let mut out = String::new();
    for (i, (node, seen)) in found.nodes.iter().zip(seen).enumerate() {
        let _ = node_line(&mut out, i, node, seen, false);
    }
    for h in &census.holders {
        let line = h.claimed.line(&h.id, h.nodes, seen.len(), h.ttl, h.held);
        let _ = writeln!(out, "{line}");
    }
    let _ = writeln!(out, "{line}");
    print!("{out}");
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holder_names_its_slot_or_its_side_in_json_and_in_text() {
        let json = |claimed: Claimed, held: bool| {
            let holder = HolderJson {
                claimed,
                sha1: "ab".to_string(),
                nodes: 2,
                ttl_ms: 1500,
                held,
            };
            serde_json::to_string(&holder).unwrap_or_default()
        };
        assert_eq!(
            json(Claimed::Slot { slot: 3 }, true),
            r#"{"slot":3,"sha1":"ab","nodes":2,"ttl_ms":1500,"held":true}"#
        );
        assert_eq!(
            json(Claimed::side(true, true), false),
            r#"{"access":"write","waiting":true,"sha1":"ab","nodes":2,"ttl_ms":1500,"held":false}"#
        );
        let ttl = Duration::from_millis(1500);
        let line = |claimed: Claimed, held: bool| claimed.line("ab", 2, 3, ttl, held);
        assert_eq!(
            line(Claimed::Slot { slot: 3 }, true),
            "slot 3: held by ab on 2 of 3 nodes (expires in 1s 500ms)"
        );
        assert_eq!(
            line(Claimed::Slot { slot: 3 }, false),
            "slot 3: claimed by ab on 2 of 3 nodes only: not held"
        );
        assert_eq!(
            line(Claimed::side(false, false), true),
            "reader ab on 2 of 3 nodes (expires in 1s 500ms)"
        );
        assert_eq!(
            line(Claimed::side(true, false), true),
            "writer ab on 2 of 3 nodes (expires in 1s 500ms)"
        );
        assert_eq!(
            line(Claimed::side(true, true), false),
            "writer waiting ab on 2 of 3 nodes (expires in 1s 500ms)"
        );
    }
}
