//! A minimal RESP2 client: one command over a fresh TCP connection, its reply parsed.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::TestkitError;

/// A RESP2 reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Simple string, e.g. `OK` or `PONG`.
    Status(String),
    /// Error reply, e.g. `ERR unknown command`.
    Error(String),
    /// Integer reply.
    Integer(i64),
    /// Bulk string; `None` is the nil bulk string.
    Bulk(Option<Vec<u8>>),
    /// Array; `None` is the nil array.
    Array(Option<Vec<Reply>>),
}

impl Reply {
    /// The text of a status reply or of a UTF-8 bulk string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Self::Status(s) => Some(s),
            Self::Bulk(Some(b)) => std::str::from_utf8(b).ok(),
            _ => None,
        }
    }

    /// The value of an integer reply.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Self::Integer(i) => Some(*i),
            _ => None,
        }
    }

    /// Whether this is a nil bulk string or nil array.
    pub fn is_nil(&self) -> bool {
        matches!(self, Self::Bulk(None) | Self::Array(None))
    }
}

/// Sends one command over a fresh TCP connection, after `AUTH` if `requirepass` is set.
pub(super) async fn command_at(
    addr: SocketAddr,
    requirepass: Option<&str>,
    args: &[&str],
) -> Result<Reply, TestkitError> {
    if args.is_empty() {
        return Err(protocol("empty command"));
    }
    let mut stream = TcpStream::connect(addr).await?;
    let mut out = Vec::new();
    if let Some(pass) = requirepass {
        encode_command(&mut out, &["AUTH", pass]);
    }
    encode_command(&mut out, args);
    stream.write_all(&out).await?;
    let mut buf = Vec::new();
    if requirepass.is_some() {
        if let Reply::Error(message) = read_reply(&mut stream, &mut buf).await? {
            return Err(TestkitError::Auth {
                port: addr.port(),
                message,
            });
        }
    }
    read_reply(&mut stream, &mut buf).await
}

pub(super) fn protocol(msg: impl Into<String>) -> TestkitError {
    TestkitError::Protocol(msg.into())
}

pub(super) fn encode_command(out: &mut Vec<u8>, args: &[&str]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
}

pub(super) async fn read_reply(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
) -> Result<Reply, TestkitError> {
    loop {
        if let Some((reply, used)) = parse_reply(buf)? {
            buf.drain(..used);
            return Ok(reply);
        }
        if stream.read_buf(buf).await? == 0 {
            return Err(protocol("connection closed before a complete reply"));
        }
    }
}

/// Parses one RESP2 reply from the start of `buf`: `Ok(None)` if more bytes are needed,
/// otherwise the reply and the number of bytes it used.
pub(super) fn parse_reply(buf: &[u8]) -> Result<Option<(Reply, usize)>, TestkitError> {
    let Some(end) = buf.windows(2).position(|w| w == b"\r\n") else {
        return Ok(None);
    };
    let (kind, line) = buf[..end]
        .split_first()
        .ok_or_else(|| protocol("empty line"))?;
    let line = String::from_utf8_lossy(line).into_owned();
    let mut used = end + 2;
    let int = || {
        line.parse::<i64>()
            .map_err(|_| protocol(format!("invalid integer {line:?}")))
    };
    let reply = match kind {
        b'+' => Reply::Status(line),
        b'-' => Reply::Error(line),
        b':' => Reply::Integer(int()?),
        b'$' => match usize::try_from(int()?) {
            Err(_) => Reply::Bulk(None),
            Ok(len) => {
                let data_end = used
                    .checked_add(len)
                    .ok_or_else(|| protocol("bulk too long"))?;
                let Some(data) = buf.get(used..data_end) else {
                    return Ok(None);
                };
                match buf.get(data_end..data_end + 2) {
                    None => return Ok(None),
                    Some(b"\r\n") => {}
                    Some(_) => return Err(protocol("bulk string not terminated by CRLF")),
                }
                let data = data.to_vec();
                used = data_end + 2;
                Reply::Bulk(Some(data))
            }
        },
        b'*' => match usize::try_from(int()?) {
            Err(_) => Reply::Array(None),
            Ok(n) => {
                let mut items = Vec::with_capacity(n.min(1024));
                for _ in 0..n {
                    let Some((item, len)) = parse_reply(&buf[used..])? else {
                        return Ok(None);
                    };
                    items.push(item);
                    used += len;
                }
                Reply::Array(Some(items))
            }
        },
        other => {
            return Err(protocol(format!(
                "unknown reply type {:?}",
                char::from(*other)
            )))
        }
    };
    Ok(Some((reply, used)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_complete_and_partial_replies() {
        let full = b"*3\r\n$3\r\nfoo\r\n$-1\r\n:42\r\n+OK\r\n";
        let expected = Reply::Array(Some(vec![
            Reply::Bulk(Some(b"foo".to_vec())),
            Reply::Bulk(None),
            Reply::Integer(42),
        ]));
        let parsed = parse_reply(full).ok().flatten();
        assert_eq!(parsed, Some((expected, full.len() - 5)));
        for cut in 0..full.len() - 5 {
            assert!(
                matches!(parse_reply(&full[..cut]), Ok(None)),
                "cut at {cut}"
            );
        }
        assert!(matches!(
            parse_reply(b"?x\r\n"),
            Err(TestkitError::Protocol(_))
        ));
    }
}
