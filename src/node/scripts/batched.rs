//! The batch script that carries concurrent calls to one node (`node/batch/`), the lists of
//! scripts it runs by number, and how a call is announced in its arguments.

use super::lock::{ACQUIRE, DISCARD, EXTEND, FENCE, HANDOVER, PEEK, RELEASE, RESTORE, SET_NX};
#[cfg(any(test, feature = "testkit"))]
use super::permit::PERMIT_HOLDERS;
use super::permit::{
    PERMIT_ACQUIRE, PERMIT_DISCARD, PERMIT_EXTEND, PERMIT_FENCE, PERMIT_HANDOVER, PERMIT_PEEK,
    PERMIT_RELEASE, RW_ACQUIRE,
};
#[cfg(any(test, feature = "testkit"))]
use super::records::{IDENTIFY, OBSERVE, QUARANTINE, SEED};

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
/// for one node are sent as one (see `node/batch/`). Each script becomes a function of
/// `(KEYS, ARGV)`, the parameters shadowing the globals, so its body is unchanged.
///
/// `ARGV = [count, then per call: its header (`batch_header`), its arguments]`; `KEYS` = the
/// calls' keys, one call after the other. Returns one element per call, in order: the
/// script's reply (nil for `false`), or a string `ERR ...` if it failed (a failing call does
/// not stop the others; like a script on its own, it keeps what it did before failing);
/// then two more, the node's marker and quarantine record as they are once every call ran
/// (`held!`).
///
/// The most frequent calls run inline, without their function, each with `redis.pcall` so
/// that an error stays the call's own, announced by one letter ([`batch_header`]): `SET NX`
/// and the release or discard of one key with one token (design 4.3;
/// `inline_calls_in_a_batch_answer_as_their_scripts_do` holds each to its script). The `SET NX`
/// calls put first for `MSETEX` come as one group, `M`, their count `n`, `key token` for each,
/// `NX PX ttl` (their keys also the first `n` of `KEYS`), set one by one as `s` where it sets
/// none (design 3.3a).
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
/// connection's check ([`Permissions`](crate::node::probe::Permissions)), which the batch
/// script uses where they spare the node work: only a matter of speed (design 3.3a).
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
/// for the calls the batch script runs inline, else the number and the two counts. The
/// letters `R`, `D` (with `DELIFEQ`) and `r`, `d`: design 3.3a. (`SET NX` calls set together
/// with `MSETEX` are announced as a group, see [`batch`].)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algo::keys;

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

    /// Lua cannot read a Rust constant: the one key shape a script spells out itself (the
    /// release channel) must be the one `algo::keys` gives.
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
