//! TLS for the metrics endpoint (`--metrics-tls-cert`, `--metrics-tls-key`): rustls (ring,
//! TLS 1.2 and 1.3) over the same non-blocking sockets, so the deadlines and the one `poll`
//! hold for a handshake as for a request.

use std::io::{self, ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ServerConfig, ServerConnection, StreamOwned};

use super::error::MetricsError;

pub type TlsConfig = Arc<ServerConfig>;

/// The certificate chain and its key, from PEM files; errors name the flag and the file.
/// The key file is checked as a key file is (ours or root's, not readable by others).
pub fn config(cert: &Path, key: &Path) -> Result<TlsConfig, MetricsError> {
    let (c, k) = (cert.display(), key.display());
    let at_cert = |why: String| MetricsError::File {
        flag: "--metrics-tls-cert",
        path: c.to_string(),
        why,
    };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect())
        .map_err(|e| at_cert(e.to_string()))?;
    if chain.is_empty() {
        return Err(at_cert("no CERTIFICATE in it (PEM)".into()));
    }
    let pem = crate::key::read_private("--metrics-tls-key", key)?;
    let private = PrivateKeyDer::from_pem_slice(&pem).map_err(|e| MetricsError::File {
        flag: "--metrics-tls-key",
        path: k.to_string(),
        why: format!("no private key in it (PEM): {e}"),
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| at_cert(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, private)
        .map_err(|e| MetricsError::File {
            flag: "--metrics-tls-key",
            path: format!("{k} and --metrics-tls-cert {c}"),
            why: e.to_string(),
        })?;
    Ok(Arc::new(config))
}

/// A connection's bytes, in the clear or through TLS.
pub enum Wire {
    Plain(TcpStream),
    Tls(Box<StreamOwned<ServerConnection, TcpStream>>),
}

impl Wire {
    pub fn new(stream: TcpStream, tls: Option<&TlsConfig>) -> io::Result<Wire> {
        Ok(match tls {
            None => Wire::Plain(stream),
            Some(config) => {
                let conn = ServerConnection::new(Arc::clone(config)).map_err(io::Error::other)?;
                Wire::Tls(Box::new(StreamOwned::new(conn, stream)))
            }
        })
    }

    pub fn socket(&self) -> &TcpStream {
        match self {
            Wire::Plain(s) => s,
            Wire::Tls(t) => &t.sock,
        }
    }

    /// Whether a TLS handshake is still under way.
    pub fn handshaking(&self) -> bool {
        matches!(self, Wire::Tls(t) if t.conn.is_handshaking())
    }

    /// Whether TLS records wait for the socket to take them (a handshake's, an alert).
    pub fn wants_write(&self) -> bool {
        matches!(self, Wire::Tls(t) if t.conn.wants_write())
    }

    /// Writes what TLS holds, as far as the socket takes it (WouldBlock: wait to write).
    pub fn flush_tls(&mut self) -> io::Result<()> {
        let Wire::Tls(t) = self else { return Ok(()) };
        while t.conn.wants_write() {
            if t.conn.write_tls(&mut t.sock)? == 0 {
                return Err(ErrorKind::WriteZero.into());
            }
        }
        Ok(())
    }

    /// Ends our side: TLS's close_notify (as far as it goes out), then the TCP FIN.
    pub fn close_write(&mut self) {
        if let Wire::Tls(t) = self {
            t.conn.send_close_notify();
        }
        let _ = self.flush_tls();
        let _ = self.socket().shutdown(Shutdown::Write);
    }
}

impl Read for Wire {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Wire::Plain(s) => s.read(buf),
            Wire::Tls(t) => t.read(buf),
        }
    }
}

impl Write for Wire {
    /// Through TLS: what is held goes first, then `buf` is sealed and sent as far as the
    /// socket takes it (the rest goes with the next call).
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if let Wire::Plain(s) = self {
            return s.write(buf);
        }
        self.flush_tls()?;
        let Wire::Tls(t) = self else { unreachable!() };
        let n = t.conn.writer().write(buf)?;
        match self.flush_tls() {
            Err(e) if e.kind() != ErrorKind::WouldBlock => Err(e),
            _ => Ok(n),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        self.flush_tls()
    }
}
