//! The Lua scripts, in one place. Each runs atomically on one node and touches the key only
//! while it still holds our token, so a holder can never delete or extend a lock that
//! expired and was taken by someone else.
//!
//! They are called with EVALSHA; a node that answers NOSCRIPT (restarted, or SCRIPT FLUSH)
//! gets the script body once with EVAL, which also caches it there again.

/// Compare-and-delete: `DEL key` if its value is our token. Returns 1 if deleted, else 0.
pub(crate) const RELEASE: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then \
return redis.call('del', KEYS[1]) else return 0 end";

/// Compare-and-pexpire: `PEXPIRE key ttl_ms` if its value is our token. Returns 1 if
/// extended, else 0.
pub(crate) const EXTEND: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then \
return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end";

/// A script and its SHA1, computed once.
#[derive(Debug)]
pub(crate) struct Script {
    pub(crate) body: &'static str,
    pub(crate) sha: String,
}

impl Script {
    pub(crate) fn new(body: &'static str) -> Script {
        Script {
            body,
            sha: fred::util::sha1_hash(body),
        }
    }
}

/// Whether a node's error means "that SHA is not cached here" (fred has no ErrorKind for it).
pub(crate) fn is_noscript(err: &fred::error::Error) -> bool {
    err.details().starts_with("NOSCRIPT")
}
