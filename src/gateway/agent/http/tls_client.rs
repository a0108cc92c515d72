//! The TLS client of the JWKS fetch (`jwks.rs`): rustls with the `ring` provider, trusting
//! the system's CA certificates (read by `rustls-native-certs`: on Linux the file or directory
//! OpenSSL would use, e.g. /etc/ssl/certs, or `SSL_CERT_FILE`/`SSL_CERT_DIR`) plus, for a
//! private issuer, the PEM certificates of `--jwks-ca FILE` (`jwksCa`).
//!
//! Built once at start (reading the trust store is the only I/O besides the handshake);
//! `roots` is the pure step from certificates to a trust store.
//!
//! Never: skip or weaken certificate verification (chain to a trusted CA, validity dates,
//! the URL's host name): there is no switch for it, and a handshake that fails is a failed
//! fetch. Never starts with an empty trust store.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite};

/// What to give instead of an unusable CA file.
const CA_FIX: &str = "give the CA certificate(s) that sign the JWKS server's certificate, in PEM \
                      (-----BEGIN CERTIFICATE-----)";

/// Why the TLS client for the JWKS cannot be set up (refused at start).
#[derive(Debug, thiserror::Error)]
pub enum TlsSetupError {
    #[error("{}: cannot read the CA file: {cause}", path.display())]
    ReadCa {
        path: std::path::PathBuf,
        cause: std::io::Error,
    },
    #[error("cannot set up TLS: {0}")]
    Setup(rustls::Error),
    #[error("{}: not PEM ({cause}); {}", path.display(), CA_FIX)]
    NotPem {
        path: std::path::PathBuf,
        cause: rustls::pki_types::pem::Error,
    },
    #[error(
        "{}: a certificate that cannot be a trust anchor ({source}); {}",
        path.display(),
        CA_FIX
    )]
    NotAnchor {
        path: std::path::PathBuf,
        source: rustls::Error,
    },
    #[error("{}: holds no certificate; {}", .0.display(), CA_FIX)]
    NoCertificate(std::path::PathBuf),
    #[error(
        "no trusted CA certificate: the system trust store (/etc/ssl/certs, or SSL_CERT_FILE / \
         SSL_CERT_DIR) holds none; install the ca-certificates package or give the issuer's CA \
         with --jwks-ca FILE (jwksCa)"
    )]
    EmptyStore,
}

/// A TLS client that verifies the server's certificate against the trust store it was built
/// with.
#[derive(Clone)]
pub struct TlsClient {
    config: Arc<rustls::ClientConfig>,
    /// How many CA certificates it trusts (logged at start).
    pub roots: usize,
}

impl std::fmt::Debug for TlsClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsClient")
            .field("roots", &self.roots)
            .finish()
    }
}

impl TlsClient {
    /// Trusts the system's CA certificates and those of `extra_ca` (a PEM file), if given.
    pub fn new(extra_ca: Option<&Path>) -> Result<TlsClient, TlsSetupError> {
        let system = rustls_native_certs::load_native_certs();
        for e in &system.errors {
            tracing::warn!("the system trust store: {e}");
        }
        let extra = match extra_ca {
            Some(path) => {
                let pem = std::fs::read(path).map_err(|source| TlsSetupError::ReadCa {
                    path: path.to_path_buf(),
                    cause: source,
                })?;
                Some((path, pem))
            }
            None => None,
        };
        let extra = extra.as_ref().map(|(p, pem)| (*p, pem.as_slice()));
        TlsClient::with_roots(system.certs, extra)
    }

    /// Trusts `system` (DER certificates) and the PEM certificates of `extra` (its path, for
    /// errors, and its text).
    pub fn with_roots(
        system: Vec<CertificateDer<'static>>,
        extra: Option<(&Path, &[u8])>,
    ) -> Result<TlsClient, TlsSetupError> {
        let store = roots(system, extra)?;
        let roots = store.len();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(TlsSetupError::Setup)?
            .with_root_certificates(store)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(TlsClient {
            config: Arc::new(config),
            roots,
        })
    }

    /// A TLS session with `host` over `io`, once the handshake verified the host's
    /// certificate (chain, dates, name); else why not.
    pub async fn connect<IO>(
        &self,
        host: &str,
        io: IO,
    ) -> Result<tokio_rustls::client::TlsStream<IO>, String>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        let name = ServerName::try_from(host.to_string())
            .map_err(|e| format!("{host}: not a name a certificate can be checked for ({e})"))?;
        tokio_rustls::TlsConnector::from(self.config.clone())
            .connect(name, io)
            .await
            .map_err(|e| format!("TLS handshake with {host} failed: {e}"))
    }
}

/// The trust store: every parsable certificate of `system` (the system store holds the odd
/// unusable one; skipped) and every certificate of `extra`, each of which must be usable.
pub fn roots(
    system: Vec<CertificateDer<'static>>,
    extra: Option<(&Path, &[u8])>,
) -> Result<rustls::RootCertStore, TlsSetupError> {
    let mut store = rustls::RootCertStore::empty();
    let (_, skipped) = store.add_parsable_certificates(system);
    if skipped > 0 {
        tracing::debug!("{skipped} certificates of the system trust store are not usable");
    }
    if let Some((path, pem)) = extra {
        let mut added = 0;
        for cert in CertificateDer::pem_slice_iter(pem) {
            let cert = cert.map_err(|source| TlsSetupError::NotPem {
                path: path.to_path_buf(),
                cause: source,
            })?;
            store.add(cert).map_err(|source| TlsSetupError::NotAnchor {
                path: path.to_path_buf(),
                source,
            })?;
            added += 1;
        }
        if added == 0 {
            return Err(TlsSetupError::NoCertificate(path.to_path_buf()));
        }
    }
    if store.is_empty() {
        return Err(TlsSetupError::EmptyStore);
    }
    Ok(store)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ca_pem() -> String {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.self_signed(&key).unwrap().pem()
    }

    #[test]
    fn an_extra_ca_file_must_hold_usable_certificates() {
        let path = Path::new("/etc/palisade/ca.pem");
        let pem = ca_pem();
        let store = roots(vec![], Some((path, pem.as_bytes()))).unwrap();
        assert_eq!(store.len(), 1);
        let two = format!("{pem}{}", ca_pem());
        assert_eq!(
            roots(vec![], Some((path, two.as_bytes()))).unwrap().len(),
            2
        );
        for (text, why) in [
            ("", "holds no certificate"),
            ("just text\n", "holds no certificate"),
            (
                "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
                "cannot be a trust anchor",
            ),
            (
                "-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n",
                "not PEM",
            ),
        ] {
            let e = roots(vec![], Some((path, text.as_bytes())))
                .unwrap_err()
                .to_string();
            assert!(e.contains(why), "{text:?}: {e}");
            assert!(e.contains("/etc/palisade/ca.pem"), "names the file: {e}");
            assert!(e.contains("BEGIN CERTIFICATE"), "says the fix: {e}");
        }
    }

    #[test]
    fn an_empty_trust_store_is_refused() {
        let e = roots(vec![], None).unwrap_err().to_string();
        assert!(e.contains("no trusted CA certificate"), "{e}");
        assert!(e.contains("--jwks-ca"), "{e}");
    }

    #[test]
    fn the_system_store_is_read() {
        // The machine's own store (Debian's ca-certificates here): a client can be built
        // without an extra CA, and it trusts more than nothing.
        let client = TlsClient::new(None).unwrap();
        assert!(client.roots > 0);
    }
}
