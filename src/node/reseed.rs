//! What a re-seed reads and writes on a node (design 2.6a; the decision is the engine's,
//! `engine/seeder.rs`, over `algo/lineage/`): the survey of a node's marker, largest
//! fencing counter and clock, and the SEED script that writes its new marker and floor.

use fred::error::Error as FredError;
use fred::types::{Key, Value};

use crate::algo::keys;
use crate::algo::lineage::{self, Surveyed};
use crate::node::batch::eval::{run_script_if, sender};
use crate::node::clock::node_time;
use crate::node::probe::command;
use crate::node::scripts::SEED;
use crate::node::Node;

/// One node's survey: its marker, its largest fencing counter and its clock. `None` if it
/// did not answer, is not checked, or answered something else.
pub(crate) async fn survey(node: &Node) -> Option<(Option<String>, Surveyed)> {
    let run_id = node.admission().run_id()?;
    let (client, timeout) = (node.client(), node.timeout());
    let keys = vec![Value::from(keys::NODE_KEY), Value::from(keys::HWM_KEY)];
    let (values, time) = tokio::join!(
        command(client, "MGET", keys, timeout),
        command(client, "TIME", vec![], timeout)
    );
    let text = |v: &Value| v.as_string();
    let (marker, hwm) = match values.ok()? {
        Value::Array(v) if v.len() == 2 => (text(&v[0]), text(&v[1])),
        _ => return None,
    };
    let hwm = hwm.map_or(Ok(0), |h| h.parse()).ok()?;
    let clock_us = u64::try_from(node_time(time.ok()?)?.as_micros()).ok()?;
    let intact = lineage::lineage(marker.as_deref(), Some(&run_id))
        .intact()
        .is_some();
    Some((
        marker,
        Surveyed {
            intact,
            hwm,
            clock_us,
        },
    ))
}

/// What SEED writes on a node: the marker the survey read (`old`, `None` for none), the new
/// `marker` and `floor`, and the quarantine record the check found (`record`), to which the
/// re-seed is held.
#[derive(Debug)]
pub(crate) struct Seed<'a> {
    pub(crate) old: Option<String>,
    pub(crate) marker: &'a str,
    pub(crate) floor: u64,
    pub(crate) record: Option<&'a str>,
}

/// Sends SEED to `node` (see `scripts::records::SEED`): 1 if re-seeded, 0 if its marker
/// changed meanwhile, -1 if the record is gone. After NOSCRIPT the body is sent again only
/// while `resend` says so.
pub(crate) async fn seed(
    node: &Node,
    seed: Seed<'_>,
    resend: impl FnOnce() -> bool,
) -> Result<i64, FredError> {
    let keys = vec![
        Key::from_static_str(keys::NODE_KEY),
        Key::from_static_str(keys::HWM_KEY),
        Key::from_static_str(keys::QUARANTINE_KEY),
    ];
    let args = vec![
        Value::from(seed.old.unwrap_or_default()),
        Value::from(seed.marker),
        Value::from(seed.floor.to_string()),
        Value::from(seed.record.unwrap_or_default()),
    ];
    let sender = sender(node.client(), node.timeout());
    run_script_if::<i64>(&sender, &SEED, keys, args, resend).await
}
