//! The semaphores' and read-write locks' scripts (design 2.9): one sorted set per key, a
//! member per claim scored with its expiry on the node's clock, with the Lua pieces they share
//! (`node_now!`, `date_claim!`, `undated!`, `prune_claims!`, `keep_key!`, `claim_held!`).

/// Lua that sets `now` to the node's own clock in milliseconds (`TIME`): a semaphore's
/// permits expire by the clocks of the nodes that record them, never by a client's.
/// `node_now!()` declares `now`; `node_now!(set)` assigns a `now` declared before.
macro_rules! node_now {
    () => {
        concat!("local now\n", node_now!(set))
    };
    (set) => {
        "local t = redis.call('time')\nnow = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    };
}

/// Lua that gives the claim `undated` (if any, found by `undated!`), the one that expires with
/// its key, its expiry in the node's milliseconds: `now` plus the key's PTTL. Which scripts run
/// it first, and why: design 2.9, "A claim that expires with its key".
macro_rules! date_claim {
    () => {
        "if undated then redis.call('zadd', KEYS[1], now + redis.call('pttl', KEYS[1]), undated) end\n"
    };
}

/// Lua run on each claim `all[i]` (scored `all[i + 1]`): notes the claim that expires with
/// its key, for `date_claim!`. Declare `local undated = false` before.
macro_rules! undated {
    () => {
        "if all[i + 1] == 'inf' then undated = all[i] end\n"
    };
}

/// Lua that drops the expired claims of the semaphore `KEYS[1]` (scored with their expiry in
/// the node's milliseconds, `now`): what frees a dead holder's permit.
macro_rules! prune_claims {
    () => {
        "redis.call('zremrangebyscore', KEYS[1], 0, now)\n"
    };
}

/// Lua that makes the semaphore key `KEYS[1]` live at least `$ms` milliseconds more (never
/// shortens it): set after a claim was recorded or extended to `now + $ms` (design 2.9).
macro_rules! keep_key {
    ($ms:literal) => {
        concat!(
            "if redis.call('pttl', KEYS[1]) < tonumber(",
            $ms,
            ") then redis.call('pexpire', KEYS[1], ",
            $ms,
            ") end\n"
        )
    };
}

/// Lua that returns `$no` unless the claim `ARGV[1]` (`slot:token`) is recorded in the
/// semaphore `KEYS[1]` and not expired by the node's clock. A `pcall`: a key of another kind
/// holds no claim.
macro_rules! claim_held {
    ($no:literal) => {
        concat!(
            r"local held = redis.pcall('zscore', KEYS[1], ARGV[1])
if type(held) ~= 'string' or tonumber(held) <= now then return ",
            $no,
            " end\n"
        )
    };
}

/// Takes a permit of the semaphore `KEYS[1]` (design 2.9: its sorted set, and the key that
/// does not exist yet). Drops the expired claims, then records the first slot free here in the
/// client's preference order (`start`, `start + step`, ... modulo `N`, `step` prime to `N`),
/// and returns it with 1 if another slot is still free here, 0 if not (`{slot, free}`: a
/// waiter behind it may attempt at once, or should wait for a release). Returns nil if every
/// slot is claimed; -1 if the key holds something other than a semaphore; -2 if it is a
/// read-write lock; `-2 - M` if it is a semaphore of `M ≠ N` permits. Changes nothing in
/// those three cases. `ARGV = [token, ttl_ms, N, start, step]`.
pub(crate) const PERMIT_ACQUIRE: &str = concat!(
    r"local n = tonumber(ARGV[3])
local start, step = tonumber(ARGV[4]), tonumber(ARGV[5])
local kind = redis.call('type', KEYS[1])['ok']
if kind == 'none' then
  redis.call('zadd', KEYS[1], -n, '#', '+inf', (start % n) .. ':' .. ARGV[1])
  redis.call('pexpire', KEYS[1], ARGV[2])
  if n > 1 then return {start % n, 1} end
  return {start % n, 0}
end
if kind ~= 'zset' then return -1 end
local record = redis.call('zscore', KEYS[1], '#')
if not record then
  if redis.call('zscore', KEYS[1], '#rw') then return -2 end
  return -1
end
if -tonumber(record) ~= n then return -2 + tonumber(record) end
",
    node_now!(),
    prune_claims!(),
    r"local taken, undated = {}, false
local all = redis.call('zrange', KEYS[1], 1, -1, 'withscores')
for i = 1, #all, 2 do
  ",
    undated!(),
    r"  local s = string.match(all[i], '^(%d+):')
  if s then taken[tonumber(s)] = true end
end
for j = 0, n - 1 do
  local s = (start + j * step) % n
  if not taken[s] then
    ",
    date_claim!(),
    r"    redis.call('zadd', KEYS[1], now + tonumber(ARGV[2]), s .. ':' .. ARGV[1])
    ",
    keep_key!("ARGV[2]"),
    r"    local free = 0
    for k = j + 1, n - 1 do
      if not taken[(start + k * step) % n] then free = 1 break end
    end
    return {s, free}
  end
end
return false"
);

/// EXTEND for a permit: if the claim `ARGV[1]` (`slot:token`) is recorded and not expired,
/// moves its expiry to the node's now + `ARGV[2]` ms and returns 1; returns 2 if it is
/// missing (expired, released, or never recorded here), 0 if the key holds something other
/// than a semaphore. A claim that expires with its key sets the key's ttl (design 2.9).
/// `ARGV = [claim, ttl_ms, 1]`, as EXTEND's.
pub(crate) const PERMIT_EXTEND: &str = concat!(
    r"local held = redis.pcall('zscore', KEYS[1], ARGV[1])
if type(held) == 'table' then return 0 end
if held == 'inf' then
  redis.call('pexpire', KEYS[1], ARGV[2])
  return 1
end
",
    node_now!(),
    r"if not held or tonumber(held) <= now then return 2 end
redis.call('zadd', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
",
    keep_key!("ARGV[2]"),
    "return 1"
);

/// RELEASE for a permit: removes each claim among `ARGV` (`slot:token`, each followed by its
/// SHA1: [`release_args`](super::release_args)) that is recorded and not expired, and announces each release on
/// the semaphore's channel with the claim's SHA1, as a lock's release is (two claims: a
/// handover that failed releases the old claim and the new one). Returns how many claims
/// were removed. The last claim's release deletes the key (expired claims are dropped
/// first), as does that of a claim that expires with its key (design 2.9).
pub(crate) const PERMIT_RELEASE: &str = concat!(
    r"local held = {}
for j = 1, #ARGV, 2 do
  held[j] = redis.pcall('zscore', KEYS[1], ARGV[j])
  if held[j] == 'inf' then
    redis.call('del', KEYS[1])
    ",
    announce!("KEYS[1]", "ARGV[j + 1]"),
    r"    return 1
  end
end
",
    node_now!(),
    r"local n = 0
for j = 1, #ARGV, 2 do
  if type(held[j]) == 'string' and tonumber(held[j]) > now then
    n = n + redis.call('zrem', KEYS[1], ARGV[j])
    ",
    announce!("KEYS[1]", "ARGV[j + 1]"),
    r"  end
end
if n == 0 then return 0 end
local left = redis.call('zcard', KEYS[1])
if left > 1 then
  ",
    prune_claims!(),
    r"  left = redis.call('zcard', KEYS[1])
end
if left <= 1 then redis.call('del', KEYS[1]) end
return n"
);

/// HANDOVER for a permit (`engine/handover.rs`): gives the slot of the claim `ARGV[1]` to the
/// claim `ARGV[2]` (the same slot, a new token) in one step, with the ttl `ARGV[3]`: where
/// the old claim is recorded and not expired, it is replaced; where it is gone but the
/// semaphore exists and no live claim holds the slot, the new claim is recorded. Returns
/// what the fencing counters read as, as HANDOVER does; nil, changing nothing, where another
/// claim holds the slot or the semaphore does not exist here.
///
/// `ARGV = [old claim, new claim, ttl_ms, n, marker]`, as HANDOVER's.
pub(crate) const PERMIT_HANDOVER: &str = concat!(
    r"local n = tonumber(ARGV[4])
local held = redis.pcall('zscore', KEYS[1], ARGV[1])
if type(held) == 'table' then return false end
local now = false
if held == 'inf' then
  redis.call('zrem', KEYS[1], ARGV[1])
else
  ",
    node_now!(set),
    r"  if held and tonumber(held) > now then
    redis.call('zrem', KEYS[1], ARGV[1])
  else
    if not redis.call('zscore', KEYS[1], '#') then return false end
    ",
    prune_claims!(),
    r"    local slot = string.match(ARGV[1], '^(%d+):')
    local all, undated = redis.call('zrange', KEYS[1], 1, -1, 'withscores'), false
    for i = 1, #all, 2 do
      if string.match(all[i], '^(%d+):') == slot then return false end
      ",
    undated!(),
    r"    end
    ",
    date_claim!(),
    r"  end
end
",
    largest_counter!(),
    r"if now then
  redis.call('zadd', KEYS[1], now + tonumber(ARGV[3]), ARGV[2])
  ",
    keep_key!("ARGV[3]"),
    r"else
  redis.call('zadd', KEYS[1], '+inf', ARGV[2])
  redis.call('pexpire', KEYS[1], ARGV[3])
end
return fence"
);

/// DISCARD for a permit: removes, without announcing it, every claim of the token `ARGV[1]`
/// whatever its slot, except the claim `ARGV[2]` (empty: none kept). The cleanup of an
/// attempt that failed, or of the claims on other slots of one that was granted a slot.
/// Returns how many claims were removed; the last claim's removal deletes the key.
pub(crate) const PERMIT_DISCARD: &str = r"if redis.call('type', KEYS[1])['ok'] ~= 'zset' then return 0 end
local n = 0
for _, m in ipairs(redis.call('zrange', KEYS[1], 1, -1)) do
  if m ~= ARGV[2] and string.match(m, '^[^:]+:(.*)$') == ARGV[1] then
    n = n + redis.call('zrem', KEYS[1], m)
  end
end
if n > 0 and redis.call('zcard', KEYS[1]) <= 1 then redis.call('del', KEYS[1]) end
return n";

/// PEEK for a permit: the fencing counters (the semaphore's, `KEYS[2]`) while the claim
/// `ARGV[1]` is recorded and not expired. `ARGV = [claim, 1, marker]`, as PEEK's.
pub(crate) const PERMIT_PEEK: &str = concat!(
    r"local n = 1
if redis.call('get', KEYS[#KEYS - 1]) ~= ARGV[3] then return -1 end
",
    node_now!(),
    claim_held!("false"),
    largest_counter!(),
    "return fence"
);

/// FENCE for a permit: raises the semaphore's fencing counter (`KEYS[2]`), and the node's
/// largest, to at least `ARGV[2]` while the claim `ARGV[1]` is recorded and not expired.
/// `ARGV = [claim, fence, 1, marker]`, as FENCE's.
pub(crate) const PERMIT_FENCE: &str = concat!(
    r"local n = 1
if redis.call('get', KEYS[#KEYS - 1]) ~= ARGV[4] then return -1 end
",
    node_now!(),
    claim_held!("0"),
    raise_counters!("2"),
    "return 1"
);

/// Reads the unexpired claims of the semaphore or read-write lock `KEYS[1]` by the node's
/// clock, changing nothing (`engine/census.rs`, sent on its own, outside the batches): `{N}`
/// for a semaphore of N permits, `{-2}` for a read-write lock, followed, for each claim whose
/// expiry is still ahead, by its slot (a read-write lock's: 0 for a reader, 1 for a writer,
/// 2 for a writer's intent), the SHA1 of its token (in hex) and the milliseconds left; `{0}`
/// when the key does not exist, `{-1}` when it holds something else. Expired claims are
/// skipped, not dropped. Only the tokens' hashes leave the node, as with OBSERVE: whoever has
/// a token can release its claim.
pub(crate) const PERMIT_HOLDERS: &str = concat!(
    r"local kind = redis.call('type', KEYS[1])['ok']
if kind == 'none' then return {0} end
if kind ~= 'zset' then return {-1} end
local out = {}
local rw = false
local record = redis.call('zscore', KEYS[1], '#')
if record then
  out[1] = -tonumber(record)
elseif redis.call('zscore', KEYS[1], '#rw') then
  out[1], rw = -2, true
else
  return {-1}
end
",
    node_now!(),
    r"local sides = {r = 0, w = 1, i = 2}
local all = redis.call('zrange', KEYS[1], 1, -1, 'withscores')
for i = 1, #all, 2 do
  local prefix, token = string.match(all[i], '^([^:]+):(.*)$')
  local left = tonumber(all[i + 1]) - now
  if all[i + 1] == 'inf' then left = redis.call('pttl', KEYS[1]) end
  local slot = nil
  if prefix and rw then slot = sides[prefix] elseif prefix then slot = tonumber(prefix) end
  if slot and left > 0 then
    out[#out + 1] = slot
    out[#out + 1] = redis.sha1hex(token)
    out[#out + 1] = math.floor(left)
  end
end
return out"
);

/// Takes a side of the read-write lock `KEYS[1]` (design 2.9, "Read-write lock": its sorted
/// set, who is recorded when, a refused writer's intent): a reader if `ARGV[3] = 'r'`, the
/// writer if `'w'`. Returns `{0, room}` when recorded (`room` 1 for a reader when another
/// reader may follow at once), nil when refused; -1 if the key holds something other than a
/// read-write lock, `-2 - M` if a semaphore of `M` permits. A writer recorded drops its own
/// intent. `ARGV = [token, ttl_ms, 'r' or 'w', waiter, intent_ttl_ms]`.
pub(crate) const RW_ACQUIRE: &str = concat!(
    r"local kind = redis.call('type', KEYS[1])['ok']
if kind == 'none' then
  redis.call('zadd', KEYS[1], -1, '#rw', '+inf', ARGV[3] .. ':' .. ARGV[1])
  redis.call('pexpire', KEYS[1], ARGV[2])
  if ARGV[3] == 'r' then return {0, 1} end
  return {0, 0}
end
if kind ~= 'zset' then return -1 end
if not redis.call('zscore', KEYS[1], '#rw') then
  local permits = redis.call('zscore', KEYS[1], '#')
  if permits then return -2 + tonumber(permits) end
  return -1
end
",
    node_now!(),
    prune_claims!(),
    r"local readers, writer, intent, undated = false, false, false, false
local all = redis.call('zrange', KEYS[1], 1, -1, 'withscores')
for i = 1, #all, 2 do
  ",
    undated!(),
    r"  local side = string.sub(all[i], 1, 2)
  if side == 'r:' then readers = true
  elseif side == 'w:' then writer = true
  elseif side == 'i:' and all[i] ~= 'i:' .. ARGV[4] then intent = true end
end
if ARGV[3] == 'w' then
  if writer or readers then
    ",
    date_claim!(),
    r"    redis.call('zadd', KEYS[1], -1, '#rw', now + tonumber(ARGV[5]), 'i:' .. ARGV[4])
    ",
    keep_key!("ARGV[5]"),
    r"    return false
  end
  redis.call('zrem', KEYS[1], 'i:' .. ARGV[4])
elseif writer or intent then
  return false
end
",
    date_claim!(),
    r"redis.call('zadd', KEYS[1], -1, '#rw', now + tonumber(ARGV[2]), ARGV[3] .. ':' .. ARGV[1])
",
    keep_key!("ARGV[2]"),
    r"if ARGV[3] == 'r' and not intent then return {0, 1} end
return {0, 0}"
);
