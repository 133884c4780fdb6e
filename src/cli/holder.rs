//! The one id by which every command names a holder (`status`, `ls`, `release`, their text
//! and their JSON): the first 12 hex digits of the SHA1 of its token. Enough to tell holders
//! apart and to match one across commands; never the token itself, which stays secret, since
//! whoever has it can release the lock.

/// How many hex digits of the SHA1 a holder id keeps.
const DIGITS: usize = 12;

/// The holder id of `token`.
pub(super) fn holder_id(token: &str) -> String {
    fred::util::sha1_hash(token)[..DIGITS].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holder_is_named_by_the_start_of_its_tokens_sha1() {
        assert_eq!(holder_id("abc"), "a9993e364706");
    }
}
