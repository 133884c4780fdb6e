//! What `run` would meet before any key matters: whether enough nodes count to decide a
//! lock. `status` asks a client of its own, checked as `run`'s is and after the same wait
//! ([`RedLock::wait_for_quorum`], then [`RedLock::quarantine_left`]), so that it does not
//! say `free` where `run` cannot lock.

use std::time::Duration;

use humantime::format_duration;
use quorumlock::{ConfigError, RedLock};

use super::super::exit::{whole_secs, UNAVAILABLE};

/// Whether the nodes' votes would count for `run` now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Counting {
    /// A quorum counts: the keys decide.
    Now,
    /// The nodes' quarantine (they may have lost data) keeps them from a quorum for this
    /// long, as they tell it.
    Quarantined(Duration),
    /// Too few nodes count, however long one waits: down, not checked within the connect
    /// timeout, refusing what the client needs, replicas.
    NoQuorum,
}

impl Counting {
    /// Waits, as `run` does, up to the connect timeout for a quorum of `redlock`'s nodes to
    /// be connected and checked, then tells whether it counts.
    ///
    /// # Errors
    /// [`ConfigError::SameServer`] for two URLs of one server, as `run` refuses them.
    pub(super) async fn of(redlock: &RedLock) -> Result<Counting, ConfigError> {
        redlock
            .wait_for_quorum(redlock.config().connect_timeout())
            .await;
        redlock.check_distinct()?;
        Ok(match redlock.quarantine_left() {
            Some(left) if left.is_zero() => Counting::Now,
            Some(left) => Counting::Quarantined(left),
            None => Counting::NoQuorum,
        })
    }

    /// Seconds until a quorum counts, as `doctor --json`'s `quorum_in_s`: 0 now, `None`
    /// when it cannot.
    pub(super) fn quorum_in_s(self) -> Option<f64> {
        match self {
            Counting::Now => Some(0.0),
            Counting::Quarantined(left) => Some(left.as_millis() as f64 / 1000.0),
            Counting::NoQuorum => None,
        }
    }

    /// Where no quorum counts now: the verdict, the exit code `run -n` would give, and what
    /// the summary line says after the resource, of `nodes` nodes with a quorum of `quorum`.
    pub(super) fn unavailable(
        self,
        quorum: usize,
        nodes: usize,
    ) -> Option<(&'static str, u8, String)> {
        match self {
            Counting::Now => None,
            Counting::Quarantined(left) => Some((
                "quarantined",
                UNAVAILABLE,
                format!(
                    "quarantined: the nodes' quarantine keeps them from a quorum and ends in \
                     {}: `run -n` exits {UNAVAILABLE} until then",
                    format_duration(whole_secs(left))
                ),
            )),
            Counting::NoQuorum => Some((
                "no_quorum",
                UNAVAILABLE,
                format!(
                    "no quorum: fewer than {quorum} of {nodes} nodes count (down, refusing \
                     the client, replicas): `run` exits {UNAVAILABLE}, `quorumlock doctor` \
                     tells why"
                ),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_quorum_that_counts_now_leaves_the_verdict_to_the_keys() {
        assert_eq!(Counting::Now.unavailable(2, 3), None);
        assert_eq!(Counting::Now.quorum_in_s(), Some(0.0));
        let quarantined = Counting::Quarantined(Duration::from_millis(8_200));
        assert_eq!(quarantined.quorum_in_s(), Some(8.2));
        let (verdict, code, says) = quarantined.unavailable(2, 3).unwrap_or_default();
        assert_eq!((verdict, code), ("quarantined", 69));
        assert!(says.contains("ends in 9s: `run -n` exits 69"), "{says}");
        assert_eq!(Counting::NoQuorum.quorum_in_s(), None);
        let (verdict, code, says) = Counting::NoQuorum.unavailable(3, 5).unwrap_or_default();
        assert_eq!((verdict, code), ("no_quorum", 69));
        assert!(
            says.starts_with("no quorum: fewer than 3 of 5 nodes"),
            "{says}"
        );
    }
}
