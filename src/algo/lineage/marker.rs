//! A node's marker (`quorumlock:node`) and what it says of the node's data: [`Lineage`].

use std::fmt;

/// A marker's contents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Marker {
    /// The server process it was written in.
    pub(crate) run_id: String,
    /// Every fencing counter of the node reads as at least this.
    pub(crate) floor: u64,
    /// Written by whoever started the server empty (the testkit): the node has no past.
    pub(crate) fresh: bool,
}

impl Marker {
    /// Parses `RUN_ID:FLOOR` or `RUN_ID:FLOOR:new`; `None` for anything else.
    pub(crate) fn parse(text: &str) -> Option<Marker> {
        let mut parts = text.split(':');
        let run_id = parts.next().filter(|r| !r.is_empty())?;
        let floor = parts.next()?.parse().ok()?;
        let fresh = match parts.next() {
            None => false,
            Some("new") => true,
            Some(_) => return None,
        };
        if parts.next().is_some() {
            return None;
        }
        Some(Marker {
            run_id: run_id.to_string(),
            floor,
            fresh,
        })
    }

    /// A marker for a node just re-seeded.
    pub(crate) fn seeded(run_id: &str, floor: u64) -> Marker {
        Marker {
            run_id: run_id.to_string(),
            floor,
            fresh: false,
        }
    }
}

impl fmt::Display for Marker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.run_id, self.floor)?;
        if self.fresh {
            f.write_str(":new")?;
        }
        Ok(())
    }
}

/// What a node's marker says of its data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Lineage {
    /// The marker was written by the server now running: nothing was lost since. `text` is
    /// the marker as stored, which the counter-reading scripts compare with.
    Intact { text: String, marker: Marker },
    /// The node may have lost data, for the reason given.
    Lost { why: String },
}

impl Lineage {
    /// The marker of an intact node.
    pub(crate) fn intact(&self) -> Option<&str> {
        match self {
            Lineage::Intact { text, .. } => Some(text),
            Lineage::Lost { .. } => None,
        }
    }
}

/// Reads a node's marker (`None`: no marker) against the run_id the server reports now
/// (`None`: the server did not tell).
pub(crate) fn lineage(marker: Option<&str>, run_id: Option<&str>) -> Lineage {
    let lost = |why: String| Lineage::Lost { why };
    let Some(run_id) = run_id else {
        return lost(
            "the server does not tell its run_id (INFO refused), so a restart \
                     cannot be detected"
                .into(),
        );
    };
    let Some(text) = marker else {
        return lost(
            "it holds no quorumlock:node marker: it lost its data (restarted \
                     without it, flushed) or was never used by quorumlock"
                .into(),
        );
    };
    match Marker::parse(text) {
        None => lost(format!("its quorumlock:node marker is not one ({text:?})")),
        Some(m) if m.run_id != run_id => lost(format!(
            "it restarted or was replaced since its marker was written (run_id {} -> {}), \
             and may have lost writes",
            short(&m.run_id),
            short(run_id)
        )),
        Some(marker) => Lineage::Intact {
            text: text.to_string(),
            marker,
        },
    }
}

/// The first 8 characters of a run_id, for messages.
fn short(run_id: &str) -> &str {
    run_id.get(..8).unwrap_or(run_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUN: &str = "0123456789abcdef0123456789abcdef01234567";
    const OTHER: &str = "ffffffffffffffff0123456789abcdef01234567";

    #[test]
    fn markers_round_trip_and_junk_is_refused() {
        for text in [format!("{RUN}:0"), format!("{RUN}:1732400000000000:new")] {
            let m = Marker::parse(&text).expect("a marker");
            assert_eq!(m.to_string(), text);
        }
        assert_eq!(
            Marker::parse(&format!("{RUN}:42")),
            Some(Marker::seeded(RUN, 42))
        );
        for junk in [
            "",
            ":1",
            "abc",
            "abc:",
            "abc:x",
            "abc:1:old",
            "abc:1:new:x",
            "abc:-1",
        ] {
            assert_eq!(Marker::parse(junk), None, "{junk:?}");
        }
    }

    #[test]
    fn only_a_marker_of_the_running_server_is_intact() {
        let mine = format!("{RUN}:7");
        assert_eq!(
            lineage(Some(&mine), Some(RUN)).intact(),
            Some(mine.as_str())
        );
        let cases = [
            (None, Some(RUN), "holds no quorumlock:node marker"),
            (
                Some(mine.as_str()),
                Some(OTHER),
                "run_id 01234567 -> ffffffff",
            ),
            (Some(mine.as_str()), None, "does not tell its run_id"),
            (Some("garbage"), Some(RUN), "is not one"),
        ];
        for (marker, run_id, why) in cases {
            match lineage(marker, run_id) {
                Lineage::Lost { why: said } => assert!(said.contains(why), "{said}"),
                intact => panic!("{marker:?} / {run_id:?}: {intact:?}"),
            }
        }
    }
}
