//! `status --json`: one document, for a lock and for a semaphore or read-write lock alike.
//! Every holder is named by its holder id (`holder.rs`), never by its token.

use std::time::Duration;

use humantime::format_duration;
use serde::Serialize;

use super::super::holder::holder_id;
use super::Seen;

/// The JSON document, fields in this order.
#[derive(Debug, Serialize)]
pub(super) struct StatusDocument<'a> {
    pub(super) resource: &'a str,
    pub(super) key: &'a str,
    /// `lock`, `semaphore` or `rwlock`, as the nodes hold at the key.
    pub(super) kind: &'static str,
    pub(super) nodes: Vec<StatusNode<'a>>,
    pub(super) quorum: usize,
    /// Seconds until a quorum of nodes counts for `run`: 0 now, `null` when it cannot.
    pub(super) quorum_in_s: Option<f64>,
    pub(super) held_on: usize,
    pub(super) free_on: usize,
    /// The holder id of the lock's token on a quorum.
    pub(super) holder_sha1: Option<String>,
    /// A semaphore's number of permits.
    pub(super) permits: Option<u32>,
    /// A semaphore's or a read-write lock's holders; `null` for a lock.
    pub(super) holders: Option<Vec<HolderJson>>,
    pub(super) verdict: &'static str,
    /// Why a semaphore's holders could not be read.
    pub(super) error: Option<String>,
    pub(super) exit_code: u8,
}

/// One holder of a semaphore's permit, or of a read-write lock's side.
#[derive(Debug, Serialize)]
pub(super) struct HolderJson {
    /// A semaphore's `slot`, or a read-write lock's `access` and `waiting`.
    #[serde(flatten)]
    pub(super) claimed: Claimed,
    /// Its holder id, as `ls` names it.
    pub(super) sha1: String,
    pub(super) nodes: usize,
    pub(super) ttl_ms: u128,
    /// On a quorum of nodes: the claim holds its slot.
    pub(super) held: bool,
}

/// One node: `holder_sha1` and `pttl_ms` when held, `error` when unreachable, `null`
/// otherwise.
#[derive(Debug, Serialize)]
pub(super) struct StatusNode<'a> {
    index: usize,
    node: &'a str,
    /// `free`, `held`, `semaphore`, `rwlock` or `unreachable`.
    state: &'static str,
    /// The holder id of the lock's token on this node.
    holder_sha1: Option<String>,
    pttl_ms: Option<i64>,
    /// A semaphore's number of permits, as this node records it.
    permits: Option<u32>,
    error: Option<&'a str>,
}

/// Every node's line of the JSON document.
pub(super) fn json_nodes<'a>(
    nodes: &'a [quorumlock::NodeUrl],
    seen: &'a [Seen],
) -> Vec<StatusNode<'a>> {
    nodes
        .iter()
        .zip(seen)
        .enumerate()
        .map(|(index, (node, seen))| {
            let node = node.redacted();
            let (state, holder_sha1, pttl_ms, permits, error) = match seen {
                Seen::Free => ("free", None, None, None, None),
                Seen::Held { token, pttl } => {
                    ("held", Some(holder_id(token)), Some(*pttl), None, None)
                }
                Seen::Semaphore { permits, pttl } => {
                    ("semaphore", None, Some(*pttl), Some(*permits), None)
                }
                Seen::ReadWrite { pttl } => ("rwlock", None, Some(*pttl), None, None),
                Seen::Failed(why) => ("unreachable", None, None, None, Some(why.as_str())),
            };
            StatusNode {
                index,
                node,
                state,
                holder_sha1,
                pttl_ms,
                permits,
                error,
            }
        })
        .collect()
}

/// Which claim a holder of a semaphore or a read-write lock has, in the JSON documents of
/// `status` and `ls` (its fields stand among the holder's own).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(untagged)]
pub(in crate::cli) enum Claimed {
    /// A semaphore's slot.
    Slot { slot: u32 },
    /// A read-write lock's side, `read` or `write`, and whether this is a writer waiting
    /// (its intent) rather than a holder.
    Side { access: &'static str, waiting: bool },
}

impl Claimed {
    /// A read-write lock's reader (`write` false), writer, or writer waiting.
    pub(in crate::cli) fn side(write: bool, waiting: bool) -> Claimed {
        let access = if write { "write" } else { "read" };
        Claimed::Side { access, waiting }
    }

    /// The holder's line in `status`'s text: `slot 1: held by …`, `reader …`.
    pub(super) fn line(
        &self,
        sha1: &str,
        nodes: usize,
        of: usize,
        ttl: Duration,
        held: bool,
    ) -> String {
        let expires = format_duration(Duration::from_millis(ttl.as_millis() as u64));
        match *self {
            Claimed::Slot { slot } if held => {
                format!(
                    "slot {slot}: held by {sha1} on {nodes} of {of} nodes (expires in {expires})"
                )
            }
            Claimed::Slot { slot } => {
                format!("slot {slot}: claimed by {sha1} on {nodes} of {of} nodes only: not held")
            }
            Claimed::Side { access, waiting } => {
                let who = match (access, waiting) {
                    (_, true) => "writer waiting",
                    ("read", _) => "reader",
                    _ => "writer",
                };
                format!("{who} {sha1} on {nodes} of {of} nodes (expires in {expires})")
            }
        }
    }
}
