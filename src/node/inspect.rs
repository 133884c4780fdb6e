//! What `inspect` reads of a node (its report is judged in `report/`, the reports gathered in
//! `engine/inspect.rs`): the round trip, the facts, the permissions for locks, elections and
//! semaphores, the clock's rate, and what the node's admission knows of it.

use std::time::Duration;

use crate::node::clock;
use crate::node::failure::describe;
use crate::node::probe::{self, KeySpace};
use crate::node::Node;
use crate::report::facts::Excluded;
use crate::report::Observed;

/// What is seen of `node`: the clock's rate over `clock_window`, the permissions on the
/// keys of `keys`; only the error if it is not connected or does not answer.
pub(crate) async fn observe(node: &Node, clock_window: Duration, keys: &KeySpace) -> Observed {
    let (client, timeout) = (node.client(), node.timeout());
    let mut seen = Observed::default();
    let not_connected = || match node.last_error() {
        Some((kind, e)) => (Some(kind), format!("not connected: {kind}: {e}")),
        None => (None, "not connected".to_string()),
    };
    if !node.is_connected() {
        let (kind, error) = not_connected();
        (seen.error_kind, seen.error) = (kind, Some(error));
        return seen;
    }
    match probe::round_trip(client, timeout).await {
        Err(e) => {
            let (kind, error) = if node.is_connected() {
                let (kind, message) = describe(&e);
                (Some(kind), format!("{kind}: {message}"))
            } else {
                not_connected()
            };
            seen.error_kind = kind;
            seen.error = Some(error);
        }
        Ok(rtt) => {
            seen.round_trip = Some(rtt);
            read(node, clock_window, keys, &mut seen).await;
        }
    }
    seen
}

/// What is read of a node that answered: its facts, permissions and clock, and what its
/// admission knows (quarantine, lost data, exclusion).
async fn read(node: &Node, clock_window: Duration, keys: &KeySpace, seen: &mut Observed) {
    let (client, timeout) = (node.client(), node.timeout());
    seen.facts = probe::facts(client, timeout).await.ok();
    let (permissions, election, semaphore) = tokio::join!(
        probe::permissions(client, timeout, keys),
        probe::election_permissions(client, timeout, keys),
        probe::semaphore_permissions(client, timeout, keys)
    );
    seen.refused = permissions.refused;
    seen.unchecked = permissions.unanswered;
    seen.refused_for_elections = election.refused;
    seen.unchecked.extend(election.unanswered);
    seen.refused_for_semaphores = semaphore.refused;
    seen.unchecked.extend(semaphore.unanswered);
    seen.clock_rate = clock::clock_rate(client, clock_window, timeout).await;
    let (_, quarantined_for) = node.admission().snapshot();
    seen.quarantined_for = quarantined_for;
    if node.admission().marker().is_none() && node.admission().is_checked() {
        seen.lost_data = Some(node.admission().lineage_why());
    }
    seen.excluded = node.admission().excluded();
    if let Some(Excluded::SameServerAs { index }) = &seen.excluded {
        seen.same_server_as = Some(*index);
    }
}
