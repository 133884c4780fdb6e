//! What a client error means for a node: its [`NodeErrorKind`], and a message in words.
//!
//! fred reports I/O and TLS failures with the `Debug` form of the underlying error
//! (`Custom { kind: InvalidData, error: InvalidCertificate(UnknownIssuer) }`); this is where
//! those become "TLS error: the server's certificate is not signed by a trusted CA". Server
//! replies (WRONGPASS, NOPERM, ...) are kept as the server wrote them: they never contain a
//! password.

use fred::error::{Error as FredError, ErrorKind};

use crate::error::NodeErrorKind;

/// The kind of a failure.
pub(crate) fn classify(e: &FredError) -> NodeErrorKind {
    let details = e.details();
    let server_says = |prefix: &str| details.starts_with(prefix);
    match e.kind() {
        ErrorKind::Timeout => NodeErrorKind::Timeout,
        ErrorKind::Auth => NodeErrorKind::Auth,
        #[cfg(feature = "tls")]
        ErrorKind::Tls => NodeErrorKind::Tls,
        _ if server_says("NOAUTH") || server_says("WRONGPASS") || server_says("NOPERM") => {
            NodeErrorKind::Auth
        }
        _ if tls_problem(details).is_some() => NodeErrorKind::Tls,
        // fred could not hand the command to a connection (it is down): reported as
        // `Unknown` with this message, or as `Routing`.
        _ if server_says("Failed to route command") => NodeErrorKind::Io,
        ErrorKind::IO | ErrorKind::Canceled | ErrorKind::Routing | ErrorKind::Backpressure => {
            NodeErrorKind::Io
        }
        ErrorKind::Protocol | ErrorKind::Parse => NodeErrorKind::Protocol,
        _ => NodeErrorKind::Server,
    }
}

/// The kind of a failure and what happened, in words (a timeout is "timed out": the
/// caller knows how long it waited).
pub(crate) fn describe(e: &FredError) -> (NodeErrorKind, String) {
    let kind = classify(e);
    let details = e.details();
    let message = match kind {
        NodeErrorKind::Timeout => "timed out".into(),
        NodeErrorKind::Tls => {
            tls_problem(details).unwrap_or_else(|| "the TLS handshake failed".into())
        }
        NodeErrorKind::Io => io_problem(details),
        _ if details.is_empty() => e.kind().to_str().to_string(),
        // A server's error reply: one line, as written.
        _ => details.lines().next().unwrap_or_default().to_string(),
    };
    (kind, message)
}

/// The first identifier after `marker(` in `details`: `UnknownIssuer` in
/// `InvalidCertificate(UnknownIssuer)`, `NotValidForNameContext` in
/// `InvalidCertificate(NotValidForNameContext { .. })`.
fn variant_after<'a>(details: &'a str, marker: &str) -> Option<&'a str> {
    let start = details.find(marker)? + marker.len();
    let rest = &details[start..];
    let end = rest
        .find(|c: char| !c.is_ascii_alphanumeric())
        .unwrap_or(rest.len());
    Some(&rest[..end])
}

/// A TLS failure in words, if `details` (rustls's error, as fred formats it) is one.
fn tls_problem(details: &str) -> Option<String> {
    if let Some(cert) = variant_after(details, "InvalidCertificate(") {
        let why = match cert {
            "UnknownIssuer" => "the server's certificate is not signed by a trusted CA (give \
                                its CA with tls_ca_file or QUORUMLOCK_TLS_CA_FILE)"
                .to_string(),
            c if c.starts_with("NotValidForName") => {
                "the server's certificate is not valid for this host name".into()
            }
            c if c.starts_with("Expired") => "the server's certificate has expired".into(),
            c if c.starts_with("NotValidYet") => "the server's certificate is not valid yet".into(),
            "Revoked" => "the server's certificate is revoked".into(),
            other => format!("the server's certificate was refused ({other})"),
        };
        return Some(why);
    }
    if let Some(alert) = variant_after(details, "AlertReceived(") {
        let why = match alert {
            "CertificateRequired" => "the server requires a client certificate (give one \
                                      with tls_client_cert, or QUORUMLOCK_TLS_CERT_FILE and \
                                      QUORUMLOCK_TLS_KEY_FILE)"
                .to_string(),
            "BadCertificate"
            | "UnknownCA"
            | "CertificateUnknown"
            | "UnsupportedCertificate"
            | "CertificateExpired"
            | "CertificateRevoked"
            | "AccessDenied" => {
                format!("the server refused our client certificate ({alert})")
            }
            "HandshakeFailure" => "the server refused the TLS handshake (HandshakeFailure: it \
                                   may require a client certificate)"
                .into(),
            other => format!("the server ended the TLS handshake ({other})"),
        };
        return Some(why);
    }
    if details.contains("InvalidContentType") || details.contains("CorruptMessage") {
        return Some("the server does not speak TLS on this port (a plain redis:// port?)".into());
    }
    if let Some(what) = variant_after(details, "PeerIncompatible(") {
        return Some(format!(
            "no TLS version or cipher suite in common with the server ({what})"
        ));
    }
    if let Some(what) = variant_after(details, "InvalidMessage(") {
        return Some(format!("the server sent an invalid TLS message ({what})"));
    }
    if details.contains("NoCertificatesPresented") {
        return Some("the server presented no certificate".into());
    }
    if details.contains("InvalidDnsNameError") {
        return Some("the host name cannot be checked against a certificate".into());
    }
    None
}

/// An I/O failure in words: the OS message of `Os { .., message: "Connection refused" }`,
/// the inner message of `Custom { kind: .., error: "..." }`, or the kind of `Kind(..)`.
fn io_problem(details: &str) -> String {
    let quoted = |after| Some(details.split_once(after)?.1.split_once('"')?.0);
    if let Some(message) = quoted("message: \"") {
        return message.to_lowercase();
    }
    if let Some(message) = quoted("error: \"") {
        return message.to_string();
    }
    if let Some(kind) = variant_after(details, "Kind(").or_else(|| variant_after(details, "kind: "))
    {
        return words(kind);
    }
    details.to_string()
}

/// `UnexpectedEof` as "unexpected eof".
fn words(identifier: &str) -> String {
    let mut out = String::new();
    for c in identifier.chars() {
        if c.is_ascii_uppercase() && !out.is_empty() {
            out.push(' ');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io(details: &str) -> FredError {
        FredError::new(ErrorKind::IO, details.to_string())
    }

    #[test]
    fn tls_failures_are_tls_errors_in_words() {
        for (details, says) in [
            (
                "Custom { kind: InvalidData, error: InvalidCertificate(UnknownIssuer) }",
                "not signed by a trusted CA",
            ),
            (
                "Custom { kind: InvalidData, error: InvalidCertificate(NotValidForNameContext { \
                 expected: DnsName(\"x\"), presented: [] }) }",
                "not valid for this host name",
            ),
            (
                "Custom { kind: InvalidData, error: AlertReceived(CertificateRequired) }",
                "requires a client certificate",
            ),
            (
                "Custom { kind: InvalidData, error: InvalidMessage(InvalidContentType) }",
                "does not speak TLS",
            ),
        ] {
            assert_eq!(describe(&io(details)).0, NodeErrorKind::Tls, "{details}");
            assert!(describe(&io(details)).1.contains(says), "{details}");
        }
    }

    #[test]
    fn io_failures_keep_their_os_message_only() {
        let refused =
            io("Os { code: 111, kind: ConnectionRefused, message: \"Connection refused\" }");
        assert_eq!(
            describe(&refused),
            (NodeErrorKind::Io, "connection refused".into())
        );
        let eof = io("Kind(UnexpectedEof)");
        assert_eq!(describe(&eof), (NodeErrorKind::Io, "unexpected eof".into()));
    }

    #[test]
    fn auth_refusals_are_auth_errors_as_the_server_wrote_them() {
        let wrong = FredError::new(
            ErrorKind::Auth,
            "WRONGPASS invalid username-password pair or user is disabled.",
        );
        assert_eq!(
            describe(&wrong),
            (
                NodeErrorKind::Auth,
                "WRONGPASS invalid username-password pair or user is disabled.".into()
            )
        );
        let noperm = FredError::new(ErrorKind::Unknown, "NOPERM this user has no permissions");
        assert_eq!(describe(&noperm).0, NodeErrorKind::Auth);
    }
}
