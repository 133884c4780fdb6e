//! The Lua scripts, in one place. Each runs atomically on one node and touches the lock keys
//! only while they hold our token (or, to re-create a lost key, while nobody holds them), so
//! a holder can never delete or extend a lock that expired and was taken by someone else.
//!
//! Every script takes the lock keys first (`KEYS[1..n]`) and, when fencing is on, the
//! matching fencing counters after them (`KEYS[n+1..2n]`); `n` is passed as an argument.
//! One resource is the case `n = 1`: a plain lock without fencing does not use a script to
//! acquire at all (`SET key token NX PX ttl`), so other Redlock clients interoperate.
//!
//! They are called with EVALSHA; a node that answers NOSCRIPT (restarted, or SCRIPT FLUSH)
//! gets the script body once with EVAL, which also caches it there again.

/// All-or-nothing acquisition of `n` keys, reading their fencing counters.
///
/// `ARGV = [token, ttl_ms, n]`. If any lock key exists, sets nothing and returns nil.
/// Otherwise sets every lock key to the token with the ttl and returns the largest fencing
/// counter among `KEYS[n+1..]` (0 when there are none or they do not exist yet).
pub(crate) const ACQUIRE: &str = r"local n = tonumber(ARGV[3])
for i = 1, n do
  if redis.call('exists', KEYS[i]) == 1 then return false end
end
local fence = 0
for i = n + 1, #KEYS do
  local v = redis.call('get', KEYS[i])
  if v then
    local c = tonumber(v)
    if not c then return redis.error_reply('quorumlock: fencing counter ' .. KEYS[i] .. ' is not a number') end
    if c > fence then fence = c end
  end
end
for i = 1, n do
  redis.call('set', KEYS[i], ARGV[1], 'PX', ARGV[2])
end
return fence";

/// Records a fencing token: while every lock key still holds our token, raises each
/// fencing counter to at least `ARGV[2]` (never lowers it).
///
/// `ARGV = [token, fence, n]`. Returns 1 if recorded, 0 if the lock is not ours here.
pub(crate) const FENCE: &str = r"local n = tonumber(ARGV[3])
for i = 1, n do
  if redis.call('get', KEYS[i]) ~= ARGV[1] then return 0 end
end
local f = tonumber(ARGV[2])
for i = n + 1, #KEYS do
  local c = tonumber(redis.call('get', KEYS[i]) or '0')
  if not c or c < f then redis.call('set', KEYS[i], ARGV[2]) end
end
return 1";

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
/// lock key to our token with the ttl, raises the fencing counters to at least our fencing
/// token, and returns 1; otherwise changes nothing and returns 0. Sent only after an
/// extension succeeded on a majority that held the lock all along.
///
/// `ARGV = [token, ttl_ms, n, fence]` (`fence` is 0 without fencing).
pub(crate) const RESTORE: &str = r"local n = tonumber(ARGV[3])
for i = 1, n do
  local v = redis.call('get', KEYS[i])
  if v and v ~= ARGV[1] then return 0 end
end
for i = 1, n do
  redis.call('set', KEYS[i], ARGV[1], 'PX', ARGV[2])
end
local f = tonumber(ARGV[4])
for i = n + 1, #KEYS do
  local c = tonumber(redis.call('get', KEYS[i]) or '0')
  if not c or c < f then redis.call('set', KEYS[i], ARGV[4]) end
end
return 1";

/// Compare-and-delete: deletes each key that holds our token, and for each announces the
/// release on the key's channel (`quorumlock:released:` + the key) with the SHA1 of the token,
/// for the clients that wait for it (`wake.rs`). `ARGV = [token]`. Returns how many keys were
/// deleted. The announcement is a `pcall`: a user whose ACL forbids `PUBLISH` still releases.
pub(crate) const RELEASE: &str = r"local n = 0
for i = 1, #KEYS do
  if redis.call('get', KEYS[i]) == ARGV[1] then
    n = n + redis.call('del', KEYS[i])
    redis.pcall('publish', 'quorumlock:released:' .. KEYS[i], redis.sha1hex(ARGV[1]))
  end
end
return n";

/// `SET key token NX PX ttl` as a script, for [`batch`] only (alone it is sent as the plain
/// command). `ARGV = [token, ttl_ms]`; returns 0 if set (fencing counter 0), nil if not.
pub(crate) const SET_NX: &str = r"if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end
return false";

/// Every script, for tests that check the hashes against a real `SCRIPT LOAD`.
#[cfg(feature = "testkit")]
pub(crate) const ALL: [&str; 5] = [ACQUIRE, FENCE, EXTEND, RESTORE, RELEASE];

/// The scripts [`batch`] can run, in the order of their numbers in it.
pub(crate) const BATCHED: [&str; 6] = [SET_NX, ACQUIRE, FENCE, EXTEND, RESTORE, RELEASE];

/// The script that runs several calls of the scripts above in one: concurrent calls bound
/// for one node are sent as one (see `batch.rs`). Each script becomes a function of
/// `(KEYS, ARGV)`, the parameters shadowing the globals, so its body is unchanged.
///
/// `ARGV = [count, then per call: script number (1-based in BATCHED), its key count, its
/// argument count, its arguments]`; `KEYS` = the calls' keys, one call after the other.
/// Returns one element per call, in order: the script's reply (nil for `false`), or a string
/// `ERR ...` if it failed (a failing call does not stop the others; like a script on its
/// own, it keeps what it did before failing).
pub(crate) fn batch() -> String {
    let mut body = String::from("local scripts = {}\n");
    for (i, script) in BATCHED.iter().enumerate() {
        body.push_str(&format!(
            "scripts[{}] = function(KEYS, ARGV)\n{script}\nend\n",
            i + 1
        ));
    }
    body.push_str(
        r"local out = {}
local k, a = 1, 2
for j = 1, tonumber(ARGV[1]) do
  local f, nk, na = scripts[tonumber(ARGV[a])], tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  a = a + 3
  local ok, r = pcall(f, {unpack(KEYS, k, k + nk - 1)}, {unpack(ARGV, a, a + na - 1)})
  k, a = k + nk, a + na
  if not ok then
    if type(r) == 'table' then r = r.err end
    r = 'ERR ' .. tostring(r)
  elseif type(r) == 'table' and r.err then
    r = 'ERR ' .. r.err
  end
  out[j] = r
end
return out",
    );
    body
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
