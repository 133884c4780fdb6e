//! The locks' scripts: acquisition (ACQUIRE, and SET_NX run inline by the batch script),
//! fencing (PEEK, FENCE), extension and restoration (EXTEND, RESTORE), release (RELEASE,
//! DISCARD) and HANDOVER, with the Lua pieces they share (`largest_counter!`,
//! `raise_counters!`, `announce!`, `compare_and_delete!`).

/// Lua that sets `fence` to what the node's fencing counters among `KEYS[n+1..#KEYS-2]` read
/// as: the largest of them and of the node's floor, 0 when there are no counters (no fencing)
/// or none exists yet; -1 when the node's marker (`KEYS[#KEYS-1]`) is not the one the client
/// checked (`ARGV[#ARGV]`; design 2.6a, "Atomic use"). Read with one `MGET`; an error reply
/// if a counter is not a number. A macro, so that the scripts stay string literals.
macro_rules! largest_counter {
    () => {
        r"local fence = 0
if #KEYS > n then
  local m = redis.call('get', KEYS[#KEYS - 1])
  if m ~= ARGV[#ARGV] then
    fence = -1
  else
    fence = tonumber(string.match(m, '^[^:]+:(%d+)')) or 0
    for i, v in ipairs(redis.call('mget', unpack(KEYS, n + 1, #KEYS - 2))) do
      if v then
        local c = tonumber(v)
        if not c then return redis.error_reply('quorumlock: fencing counter ' .. KEYS[n + i] .. ' is not a number') end
        if c > fence then fence = c end
      end
    end
  end
end
"
    };
}

/// Lua that raises each fencing counter among `KEYS[n+1..#KEYS-2]`, and the node's largest
/// counter (`KEYS[#KEYS]`, `algo/lineage/`), to at least `ARGV[$at]` (never lowers one).
macro_rules! raise_counters {
    ($at:literal) => {
        concat!(
            "local f = tonumber(ARGV[",
            $at,
            r"])
for i = n + 1, #KEYS do
  if i ~= #KEYS - 1 then
    local c = tonumber(redis.call('get', KEYS[i]) or '0')
    if not c or c < f then redis.call('set', KEYS[i], ARGV[",
            $at,
            r"]) end
  end
end
"
        )
    };
}

/// Lua that announces the release of key `$key` on its channel (`quorumlock:released:` + the
/// key, `algo/keys.rs`) with the token's SHA1 `$hash`, for the clients that wait for it
/// (`engine/waiters.rs`). A `pcall`: a user whose ACL forbids `PUBLISH` still releases.
/// RELEASE and the batch script's release of one key.
macro_rules! announce {
    ($key:literal, $hash:literal) => {
        concat!(
            "redis.pcall('publish', 'quorumlock:released:' .. ",
            $key,
            ", ",
            $hash,
            ")\n"
        )
    };
}

/// Compare-and-delete of every key that holds any of the tokens in `ARGV` (every `$step`-th
/// argument from the first), running `$deleted` (Lua) after each delete; returns how many
/// keys were deleted. RELEASE and DISCARD.
macro_rules! compare_and_delete {
    ($step:literal, $deleted:expr) => {
        concat!(
            r"local n = 0
for i = 1, #KEYS do
  local v = redis.call('get', KEYS[i])
  for j = 1, #ARGV, ",
            $step,
            r" do
    if v == ARGV[j] then
      n = n + redis.call('del', KEYS[i])
",
            $deleted,
            r"      break
    end
  end
end
return n"
        )
    };
}

/// ACQUIRE (design 3.1's table), which given a hint also records a fencing token in the same
/// round. `ARGV = [token, ttl_ms, n, hint, marker]`. The counters read as `largest_counter!`
/// says (-1 when the marker is not `marker`), as they were before this call; if that is below
/// `hint`, every counter, and the node's largest, is raised to `hint` (`raise_counters!`): the
/// token `hint` is then recorded here, as FENCE would record it (`engine/fencing.rs`). A hint
/// of 0 records nothing.
pub(crate) const ACQUIRE: &str = concat!(
    "local n = tonumber(ARGV[3])\n",
    largest_counter!(),
    r"if n == 1 then
  if not redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return false end
else
  if redis.call('exists', unpack(KEYS, 1, n)) > 0 then return false end
  for i = 1, n do
    redis.call('set', KEYS[i], ARGV[1], 'PX', ARGV[2])
  end
end
if fence >= 0 and #KEYS > n and fence < tonumber(ARGV[4]) then
",
    raise_counters!("4"),
    r"end
return fence"
);

/// PEEK (design 3.1's table), -1 first if the node's marker is not the one the client
/// checked. `ARGV = [token, n, marker]`.
pub(crate) const PEEK: &str = concat!(
    r"local n = tonumber(ARGV[2])
if redis.call('get', KEYS[#KEYS - 1]) ~= ARGV[3] then return -1 end
for i = 1, n do
  if redis.call('get', KEYS[i]) ~= ARGV[1] then return false end
end
",
    largest_counter!(),
    "return fence"
);

/// FENCE (design 3.1's table), the node's largest counter raised too; -1 first if the node's
/// marker is not the one the client checked (it may have lost counters: a token recorded
/// there would not count). `ARGV = [token, fence, n, marker]`.
pub(crate) const FENCE: &str = concat!(
    r"local n = tonumber(ARGV[3])
if redis.call('get', KEYS[#KEYS - 1]) ~= ARGV[4] then return -1 end
for i = 1, n do
  if redis.call('get', KEYS[i]) ~= ARGV[1] then return 0 end
end
",
    raise_counters!("2"),
    "return 1"
);

/// EXTEND (design 3.1's table): keys missing means the node restarted empty, or missed the
/// acquisition. `ARGV = [token, ttl_ms, n]`.
pub(crate) const EXTEND: &str = r"local n = tonumber(ARGV[3])
local missing = false
for i = 1, n do
  local v = redis.call('get', KEYS[i])
  if not v then missing = true elseif v ~= ARGV[1] then return 0 end
end
if missing then return 2 end
for i = 1, n do
  redis.call('pexpire', KEYS[i], ARGV[2])
end
return 1";

/// RESTORE (design 3.1's table) on a node that lost the lock, sent only after an extension
/// succeeded on a majority that held it all along; the node's largest counter is raised too.
/// Raising never harms, so the node's marker is not checked.
/// `ARGV = [token, ttl_ms, n, fence]` (`fence` is 0 without fencing).
pub(crate) const RESTORE: &str = concat!(
    r"local n = tonumber(ARGV[3])
for i = 1, n do
  local v = redis.call('get', KEYS[i])
  if v and v ~= ARGV[1] then return 0 end
end
for i = 1, n do
  redis.call('set', KEYS[i], ARGV[1], 'PX', ARGV[2])
end
",
    raise_counters!("4"),
    "return 1"
);

/// RELEASE (design 3.1's table; its announcement, `announce!`, design 2.4a).
/// `ARGV = [token, its SHA1, ...]` ([`release_args`]; the client hashes each token once,
/// rather than every node on every release).
pub(crate) const RELEASE: &str =
    compare_and_delete!("2", concat!("      ", announce!("KEYS[i]", "ARGV[j + 1]")));

/// RELEASE's arguments for `tokens`: each token followed by its SHA1 in hex, the payload of
/// its release message (what `redis.sha1hex` would give, and what waiters compare).
pub(crate) fn release_args(tokens: &[fred::types::Value]) -> Vec<fred::types::Value> {
    let mut args = Vec::with_capacity(tokens.len() * 2);
    for token in tokens {
        let hash = token.as_str().map(|t| fred::util::sha1_hash(&t));
        args.push(token.clone());
        args.push(fred::types::Value::from(hash.unwrap_or_default()));
    }
    args
}

/// DISCARD (design 3.1's table): RELEASE without the announcement, for the cleanup of an
/// attempt that failed (why it must not announce: design 2.4a). `ARGV = [token, ...]`.
pub(crate) const DISCARD: &str = compare_and_delete!("1", "");

/// HANDOVER (design 3.1's table, 2.4b; `engine/handover.rs`): where the old token is gone
/// (expired) and no other holds the key, ACQUIRE for the new token; where the old token is
/// there, its RELEASE followed by ACQUIRE of the new one with nothing in between.
/// `ARGV = [old token, new token, ttl_ms, n, marker]`.
pub(crate) const HANDOVER: &str = concat!(
    r"local n = tonumber(ARGV[4])
for i = 1, n do
  local v = redis.call('get', KEYS[i])
  if v and v ~= ARGV[1] then return false end
end
",
    largest_counter!(),
    r"for i = 1, n do
  redis.call('set', KEYS[i], ARGV[2], 'PX', ARGV[3])
end
return fence"
);

/// `SET key token NX PX ttl` as a script, for [`batch`](super::batch) only (where it runs inline). `ARGV = [token, ttl_ms]`; returns 0 if set (fencing counter 0), nil if not.
pub(crate) const SET_NX: &str = r"if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end
return false";

#[cfg(test)]
mod tests {
    use super::*;
    use fred::types::Value;

    /// The release message carries the token's SHA1 (what `redis.sha1hex` gives, 40 hex
    /// digits), never the token.
    #[test]
    fn release_args_pair_each_token_with_its_sha1() {
        let args = release_args(&[Value::from("secret-token"), Value::from("abc")]);
        let text: Vec<String> = args.iter().filter_map(|v| v.as_string()).collect();
        assert_eq!(text.len(), 4);
        assert_eq!(text[0], "secret-token");
        assert_eq!(text[1].len(), 40);
        assert!(!text[1].contains("secret"));
        assert_eq!(text[2], "abc");
        assert_eq!(text[3], "a9993e364706816aba3e25717850c26c9cd0d89d");
    }
}
