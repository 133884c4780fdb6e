//! The Lua scripts, in one place. Each runs atomically on one node and touches the lock keys
//! only while they hold our token (or, to re-create a lost key, while nobody holds them), so
//! a holder can never delete or extend a lock that expired and was taken by someone else.
//!
//! Every script takes the lock keys first (`KEYS[1..n]`) and, when it reads or raises fencing
//! counters, the matching counters after them (`KEYS[n+1..2n]`), then the node's marker and
//! its largest counter (`quorumlock:node`, `quorumlock:hwm`: `algo/lineage.rs`); `n` is passed as
//! an argument, and the scripts that read counters take the marker the client checked as
//! their last argument.
//! One resource is the case `n = 1`: a plain lock without fencing acquires with
//! `SET key token NX PX ttl` (inline in the batch script, which every vote goes as: it reads
//! back the node's marker and quarantine record), so other Redlock clients interoperate.
//!
//! They are called with EVALSHA; a node that answers NOSCRIPT (restarted, or SCRIPT FLUSH)
//! gets the script body once with EVAL, which also caches it there again.

/// Lua that sets `fence` to what the node's fencing counters among `KEYS[n+1..#KEYS-2]` read
/// as: the largest of them and of the node's floor, 0 when there are no counters (no fencing)
/// or none exists yet; -1 when the node's marker (`KEYS[#KEYS-1]`, `algo/lineage.rs`) is not the
/// one the client checked (`ARGV[#ARGV]`): the node may have lost counters since, and what
/// it holds says nothing. Read with one `MGET`; an error reply if a counter is not a number.
/// A macro, so that the scripts stay string literals.
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
/// counter (`KEYS[#KEYS]`, `algo/lineage.rs`), to at least `ARGV[$at]` (never lowers one).
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

/// All-or-nothing acquisition of `n` keys, reading their fencing counters and, given a hint,
/// recording a fencing token in the same round.
///
/// `ARGV = [token, ttl_ms, n, hint, marker]`. If any lock key exists, sets nothing and returns
/// nil. Otherwise sets every lock key to the token with the ttl and returns what the fencing
/// counters read as (`largest_counter!`: -1 when the marker is not `marker`), as they were
/// before this call; and if that is below `hint`, raises every counter, and the node's
/// largest, to `hint` (`raise_counters!`): the token `hint` is then recorded here, as FENCE
/// would record it (`engine/fencing.rs`). A hint of 0 records nothing. The counters are read
/// with one `MGET`; one key is set with one `SET NX PX`, several after one `EXISTS` of them
/// all, so that the server does little more than for a bare `SET NX`.
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

/// Reads the fencing counters of a lock we hold: -1 if the node's marker is not the one the
/// client checked; else, while every lock key holds our token, what the counters read as
/// (0 when none exists yet); nil if the lock is not ours here. Changes nothing.
///
/// `ARGV = [token, n, marker]`.
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

/// Records a fencing token: -1 if the node's marker is not the one the client checked (it
/// may have lost counters: a token recorded there would not count); else, while every lock
/// key still holds our token, raises each fencing counter, and the node's largest, to at
/// least `ARGV[2]` (never lowers one).
///
/// `ARGV = [token, fence, n, marker]`. Returns 1 if recorded, 0 if the lock is not ours here.
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

/// Compare-and-pexpire: if every lock key holds our token, resets their ttl and returns 1.
/// Changes nothing and returns 0 if any holds another token, 2 if none does but some are
/// missing (the node restarted empty, or missed the acquisition).
///
/// `ARGV = [token, ttl_ms, n]`.
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

/// Restores a lock on a node that lost it: unless a lock key holds another token, sets every
/// lock key to our token with the ttl, raises the fencing counters (and the node's largest)
/// to at least our fencing token, and returns 1; otherwise changes nothing and returns 0.
/// Sent only after an extension succeeded on a majority that held the lock all along.
/// Raising never harms, so the node's marker is not checked.
///
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

/// Compare-and-delete: deletes each key that holds our token, and for each announces the
/// release on the key's channel (`quorumlock:released:` + the key) with the SHA1 of the token,
/// for the clients that wait for it (`engine/waiters.rs`). `ARGV = [token, its SHA1, ...]`
/// ([`release_args`]; the client hashes each token once, rather than every node on every
/// release): a key is deleted if it holds any of the tokens (a handover that failed releases
/// the old token and the new one at once, `engine/handover.rs`). Returns how many keys were
/// deleted. The announcement is a `pcall`: a user whose ACL forbids `PUBLISH` still releases.
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

/// Compare-and-delete without the announcement: RELEASE's twin for the cleanup of an attempt
/// that failed. Such a token never held the lock, so its deletes free nothing that a waiter
/// waits for; announcing them would wake every waiter of the key after each failed attempt,
/// and while a holder keeps the key on a bare majority, the waiters' attempts would then wake
/// one another without pause (design 2.4a). `ARGV = [token, ...]`; returns how many keys were
/// deleted.
pub(crate) const DISCARD: &str = compare_and_delete!("1", "");

/// Hands a lock over from one token to the next, atomically, without the key ever being free
/// (`engine/handover.rs`): unless a lock key holds a token other than the old one, sets every lock key
/// to the new token with the ttl and returns the largest fencing counter among `KEYS[n+1..]`
/// (0 when there are none or they do not exist yet), as ACQUIRE does; otherwise changes nothing
/// and returns nil. On a node where the old token is gone (expired) and no other holds the
/// key, this is ACQUIRE for the new token; where the old token is there, it is RELEASE of the
/// old token followed by ACQUIRE of the new one with nothing in between.
///
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

/// `SET key token NX PX ttl` as a script, for [`batch`] only (where it runs inline). `ARGV = [token, ttl_ms]`; returns 0 if set (fencing counter 0), nil if not.
pub(crate) const SET_NX: &str = r"if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end
return false";

/// Writes a leader's identity record beside its lock (`engine/election.rs`): while the lock key
/// holds our token, sets the identity key to the record with the ttl and returns 1;
/// otherwise changes nothing and returns 0.
///
/// `KEYS = [lock key, identity key]`, `ARGV = [token, record, ttl_ms]`.
pub(crate) const IDENTIFY: &str = r"if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('set', KEYS[2], ARGV[2], 'PX', ARGV[3])
return 1";

/// Reads who leads on one node (`engine/election.rs`), changing nothing: the SHA1 of the token in
/// the lock key (nil when the key is missing) and the identity record (nil when missing).
/// Only the hash leaves the node: the token itself stays with its holder.
///
/// `KEYS = [lock key, identity key]`.
pub(crate) const OBSERVE: &str = r"local v = redis.call('get', KEYS[1])
local s = false
if v then s = redis.sha1hex(v) end
return {s, redis.call('get', KEYS[2])}";

/// Re-seeds a node that may have lost data (`engine/seeder.rs`): if its marker is still what the
/// survey read (`ARGV[1]`, empty for none), replaces it with `ARGV[2]`, raises its largest
/// counter to at least the new floor `ARGV[3]`, and returns 1; otherwise changes nothing and
/// returns 0 (another client re-seeded it meanwhile, or it changed again). The record of the
/// node's quarantine stays (see [`QUARANTINE`]): it tells a client with the same longest
/// ttl that the young node it finds re-seeded waited out its quarantine.
///
/// Where the check that found the loss found a record too, `ARGV[4]` is its `RUN_ID:START_MS`,
/// and the node is re-seeded only while it still holds that record: a record gone or another
/// is a new loss since the check (a flush takes the record with the data), whose quarantine a
/// marker written now would cancel. Then returns -1 and changes nothing (the client checks
/// the node again). `ARGV[4]` empty: no record to hold it to.
///
/// `KEYS = [marker key, largest counter key, quarantine key]`.
pub(crate) const SEED: &str = r"if (redis.call('get', KEYS[1]) or '') ~= ARGV[1] then return 0 end
if ARGV[4] ~= '' then
  local r = redis.call('get', KEYS[3]) or ''
  if string.sub(r, 1, string.len(ARGV[4]) + 1) ~= ARGV[4] .. ':' then return -1 end
end
redis.call('set', KEYS[1], ARGV[2])
local h = tonumber(redis.call('get', KEYS[2]) or '0')
if not h or h < tonumber(ARGV[3]) then redis.call('set', KEYS[2], ARGV[3]) end
return 1";

/// Records on a node that may have lost data when its quarantine started, on the node's own
/// clock, for every client to read (design 2.6a, `algo::lineage::Recorded`), unless its
/// marker is the running server's after all (another client re-seeded it since the check
/// read it): then returns `{marker}`.
///
/// The record is `RUN_ID:START_MS:WAIT_MS`. One of the running server (`ARGV[1]`) is kept,
/// its wait raised to `ARGV[2]` ms if shorter; anything else (none, another server's, after
/// a restart or a failover) is replaced by one that starts `ARGV[3]` ms before now
/// (`lineage::record_age`). Returns `{start_ms, wait_ms, now_ms}`.
///
/// `KEYS = [marker key, quarantine key]`.
pub(crate) const QUARANTINE: &str = r"local m = redis.call('get', KEYS[1])
if m and string.sub(m, 1, string.len(ARGV[1]) + 1) == ARGV[1] .. ':' then return {m} end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local wait = tonumber(ARGV[2])
local run, start, was = string.match(redis.call('get', KEYS[2]) or '', '^(%x+):(%d+):(%d+)$')
if run == ARGV[1] then
  start = tonumber(start)
  was = tonumber(was)
  if was >= wait then return {start, was, now} end
else
  start = now - tonumber(ARGV[3])
end
redis.call('set', KEYS[2], ARGV[1] .. ':' .. string.format('%d', start) .. ':' .. string.format('%d', wait))
return {start, wait, now}";

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

/// Lua that gives the claim `undated` (if any) its expiry in the node's milliseconds: `now`
/// plus the key's PTTL. A claim recorded on a key that did not exist is scored `+inf` and
/// expires with the key (design 2.9: the first claim on a new key costs no `TIME`). Such a
/// claim is the only one on its key: every script that adds a claim to an existing key, or
/// lengthens the key, runs this first (with `undated` found among the claims `all`, read
/// `withscores`, by `undated!`), so that the key's expiry is never the claim's once another
/// claim shares the key. A refusal changes nothing, not even that.
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
/// shortens it): set after a claim was recorded or extended to `now + $ms`, so that the key
/// never goes before a live claim. The key outlives its last claim by at most a ttl, and
/// goes with the last release (`PERMIT_RELEASE`).
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

/// Takes a permit of the semaphore `KEYS[1]` (design 2.9): one sorted set per semaphore, a
/// member `slot:token` per claim scored with its expiry in the node's milliseconds, and the
/// member `#` scored `-N` recording the number of permits. Drops the expired claims, then
/// records the first slot free here in the client's preference order (`start`, `start +
/// step`, ... modulo `N`, `step` prime to `N`), and returns it with 1 if another slot is
/// still free here, 0 if not (`{slot, free}`: a waiter behind it may attempt at once, or
/// should wait for a release). Returns nil if every slot is claimed; -1 if the key holds
/// something other than a semaphore (a lock's token, another program's value); -2 if it is
/// a read-write lock; `-2 - M` if it is a semaphore of `M ≠ N` permits. Changes nothing in those three cases.
///
/// A key that does not exist (the common case of a semaphore nobody holds: the last release
/// deletes it) costs neither a read of the claims nor the node's clock: `TYPE`, `ZADD`,
/// `PEXPIRE`, the claim scored `+inf` so that it expires with the key (`date_claim!`).
///
/// `ARGV = [token, ttl_ms, N, start, step]`.
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
/// than a semaphore. A claim that expires with its key (`date_claim!`) is the key's only
/// one: the key's ttl is set instead, without the node's clock.
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
/// SHA1: [`release_args`]) that is recorded and not expired, and announces each release on
/// the semaphore's channel with the claim's SHA1, as a lock's release is (two claims: a
/// handover that failed releases the old claim and the new one). Returns how many claims
/// were removed. The last claim's release deletes the key (expired claims are dropped
/// first). A claim that expires with its key (`date_claim!`) is the key's only one: its
/// release deletes the key without the node's clock (`ZSCORE`, `DEL`, `PUBLISH`).
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

/// Takes a side of the read-write lock `KEYS[1]` (design 2.9): one sorted set, its record
/// member `#rw` scored -1, a member `r:token` per reader and `w:token` for the writer, each
/// scored with its expiry in the node's milliseconds, and `i:waiter` per writer waiting
/// (an intent, scored with its own expiry). A reader (`ARGV[3] = 'r'`) is recorded while
/// no live writer and no other writer's intent is there; a writer (`'w'`) while no live
/// claim of either kind is there, and otherwise records (or renews) its intent, so that
/// readers arriving after it wait (writers go first). Returns `{0, room}` when recorded
/// (`room` 1 for a reader when another reader may follow at once), nil when refused; -1 if
/// the key holds something other than a read-write lock, `-2 - M` if a semaphore of `M`
/// permits. A writer recorded drops its own intent. A key that does not exist costs
/// `TYPE`, `ZADD`, `PEXPIRE`, as PERMIT_ACQUIRE's (the claim expires with the key).
///
/// `ARGV = [token, ttl_ms, 'r' or 'w', waiter, intent_ttl_ms]`.
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

/// The arrays `a` then `b` as one (`C = A + B`, checked when the constant is built): the
/// script lists below are written once and joined.
const fn join<const A: usize, const B: usize, const C: usize>(
    a: [&'static str; A],
    b: [&'static str; B],
) -> [&'static str; C] {
    assert!(A + B == C, "join: C must be A + B");
    let mut out = [""; C];
    let mut i = 0;
    while i < A {
        out[i] = a[i];
        i += 1;
    }
    while i < C {
        out[i] = b[i - A];
        i += 1;
    }
    out
}

/// The locks' scripts that [`batch`] runs, after `SET_NX` (numbers 2 to 9 in it).
const LOCK_BATCHED: [&str; 8] = [
    ACQUIRE, FENCE, EXTEND, RESTORE, RELEASE, PEEK, HANDOVER, DISCARD,
];

/// The semaphores' and read-write locks' scripts that [`batch`] runs (numbers 10 to 17).
const PERMIT_BATCHED: [&str; 8] = [
    PERMIT_ACQUIRE,
    PERMIT_EXTEND,
    PERMIT_RELEASE,
    PERMIT_DISCARD,
    PERMIT_PEEK,
    PERMIT_FENCE,
    PERMIT_HANDOVER,
    RW_ACQUIRE,
];

/// The scripts of semaphores. Their commands beyond a lock's (`TIME`, `TYPE`, `PTTL` and the sorted
/// set's) are not part of a node's admission, since a client that only locks never sends
/// them; `doctor` checks them (`probe::semaphore_permissions`).
#[cfg(test)]
pub(crate) const PERMIT: [&str; 9] = join(PERMIT_BATCHED, [PERMIT_HOLDERS]);

/// Every script sent by `EVALSHA` (`SET_NX` runs inline in the batch script),
/// for tests that check the hashes against a real `SCRIPT LOAD`.
#[cfg(any(test, feature = "testkit"))]
pub(crate) const ALL: [&str; 22] = join(
    join::<8, 8, 16>(LOCK_BATCHED, PERMIT_BATCHED),
    [
        IDENTIFY,
        OBSERVE,
        SEED,
        QUARANTINE,
        PERMIT_HOLDERS,
        SET_NX_ALONE,
    ],
);

/// The scripts [`batch`] can run, in the order of their numbers in it.
pub(crate) const BATCHED: [&str; 17] =
    join(join::<1, 8, 9>([SET_NX], LOCK_BATCHED), PERMIT_BATCHED);

/// Lua that appends to `out`, after the answers of the batch's `ARGV[1]` calls, what the
/// node holds under its marker and its quarantine record (`quorumlock:node`,
/// `quorumlock:quarantine`; nil for none, or where the ACL refuses them), read after every
/// call ran: a vote counts only if the node still holds what its check found
/// (`lineage::still_checked`), so that a flush under a connected client is seen.
macro_rules! held {
    ($count:literal) => {
        concat!(
            "local count = ",
            $count,
            r"
for i, key in ipairs({'quorumlock:node', 'quorumlock:quarantine'}) do
  local v = redis.pcall('get', key)
  if type(v) == 'table' then v = false end
  out[count + i] = v
end
"
        )
    };
}

/// A lone `SET key token NX PX ttl` vote, answered as the [`batch`] of that one call
/// answers: `{0 or nil, marker, record}`. The most frequent vote (a lock whose token nobody
/// asks for), spared the batch script's table of functions: about the server work of the
/// plain command, two `GET`s and a script call (docs/benchmarks.md).
/// `KEYS = [key]`, `ARGV = [token, ttl_ms]`.
pub(crate) const SET_NX_ALONE: &str = concat!(
    r"local out = {false}
if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then out[1] = 0 end
",
    held!("1"),
    "return out"
);

/// The script that runs several calls of the scripts above in one: concurrent calls bound
/// for one node are sent as one (see `node/batch.rs`). Each script becomes a function of
/// `(KEYS, ARGV)`, the parameters shadowing the globals, so its body is unchanged.
///
/// `ARGV = [count, then per call: its header (`batch_header`), its arguments]`; `KEYS` = the
/// calls' keys, one call after the other. Returns one element per call, in order: the
/// script's reply (nil for `false`), or a string `ERR ...` if it failed (a failing call does
/// not stop the others; like a script on its own, it keeps what it did before failing);
/// then two more, the node's marker and quarantine record as they are once every call ran
/// (`held!`).
///
/// The most frequent calls run inline, without their function: `SET NX` (SET_NX) and the
/// release or discard of one key with one token (RELEASE, DISCARD), each with `redis.pcall`
/// so that an error stays the call's own, and each with a header of one letter (`s`, `r`,
/// `d`) in place of its script's number, key count and argument count. That spares the server
/// a Lua `pcall` and two argument tables per call, about 10 to 15% of its CPU for a batch of
/// acquisitions and releases, and the letter two arguments and three conversions per call,
/// about 20% of what the script costs the server for such a batch (docs/benchmarks-load.md).
/// `tests/lock_batch.rs` (`inline_calls_in_a_batch_answer_as_their_scripts_do`) holds each
/// inline call to its script's answers and effects, for every state of the key.
///
/// On a node that runs `MSETEX` ([`Natives::msetex`]), the client puts first the `SET NX`
/// calls of one key that share the first one's ttl and whose key no other call of the batch
/// names (`node/batch.rs`, `set_together`), and announces them as one group: `M`, their
/// count `n`, then `key token` for each, then `NX PX ttl` (their keys are also the first `n`
/// of `KEYS`). The script sets them with one `MSETEX n key token ... NX PX ttl`: it sets
/// every key, each as `SET key token NX PX ttl` would, if none exists, and answers 1; else it
/// sets none and answers 0, and the calls are run one by one, as `s`. Running them ahead of
/// the batch's other calls changes no answer: a script runs alone on the node, and those
/// calls name other keys. A key named twice (two clients after one lock, or its release and
/// next acquisition in one batch) keeps its calls in order: `MSETEX` with a key twice would
/// set it to the later token and tell both they had it.
/// `tests/lock_batch.rs` (`set_nx_calls_set_together_answer_as_they_do_alone`) holds these
/// batches to the same calls made one by one.
pub(crate) fn batch() -> String {
    let mut body = String::from("local scripts = {}\n");
    for (i, script) in BATCHED.iter().enumerate() {
        body.push_str(&format!(
            "scripts[{}] = function(KEYS, ARGV)\n{script}\nend\n",
            i + 1
        ));
    }
    body.push_str(concat!(
        r"local out = {}
local k, a, first = 1, 2, 1
if ARGV[2] == 'M' then
  local n = tonumber(ARGV[3])
  local ttl = ARGV[6 + 2 * n]
  if redis.pcall('msetex', unpack(ARGV, 3, 6 + 2 * n)) == 1 then
    for i = 1, n do out[i] = 0 end
  else
    for i = 1, n do
      local r = redis.pcall('set', KEYS[i], ARGV[3 + 2 * i], 'NX', 'PX', ttl)
      if r and not r.err then
        r = 0
      elseif r then
        r = 'ERR ' .. r.err
      end
      out[i] = r
    end
  end
  k, a, first = n + 1, 7 + 2 * n, n + 1
end
for j = first, tonumber(ARGV[1]) do
  local op = ARGV[a]
  local ok, r = true, nil
  if op == 's' then
    r = redis.pcall('set', KEYS[k], ARGV[a + 1], 'NX', 'PX', ARGV[a + 2])
    if r and not r.err then r = 0 end
    k, a = k + 1, a + 3
  elseif op == 'r' or op == 'd' or op == 'R' or op == 'D' then
    local release = op == 'r' or op == 'R'
    r = nil
    if op == 'R' or op == 'D' then
      r = redis.pcall('delifeq', KEYS[k], ARGV[a + 1])
      if type(r) == 'table' then r = nil end
    end
    if r == nil then
      r = redis.pcall('get', KEYS[k])
      if type(r) ~= 'table' then
        if r == ARGV[a + 1] then
          r = redis.pcall('del', KEYS[k])
        else
          r = 0
        end
      end
    end
    if r == 1 and release then
      ",
        announce!("KEYS[k]", "ARGV[a + 2]"),
        r"    end
    if release then a = a + 3 else a = a + 2 end
    k = k + 1
  else
    local nk, na = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
    a = a + 3
    ok, r = pcall(scripts[tonumber(op)], {unpack(KEYS, k, k + nk - 1)}, {unpack(ARGV, a, a + na - 1)})
    k, a = k + nk, a + na
  end
  if not ok then
    if type(r) == 'table' then r = r.err end
    r = 'ERR ' .. tostring(r)
  elseif type(r) == 'table' and r.err then
    r = 'ERR ' .. r.err
  end
  out[j] = r
end
",
        held!("tonumber(ARGV[1])"),
        r"return out"
    ));
    body
}

/// The commands beside `SET`, `GET` and `DEL` that a node runs for the client, found by the
/// connection's check ([`Permissions`](crate::node::probe::Permissions)): the batch script
/// uses them where they spare the node work. Each is only a matter of speed: where one fails
/// (a server without it, an ACL that refuses it), the script does what it stands for with
/// `SET`, `GET` and `DEL`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Natives {
    /// `DELIFEQ key token` (Valkey 9): one compare-and-delete where `GET` and `DEL` are two.
    pub(crate) delifeq: bool,
    /// `MSETEX n key token ... NX PX ttl` (Valkey 9.1): several keys set at once, all or
    /// none, where `SET NX` sets one.
    pub(crate) msetex: bool,
}

/// How a call of script number `number` (1-based in [`BATCHED`]) with `keys` keys and `args`
/// arguments is announced in the batch script's arguments, before its arguments: one letter
/// for the calls the batch script runs inline, else the number and the two counts.
///
/// For a node that runs `DELIFEQ` ([`Natives::delifeq`]), the release and the discard of one
/// key delete with it (`R`, `D`), else with `GET` and `DEL` (`r`, `d`); where `DELIFEQ`
/// fails, the batch script takes `GET` and `DEL`, so the letter is only a matter of speed.
/// (`SET NX` calls set together with `MSETEX` are announced as a group, see [`batch`].)
pub(crate) fn batch_header(
    number: usize,
    keys: usize,
    args: usize,
    natives: Natives,
) -> BatchHeader {
    match (number, keys, args) {
        (INLINE_SET_NX, 1, 2) => BatchHeader::Inline("s"),
        (INLINE_RELEASE, 1, 2) if natives.delifeq => BatchHeader::Inline("R"),
        (INLINE_RELEASE, 1, 2) => BatchHeader::Inline("r"),
        (INLINE_DISCARD, 1, 1) if natives.delifeq => BatchHeader::Inline("D"),
        (INLINE_DISCARD, 1, 1) => BatchHeader::Inline("d"),
        _ => BatchHeader::Call([number, keys, args]),
    }
}

/// The numbers in [`BATCHED`] of SET_NX, RELEASE and DISCARD (checked by a test).
const INLINE_SET_NX: usize = 1;
const INLINE_RELEASE: usize = 6;
const INLINE_DISCARD: usize = 9;

/// See [`batch_header`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BatchHeader {
    /// A call run inline: `s` (SET NX), `r` or `R` (RELEASE of one key, one token), `d` or `D`
    /// (DISCARD).
    Inline(&'static str),
    /// Any other: the script's number, the call's key count and argument count.
    Call([usize; 3]),
}

/// A script and its SHA1, computed once.
#[derive(Debug)]
pub(crate) struct Script {
    pub(crate) body: std::borrow::Cow<'static, str>,
    pub(crate) sha: String,
}

impl Script {
    pub(crate) fn new(body: impl Into<std::borrow::Cow<'static, str>>) -> Script {
        let body = body.into();
        let sha = fred::util::sha1_hash(&body);
        Script { body, sha }
    }
}

/// Whether a node's error means "that SHA is not cached here" (fred has no ErrorKind for it).
pub(crate) fn is_noscript(err: &fred::error::Error) -> bool {
    err.details().starts_with("NOSCRIPT")
}

/// The Redis commands `script` calls, in order, as written: the name in each
/// `redis.call('name', ...)` and `redis.pcall('name', ...)`, with `true` for `pcall` (the
/// script goes on if the command fails). Where the name is not a string literal, what stands
/// in its place is returned, so that a check of the names against a list fails on it. The
/// permission probe's test reads every script with it (`node/probe.rs`).
#[cfg(test)]
pub(crate) fn commands(script: &str) -> impl Iterator<Item = (&str, bool)> + '_ {
    script.match_indices("redis.").filter_map(move |(at, _)| {
        let rest = &script[at + "redis.".len()..];
        let (rest, protected) = match rest.strip_prefix("pcall") {
            Some(rest) => (rest, true),
            None => (rest.strip_prefix("call")?, false),
        };
        let rest = rest.trim_start().strip_prefix('(')?.trim_start();
        let name = match rest.chars().next() {
            Some(quote @ ('\'' | '"')) => rest[1..].split(quote).next().unwrap_or_default(),
            _ => rest.split([',', ')']).next().unwrap_or_default().trim(),
        };
        Some((name, protected))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algo::keys;
    use fred::types::Value;

    /// Lua cannot read a Rust constant: the one key shape a script spells out itself (the
    /// release channel) must be the one `algo::keys` gives.
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

    #[test]
    fn the_calls_run_inline_are_named_by_their_numbers_in_the_batch() {
        assert_eq!(BATCHED[INLINE_SET_NX - 1], SET_NX);
        assert_eq!(BATCHED[INLINE_RELEASE - 1], RELEASE);
        assert_eq!(BATCHED[INLINE_DISCARD - 1], DISCARD);
        let none = Natives::default();
        let delifeq = Natives {
            delifeq: true,
            msetex: false,
        };
        let both = Natives {
            delifeq: true,
            msetex: true,
        };
        assert_eq!(batch_header(1, 1, 2, none), BatchHeader::Inline("s"));
        assert_eq!(batch_header(6, 1, 2, none), BatchHeader::Inline("r"));
        assert_eq!(batch_header(9, 1, 1, none), BatchHeader::Inline("d"));
        assert_eq!(batch_header(1, 1, 2, delifeq), BatchHeader::Inline("s"));
        assert_eq!(batch_header(6, 1, 2, delifeq), BatchHeader::Inline("R"));
        assert_eq!(batch_header(9, 1, 1, delifeq), BatchHeader::Inline("D"));
        assert_eq!(batch_header(1, 1, 2, both), BatchHeader::Inline("s"));
        assert_eq!(batch_header(6, 1, 2, both), BatchHeader::Inline("R"));
        assert_eq!(batch_header(9, 1, 1, both), BatchHeader::Inline("D"));
        // A release of two keys, or of a handover's two tokens, runs its script.
        assert_eq!(batch_header(6, 2, 2, both), BatchHeader::Call([6, 2, 2]));
        assert_eq!(batch_header(6, 1, 4, none), BatchHeader::Call([6, 1, 4]));
        assert_eq!(batch_header(2, 1, 2, both), BatchHeader::Call([2, 1, 2]));
    }

    #[test]
    fn the_release_announcement_uses_the_key_namespace_channel() {
        let channel = format!("'{}' .. KEYS[i]", keys::CHANNEL_PREFIX);
        assert!(RELEASE.contains(&channel), "{RELEASE}");
        assert!(batch().contains(&channel));
        // The batch script's own release of one key announces on the same channel.
        let batched = format!("'{}' .. KEYS[k]", keys::CHANNEL_PREFIX);
        assert!(batch().contains(&batched), "{}", batch());
        assert!(!DISCARD.contains(keys::CHANNEL_PREFIX));
    }

    #[test]
    fn the_batch_reads_back_the_marker_and_record_keys() {
        let held = format!("{{'{}', '{}'}}", keys::NODE_KEY, keys::QUARANTINE_KEY);
        assert!(batch().contains(&held), "{}", batch());
        assert!(SET_NX_ALONE.contains(&held), "{SET_NX_ALONE}");
    }
}
