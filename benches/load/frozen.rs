//! Freezing nodes (SIGSTOP) and resuming them, and releasing with nodes frozen: shared by
//! workloads d and e (faults.rs) and f (majority.rs).

use quorumlock::testkit::{LocalQuorum, NodeState};

use crate::impls::{Clients, Held};

/// Freezes nodes `0..n` (those not frozen yet).
pub(crate) fn freeze(quorum: &mut LocalQuorum, n: usize) {
    for i in 0..n {
        if quorum.node(i).state() == NodeState::Running {
            quorum.node_mut(i).freeze().expect("SIGSTOP");
        }
    }
}

/// Resumes every frozen node.
pub(crate) fn resume(quorum: &mut LocalQuorum) {
    for node in quorum.nodes_mut() {
        if node.state() == NodeState::Frozen {
            node.resume().expect("SIGCONT");
        }
    }
}

/// Releases `held`; rslock's release with a frozen node waits for its response timeout, so
/// it goes to the background then (the caller awaits the handles before resuming).
pub(crate) async fn release(
    clients: &Clients,
    held: Held,
    frozen: usize,
    background: &mut Vec<tokio::task::JoinHandle<()>>,
) {
    match held {
        Held::Rslock(lock) if frozen > 0 => {
            let manager = clients.rslock.clone();
            background.push(tokio::spawn(async move { manager.unlock(&lock).await }));
        }
        held => {
            clients.release(held).await;
        }
    }
}
