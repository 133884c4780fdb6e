//! The record of a node's quarantine, kept on the node (design 2.6a, "The quarantine is kept
//! on the node"): written, or read, by the QUARANTINE script. The rules are in
//! `algo/lineage/`.

use std::time::Duration;

use fred::clients::Client;
use fred::error::{Error as FredError, ErrorKind};
use fred::types::{Key, Value};

use crate::algo::keys;
use crate::algo::lineage::Recorded;
use crate::node::batch::eval::{run_script_if, sender};
use crate::node::scripts::QUARANTINE;

/// What the node answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Answer {
    /// Its marker is the running server's after all (re-seeded since the check read it).
    Marker(String),
    /// Its quarantine, as recorded on it.
    Recorded(Recorded),
}

/// Records the quarantine of a node whose server reported `run_id` and that may have lost
/// data, for a client whose longest ttl is `wait`, starting `age` before now if none of this
/// server is recorded yet (`lineage::record_age`); reads the one recorded otherwise, raising
/// its wait to `wait`. Sent on the connection being checked, under `timeout`.
pub(crate) async fn record(
    client: &Client,
    timeout: Duration,
    run_id: &str,
    wait: Duration,
    age: Duration,
) -> Result<Answer, FredError> {
    let keys = vec![
        Key::from_static_str(keys::NODE_KEY),
        Key::from_static_str(keys::QUARANTINE_KEY),
    ];
    let ms = |d: Duration| Value::Integer(i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let args = vec![Value::from(run_id), ms(wait), ms(age)];
    let sender = sender(client, timeout);
    answer(run_script_if(&sender, &QUARANTINE, keys, args, || true).await?)
}

/// Reads the script's reply: `{marker}` or `{start_ms, wait_ms, now_ms}`.
fn answer(reply: Value) -> Result<Answer, FredError> {
    let unexpected = |reply: &Value| {
        FredError::new(
            ErrorKind::Protocol,
            format!("QUARANTINE answered {reply:?}"),
        )
    };
    let Value::Array(values) = &reply else {
        return Err(unexpected(&reply));
    };
    let ms = |v: &Value| match v {
        Value::Integer(n) => u64::try_from(*n).ok(),
        _ => None,
    };
    match values.as_slice() {
        [marker] => marker
            .as_string()
            .map(Answer::Marker)
            .ok_or_else(|| unexpected(&reply)),
        [start, wait, now] => match (ms(start), ms(wait), ms(now)) {
            (Some(start), Some(wait), Some(now)) => {
                Ok(Answer::Recorded(Recorded::answered(start, wait, now)))
            }
            _ => Err(unexpected(&reply)),
        },
        _ => Err(unexpected(&reply)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scripts_replies_are_read_and_anything_else_refused() {
        let reply = Value::Array(vec![
            Value::Integer(1_000),
            Value::Integer(10_000),
            Value::Integer(3_500),
        ]);
        assert_eq!(
            answer(reply).unwrap(),
            Answer::Recorded(Recorded {
                elapsed: Duration::from_millis(2_500),
                wait: Duration::from_secs(10),
                start_ms: 1_000,
            })
        );
        let marker = Value::Array(vec![Value::from("abc:7")]);
        assert_eq!(answer(marker).unwrap(), Answer::Marker("abc:7".into()));
        // A clock that went back reads as a quarantine just started.
        let back = Value::Array(vec![
            Value::Integer(5_000),
            Value::Integer(10_000),
            Value::Integer(4_000),
        ]);
        assert!(matches!(answer(back), Ok(Answer::Recorded(r)) if r.elapsed.is_zero()));
        for junk in [
            Value::Null,
            Value::Integer(1),
            Value::Array(vec![]),
            Value::Array(vec![
                Value::Integer(-1),
                Value::Integer(1),
                Value::Integer(2),
            ]),
            Value::Array(vec![Value::Null]),
        ] {
            assert!(answer(junk.clone()).is_err(), "{junk:?}");
        }
    }
}
