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

/// The SEED script of a re-seed (design 2.6a; `engine/seeder.rs`): `ARGV = [the marker the
/// survey read (empty for none), the new marker, the floor, the record's `RUN_ID:START_MS`
/// (empty: no record to hold it to)]`. Returns 1 when re-seeded; 0, changing nothing, when the
/// marker changed since the survey; -1, changing nothing, when the record did (a new loss).
/// The record of the node's quarantine stays (see [`QUARANTINE`]).
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

/// The QUARANTINE script of design 2.6a, "The quarantine is kept on the node"
/// (`algo::lineage::Recorded`): `ARGV[1]` is the running server's run_id, `ARGV[2]` this
/// client's longest ttl in ms, and a new record starts `ARGV[3]` ms before now
/// (`lineage::record_age`). `KEYS = [marker key, quarantine key]`.
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
