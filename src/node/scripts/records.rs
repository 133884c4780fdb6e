//! The scripts of the records kept beside the locks: a leader's identity (IDENTIFY, OBSERVE,
//! `engine/election.rs`) and a node's marker and quarantine record (SEED, QUARANTINE,
//! `algo/lineage/`).

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
