//! The batch script's reply read back: one answer per call, then the node's marker and
//! quarantine record as they are once every call ran (`held!` in `scripts/batched.rs`). The
//! votes count only if the node still holds what its check found.

use fred::clients::Client;
use fred::error::{Error as FredError, ErrorKind};
use fred::types::Value;

use super::call::{Call, Failure};
use crate::node::admission::Admission;

/// The batch script's reply, read: the calls' answers, then what the node holds under its
/// marker and its quarantine record (`None` for none).
#[derive(Debug)]
pub(super) struct Reply {
    answers: Vec<Value>,
    marker: Option<String>,
    record: Option<String>,
}

impl Reply {
    /// Reads the reply to `calls` calls: an array of their answers and the two read back, or
    /// a protocol error for anything else.
    pub(super) fn read(reply: Value, calls: usize) -> Result<Reply, FredError> {
        match reply {
            Value::Array(mut answers) if answers.len() == calls + 2 => {
                let record = answers.pop().and_then(|v| v.into_string());
                let marker = answers.pop().and_then(|v| v.into_string());
                Ok(Reply {
                    answers,
                    marker,
                    record,
                })
            }
            other => Err(FredError::new(
                ErrorKind::Protocol,
                format!("unexpected reply to the batch script: {other:?}"),
            )),
        }
    }

    /// Answers each call with its element: a vote is refused if the node no longer holds
    /// what its check found (`votes`: the batch carried votes), and an `ERR ...` string is
    /// the call's own error.
    pub(super) fn answer(
        self,
        client: &Client,
        admission: &Admission,
        votes: bool,
        calls: &mut [Call],
    ) {
        // The votes count only if the node still holds what its check found: a flush under
        // this connection is seen here, or by no one (`lineage::still_checked`).
        let lost = if votes {
            admission
                .still_checked(client, self.marker.as_deref(), self.record.as_deref())
                .err()
        } else {
            None
        };
        for (call, answer) in calls.iter_mut().zip(self.answers) {
            if let (Some(excluded), true) = (&lost, call.vote) {
                call.answer(Err(Failure::Excluded(excluded.clone())));
                continue;
            }
            let answer = match answer {
                Value::String(text) if text.starts_with("ERR ") => Err(Failure::Node(
                    FredError::new(ErrorKind::Unknown, text[4..].to_string()),
                )),
                answer => Ok(answer),
            };
            call.answer(answer);
        }
    }
}
