//! Who leads an election (design 2.8): [`leader`] reads the lock and the identity record on
//! every node and reports what a majority agrees on; [`observe`] polls it.

use std::fmt;
use std::time::Duration;

use fred::types::{Key, Value};
use futures::Stream;

use crate::algo::quorum::Tally;
use crate::engine::coordinator::Coordinator;
use crate::engine::election::{election_keys, parse_record};
use crate::engine::held;
use crate::error::{ConfigError, Error, NodeError};
use crate::node::scripts::OBSERVE;
use crate::node::Node;

/// Who leads an election, as a majority of nodes reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leader {
    /// The identity the leader chose ([`Candidacy::identity`](crate::Candidacy::identity)).
    pub identity: String,
    /// The leader's term: its fencing token, greater than every earlier term.
    pub term: u64,
    /// How many nodes agreed.
    pub nodes: usize,
}

impl fmt::Display for Leader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (term {})", self.identity, self.term)
    }
}

/// Who leads the election `name`, as a majority of `client`'s nodes reports it.
pub(crate) async fn leader(client: &Coordinator, name: &str) -> Result<Option<Leader>, Error> {
    if name.is_empty() {
        return Err(ConfigError::EmptyResource.into());
    }
    let (lock_key, identity_key) = election_keys(client, name);
    let keys = vec![lock_key, identity_key];
    let answers = futures::future::join_all(
        client
            .node_list()
            .iter()
            .map(|node| observe_node(node, keys.clone())),
    )
    .await;
    let mut seen: Vec<((u64, String), usize)> = Vec::new();
    let mut failures = Vec::new();
    // Those that answered are its yes: a majority of them must.
    let mut tally = Tally::presuming(client.node_list().len(), 0);
    for answer in answers {
        match answer {
            Err(e) => failures.push(e),
            Ok(view) => {
                tally.yes += 1;
                let Some(leader) = view else { continue };
                match seen.iter_mut().find(|(l, _)| *l == leader) {
                    Some((_, n)) => *n += 1,
                    None => seen.push((leader, 1)),
                }
            }
        }
    }
    if tally.yes < tally.quorum() {
        return Err(held::unheld(name, tally, failures, false));
    }
    Ok(seen
        .into_iter()
        .find(|(_, n)| *n >= tally.quorum())
        .map(|((term, identity), nodes)| Leader {
            identity,
            term,
            nodes,
        }))
}

/// Polls who leads the election `name` every `every`, reporting each change.
pub(crate) fn observe(
    client: &Coordinator,
    name: &str,
    every: Duration,
) -> impl Stream<Item = Result<Option<Leader>, Error>> + Send + 'static {
    let (client, name) = (client.clone(), name.to_string());
    let every = every.max(Duration::from_millis(1));
    // The last report, compared without the count of agreeing nodes.
    let last: Option<Result<Option<(u64, String)>, String>> = None;
    futures::stream::unfold(
        (client, name, last, true),
        move |(client, name, mut last, first)| async move {
            if !first {
                tokio::time::sleep(every).await;
            }
            loop {
                let seen = leader(&client, &name).await;
                let key = match &seen {
                    Ok(leader) => Ok(leader.as_ref().map(|l| (l.term, l.identity.clone()))),
                    Err(e) => Err(error_kind(e)),
                };
                if last.as_ref() != Some(&key) {
                    last = Some(key);
                    return Some((seen, (client, name, last, false)));
                }
                tokio::time::sleep(every).await;
            }
        },
    )
}

/// An error as [`observe`] compares them: by kind, not by the nodes' messages.
fn error_kind(e: &Error) -> String {
    match e {
        Error::NoQuorum { .. } => "no quorum".into(),
        other => other.to_string(),
    }
}

/// What one node says leads: `(term, identity)` when its lock key holds the token whose
/// hash its identity record names.
async fn observe_node(node: &Node, keys: Vec<Key>) -> Result<Option<(u64, String)>, NodeError> {
    node.eval(&OBSERVE, keys, Vec::new(), |reply| {
        let parts = match &reply {
            Value::Array(parts) if parts.len() == 2 => parts,
            _ => return Err(crate::node::unexpected("OBSERVE", &reply)),
        };
        let (sha, record) = (parts[0].as_string(), parts[1].as_string());
        Ok(match (sha, record) {
            (Some(sha), Some(record)) => match parse_record(&record) {
                Some((term, hash, identity)) if hash == sha => Some((term, identity.to_string())),
                _ => None,
            },
            _ => None,
        })
    })
    .await
}
