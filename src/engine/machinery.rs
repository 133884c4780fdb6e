//! What a held claim needs of its client, and no more: the fan-out of rounds to the nodes
//! (`engine/fanout.rs`) and the registries the claim is entered in or reads (held locks,
//! waiters, fencing hints, the keeper), with the settings its rounds check. A
//! [`Coordinator`](crate::engine::coordinator::Coordinator) keeps one, and so does every
//! held claim; the client's counters and its nodes' fleet stay with the coordinator.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::config::Config;
use crate::engine::claim::Keys;
use crate::engine::fanout::Fanout;
use crate::engine::fence_state::Hints;
use crate::engine::held::{Held, Ident};
use crate::engine::holdings::Holdings;
use crate::engine::keeper::Keeper;
use crate::engine::waiters::Wakeups;
use crate::node::Node;

/// The fan-out and the registries of one client, shared by the client and its held claims.
#[derive(Debug)]
pub(crate) struct Machinery {
    config: Config,
    /// Every node, and the rounds sent to them.
    fanout: Fanout,
    /// The task that extends this client's kept locks, started with the first one.
    keeper: Keeper<Held>,
    /// The locks this client holds, for its shutdown (`engine/holdings.rs`).
    held: Holdings<Ident>,
    /// The waiters for releases, by key (see `engine/waiters.rs`).
    wakeups: Arc<Wakeups>,
    /// Set once a fencing token of one of this client's locks was asked for: from then on,
    /// acquisitions of one resource read the fencing counters too, and record the token this
    /// client expects next where they can (see `Locking` in `engine/coordinator.rs`).
    tokens_asked: AtomicBool,
    /// The hints of its acquisitions' fencing tokens (`engine/fence_state.rs`).
    hints: Hints,
}

impl AsRef<[Node]> for Machinery {
    fn as_ref(&self) -> &[Node] {
        self.fanout.nodes()
    }
}

impl Machinery {
    /// A client's machinery, with empty registries.
    pub(crate) fn new(config: Config, fanout: Fanout, wakeups: Arc<Wakeups>) -> Machinery {
        Machinery {
            config,
            fanout,
            keeper: Keeper::default(),
            held: Holdings::default(),
            wakeups,
            tokens_asked: AtomicBool::new(false),
            hints: Hints::default(),
        }
    }

    pub(crate) fn config(&self) -> &Config {
        &self.config
    }

    /// The fan-out of rounds to every node.
    pub(crate) fn fanout(&self) -> &Fanout {
        &self.fanout
    }

    pub(crate) fn node_list(&self) -> &[Node] {
        self.fanout.nodes()
    }

    pub(crate) fn nodes(&self) -> usize {
        self.node_list().len()
    }

    pub(crate) fn keeper(&self) -> &Keeper<Held> {
        &self.keeper
    }

    pub(crate) fn held(&self) -> &Holdings<Ident> {
        &self.held
    }

    pub(crate) fn wakeups(&self) -> &Arc<Wakeups> {
        &self.wakeups
    }

    pub(crate) fn hints(&self) -> &Hints {
        &self.hints
    }

    /// Notes that a fencing token of one of this client's locks was asked for.
    pub(crate) fn token_asked(&self) {
        if !self.tokens_asked.load(Ordering::Relaxed) {
            self.tokens_asked.store(true, Ordering::Relaxed);
        }
    }

    /// Whether a fencing token of one of this client's locks was asked for.
    pub(crate) fn tokens_asked(&self) -> bool {
        self.tokens_asked.load(Ordering::Relaxed)
    }

    /// Whether an acquisition of `keys` reads their fencing counters (see `Locking`).
    pub(crate) fn reads_counters(&self, keys: &Keys) -> bool {
        keys.fencing() && (keys.locks > 1 || self.tokens_asked())
    }
}
