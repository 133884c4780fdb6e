//! TLS for `rediss://` nodes: the rustls client configuration, built once by
//! [`RedLockBuilder::validate`](crate::RedLockBuilder::validate) from the system's root
//! certificates, an optional private CA bundle and an optional client certificate, so that a
//! bad file is a [`ConfigError`] before anything connects. Every node's client gets a copy.

use std::fmt;
use std::path::{Path, PathBuf};

use fred::types::config::Config as FredConfig;

use crate::config::given::Source;
use crate::config::url::NodeUrl;
use crate::config::Config;
use crate::error::ConfigError;

/// The TLS files as given to the builder.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TlsFiles {
    pub(crate) ca: Option<PathBuf>,
    pub(crate) cert: Option<PathBuf>,
    pub(crate) key: Option<PathBuf>,
}

/// The checked TLS settings of a [`Config`].
#[derive(Clone)]
pub(crate) struct Tls {
    pub(crate) ca: Option<PathBuf>,
    pub(crate) client: Option<(PathBuf, PathBuf)>,
    #[cfg(feature = "tls")]
    rustls: std::sync::Arc<rustls::ClientConfig>,
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The paths only: the rustls configuration would list every root certificate.
        f.debug_struct("Tls")
            .field("ca", &self.ca)
            .field("client", &self.client)
            .finish_non_exhaustive()
    }
}

impl TlsFiles {
    /// Reads and checks the files, if TLS is needed (`rediss`: a `rediss://` node URL) or
    /// any file is given; `None` otherwise.
    pub(crate) fn load(&self, rediss: bool) -> Result<Option<Tls>, ConfigError> {
        let client = match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => Some((cert.clone(), key.clone())),
            (None, None) => None,
            (Some(_), None) => return Err(unpaired("certificate needs its key", "KEY")),
            (None, Some(_)) => return Err(unpaired("key needs its certificate", "CERT")),
        };
        if self.ca.is_none() && client.is_none() && !rediss {
            return Ok(None);
        }
        #[cfg(feature = "tls")]
        {
            let rustls = imp::client_config(self.ca.as_deref(), client.as_ref())?;
            Ok(Some(Tls {
                ca: self.ca.clone(),
                client,
                rustls: std::sync::Arc::new(rustls),
            }))
        }
        #[cfg(not(feature = "tls"))]
        {
            // `rediss://` URLs were refused already.
            Err(ConfigError::InvalidTls(
                "TLS files are given, but quorumlock was built without the `tls` feature".into(),
            ))
        }
    }
}

/// A client certificate or key given without the other (`file` names the missing one's
/// variable).
fn unpaired(what: &str, file: &str) -> ConfigError {
    ConfigError::InvalidTls(format!(
        "a client {what} (tls_client_cert, QUORUMLOCK_TLS_{file}_FILE)"
    ))
}

/// The client library's configuration for `url`: address, credentials, database, and our
/// TLS settings for a `rediss://` URL.
pub(crate) fn fred_config(
    url: &NodeUrl,
    tls: Option<&Tls>,
) -> Result<FredConfig, fred::error::Error> {
    #[cfg(feature = "tls")]
    if let (true, Some(tls)) = (url.tls(), tls) {
        // Parsed as `redis://`: for `rediss://`, fred would build TLS settings of its own
        // (the system's roots only, loaded again for every node).
        let mut config = FredConfig::from_url_centralized(&url.as_plain())?;
        config.tls = Some(fred::types::config::TlsConnector::from((*tls.rustls).clone()).into());
        return Ok(config);
    }
    let _ = tls;
    FredConfig::from_url_centralized(url.as_str())
}

impl Config {
    /// The client library's configuration for node `index` (address, credentials, database,
    /// TLS settings), for the command line's own read-only connections. Not part of the
    /// API: it exposes the client library's types.
    #[doc(hidden)]
    pub fn node_client_config(&self, index: usize) -> Option<Result<FredConfig, ConfigError>> {
        use fred::interfaces::ClientLike;
        let url = self.nodes.get(index)?;
        Some(match self.sources.get(index)? {
            Source::Url => {
                fred_config(url, self.tls.as_ref()).map_err(|e| ConfigError::InvalidUrl {
                    url: url.redacted().to_string(),
                    reason: e.details().to_string(),
                })
            }
            Source::Config(config) => Ok((**config).clone()),
            Source::Client(client) => Ok(client.client_config()),
        })
    }

    /// The CA bundle trusted for `rediss://` nodes besides the system's roots, if any.
    pub fn tls_ca_file(&self) -> Option<&Path> {
        self.tls.as_ref().and_then(|t| t.ca.as_deref())
    }

    /// The client certificate and key files presented to `rediss://` nodes, if any.
    pub fn tls_client_cert(&self) -> Option<(&Path, &Path)> {
        self.tls
            .as_ref()
            .and_then(|t| t.client.as_ref())
            .map(|(cert, key)| (cert.as_path(), key.as_path()))
    }
}

#[cfg(feature = "tls")]
mod imp {
    use std::path::{Path, PathBuf};
    use std::sync::Arc;

    use rustls::pki_types::pem::{self, PemObject};
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    use rustls::{ClientConfig, RootCertStore};

    use crate::error::ConfigError;

    /// The system's roots plus the CA bundle's, and the client certificate if given.
    pub(super) fn client_config(
        ca: Option<&Path>,
        client: Option<&(PathBuf, PathBuf)>,
    ) -> Result<ClientConfig, ConfigError> {
        let mut roots = RootCertStore::empty();
        // rustls-native-certs honours SSL_CERT_FILE and SSL_CERT_DIR. A system store that
        // cannot be read is not fatal: a private CA may be all that is needed.
        let system = rustls_native_certs::load_native_certs();
        for error in &system.errors {
            tracing::warn!(%error, "some system root certificates could not be loaded");
        }
        roots.add_parsable_certificates(system.certs);
        if let Some(ca) = ca {
            for cert in certificates(ca)? {
                roots
                    .add(cert)
                    .map_err(|e| file_error(ca, format!("not a valid CA certificate: {e}")))?;
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| ConfigError::InvalidTls(e.to_string()))?
            .with_root_certificates(roots);
        match client {
            None => Ok(builder.with_no_client_auth()),
            Some((cert, key)) => {
                let chain = certificates(cert)?;
                let key_der = private_key(key)?;
                // rustls's messages name no key material.
                builder.with_client_auth_cert(chain, key_der).map_err(|e| {
                    ConfigError::InvalidTls(format!(
                        "the client certificate `{}` and key `{}` cannot be used: {e}",
                        cert.display(),
                        key.display()
                    ))
                })
            }
        }
    }

    fn read(path: &Path) -> Result<Vec<u8>, ConfigError> {
        std::fs::read(path).map_err(|e| file_error(path, format!("cannot be read: {e}")))
    }

    /// Every certificate in a PEM file; at least one.
    fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, ConfigError> {
        let pem = read(path)?;
        let certs = CertificateDer::pem_slice_iter(&pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| file_error(path, pem_problem(&e, "certificate")))?;
        if certs.is_empty() {
            return Err(file_error(
                path,
                "no PEM certificate (BEGIN CERTIFICATE) in it",
            ));
        }
        Ok(certs)
    }

    /// The first private key in a PEM file (PKCS#8, PKCS#1 or SEC1).
    fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, ConfigError> {
        let pem = read(path)?;
        PrivateKeyDer::from_pem_slice(&pem)
            .map_err(|e| file_error(path, pem_problem(&e, "private key")))
    }

    /// What is wrong with a PEM file, in words that quote nothing from it (pem::Error's
    /// own message may quote a line of the file, which for a key is secret).
    fn pem_problem(e: &pem::Error, what: &str) -> String {
        match e {
            pem::Error::NoItemsFound => format!("no PEM {what} in it"),
            pem::Error::MissingSectionEnd { .. } => "a PEM section has no END line".into(),
            pem::Error::IllegalSectionStart { .. } => "a PEM BEGIN line is malformed".into(),
            pem::Error::Base64Decode(_) => "a PEM section is not valid base64".into(),
            _ => format!("not a PEM {what} file"),
        }
    }

    fn file_error(path: &Path, reason: impl ToString) -> ConfigError {
        ConfigError::TlsFile {
            path: path.to_path_buf(),
            reason: reason.to_string(),
        }
    }
}
