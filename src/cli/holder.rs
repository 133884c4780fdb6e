//! The one id by which every command names a holder (`status`, `ls`, `release`, their text
//! and their JSON): the first 12 hex digits of the SHA1 of its token. Enough to tell holders
//! apart and to match one across commands; never the token itself, which stays secret, since
//! whoever has it can release the lock.

/// How many hex digits of the SHA1 a holder id keeps.
const DIGITS: usize = 12;

/// The holder id of `token`.
pub(super) fn holder_id(token: &str) -> String {
    of_sha1(&fred::util::sha1_hash(token))
}

/// The holder id of a token whose SHA1 the library gave (40 hex digits, as
/// [`PermitHolder::token_sha1`](quorumlock::PermitHolder::token_sha1)).
pub(super) fn of_sha1(sha1: &str) -> String {
    sha1.chars().take(DIGITS).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holder_is_named_by_the_start_of_its_tokens_sha1() {
        assert_eq!(holder_id("abc"), "a9993e364706");
        let sha1 = fred::util::sha1_hash("abc");
        assert_eq!(sha1.len(), 40);
        assert_eq!(of_sha1(&sha1), holder_id("abc"));
    }
}
