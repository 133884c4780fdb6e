//! Certificates made for the test, and `redis-server`s that speak TLS with them (each on a
//! TLS port of its own beside the plain one that the test kit uses for its checks).

use std::net::TcpListener;
use std::path::{Path, PathBuf};

use quorumlock::testkit::{LocalQuorum, NodeOptions};
use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

/// A CA, a server certificate and a client certificate it signed, and an unrelated CA; all
/// as PEM files in a temporary directory.
pub struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    pub fn new() -> Pki {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let pki = Pki { dir };
        let (ca, ca_key) = make_ca("quorumlock test CA");
        pki.write("ca.pem", &ca.pem());
        let (other, _) = make_ca("some other CA");
        pki.write("other-ca.pem", &other.pem());
        for (name, purpose, sans) in [
            (
                "server",
                ExtendedKeyUsagePurpose::ServerAuth,
                vec!["localhost".to_string(), "127.0.0.1".to_string()],
            ),
            ("client", ExtendedKeyUsagePurpose::ClientAuth, Vec::new()),
        ] {
            let key = KeyPair::generate().expect("a key");
            let mut params = CertificateParams::new(sans).expect("certificate parameters");
            params.distinguished_name.push(DnType::CommonName, name);
            params.extended_key_usages = vec![purpose];
            let cert = params.signed_by(&key, &ca, &ca_key).expect("a certificate");
            pki.write(&format!("{name}.pem"), &cert.pem());
            pki.write(&format!("{name}-key.pem"), &key.serialize_pem());
        }
        pki
    }

    fn write(&self, name: &str, pem: &str) {
        std::fs::write(self.path(name), pem).expect("a PEM file");
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The CA that signed the server and client certificates.
    pub fn ca(&self) -> PathBuf {
        self.path("ca.pem")
    }

    /// A CA that signed nothing we use.
    pub fn other_ca(&self) -> PathBuf {
        self.path("other-ca.pem")
    }

    pub fn client_cert(&self) -> PathBuf {
        self.path("client.pem")
    }

    pub fn client_key(&self) -> PathBuf {
        self.path("client-key.pem")
    }
}

fn make_ca(name: &str) -> (Certificate, KeyPair) {
    let key = KeyPair::generate().expect("a key");
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let cert = params.self_signed(&key).expect("a CA certificate");
    (cert, key)
}

/// One server with TLS on [`tls_port`](TlsNode::tls_port) (besides its plain port).
pub struct TlsNode {
    pub quorum: LocalQuorum,
    pub tls_port: u16,
}

impl TlsNode {
    /// `rediss://127.0.0.1:TLS_PORT`, with `credentials@` if not empty.
    pub fn url(&self, credentials: &str) -> String {
        let at = if credentials.is_empty() { "" } else { "@" };
        format!("rediss://{credentials}{at}127.0.0.1:{}", self.tls_port)
    }

    /// `redis://127.0.0.1:PORT`, the plain port.
    pub fn plain_url(&self) -> String {
        self.quorum.node(0).url()
    }
}

/// Starts `n` servers with TLS; `client_certs`: whether they require a client certificate.
pub async fn tls_nodes(
    pki: &Pki,
    n: usize,
    client_certs: bool,
    password: Option<&str>,
) -> Vec<TlsNode> {
    let mut nodes = Vec::with_capacity(n);
    while nodes.len() < n {
        nodes.push(tls_node(pki, client_certs, password).await);
    }
    nodes
}

async fn tls_node(pki: &Pki, client_certs: bool, password: Option<&str>) -> TlsNode {
    let path = |name: &str| pki.path(name).to_string_lossy().into_owned();
    let mut last_error = None;
    // The TLS port is picked here, free when picked: another process may take it before the
    // server binds it, so try a few.
    for _ in 0..5 {
        let tls_port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let opts = NodeOptions {
            requirepass: password.map(String::from),
            extra_args: vec![
                "--tls-port".into(),
                tls_port.to_string(),
                "--tls-cert-file".into(),
                path("server.pem"),
                "--tls-key-file".into(),
                path("server-key.pem"),
                "--tls-ca-cert-file".into(),
                path("ca.pem"),
                "--tls-auth-clients".into(),
                (if client_certs { "yes" } else { "no" }).into(),
            ],
            ..NodeOptions::default()
        };
        match LocalQuorum::start_with(1, opts).await {
            Ok(quorum) => return TlsNode { quorum, tls_port },
            Err(e) => last_error = Some(e),
        }
    }
    panic!("no TLS server started: {last_error:?}");
}
