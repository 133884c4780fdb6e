//! The semaphores and read-write locks that `quorumlock ls` lists: their sorted sets read on
//! one node (`TIME`, `ZRANGE ... WITHSCORES` and `PTTL` in one pipeline), their claims told
//! by the record member (`#` scored `-N`, `#rw`) and by the nodes' clocks (a claim scored
//! `+inf` expires with its key), and put together across the nodes.

use std::collections::BTreeMap;

use fred::prelude::{ClientLike, KeysInterface, Value};
use fred::types::CustomCommand;
use quorumlock::Config;
use serde::Serialize;

use super::super::holder::holder_id;
use super::super::status::Claimed;
use super::Scanned;

/// What a sorted set of quorumlock's is, by its record member.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum SetKind {
    /// `#` scored `-N`: a semaphore of `N` permits.
    Semaphore { permits: u32 },
    /// `#rw`: a read-write lock.
    ReadWrite,
}

/// One semaphore or read-write lock as one node holds it: its kind and unexpired claims.
#[derive(Debug, Clone)]
pub(super) struct SetEntry {
    key: String,
    kind: SetKind,
    claims: Vec<ClaimSeen>,
    fence: Option<u64>,
}

/// One claim unexpired by the node's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ClaimSeen {
    claimed: Claimed,
    /// Its holder id (`holder.rs`).
    sha1: String,
    /// Its ttl left in milliseconds by the node's clock; `None`: it never expires.
    left_ms: Option<u64>,
}

/// The semaphore or read-write lock at `key` on one node (`None` if the sorted set is
/// neither), with its unexpired claims: `TIME`, `ZRANGE ... WITHSCORES` and `PTTL` in one
/// pipeline, then `GET` of its fencing counter.
pub(super) async fn read_set(
    client: &fred::clients::Client,
    config: &Config,
    key: String,
) -> Result<Option<SetEntry>, fred::error::Error> {
    let pipeline = client.pipeline();
    let no_args = Vec::<Value>::new();
    let () = pipeline
        .custom(CustomCommand::new_static("TIME", None, false), no_args)
        .await?;
    let () = pipeline
        .custom(
            CustomCommand::new_static("ZRANGE", None, false),
            vec![key.as_str(), "0", "-1", "WITHSCORES"],
        )
        .await?;
    let () = pipeline.pttl(key.as_str()).await?;
    let replies: Vec<Value> = pipeline.all().await?;
    let [time, members, pttl] = <[Value; 3]>::try_from(replies)
        .map_err(|replies| unexpected("TIME, ZRANGE, PTTL", &replies))?;
    let now_ms = node_ms(&time).ok_or_else(|| unexpected("TIME", &time))?;
    let pttl = pttl.as_i64().ok_or_else(|| unexpected("PTTL", &pttl))?;
    let Some((kind, claims)) = parse_set(&members.into_array(), now_ms, pttl) else {
        return Ok(None);
    };
    let resource = key.strip_prefix(config.key_prefix()).unwrap_or(&key);
    let fence: Option<String> = client.get(config.fencing_key(resource)).await?;
    Ok(Some(SetEntry {
        key,
        kind,
        claims,
        fence: fence.and_then(|f| f.parse().ok()),
    }))
}

/// A reply that is not of the shape `what` answers with.
fn unexpected(what: &str, reply: &impl std::fmt::Debug) -> fred::error::Error {
    fred::error::Error::new(
        fred::error::ErrorKind::Protocol,
        format!("unexpected {what} reply: {reply:?}"),
    )
}

/// The node's clock in milliseconds from its answer to `TIME`.
fn node_ms(time: &Value) -> Option<u64> {
    let Value::Array(parts) = time else {
        return None;
    };
    let parts: Vec<u64> = parts.iter().filter_map(Value::as_u64).collect();
    match parts[..] {
        [secs, micros] => Some(secs.saturating_mul(1000).saturating_add(micros / 1000)),
        _ => None,
    }
}

/// When a claim expires, from its score.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Expiry {
    /// At this time in the node's milliseconds.
    At(f64),
    /// With the key (`+inf`: a claim recorded on a key that did not exist).
    WithKey,
}

/// A member's score as `ZRANGE ... WITHSCORES` answers it: a number, `inf` or `+inf` (a
/// double with RESP3).
fn expiry(score: &Value) -> Option<Expiry> {
    let ms = match score {
        Value::Double(ms) => *ms,
        other => match other.as_str()?.as_ref() {
            "inf" | "+inf" => f64::INFINITY,
            text => text.parse().ok()?,
        },
    };
    match ms {
        f64::INFINITY => Some(Expiry::WithKey),
        ms if ms.is_nan() => None,
        ms => Some(Expiry::At(ms)),
    }
}

/// A sorted set's members with their scores (`ZRANGE ... WITHSCORES`, flat), read at the
/// node's `now_ms` with the key's `pttl`: what it is by its record member (`None`: neither
/// a semaphore nor a read-write lock), and its unexpired claims. A semaphore's claim is
/// `slot:token`, a read-write lock's `r:token`, `w:token` or `i:waiter` (a writer waiting);
/// a claim scored `+inf` expires with the key, in `pttl` (never if the key has no expiry).
fn parse_set(members: &[Value], now_ms: u64, pttl: i64) -> Option<(SetKind, Vec<ClaimSeen>)> {
    let mut kind = None;
    let mut claims = Vec::new();
    for pair in members.chunks(2) {
        let [member, score] = pair else { continue };
        let (Some(member), Some(expiry)) = (member.as_string(), expiry(score)) else {
            continue;
        };
        match (member.as_str(), expiry) {
            ("#", Expiry::At(score))
                if score < 0.0 && score.fract() == 0.0 && -score <= f64::from(u32::MAX) =>
            {
                kind = Some(SetKind::Semaphore {
                    permits: -score as u32,
                });
                continue;
            }
            ("#rw", _) => {
                kind = Some(SetKind::ReadWrite);
                continue;
            }
            _ => {}
        }
        let left_ms = match expiry {
            Expiry::At(at) if at > now_ms as f64 => Some((at - now_ms as f64) as u64),
            Expiry::At(_) => continue,
            Expiry::WithKey if pttl > 0 => Some(pttl as u64),
            // No expiry: a key written by hand.
            Expiry::WithKey if pttl == -1 => None,
            // Gone meanwhile.
            Expiry::WithKey => continue,
        };
        let Some((prefix, token)) = member.split_once(':') else {
            continue;
        };
        claims.push((prefix.to_string(), holder_id(token), left_ms));
    }
    let kind = kind?;
    let claims = claims
        .into_iter()
        .filter_map(|(prefix, sha1, left_ms)| {
            let claimed = match (kind, prefix.as_str()) {
                (SetKind::Semaphore { .. }, slot) => Claimed::Slot {
                    slot: slot.parse().ok()?,
                },
                (SetKind::ReadWrite, "r") => Claimed::side(false, false),
                (SetKind::ReadWrite, "w") => Claimed::side(true, false),
                (SetKind::ReadWrite, "i") => Claimed::side(true, true),
                (SetKind::ReadWrite, _) => return None,
            };
            Some(ClaimSeen {
                claimed,
                sha1,
                left_ms,
            })
        })
        .collect();
    Some((kind, claims))
}

/// One semaphore or read-write lock, across the nodes.
#[derive(Debug, Serialize)]
pub(super) struct SetListed {
    pub(super) resource: String,
    pub(super) key: String,
    /// `kind` and what is held.
    #[serde(flatten)]
    pub(super) counts: Counts,
    /// The greatest fencing counter of the resource on the nodes that answered.
    pub(super) fencing_token: Option<u64>,
    /// The nodes that hold its key.
    pub(super) nodes: Vec<usize>,
    holders: Vec<ClaimListed>,
}

/// What is held of a semaphore or a read-write lock: claims on a quorum of nodes.
#[derive(Debug, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub(super) enum Counts {
    Semaphore {
        /// The number of permits recorded on the most nodes.
        permits: u32,
        /// How many claims are recorded (unexpired) on a quorum of nodes.
        held: usize,
    },
    Rwlock {
        readers: usize,
        writers: usize,
        /// Writers waiting: intents recorded on at least one node.
        waiting: usize,
    },
}

/// A claim of a semaphore's slot or of a read-write lock's side, and the nodes that record
/// it.
#[derive(Debug, Serialize)]
struct ClaimListed {
    #[serde(flatten)]
    claimed: Claimed,
    sha1: String,
    nodes: Vec<usize>,
    /// How long a majority of the nodes still records it, by their clocks: the quorum-th
    /// longest ttl left among the nodes that record it; 0 on fewer than a quorum, `None` if
    /// it never expires.
    ttl_ms: Option<u64>,
}

/// The semaphores and read-write locks, by resource name.
pub(super) fn aggregate_sets(
    config: &Config,
    seen: &[Result<Scanned, String>],
    quorum: usize,
) -> Vec<SetListed> {
    let mut by_key: BTreeMap<&str, Vec<(usize, &SetEntry)>> = BTreeMap::new();
    for (i, scanned) in seen.iter().enumerate() {
        for entry in scanned.iter().flat_map(|s| &s.sets) {
            by_key.entry(&entry.key).or_default().push((i, entry));
        }
    }
    by_key
        .into_iter()
        .filter_map(|(key, held)| {
            let mut kinds: BTreeMap<SetKind, usize> = BTreeMap::new();
            let mut claims: ByClaim<'_> = BTreeMap::new();
            for (i, entry) in &held {
                *kinds.entry(entry.kind).or_default() += 1;
                for claim in &entry.claims {
                    let nodes = claims.entry((claim.claimed, &claim.sha1)).or_default();
                    nodes.push((*i, claim.left_ms));
                }
            }
            let holders: Vec<ClaimListed> = claims
                .into_iter()
                .map(|((claimed, sha1), nodes)| ClaimListed {
                    claimed,
                    sha1: sha1.to_string(),
                    ttl_ms: majority_ttl(nodes.iter().map(|(_, left)| *left), quorum),
                    nodes: nodes.into_iter().map(|(i, _)| i).collect(),
                })
                .collect();
            let on_quorum = |side: Claimed| {
                holders
                    .iter()
                    .filter(|h| h.claimed == side && h.nodes.len() >= quorum)
                    .count()
            };
            // What the most nodes record (each node records one kind).
            let (kind, _) = kinds.into_iter().max_by_key(|(_, n)| *n)?;
            let counts = match kind {
                SetKind::ReadWrite => Counts::Rwlock {
                    readers: on_quorum(Claimed::side(false, false)),
                    writers: on_quorum(Claimed::side(true, false)),
                    waiting: holders
                        .iter()
                        .filter(|h| h.claimed == Claimed::side(true, true))
                        .count(),
                },
                SetKind::Semaphore { permits } => Counts::Semaphore {
                    permits,
                    held: holders
                        .iter()
                        .filter(|h| {
                            matches!(h.claimed, Claimed::Slot { .. }) && h.nodes.len() >= quorum
                        })
                        .count(),
                },
            };
            Some(SetListed {
                resource: key
                    .strip_prefix(config.key_prefix())
                    .unwrap_or(key)
                    .to_string(),
                key: key.to_string(),
                counts,
                fencing_token: held.iter().filter_map(|(_, e)| e.fence).max(),
                nodes: held.iter().map(|(i, _)| *i).collect(),
                holders,
            })
        })
        .collect()
}

/// Each claim (its slot or side, its token's short SHA1) and the nodes recording it, each
/// with the claim's ttl left there.
type ByClaim<'a> = BTreeMap<(Claimed, &'a str), Vec<(usize, Option<u64>)>>;

/// How long a majority of the nodes still records a claim, from its ttl left on each node
/// that records it (`None`: never expires): the quorum-th longest; 0 on fewer than a quorum.
fn majority_ttl(left: impl Iterator<Item = Option<u64>>, quorum: usize) -> Option<u64> {
    let mut left: Vec<Option<u64>> = left.collect();
    // Longest first, never-expiring (`None`) before any.
    left.sort_unstable_by(|a, b| match (a, b) {
        (None, None) => std::cmp::Ordering::Equal,
        (None, Some(_)) => std::cmp::Ordering::Less,
        (Some(_), None) => std::cmp::Ordering::Greater,
        (Some(a), Some(b)) => b.cmp(a),
    });
    match left.get(quorum.saturating_sub(1)) {
        Some(ttl) => *ttl,
        None => Some(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `ZRANGE ... WITHSCORES` as RESP2 answers it: member, score, member, score...
    fn zrange(pairs: &[(&str, &str)]) -> Vec<Value> {
        pairs
            .iter()
            .flat_map(|(member, score)| [Value::from(*member), Value::from(*score)])
            .collect()
    }

    fn seen(claimed: Claimed, token: &str, left_ms: Option<u64>) -> ClaimSeen {
        ClaimSeen {
            claimed,
            sha1: holder_id(token),
            left_ms,
        }
    }

    #[test]
    fn a_score_is_a_time_or_inf_which_means_with_the_key() {
        let at = |ms: f64| Some(Expiry::At(ms));
        assert_eq!(
            expiry(&Value::from("1700000000123")),
            at(1_700_000_000_123.0)
        );
        assert_eq!(expiry(&Value::from("-3")), at(-3.0));
        assert_eq!(expiry(&Value::from("inf")), Some(Expiry::WithKey));
        assert_eq!(expiry(&Value::from("+inf")), Some(Expiry::WithKey));
        assert_eq!(expiry(&Value::Double(f64::INFINITY)), Some(Expiry::WithKey));
        assert_eq!(expiry(&Value::Double(2.5)), at(2.5));
        assert_eq!(expiry(&Value::from("-inf")), at(f64::NEG_INFINITY));
        assert_eq!(expiry(&Value::from("nan")), None);
        assert_eq!(expiry(&Value::from("soon")), None);
        assert_eq!(expiry(&Value::Null), None);
    }

    #[test]
    fn a_semaphores_claims_are_read_at_the_nodes_now_and_inf_is_the_keys_pttl() {
        let members = zrange(&[
            ("#", "-3"),
            ("0:expired", "999"),
            ("1:live", "1500"),
            ("2:fresh", "inf"),
            ("x:not-a-slot", "5000"),
            ("nocolon", "5000"),
        ]);
        let (kind, claims) = parse_set(&members, 1000, 7000).expect("a semaphore");
        assert_eq!(kind, SetKind::Semaphore { permits: 3 });
        assert_eq!(
            claims,
            [
                seen(Claimed::Slot { slot: 1 }, "live", Some(500)),
                seen(Claimed::Slot { slot: 2 }, "fresh", Some(7000)),
            ]
        );
        // A key with no expiry (written by hand): the claim scored inf never expires.
        let (_, claims) = parse_set(&members, 1000, -1).expect("a semaphore");
        assert_eq!(claims[1], seen(Claimed::Slot { slot: 2 }, "fresh", None));
        // The key gone between ZRANGE and PTTL: so is the claim.
        let (_, claims) = parse_set(&members, 1000, -2).expect("a semaphore");
        assert_eq!(claims, [seen(Claimed::Slot { slot: 1 }, "live", Some(500))]);
    }

    #[test]
    fn a_read_write_locks_readers_writer_and_intents_are_its_claims() {
        let members = zrange(&[
            ("#rw", "-1"),
            ("r:one", "inf"),
            ("r:two", "3000"),
            ("w:old", "100"),
            ("i:waiter", "2000"),
            ("7:slot", "5000"),
        ]);
        let (kind, claims) = parse_set(&members, 1000, 4000).expect("a read-write lock");
        assert_eq!(kind, SetKind::ReadWrite);
        assert_eq!(
            claims,
            [
                seen(Claimed::side(false, false), "one", Some(4000)),
                seen(Claimed::side(false, false), "two", Some(2000)),
                seen(Claimed::side(true, true), "waiter", Some(1000)),
            ]
        );
        let members = zrange(&[("w:writer", "+inf"), ("#rw", "-1")]);
        let (_, claims) = parse_set(&members, 1000, 900).expect("a read-write lock");
        assert_eq!(
            claims,
            [seen(Claimed::side(true, false), "writer", Some(900))]
        );
    }

    #[test]
    fn a_sorted_set_without_a_record_or_with_a_bad_one_is_not_listed() {
        for members in [
            zrange(&[("1:token", "5000")]),
            zrange(&[("#", "2"), ("1:token", "5000")]),
            zrange(&[("#", "-1.5"), ("1:token", "5000")]),
            zrange(&[("#", "inf"), ("1:token", "5000")]),
            Vec::new(),
        ] {
            assert_eq!(parse_set(&members, 1000, 5000), None, "{members:?}");
        }
    }

    #[test]
    fn the_ttl_listed_is_the_quorum_th_longest() {
        let ttl = |left: &[Option<u64>]| majority_ttl(left.iter().copied(), 3);
        assert_eq!(
            ttl(&[Some(900), Some(5000), Some(4000), Some(3000)]),
            Some(3000)
        );
        assert_eq!(ttl(&[Some(900), None, Some(4000)]), Some(900));
        assert_eq!(ttl(&[None, None, None, Some(1)]), None);
        assert_eq!(
            ttl(&[Some(8000), Some(7000)]),
            Some(0),
            "on fewer than a quorum"
        );
    }

    #[test]
    fn sets_are_counted_by_claims_on_a_quorum() {
        let set = |kind: SetKind, claims: Vec<ClaimSeen>| SetEntry {
            key: "shelf".into(),
            kind,
            claims,
            fence: None,
        };
        let reader = |token: &str| seen(Claimed::side(false, false), token, Some(1000));
        let intent = seen(Claimed::side(true, true), "w", Some(1000));
        let node = |sets: Vec<SetEntry>| {
            Ok(Scanned {
                locks: Vec::new(),
                sets,
            })
        };
        let rw = SetKind::ReadWrite;
        let seen_by_nodes = [
            node(vec![set(
                rw,
                vec![reader("a"), reader("b"), intent.clone()],
            )]),
            node(vec![set(rw, vec![reader("a"), reader("b")])]),
            node(vec![set(rw, vec![reader("a")])]),
        ];
        let config = quorumlock::RedLock::builder()
            .nodes(["redis://127.0.0.1:1"])
            .validate()
            .expect("a configuration");
        let listed = aggregate_sets(&config, &seen_by_nodes, 2);
        assert_eq!(listed.len(), 1, "{listed:?}");
        let json = serde_json::to_value(&listed[0]).expect("JSON");
        assert_eq!(
            json,
            serde_json::json!({
                "resource": "shelf",
                "key": "shelf",
                "kind": "rwlock",
                "readers": 2,
                "writers": 0,
                "waiting": 1,
                "fencing_token": null,
                "nodes": [0, 1, 2],
                "holders": [
                    {"access": "read", "waiting": false, "sha1": holder_id("a"),
                     "nodes": [0, 1, 2], "ttl_ms": 1000},
                    {"access": "read", "waiting": false, "sha1": holder_id("b"),
                     "nodes": [0, 1], "ttl_ms": 1000},
                    {"access": "write", "waiting": true, "sha1": holder_id("w"),
                     "nodes": [0], "ttl_ms": 0},
                ],
            })
        );
    }
}
