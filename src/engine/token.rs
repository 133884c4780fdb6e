//! Lock tokens: 128 bits from the operating system's CSPRNG, one per acquisition attempt.
//!
//! The retry jitter uses a separate fast RNG (`rand::rng()`), so that nothing about a token
//! can be learned from timing and no token draws from a userspace generator.

use std::fmt;

use rand::rngs::OsRng;
use rand::TryRngCore;

use crate::Error;

const BYTES: usize = 16;

/// The unguessable value stored under a locked key: 32 lowercase hex digits (128 bits).
///
/// Only the holder knows it, so only the holder's compare-and-delete and compare-and-expire
/// scripts can touch the key.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Token([u8; BYTES * 2]);

impl Token {
    /// Draws a fresh token from the operating system's CSPRNG.
    pub(crate) fn generate() -> Result<Token, Error> {
        let mut raw = [0u8; BYTES];
        OsRng
            .try_fill_bytes(&mut raw)
            .map_err(|e| Error::Entropy(e.to_string()))?;
        Ok(Token::from_bytes(raw))
    }

    fn from_bytes(raw: [u8; BYTES]) -> Token {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut hex = [0u8; BYTES * 2];
        for (i, b) in raw.iter().enumerate() {
            hex[2 * i] = HEX[usize::from(b >> 4)];
            hex[2 * i + 1] = HEX[usize::from(b & 0x0f)];
        }
        Token(hex)
    }

    /// The token as stored in Redis.
    pub fn as_str(&self) -> &str {
        // Only ASCII hex digits are ever written into the array.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Shows only a prefix: enough to correlate logs, not enough to forge a release.
impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Token({}…)", &self.as_str()[..8])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_32_hex_digits_and_distinct() {
        let a = Token::generate().unwrap();
        let b = Token::generate().unwrap();
        assert_eq!(a.as_str().len(), 32);
        assert!(a.as_str().bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }

    #[test]
    fn hex_encoding_is_exact() {
        let t = Token::from_bytes([0x01, 0xab, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10]);
        assert_eq!(t.as_str(), "01abff00000000000000000000000010");
        assert_eq!(format!("{t:?}"), "Token(01abff00…)");
    }
}
