//! `MSETEX` groups: the `SET NX` calls of a batch that the batch script sets together with
//! one command on a node that runs it, and the batch script's arguments that announce them.

use fred::types::Value;

use super::call::Call;
use super::op::Op;
use crate::node::scripts::{self, BatchHeader, Natives};

/// The keys a batch names, as a set of spots (a hash of each key): a key whose spot another
/// key of the batch also takes counts as named twice. Two keys may share a spot, which only
/// keeps a call out of a group (design 4.3), never puts one in; with 4,096 spots, about one
/// `SET NX` call in a hundred is kept out for that in a batch of 48 keys.
struct Named {
    once: [u64; 64],
    twice: [u64; 64],
}

impl Named {
    fn of(calls: &[Call]) -> Named {
        let mut named = Named {
            once: [0; 64],
            twice: [0; 64],
        };
        for key in calls.iter().flat_map(|call| call.keys.iter()) {
            let (word, bit) = Named::spot(key.as_bytes());
            if named.once[word] & bit != 0 {
                named.twice[word] |= bit;
            }
            named.once[word] |= bit;
        }
        named
    }

    /// FNV-1a of `key`, mixed (MurmurHash3's finalizer: FNV leaves a short key's last bytes
    /// out of the top bits), its top 12 bits as a word of 64 and a bit in it.
    fn spot(key: &[u8]) -> (usize, u64) {
        let mut hash = key.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
        });
        hash ^= hash >> 33;
        hash = hash.wrapping_mul(0xff51_afd7_ed55_8ccd);
        hash ^= hash >> 33;
        hash = hash.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        hash ^= hash >> 33;
        ((hash >> 58) as usize, 1 << ((hash >> 52) & 63))
    }

    fn twice(&self, key: &[u8]) -> bool {
        let (word, bit) = Named::spot(key);
        self.twice[word] & bit != 0
    }
}

/// Which calls of a batch the batch script may set together with one `MSETEX`: the `SET NX`
/// calls of one key that share the first one's ttl and whose key no other call names.
struct Together {
    ttl: Value,
    named: Named,
}

impl Together {
    fn of(calls: &[Call]) -> Option<Together> {
        let ttl = calls.iter().find_map(|call| match &call.args[..] {
            [_, ttl] if call.op == Op::SetNx && call.keys.len() == 1 => Some(ttl.clone()),
            _ => None,
        })?;
        Some(Together {
            ttl,
            named: Named::of(calls),
        })
    }

    fn takes(&self, call: &Call) -> bool {
        match (&call.keys[..], &call.args[..]) {
            ([key], [_, ttl]) => {
                call.op == Op::SetNx && *ttl == self.ttl && !self.named.twice(key.as_bytes())
            }
            _ => false,
        }
    }
}

/// For a node that runs `MSETEX`: puts first, in their order, the calls that [`Together`]
/// takes when there are two or more, so that the batch script sets them with one `MSETEX`
/// (see `scripts::batch`), and returns how many; the others keep their order. Calls on
/// different keys answer the same in either order within one script, which runs alone on the
/// node, and every call on a key that another call names keeps its place among them.
pub(super) fn put_together_first(calls: &mut Vec<Call>) -> usize {
    let Some(together) = Together::of(calls) else {
        return 0;
    };
    if calls
        .iter()
        .filter(|call| together.takes(call))
        .nth(1)
        .is_none()
    {
        return 0;
    }
    let (mut head, mut rest) = (Vec::with_capacity(calls.len()), Vec::new());
    for call in calls.drain(..) {
        if together.takes(&call) {
            head.push(call);
        } else {
            rest.push(call);
        }
    }
    let n = head.len();
    calls.append(&mut head);
    calls.append(&mut rest);
    n
}

/// How many calls at the head of `calls` the batch script sets together with one `MSETEX`
/// (none below two): after [`put_together_first`], those it put first, or fewer if some
/// were dropped since.
pub(super) fn set_together(calls: &[Call]) -> usize {
    let Some(together) = Together::of(calls) else {
        return 0;
    };
    let n = calls.iter().take_while(|call| together.takes(call)).count();
    if n >= 2 {
        n
    } else {
        0
    }
}

/// The EVALSHA (or EVAL) of the batch script for `calls`: `first`, the key count, every
/// call's keys, then the call count and each call's header and arguments; the first
/// `together` calls (`SET NX` calls that [`set_together`] counts, for a node that runs
/// `MSETEX`) go as one group instead: `M`, their count, `key token` for each, `NX PX ttl`.
pub(super) fn batch_command(
    calls: &[Call],
    first: Value,
    natives: Natives,
    together: usize,
) -> Vec<Value> {
    let key_count: usize = calls.iter().map(|call| call.keys.len()).sum();
    let arg_count: usize = calls.iter().map(|call| call.args.len() + 3).sum();
    let mut all = Vec::with_capacity(2 + key_count + 1 + arg_count + 5);
    all.push(first);
    all.push(Value::Integer(key_count as i64));
    for call in calls {
        all.extend(call.keys.iter().cloned().map(Value::from));
    }
    all.push(Value::Integer(calls.len() as i64));
    let (head, calls) = calls.split_at(together);
    if let Some(ttl) = head.first().and_then(|call| call.args.get(1)) {
        all.push(Value::from_static_str("M"));
        all.push(Value::Integer(together as i64));
        for call in head {
            all.extend(call.keys.first().cloned().map(Value::from));
            all.extend(call.args.first().cloned());
        }
        all.extend(["NX", "PX"].map(Value::from_static_str));
        all.push(ttl.clone());
    }
    for call in calls {
        let (number, keys, args) = (call.op.number(), call.keys.len(), call.args.len());
        match scripts::batch_header(number, keys, args, natives) {
            BatchHeader::Inline(letter) => all.push(Value::from_static_str(letter)),
            BatchHeader::Call(numbers) => {
                all.extend(numbers.map(|n| Value::Integer(n as i64)));
            }
        }
        all.extend(call.args.iter().cloned());
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;
    use fred::types::Key;
    use tokio::time::Instant;

    fn call(op: Op, key: &str, args: &[Value]) -> Call {
        Call {
            op,
            vote: true,
            keys: vec![Key::from(key)].into(),
            args: args.to_vec().into(),
            deadline: Instant::now(),
            reply: None,
        }
    }

    fn set(key: &str, ttl: i64) -> Call {
        call(Op::SetNx, key, &[Value::from("t"), Value::Integer(ttl)])
    }

    fn release(key: &str) -> Call {
        call(Op::Release, key, &[Value::from("t"), Value::from("h")])
    }

    /// Puts `calls` together first, and checks their order (each as `op key`) and how many
    /// go together, counted when put and counted again.
    fn assert_put(calls: Vec<Call>, order: &[&str], together: usize) {
        let mut calls = calls;
        let n = put_together_first(&mut calls);
        let seen: Vec<String> = calls
            .iter()
            .map(|c| {
                format!(
                    "{:?} {}",
                    c.op,
                    String::from_utf8_lossy(c.keys[0].as_bytes())
                )
            })
            .collect();
        assert_eq!(
            (seen, n),
            (order.iter().map(|o| o.to_string()).collect(), together)
        );
        assert_eq!(set_together(&calls), n, "counted again");
    }

    #[test]
    fn set_nx_calls_of_one_ttl_on_keys_named_once_go_first_in_their_order() {
        assert_put(
            vec![release("r"), set("a", 100), release("q"), set("b", 100)],
            &["SetNx a", "SetNx b", "Release r", "Release q"],
            2,
        );
    }

    #[test]
    fn a_key_named_twice_keeps_every_call_on_it_in_place() {
        // A release of a, then its next acquisition; c is acquired twice.
        let calls = ["a", "b", "c", "d", "c"].map(|key| set(key, 100));
        assert_put(
            std::iter::once(release("a")).chain(calls).collect(),
            &[
                "SetNx b",
                "SetNx d",
                "Release a",
                "SetNx a",
                "SetNx c",
                "SetNx c",
            ],
            2,
        );
    }

    #[test]
    fn keys_that_share_a_spot_are_kept_out_as_if_named_twice() {
        let first = Named::spot(b"k0");
        let other = (1..100_000)
            .map(|i| format!("k{i}"))
            .find(|key| Named::spot(key.as_bytes()) == first)
            .expect("two keys on one spot");
        let other_set = format!("SetNx {other}");
        assert_put(
            ["k0", &other, "x", "y"].map(|key| set(key, 100)).into(),
            &["SetNx x", "SetNx y", "SetNx k0", &other_set],
            2,
        );
    }

    #[test]
    fn only_the_first_set_nx_calls_ttl_goes_together() {
        assert_put(
            vec![set("a", 100), set("b", 200), set("c", 100)],
            &["SetNx a", "SetNx c", "SetNx b"],
            2,
        );
    }

    #[test]
    fn fewer_than_two_set_nx_calls_change_nothing() {
        assert_put(
            vec![release("r"), set("a", 100), set("a", 100), set("b", 200)],
            &["Release r", "SetNx a", "SetNx a", "SetNx b"],
            0,
        );
        assert_put(vec![], &[], 0);
    }

    #[test]
    fn the_group_goes_as_msetex_arguments_only_where_the_node_runs_it() {
        let mut calls = vec![release("r"), set("a", 100), set("b", 100)];
        let n = put_together_first(&mut calls);
        let text = |natives: Natives| -> Vec<String> {
            let together = if natives.msetex { n } else { 0 };
            batch_command(&calls, Value::from("sha"), natives, together)
                .iter()
                .map(|v| v.as_string().unwrap_or_default())
                .collect()
        };
        let msetex = Natives {
            delifeq: false,
            msetex: true,
        };
        assert_eq!(
            text(msetex),
            [
                "sha", "3", "a", "b", "r", "3", "M", "2", "a", "t", "b", "t", "NX", "PX", "100",
                "r", "t", "h"
            ]
        );
        assert_eq!(
            text(Natives::default()),
            ["sha", "3", "a", "b", "r", "3", "s", "t", "100", "s", "t", "100", "r", "t", "h"]
        );
    }
}
