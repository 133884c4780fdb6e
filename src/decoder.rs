//! Whether the RESP decoder under fred bounds the nesting depth of replies.
//!
//! The decoder (redis-protocol) is recursive: without a bound, a node that answers an array
//! nested a few thousand levels deep overflows the stack of the task that decodes it, which
//! aborts the process. This repository builds with a patched decoder that refuses more than
//! 32 levels (`vendor/README.md`); an application that depends on the published crate gets the
//! patch only if it applies it too. This module finds out which decoder was linked, by
//! decoding one reply just past the bound, once per process.

use std::sync::OnceLock;

// The decoder probed below must be the one fred decodes replies with: this does not compile
// if fred links a different redis-protocol crate (another major version) than quorumlock.
const _: fn(fred::types::RespVersion) -> redis_protocol::resp3::types::RespVersion = |v| v;

/// The patched decoder's bound: a reply nested one level deeper must be refused.
const PROBE_DEPTH: usize = 33;

/// Whether the linked decoder refuses deeply nested replies (the patched one does). When it
/// does not, a hostile node can abort the process; [`RedLock`](crate::RedLock) warns when it
/// is built, and `quorumlock doctor` reports it.
pub fn decoder_is_bounded() -> bool {
    static BOUNDED: OnceLock<bool> = OnceLock::new();
    *BOUNDED.get_or_init(probe)
}

fn probe() -> bool {
    let mut reply = b"*1\r\n".repeat(PROBE_DEPTH);
    reply.extend_from_slice(b":1\r\n");
    // 33 levels take about 660 KiB of stack in a debug build: decode on a thread of our own
    // rather than on whatever stack the caller has.
    std::thread::Builder::new()
        .name("quorumlock-decoder-probe".into())
        .stack_size(8 << 20)
        .spawn(move || redis_protocol::resp2::decode::decode(&reply).is_err())
        .ok()
        .and_then(|thread| thread.join().ok())
        // A thread could not be started: assume the worst.
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fails if this repository is built without the patched decoder (vendor/README.md).
    #[test]
    fn this_build_has_the_bounded_decoder() {
        assert!(decoder_is_bounded());
    }

    #[test]
    fn replies_nested_within_the_bound_still_decode() {
        let mut reply = b"*1\r\n".repeat(PROBE_DEPTH - 1);
        reply.extend_from_slice(b":1\r\n");
        assert!(matches!(
            redis_protocol::resp2::decode::decode(&reply),
            Ok(Some(_))
        ));
    }
}
