//! The commands that carry calls: EVALSHA of one call's script or of the batch script, EVAL
//! on NOSCRIPT while it may still be sent, each with the node's own options.

use std::time::Duration;

use fred::clients::Client;
use fred::error::{Error as FredError, ErrorKind};
use fred::types::Value;
use tokio::time::Instant;

use super::call::{timed_out, Call, Failure};
use super::deadlines::{command_timeout, expire, within_deadlines};
use super::eval::{custom, eval_args, not_resent, script_command, sender, Form};
use super::groups::{batch_command, put_together_first, set_together};
use super::op::Op;
use super::reply::Reply;
use crate::node::admission::{Admission, Clearance};
use crate::node::scripts::{self, Script, BATCH, SET_NX_ALONE};

/// One call alone (`calls` holds it), not a vote: its script.
pub(super) async fn send_one(
    client: &Client,
    timeout: Duration,
    calls: &mut Vec<Call>,
    admission: &Admission,
) {
    let Some(call) = calls.first() else { return };
    let (op, vote) = (call.op, call.vote);
    let resend = || !vote || admission.clearance(client) == Clearance::Clear;
    let answer = run_calls(client, timeout, calls, op.script(), single_command, resend).await;
    if op.deletes() {
        clean_up_after(client, timeout, &answer, calls.iter());
    }
    if let Some(call) = calls.first_mut() {
        call.answer(answer.map_err(Failure::Node));
    }
}

/// The EVALSHA (or EVAL) of one call: `first` (the script's SHA1 or body), the key count, the
/// keys and the arguments.
fn single_command(calls: &[Call], first: Value) -> Vec<Value> {
    calls
        .first()
        .map_or_else(Vec::new, |call| eval_args(first, &call.keys, &call.args))
}

/// Several calls as one call of the batch script; each gets its own element of the reply.
pub(super) async fn send_batch(
    client: &Client,
    timeout: Duration,
    calls: &mut Vec<Call>,
    admission: &Admission,
) {
    let votes = calls.iter().any(|call| call.vote);
    let resend = || !votes || admission.clearance(client) == Clearance::Clear;
    let natives = admission.natives();
    let together = if natives.msetex {
        put_together_first(calls)
    } else {
        0
    };
    // The calls sent: these, or fewer if some are dropped before the EVAL fallback.
    let sent = calls.len();
    // A lone SET NX goes as its own script, which answers as the batch of it would.
    let alone = matches!(calls.as_slice(), [call] if call.op == Op::SetNx);
    let command = |calls: &[Call], first| {
        if alone {
            return single_command(calls, first);
        }
        let together = match calls.len() {
            n if n == sent => together,
            _ if natives.msetex => set_together(calls),
            _ => 0,
        };
        batch_command(calls, first, natives, together)
    };
    let script: &Script = if alone { &SET_NX_ALONE } else { &BATCH };
    let reply = run_calls(client, timeout, calls, script, command, resend).await;
    match reply.and_then(|reply| Reply::read(reply, calls.len())) {
        Ok(reply) => reply.answer(client, admission, votes, calls),
        Err(error) => {
            clean_up_after(
                client,
                timeout,
                &Err(error.clone()),
                calls.iter().filter(|call| call.op.deletes()),
            );
            for call in calls.iter_mut() {
                call.answer(Err(Failure::Node(error.clone())));
            }
        }
    }
}

/// The command of `script` carrying `calls` (built by `command` from the script's SHA1 or
/// body): EVALSHA, then EVAL on NOSCRIPT if `resend` says that it may still be sent (see
/// [`run_script_if`](super::eval::run_script_if)), each within the calls' deadlines. Before the EVAL, the calls whose
/// callers stopped waiting are dropped (NOSCRIPT means that nothing ran).
async fn run_calls(
    client: &Client,
    timeout: Duration,
    calls: &mut Vec<Call>,
    script: &Script,
    command: impl Fn(&[Call], Value) -> Vec<Value>,
    resend: impl FnOnce() -> bool,
) -> Result<Value, FredError> {
    let options = sender(client, command_timeout(calls, timeout));
    let (name, sha) = Form::Sha.head(script);
    let sent = custom(&options, name, command(calls, sha));
    match within_deadlines(calls, sent).await {
        Err(e) if scripts::is_noscript(&e) && resend() => {
            expire(calls, Instant::now());
            if calls.is_empty() {
                return Err(timed_out());
            }
            let options = sender(client, command_timeout(calls, timeout));
            let (name, body) = Form::Body.head(script);
            let sent = custom(&options, name, command(calls, body));
            within_deadlines(calls, sent).await
        }
        Err(e) if scripts::is_noscript(&e) => Err(not_resent()),
        other => other,
    }
}

/// After a release (or discard) timed out: its EVALSHA may still run later, on a node that was frozen,
/// and it answers NOSCRIPT there if the node never cached the script, when nobody waits to
/// send the fallback. Queue the script body right behind it on the same connection, so that
/// the node runs the delete either way (it is idempotent for our token).
fn clean_up_after<'a>(
    client: &Client,
    timeout: Duration,
    reply: &Result<Value, FredError>,
    releases: impl IntoIterator<Item = &'a Call>,
) {
    if !matches!(reply, Err(e) if *e.kind() == ErrorKind::Timeout) {
        return;
    }
    let client = sender(client, timeout);
    for call in releases {
        let client = client.clone();
        let (op, keys, args) = (call.op, call.keys.clone(), call.args.clone());
        tokio::spawn(async move {
            let _: Result<Value, FredError> =
                script_command(&client, op.script(), Form::Body, &keys, &args).await;
        });
    }
}
