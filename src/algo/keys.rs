//! The key namespace: every key and channel quorumlock writes, reads or listens to, and its
//! shape. A lock's key is the resource's name after the configured prefix (none by default),
//! so that other Redlock clients interoperate; everything else quorumlock keeps lives under
//! `quorumlock:`, which resources may not use for the keys it derives from them.

/// The prefix of the fencing counters' keys: `quorumlock:fence:` + the lock's key.
pub(crate) const FENCE_PREFIX: &str = "quorumlock:fence:";

/// The prefix of election identity keys: `quorumlock:leader:` + the lock's key (its key
/// prefix and the election's name).
pub(crate) const IDENTITY_PREFIX: &str = "quorumlock:leader:";

/// The prefix of the release channels: `quorumlock:released:` + the lock's key.
pub(crate) const CHANNEL_PREFIX: &str = "quorumlock:released:";

/// The key of a node's marker (design 2.6a, `algo::lineage`).
pub(crate) const NODE_KEY: &str = "quorumlock:node";

/// The key of the record of a node's quarantine, while it lasts (design 2.6a,
/// `algo::lineage::Recorded`).
pub(crate) const QUARANTINE_KEY: &str = "quorumlock:quarantine";

/// The key of a node's largest fencing counter.
pub(crate) const HWM_KEY: &str = "quorumlock:hwm";

/// What the permission probes put after the key prefix of the keys they try.
pub(crate) const PROBE_INFIX: &str = "quorumlock:probe:";

/// A lock's key: the configured prefix and the resource's name.
pub(crate) fn lock_key(prefix: &str, resource: &str) -> String {
    format!("{prefix}{resource}")
}

/// The fencing counter of the lock whose key is `lock`.
pub(crate) fn fence_key(lock: &str) -> String {
    format!("{FENCE_PREFIX}{lock}")
}

/// The election identity record beside the lock whose key is `lock`.
pub(crate) fn identity_key(lock: &str) -> String {
    format!("{IDENTITY_PREFIX}{lock}")
}

/// The channel a release of the lock whose key is `lock` is announced on.
pub(crate) fn release_channel(lock: &str) -> String {
    format!("{CHANNEL_PREFIX}{lock}")
}

/// Whether `key` is one quorumlock keeps for itself (a fencing counter, an identity record,
/// a node's marker or largest counter, a permission probe's key), never a lock's key.
pub(crate) fn is_internal(key: &str) -> bool {
    is_reserved(key)
        || [NODE_KEY, HWM_KEY, QUARANTINE_KEY].contains(&key)
        || key.contains(PROBE_INFIX)
}

/// Whether a lock key would collide with the keys quorumlock derives from lock keys.
pub(crate) fn is_reserved(lock: &str) -> bool {
    lock.starts_with(FENCE_PREFIX) || lock.starts_with(IDENTITY_PREFIX)
}

/// A probe's key: under the configured prefix, with a random `tag` drawn by the caller.
pub(crate) fn probe_key(prefix: &str, tag: u128) -> String {
    format!("{prefix}{PROBE_INFIX}{tag:032x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_keys_are_told_from_lock_keys() {
        for key in [
            fence_key("job"),
            identity_key("app:scheduler"),
            NODE_KEY.to_string(),
            HWM_KEY.to_string(),
            QUARANTINE_KEY.to_string(),
            probe_key("app:", 7),
        ] {
            assert!(is_internal(&key), "{key}");
        }
        for key in ["job", "app:invoice:42", "quorumlock", "quorumlock:hwm:x"] {
            assert!(!is_internal(key), "{key}");
        }
    }

    #[test]
    fn derived_keys_are_reserved_and_lock_keys_are_not() {
        let lock = lock_key("app:", "invoice:42");
        assert_eq!(lock, "app:invoice:42");
        assert_eq!(fence_key(&lock), "quorumlock:fence:app:invoice:42");
        assert_eq!(identity_key(&lock), "quorumlock:leader:app:invoice:42");
        assert_eq!(release_channel(&lock), "quorumlock:released:app:invoice:42");
        assert!(!is_reserved(&lock));
        assert!(is_reserved(&fence_key(&lock)));
        assert!(is_reserved(&identity_key(&lock)));
        assert!(!is_reserved(NODE_KEY));
        assert_eq!(
            probe_key("p:", 1),
            "p:quorumlock:probe:00000000000000000000000000000001"
        );
    }
}
