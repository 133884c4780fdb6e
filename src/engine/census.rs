//! The census of a semaphore's holders (design 2.9): every node's unexpired claims, read by a
//! script that changes nothing (PERMIT_HOLDERS, sent on its own as OBSERVE is, outside the
//! batches), and put together across the nodes: [`Semaphore::holders`].
//!
//! [`Semaphore::holders`]: crate::Semaphore::holders

use std::collections::BTreeMap;
use std::time::Duration;

use fred::types::{Key, Value};

use crate::algo::quorum::Tally;
use crate::algo::slots;
use crate::engine::held::{self, Access};
use crate::engine::machinery::Machinery;
use crate::error::{Error, FoundKind, NodeError};
use crate::node::scripts::PERMIT_HOLDERS;
use crate::node::Node;

/// One claim of a [`Semaphore`](crate::Semaphore)'s slot, as
/// [`Semaphore::holders`](crate::Semaphore::holders) found it on the nodes: who (by the hash
/// of its token), on how many nodes, and for how long yet.
///
/// The census is advisory, as [`RedLock::leader`](crate::RedLock::leader) is: a permit may
/// be released, lost or taken right after it was read.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PermitHolder {
    /// The slot claimed, from 0 to the semaphore's permits − 1 ([`Permit::slot`]).
    ///
    /// [`Permit::slot`]: crate::Permit::slot
    pub slot: u32,
    /// The SHA1 of the holder's token, 40 lower-case hex digits: what
    /// `quorumlock::fred::util::sha1_hash(permit.token().as_str())` gives. Never the token
    /// itself, which stays with its holder: whoever has it can release the permit.
    pub token_sha1: String,
    /// How many nodes record this claim, unexpired by their own clocks. Fewer than a
    /// [quorum](crate::RedLock::quorum) means the claim does not hold its slot: a remnant
    /// of an attempt being decided or cleaned up, or of a permit that lost nodes.
    pub nodes: usize,
    /// How long a majority of all the nodes will still record the claim if it is not
    /// extended, by the nodes' own clocks: the quorum-th longest of the ttls left on the
    /// nodes that record it (with 5 nodes, the third longest). Zero when fewer than a quorum
    /// record it.
    ///
    /// Neither the minimum nor the median: the slot stays taken exactly as long as a
    /// majority records the claim, so one node with a shorter ttl (one that missed the last
    /// extension) does not shorten it, and a minority with a longer one does not lengthen
    /// it. It is measured by the nodes' clocks as they answered, not from the client's.
    pub ttl: Duration,
}

/// What one node records at the semaphore's key.
#[derive(Debug)]
enum Record {
    /// No key.
    Empty,
    /// Something other than a semaphore of the permits asked for.
    Other(FoundKind),
    /// A semaphore of the permits asked for, with its unexpired claims.
    Claims(Vec<NodeClaim>),
}

/// One unexpired claim on one node.
#[derive(Debug)]
struct NodeClaim {
    slot: u32,
    sha1: String,
    left: Duration,
}

/// One claim of a [`RwLock`](crate::RwLock), as
/// [`RwLock::holders`](crate::RwLock::holders) found it on the nodes: a reader, the writer,
/// or a writer waiting (its intent, which keeps new readers out).
///
/// Advisory, as [`PermitHolder`] is.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RwHolder {
    /// The side held, or waited for.
    pub access: Access,
    /// Whether this is a writer waiting (its intent) rather than a holder.
    pub waiting: bool,
    /// The SHA1 of the holder's token (of a waiting writer's call, for an intent), as
    /// [`PermitHolder::token_sha1`].
    pub token_sha1: String,
    /// How many nodes record it, unexpired by their own clocks.
    pub nodes: usize,
    /// How long a majority of all the nodes will still record it, as [`PermitHolder::ttl`].
    pub ttl: Duration,
}

/// A read of one sorted set's claims on every node of a client, which changes nothing.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClaimCensus<'a> {
    /// The client's nodes, and its registry of held locks, which says whether it was shut
    /// down.
    client: &'a Machinery,
}

impl<'a> ClaimCensus<'a> {
    pub(crate) fn of(client: &'a Machinery) -> ClaimCensus<'a> {
        ClaimCensus { client }
    }

    /// Reads the readers, writer and waiting writers of the read-write lock `name`, at
    /// `key`, on every node.
    pub(crate) async fn rw_holders(&self, name: &str, key: &str) -> Result<Vec<RwHolder>, Error> {
        let found = self.holders(name, key, None).await?;
        Ok(found
            .into_iter()
            .map(|h| RwHolder {
                access: if h.slot == 0 {
                    Access::Read
                } else {
                    Access::Write
                },
                waiting: h.slot == 2,
                token_sha1: h.token_sha1,
                nodes: h.nodes,
                ttl: h.ttl,
            })
            .collect())
    }

    /// What kind of thing holds `key` where a lock of that key was refused (`Error::Taken`):
    /// a semaphore or a read-write lock, when so many nodes record one that a lock could
    /// never get a majority there (more than the nodes a majority may do without), since
    /// a lock's `SET NX` cannot tell a sorted set from another lock. `None` otherwise, or
    /// when the nodes do not say (down, or a user not allowed the census's commands): the
    /// refusal then stays `Taken`. Read with PERMIT_HOLDERS, which changes nothing.
    pub(crate) async fn kind_in_the_way(&self, key: &str) -> Option<FoundKind> {
        let key = Key::from(key);
        let answers = futures::future::join_all(self.client.node_list().iter().map(|node| {
            node.eval(&PERMIT_HOLDERS, vec![key.clone()], Vec::new(), |reply| {
                Ok(kind_of(&reply))
            })
        }))
        .await;
        let found = answers.into_iter().filter_map(|a| a.ok().flatten());
        slots::kind_in_the_way(&Tally::presuming(self.client.node_list().len(), 0), found)
    }

    /// The claims of the sorted set at `key` on every node, put together: the holders of the
    /// semaphore `name` of `permits`, or of a read-write lock (`None`; slots 0, 1 and 2 are
    /// readers, writers and intents).
    pub(crate) async fn holders(
        &self,
        name: &str,
        key: &str,
        permits: Option<u32>,
    ) -> Result<Vec<PermitHolder>, Error> {
        self.client.held.refuse()?;
        let key = Key::from(key);
        let answers = futures::future::join_all(
            self.client
                .node_list()
                .iter()
                .map(|node| read_node(node, key.clone(), permits)),
        )
        .await;
        let mut failures = Vec::new();
        let mut claims = Vec::new();
        let mut others = Vec::new();
        // Those that answered are its yes: a census needs a majority of them.
        let mut nodes = Tally::presuming(self.client.nodes(), 0);
        for answer in answers {
            match answer {
                Err(e) => failures.push(e),
                // Another kind at the key: that node holds no claim of this primitive. A
                // kind mismatch only where too many nodes say so for any claim to be granted
                // (`slots::kind_in_the_way`), as for an acquisition.
                Ok(Record::Other(found)) => {
                    others.push(found);
                    nodes.yes += 1;
                }
                Ok(Record::Empty) => nodes.yes += 1,
                Ok(Record::Claims(found)) => {
                    nodes.yes += 1;
                    claims.extend(found);
                }
            }
        }
        if let Some(found) = slots::kind_in_the_way(&nodes, others) {
            return Err(Error::KindMismatch {
                resource: name.to_string(),
                found,
            });
        }
        if nodes.yes < nodes.quorum() {
            return Err(held::unheld(name, nodes, failures, false));
        }
        Ok(tally(claims, nodes.quorum()))
    }
}

/// The claims of every node, one holder per slot and token: by slot, then the most nodes
/// first, then by hash.
fn tally(claims: Vec<NodeClaim>, quorum: usize) -> Vec<PermitHolder> {
    let mut by_claim: BTreeMap<(u32, String), Vec<Duration>> = BTreeMap::new();
    for claim in claims {
        by_claim
            .entry((claim.slot, claim.sha1))
            .or_default()
            .push(claim.left);
    }
    let mut holders: Vec<PermitHolder> = by_claim
        .into_iter()
        .map(|((slot, token_sha1), mut left)| {
            left.sort_unstable_by(|a, b| b.cmp(a));
            let ttl = left.get(quorum.saturating_sub(1)).copied();
            PermitHolder {
                slot,
                token_sha1,
                nodes: left.len(),
                ttl: ttl.unwrap_or_default(),
            }
        })
        .collect();
    // Stable: by hash within a slot and a count, as the map gave them.
    holders.sort_by_key(|h| (h.slot, std::cmp::Reverse(h.nodes)));
    holders
}

/// What one node records at `key`, compared with a semaphore of `permits` (a read-write
/// lock: `None`).
async fn read_node(node: &Node, key: Key, permits: Option<u32>) -> Result<Record, NodeError> {
    node.eval(&PERMIT_HOLDERS, vec![key], Vec::new(), move |reply| {
        parse(&reply, permits).ok_or_else(|| crate::node::unexpected("PERMIT_HOLDERS", &reply))
    })
    .await
}

/// The kind PERMIT_HOLDERS's reply names, where it is a semaphore or a read-write lock.
fn kind_of(reply: &Value) -> Option<FoundKind> {
    let Value::Array(parts) = reply else {
        return None;
    };
    match parts.first()? {
        Value::Integer(-2) => Some(FoundKind::ReadWriteLock),
        Value::Integer(n) if *n > 0 => Some(FoundKind::Semaphore {
            permits: u32::try_from(*n).ok()?,
        }),
        _ => None,
    }
}

/// PERMIT_HOLDERS's reply, for a semaphore of `permits` or a read-write lock (`None`);
/// `None` if it is not of the script's shape.
fn parse(reply: &Value, permits: Option<u32>) -> Option<Record> {
    let Value::Array(parts) = reply else {
        return None;
    };
    let int = |value: &Value| match value {
        Value::Integer(n) => Some(*n),
        _ => None,
    };
    let (record, rest) = parts.split_first()?;
    match int(record)? {
        0 if rest.is_empty() => return Some(Record::Empty),
        -1 if rest.is_empty() => return Some(Record::Other(FoundKind::Other)),
        -2 if permits.is_some() => return Some(Record::Other(FoundKind::ReadWriteLock)),
        -2 => {}
        n if n > 0 => {
            let found = u32::try_from(n).ok()?;
            if Some(found) != permits {
                return Some(Record::Other(FoundKind::Semaphore { permits: found }));
            }
        }
        _ => return None,
    }
    if rest.len() % 3 != 0 {
        return None;
    }
    let claims = rest
        .chunks(3)
        .map(|claim| {
            let slot = u32::try_from(int(&claim[0])?).ok()?;
            let sha1 = claim[1].as_string().filter(|s| s.len() == 40)?;
            let left = u64::try_from(int(&claim[2])?).ok()?;
            Some(NodeClaim {
                slot,
                sha1,
                left: Duration::from_millis(left),
            })
        })
        .collect::<Option<Vec<_>>>()?;
    Some(Record::Claims(claims))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(slot: u32, sha1: char, ms: u64) -> NodeClaim {
        NodeClaim {
            slot,
            sha1: sha1.to_string().repeat(40),
            left: Duration::from_millis(ms),
        }
    }

    #[test]
    fn the_ttl_is_how_long_a_majority_still_records_the_claim() {
        // Five nodes, quorum 3: the third longest ttl.
        let claims = vec![
            claim(1, 'a', 900),
            claim(1, 'a', 5000),
            claim(1, 'a', 4000),
            claim(1, 'a', 3000),
            claim(0, 'b', 7000),
            claim(0, 'b', 8000),
            claim(0, 'c', 9000),
        ];
        let holders = tally(claims, 3);
        let seen: Vec<(u32, char, usize, u64)> = holders
            .iter()
            .map(|h| {
                let first = h.token_sha1.chars().next().unwrap_or_default();
                (h.slot, first, h.nodes, h.ttl.as_millis() as u64)
            })
            .collect();
        // On fewer than a quorum: no ttl.
        assert_eq!(
            seen,
            [(0, 'b', 2, 0), (0, 'c', 1, 0), (1, 'a', 4, 3000)],
            "{holders:?}"
        );
    }

    #[test]
    fn replies_are_read_by_their_shape() {
        let int = Value::Integer;
        let sha = || Value::from("f".repeat(40));
        let reply = |parts: Vec<Value>| Value::Array(parts);
        assert!(matches!(
            parse(&reply(vec![int(0)]), Some(2)),
            Some(Record::Empty)
        ));
        assert!(matches!(
            parse(&reply(vec![int(-1)]), Some(2)),
            Some(Record::Other(FoundKind::Other))
        ));
        assert!(matches!(
            parse(&reply(vec![int(3)]), Some(2)),
            Some(Record::Other(FoundKind::Semaphore { permits: 3 }))
        ));
        match parse(&reply(vec![int(2), int(1), sha(), int(1500)]), Some(2)) {
            Some(Record::Claims(claims)) => {
                assert_eq!(claims.len(), 1);
                assert_eq!(claims[0].slot, 1);
                assert_eq!(claims[0].left, Duration::from_millis(1500));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            parse(&reply(vec![int(-2)]), Some(2)),
            Some(Record::Other(FoundKind::ReadWriteLock))
        ));
        match parse(&reply(vec![int(-2), int(1), sha(), int(800)]), None) {
            Some(Record::Claims(claims)) => assert_eq!(claims[0].slot, 1),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            parse(&reply(vec![int(2)]), None),
            Some(Record::Other(FoundKind::Semaphore { permits: 2 }))
        ));
        for bad in [
            reply(vec![]),
            reply(vec![int(0), int(1)]),
            reply(vec![int(2), int(1), sha()]),
            reply(vec![int(2), int(-1), sha(), int(5)]),
            reply(vec![int(2), int(1), Value::from("short"), int(5)]),
            reply(vec![int(2), int(1), sha(), int(-5)]),
            Value::from("OK"),
        ] {
            assert!(parse(&bad, Some(2)).is_none(), "{bad:?}");
        }
    }
}
