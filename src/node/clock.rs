//! How fast a node's clock runs: `TIME` read at the start and the end of a window, each the
//! fastest of a few round trips (what `doctor` reports of a node's clock).

use std::time::{Duration, Instant};

use fred::clients::Client;
use fred::types::Value;

use crate::node::probe::command;
use crate::report::facts::ClockRate;

/// Measures the clock rate: the fastest of a few `TIME` round trips at the start and at the
/// end of `window`. A reading was taken somewhere between sending and receiving, so the rate
/// lies between `Δnode / (received₂ − sent₁)` and `Δnode / (sent₂ − received₁)`; a stall
/// widens that range instead of skewing the estimate unseen. `None` if `TIME` is refused or
/// unanswered.
pub(crate) async fn clock_rate(
    client: &Client,
    window: Duration,
    timeout: Duration,
) -> Option<ClockRate> {
    let first = fastest_time(client, timeout).await?;
    tokio::time::sleep(window).await;
    let second = fastest_time(client, timeout).await?;
    let node = second.node.checked_sub(first.node)?.as_secs_f64();
    let secs = |to: Instant, from| Some(to.checked_duration_since(from)?.as_secs_f64());
    let widest = secs(second.received, first.sent)?;
    let narrowest = secs(second.sent, first.received)?;
    let middle = secs(second.mid(), first.mid())?;
    (narrowest > 0.0 && middle > 0.0).then(|| ClockRate {
        rate: node / middle,
        low: node / widest,
        high: node / narrowest,
    })
}

/// One `TIME` reading and when it was asked for and answered.
#[derive(Debug, Clone, Copy)]
struct Reading {
    node: Duration,
    sent: Instant,
    received: Instant,
}

impl Reading {
    fn mid(&self) -> Instant {
        self.sent + self.received.duration_since(self.sent) / 2
    }
}

/// The reading with the shortest round trip of three.
async fn fastest_time(client: &Client, timeout: Duration) -> Option<Reading> {
    let mut best: Option<Reading> = None;
    for _ in 0..3 {
        let sent = Instant::now();
        let reply = command(client, "TIME", Vec::new(), timeout).await;
        let received = Instant::now();
        let Some(node) = reply.ok().and_then(node_time) else {
            continue;
        };
        let rtt = received.duration_since(sent);
        if best.is_none_or(|b| rtt < b.received.duration_since(b.sent)) {
            best = Some(Reading {
                node,
                sent,
                received,
            });
        }
    }
    best
}

/// `TIME`'s reply (seconds and microseconds) as a duration since the epoch; `None` for a
/// reply of another shape, or one too large to add up (a peer may answer anything).
pub(crate) fn node_time(reply: Value) -> Option<Duration> {
    let Value::Array(parts) = reply else {
        return None;
    };
    let [secs, micros] = parts.as_slice() else {
        return None;
    };
    let secs: u64 = secs.as_string()?.parse().ok()?;
    let micros: u64 = micros.as_string()?.parse().ok()?;
    Duration::from_secs(secs).checked_add(Duration::from_micros(micros))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn time_reply(secs: &str, micros: &str) -> Value {
        Value::Array(vec![Value::from(secs), Value::from(micros)])
    }

    #[test]
    fn a_time_reply_too_large_to_add_up_is_no_reading() {
        assert_eq!(
            node_time(time_reply("1700000000", "250")),
            Some(Duration::new(1_700_000_000, 250_000))
        );
        assert_eq!(
            node_time(time_reply(&u64::MAX.to_string(), "999999999")),
            None
        );
        assert_eq!(node_time(time_reply("x", "1")), None);
        assert_eq!(node_time(Value::from("OK")), None);
    }
}
