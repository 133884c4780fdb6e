//! Whether the RESP decoder under fred bounds the nesting depth of replies (design 6.2,
//! "Nested replies": what an unbounded one lets a node do, and the patched decoder of
//! `vendor/README.md`). This module finds out which decoder was linked, by decoding one reply
//! just past the bound, once per process, and says so where an application that logs nothing
//! still sees it: once on stderr ([`print_once`]).

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use crate::report::{Finding, Severity};

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

/// The commit of quorumlock's repository whose `vendor/redis-protocol` is the bounded decoder
/// this version builds with: the last commit that changed it. Pinned, so that the `[patch]`
/// of an application names one decoder, whatever the repository's branches become.
/// tests/config_decoder.rs checks that it is an ancestor of the checkout and that
/// `vendor/redis-protocol` has not changed since, and builds a new crate with the lines.
pub(crate) const DECODER_REV: &str = "0b9fcc9479391ee63da3f7ed43b1ac393f2bd4fc";

/// The `[patch]` section that gives an application the bounded decoder: the patched copy in
/// quorumlock's repository (`vendor/redis-protocol`, found there by its package name), at
/// [`DECODER_REV`].
pub(crate) fn patch_lines() -> String {
    format!(
        "[patch.crates-io]\nredis-protocol = {{ git = \"{}\", rev = \"{DECODER_REV}\" }}",
        env!("CARGO_PKG_REPOSITORY")
    )
}

/// What this build's decoder means for the process, as a finding: `None` when it bounds
/// nesting; when it does not, an unsafe finding that says what to add to the application's
/// `Cargo.toml`, where the patched crate comes from, and how to check. Self-contained: it is
/// logged by [`RedLockBuilder::build`](crate::RedLockBuilder::build) and printed by
/// `quorumlock doctor`, far from this repository's files.
pub(crate) fn finding(bounded: bool) -> Option<Finding> {
    if bounded {
        return None;
    }
    let message = format!(
        "this build's RESP decoder (redis-protocol, under fred) does not bound the nesting of \
         replies: one node that answers an array nested a few thousand levels deep overflows \
         the stack and aborts the whole process. quorumlock's repository builds with a \
         patched decoder, but a [patch] does not travel with a published crate: add these \
         lines to the Cargo.toml at the root of your application's workspace\n\n{}\n\n\
         (or copy vendor/redis-protocol from that commit of the repository into your project \
         and write `path = \"vendor/redis-protocol\"` instead of git and rev), run \
         `cargo update -p redis-protocol`, and check that `quorumlock::decoder_is_bounded()` \
         is true. The quorumlock binary gets the bounded decoder when installed from a \
         checkout of the repository: `cargo install --path . --features cli`",
        patch_lines()
    );
    Some(Finding::new(Severity::Unsafe, message))
}

/// Whether this process has printed the decoder's warning on stderr.
static PRINTED: AtomicBool = AtomicBool::new(false);

/// Prints `finding` (the unbounded decoder's) on stderr, the first time it is called in this
/// process only: an application that has no `tracing` subscriber sees it too. Called by
/// [`RedLockBuilder::build`](crate::RedLockBuilder::build) unless the application turned it
/// off ([`RedLockBuilder::decoder_warning`](crate::RedLockBuilder::decoder_warning)).
pub(crate) fn print_once(finding: &Finding) {
    print_once_to(&PRINTED, finding, &mut std::io::stderr().lock());
}

fn print_once_to(printed: &AtomicBool, finding: &Finding, out: &mut dyn Write) {
    if printed.swap(true, Ordering::Relaxed) {
        return;
    }
    // Nothing to do if stderr is closed: the finding is still logged and listed.
    let _ = writeln!(
        out,
        "quorumlock: warning: {}\n(printed once per process; turn it off with \
         RedLockBuilder::decoder_warning(false) or QUORUMLOCK_DECODER_WARNING=false)",
        finding.message
    );
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
    fn an_unbounded_decoder_is_an_unsafe_finding_with_the_patch_lines() {
        assert_eq!(finding(true), None);
        let unbounded = finding(false).expect("a finding");
        assert_eq!(unbounded.severity, Severity::Unsafe);
        for fragment in [
            "does not bound the nesting of replies",
            "aborts the whole process",
            "\n\n[patch.crates-io]\nredis-protocol = { git = \"https://github.com/quorumlock/quorumlock\", rev = \"0b9fcc9479391ee63da3f7ed43b1ac393f2bd4fc\" }\n\n",
            "the root of your application's workspace",
            "path = \"vendor/redis-protocol\"",
            "cargo update -p redis-protocol",
            "quorumlock::decoder_is_bounded()",
        ] {
            assert!(unbounded.message.contains(fragment), "{fragment}: {}", unbounded.message);
        }
        // Nothing in it points at a file that the published crate does not ship.
        assert!(!unbounded.message.contains("vendor/README.md"));
    }

    #[test]
    fn the_warning_is_printed_once_per_process() {
        let printed = AtomicBool::new(false);
        let unbounded = finding(false).expect("a finding");
        let mut out = Vec::new();
        print_once_to(&printed, &unbounded, &mut out);
        print_once_to(&printed, &unbounded, &mut out);
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.matches("quorumlock: warning: ").count(), 1, "{text}");
        assert!(text.contains(&patch_lines()), "{text}");
        assert!(
            text.ends_with(
                "turn it off with RedLockBuilder::decoder_warning(false) or \
                 QUORUMLOCK_DECODER_WARNING=false)\n"
            ),
            "{text}"
        );
    }

    /// The README's first screen and vendor/README.md give the same lines as the warning.
    #[test]
    fn the_readmes_give_the_same_patch_lines() {
        let block = format!("```toml\n{}\n```", patch_lines());
        assert!(include_str!("../../README.md").contains(&block));
        assert!(include_str!("../../vendor/README.md").contains(&block));
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
