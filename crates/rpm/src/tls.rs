//! TLS for both ends (rustls with ring). The server: TLS 1.3 only (the draft's endpoint is
//! HTTP/2 over TLS; 1.3 is one round trip), ALPN `h2`, a certificate from PEM files or a
//! self-signed one made at start whose SHA-256 fingerprint is printed so that a client can
//! check it. The client: the system's CA bundle or `--ca`'s, or, only when asked
//! (`--insecure`), any certificate.

use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use sha2::Digest;

/// Where a Debian-like system keeps its CA bundle.
pub const SYSTEM_CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{flag} {path}: {why}")]
    File {
        flag: &'static str,
        path: String,
        why: String,
    },
    #[error("cannot make a self-signed certificate: {0}")]
    SelfSigned(String),
    #[error("{0}")]
    Rustls(#[from] rustls::Error),
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A server's TLS: its configuration and its certificate's SHA-256 (hex, colon-free).
pub struct ServerTls {
    pub config: Arc<rustls::ServerConfig>,
    pub fingerprint: String,
}

/// The chain and key from PEM files (`cert_flag`/`key_flag` name them in errors).
pub fn server_from_files(
    cert: &Path,
    key: &Path,
    cert_flag: &'static str,
    key_flag: &'static str,
) -> Result<ServerTls, TlsError> {
    let file_err = |flag, path: &Path, why: String| TlsError::File {
        flag,
        path: path.display().to_string(),
        why,
    };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .and_then(|c| c.collect())
        .map_err(|e| file_err(cert_flag, cert, e.to_string()))?;
    if chain.is_empty() {
        return Err(file_err(
            cert_flag,
            cert,
            "no CERTIFICATE in it (PEM)".into(),
        ));
    }
    let private = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| file_err(key_flag, key, format!("no private key in it (PEM): {e}")))?;
    server_config(chain, private)
}

/// A self-signed certificate for `names` (host names or addresses), made now.
pub fn server_self_signed(names: Vec<String>) -> Result<ServerTls, TlsError> {
    let made = rcgen::generate_simple_self_signed(names)
        .map_err(|e| TlsError::SelfSigned(e.to_string()))?;
    let cert = made.cert.der().clone();
    let key = PrivateKeyDer::try_from(made.key_pair.serialize_der())
        .map_err(|e| TlsError::SelfSigned(e.to_string()))?;
    server_config(vec![cert], key)
}

fn server_config(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<ServerTls, TlsError> {
    let fingerprint = fingerprint(&chain[0]);
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
    // HTTP/2 first; HTTP/1.1 for clients that ask for it (mach's idle latency probe).
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(ServerTls {
        config: Arc::new(config),
        fingerprint,
    })
}

/// A certificate's SHA-256, as lowercase hex.
pub fn fingerprint(cert: &CertificateDer<'_>) -> String {
    sha2::Sha256::digest(cert.as_ref())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// How the client checks the server's certificate.
#[derive(Debug, Clone)]
pub enum Trust {
    /// The system's CA bundle.
    System,
    /// The CAs (or the self-signed certificate) of a PEM file (`--ca`).
    File(std::path::PathBuf),
    /// Any certificate (`--insecure`): on purpose only.
    Anything,
}

/// The client's TLS (TLS 1.2 or 1.3, ALPN `h2`).
pub fn client_config(trust: &Trust) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?;
    let mut config = match trust {
        Trust::Anything => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnything))
            .with_no_client_auth(),
        Trust::System | Trust::File(_) => {
            let (flag, path) = match trust {
                Trust::File(p) => ("--ca", p.as_path()),
                _ => ("the system's CA bundle", Path::new(SYSTEM_CA_BUNDLE)),
            };
            let mut roots = rustls::RootCertStore::empty();
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
                .and_then(|c| c.collect())
                .map_err(|e| TlsError::File {
                    flag,
                    path: path.display().to_string(),
                    why: e.to_string(),
                })?;
            let (added, _) = roots.add_parsable_certificates(certs);
            if added == 0 {
                return Err(TlsError::File {
                    flag,
                    path: path.display().to_string(),
                    why: "no usable CERTIFICATE in it (PEM)".into(),
                });
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        }
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

/// `--insecure`: every certificate is taken (signatures still checked, so the handshake
/// is a real one), and the result says so.
#[derive(Debug)]
struct AcceptAnything;

impl ServerCertVerifier for AcceptAnything {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algs = provider().signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, &algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algs = provider().signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, &algs)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}
