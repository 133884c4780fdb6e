//! Re-seeding nodes that may have lost data (design 2.6a; the rules are in `algo/lineage/`):
//! a node found without a marker of its own is surveyed with the others once its quarantine
//! ends, and the SEED script writes its marker with the floor decided from the answers.

use std::sync::Weak;
use std::time::Duration;

use futures::future::join_all;
use tokio::sync::mpsc::UnboundedReceiver;

use crate::algo::lineage::{self, Floor, Marker, Surveyed};
use crate::engine::machinery::Machinery;
use crate::node::admission::Reseed;
use crate::node::reseed::{seed, survey, Seed};
use crate::node::Node;

/// What one re-seed attempt came to.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    /// Re-seeded, by us or by another client, or nothing left to do.
    Done,
    /// Not now: why.
    Retry(String),
}

/// One attempt to re-seed node `index`, checked by the check of `generation`.
async fn reseed(nodes: &[Node], index: usize, generation: u64) -> Outcome {
    let node = &nodes[index];
    let Some((current, run_id, record)) = node.admission().lost() else {
        return Outcome::Done; // re-seeded, or checked again since
    };
    if current != generation {
        return Outcome::Done; // a newer check sent its own request
    }
    let answers = join_all(nodes.iter().map(survey)).await;
    let Some((old, mine)) = answers[index].clone() else {
        return Outcome::Retry("the node did not answer the survey".into());
    };
    if mine.intact {
        // Another client re-seeded it since our check.
        if let Some(text) = old.as_deref() {
            node.admission().reseeded(generation, text);
        }
        return Outcome::Done;
    }
    let answered: Vec<Surveyed> = answers.iter().flatten().map(|(_, s)| s.clone()).collect();
    let floor = match lineage::floor(nodes.len(), &answered) {
        Floor::Majority(floor) | Floor::Clock(floor) => floor,
        Floor::Wait => {
            return Outcome::Retry(format!(
                "{} of {} nodes answered, too few to tell the largest fencing token handed out",
                answered.len(),
                nodes.len()
            ))
        }
    };
    let marker = Marker::seeded(&run_id, floor).to_string();
    // Sent again after NOSCRIPT only while the check that found the loss still stands: a new
    // connection may lead to another server (a SEED there would name the wrong run_id, which
    // the next check would find and re-seed again, but nothing is gained by it).
    let same_check = || {
        node.admission()
            .lost()
            .is_some_and(|(g, ..)| g == generation)
    };
    let request = Seed {
        old,
        marker: &marker,
        floor,
        record: record.as_deref(),
    };
    match seed(node, request, same_check).await {
        Ok(1) => {
            tracing::info!(
                node = index,
                url = node.label(),
                floor,
                "node re-seeded: its fencing counters count again"
            );
            node.admission().reseeded(generation, &marker);
            Outcome::Done
        }
        Ok(-1) => {
            // The record the check found is gone: a new loss (a flush) since. A marker now
            // would cancel its quarantine; check the node again, which records it.
            tracing::warn!(
                node = index,
                url = node.label(),
                "node lost its data again before its re-seed (its quarantine record is gone): checking it again"
            );
            node.admission().recheck(node.client(), false);
            Outcome::Done
        }
        Ok(_) => Outcome::Retry("its marker changed during the re-seed".into()),
        Err(e) => Outcome::Retry(format!("SEED failed: {e}")),
    }
}

/// The task that re-seeds the nodes of one client, for as long as the client (or one of its
/// held claims) lives.
pub(crate) fn start(client: Weak<Machinery>, mut requests: UnboundedReceiver<Reseed>) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(async move {
        while let Some(request) = requests.recv().await {
            let client = Weak::clone(&client);
            tokio::spawn(async move {
                tokio::time::sleep_until(request.due.into()).await;
                let mut pause = Duration::from_millis(100);
                loop {
                    let Some(alive) = client.upgrade() else {
                        return;
                    };
                    let outcome =
                        reseed(alive.node_list(), request.index, request.generation).await;
                    drop(alive);
                    match outcome {
                        Outcome::Done => return,
                        Outcome::Retry(why) => {
                            tracing::debug!(node = request.index, %why, "re-seed postponed");
                        }
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(2));
                }
            });
        }
    });
}
