//! A script's command with our options: EVALSHA, and EVAL of its body on NOSCRIPT while it
//! may still be sent, as a command of the client itself so that it carries those options.
//! For the queue's commands (`send`) and the scripts sent on their own (the quarantine
//! record, SEED, an election's calls).

use std::time::Duration;

use fred::clients::{Client, WithOptions};
use fred::error::{Error as FredError, ErrorKind};
use fred::interfaces::ClientLike;
use fred::types::config::Options;
use fred::types::{CustomCommand, Key, Value};

use crate::node::scripts::{self, Script};

/// A node's client with the options of every command sent for a lock.
pub(crate) type Sender = WithOptions<Client>;

/// `client` with our own options on every command, whatever the client's defaults (an
/// application's shared client may have none, or re-send commands after a reconnect: see
/// `config/given.rs`).
pub(crate) fn sender(client: &Client, timeout: Duration) -> Sender {
    client.with_options(&Options {
        timeout: Some(timeout),
        max_attempts: Some(1),
        ..Options::default()
    })
}

/// What EVALSHA and EVAL take: `first` (the script's SHA1 or body), the key count, the keys,
/// the arguments.
pub(super) fn eval_args(first: Value, keys: &[Key], args: &[Value]) -> Vec<Value> {
    let mut all = Vec::with_capacity(2 + keys.len() + args.len());
    all.push(first);
    all.push(Value::Integer(keys.len() as i64));
    all.extend(keys.iter().cloned().map(Value::from));
    all.extend(args.iter().cloned());
    all
}

/// A NOSCRIPT whose EVAL fallback may not be sent (see [`run_script_if`]).
pub(super) fn not_resent() -> FredError {
    FredError::new(
        ErrorKind::IO,
        "the connection changed before the script could be sent again",
    )
}

/// `name` (EVALSHA or EVAL) with `args` as a command of `client` itself (see
/// [`script_command`]).
pub(super) async fn custom<R: fred::types::FromValue, C: ClientLike>(
    client: &C,
    name: &'static str,
    args: Vec<Value>,
) -> Result<R, FredError> {
    client
        .custom(CustomCommand::new_static(name, None, false), args)
        .await
}

/// EVALSHA, falling back to EVAL (which caches the script again) on NOSCRIPT if `resend`
/// says that it may still be sent: a call that changes data is sent only on the checked
/// connection, which may have been replaced while the EVALSHA was out. (NOSCRIPT means that
/// nothing ran.)
pub(crate) async fn run_script_if<R: fred::types::FromValue>(
    client: &Sender,
    script: &Script,
    keys: Vec<Key>,
    args: Vec<Value>,
    resend: impl FnOnce() -> bool,
) -> Result<R, FredError> {
    match script_command::<R, _>(client, script, Form::Sha, &keys, &args).await {
        Err(e) if scripts::is_noscript(&e) && resend() => {
            script_command(client, script, Form::Body, &keys, &args).await
        }
        Err(e) if scripts::is_noscript(&e) => Err(not_resent()),
        other => other,
    }
}

/// How a script is named in its command: by SHA1 (EVALSHA) or by its body (EVAL).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Form {
    Sha,
    Body,
}

impl Form {
    /// The command's name and its first argument: EVALSHA and the SHA1, or EVAL and the body.
    pub(super) fn head(self, script: &Script) -> (&'static str, Value) {
        match self {
            Form::Sha => ("EVALSHA", Value::from(script.sha.as_str())),
            Form::Body => ("EVAL", Value::from(script.body.as_ref())),
        }
    }
}

/// EVALSHA or EVAL of `script` as a command of `client` itself, so that it carries
/// `client`'s options (for a [`Sender`]: the node timeout, never re-sent after a reconnect).
/// Not fred's `eval` and `evalsha`: on a `Sender` they carry the inner client's options, an
/// application's shared client's own (design 4.0a).
pub(crate) async fn script_command<R: fred::types::FromValue, C: ClientLike>(
    client: &C,
    script: &Script,
    form: Form,
    keys: &[Key],
    args: &[Value],
) -> Result<R, FredError> {
    let (name, first) = form.head(script);
    custom(client, name, eval_args(first, keys, args)).await
}
