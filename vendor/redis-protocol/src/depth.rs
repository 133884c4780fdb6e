//! A bound on the nesting depth of decoded frames.
//!
//! Patched in by quorumlock (see `vendor/README.md` in the quorumlock repository). The
//! decoders are recursive descent parsers: without a bound, a peer that sends an aggregate
//! nested a few thousand levels deep (`*1\r\n` repeated, 20 KB) overflows the stack of the
//! task that decodes it, and a stack overflow aborts the whole process. With it, such a reply
//! is a parse error, and the client closes that connection.

use crate::error::RedisParseError;
use core::cell::Cell;

/// The deepest nesting of aggregate frames (arrays, maps, sets, pushes, attributes) that the
/// decoders accept. Redis replies nest a few levels (streams, COMMAND DOCS: 4 to 6). Measured
/// stack per level: under 2 KB in a release build, 16 to 20 KB in a debug build, so 32 levels
/// stay under 1 MiB even in a debug build on a 2 MiB Tokio worker stack.
pub const MAX_DEPTH: usize = 32;

std::thread_local! {
  static DEPTH: Cell<usize> = const { Cell::new(0) };
}

/// Held while an aggregate frame's elements are decoded; counts one level of nesting.
pub(crate) struct Nested(());

impl Nested {
  /// Enters one more level, or fails when that would pass [`MAX_DEPTH`].
  pub(crate) fn enter<I>() -> Result<Nested, RedisParseError<I>> {
    DEPTH.with(|depth| {
      let level = depth.get();
      if level >= MAX_DEPTH {
        Err(RedisParseError::new_custom(
          "nesting",
          "Frames nested too deeply.",
        ))
      } else {
        depth.set(level + 1);
        Ok(Nested(()))
      }
    })
  }
}

impl Drop for Nested {
  fn drop(&mut self) {
    DEPTH.with(|depth| depth.set(depth.get().saturating_sub(1)));
  }
}

#[cfg(all(test, feature = "bytes"))]
mod tests {
  use super::MAX_DEPTH;
  use bytes::BytesMut;

  fn nested(depth: usize) -> BytesMut {
    let mut buf = BytesMut::from(&b"*1\r\n".repeat(depth)[..]);
    buf.extend_from_slice(b":1\r\n");
    buf
  }

  #[test]
  fn frames_nested_up_to_the_bound_decode() {
    let buf = nested(MAX_DEPTH);
    assert!(crate::resp2::decode::decode_bytes_mut(&mut buf.clone()).unwrap().is_some());
    assert!(crate::resp3::decode::streaming::decode_bytes_mut(&mut buf.clone()).unwrap().is_some());
  }

  #[test]
  fn frames_nested_deeper_are_an_error_not_a_stack_overflow() {
    for depth in [MAX_DEPTH + 1, 5_000, 1_000_000] {
      let buf = nested(depth);
      assert!(crate::resp2::decode::decode_bytes_mut(&mut buf.clone()).is_err());
      assert!(crate::resp3::decode::streaming::decode_bytes_mut(&mut buf.clone()).is_err());
      assert!(crate::resp3::decode::complete::decode_bytes_mut(&mut buf.clone()).is_err());
    }
  }
}
