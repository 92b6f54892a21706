//! Why `sonde rpm` stopped: each error names the far end or the flag at fault.

use std::net::SocketAddr;

use crate::config::ConfigError;
use crate::tls;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("{0}: {1}")]
    Url(String, String),
    #[error("cannot resolve {0}: {1}")]
    Resolve(String, String),
    #[error("cannot connect to {0}: {1}")]
    Connect(SocketAddr, std::io::Error),
    #[error("TLS with {0}: {1}")]
    Tls(String, String),
    #[error("{0}'s certificate does not verify ({1}); --ca FILE trusts its CA, --insecure accepts any certificate on purpose")]
    Certificate(String, String),
    #[error("{0} does not speak HTTP/2 over TLS (ALPN h2 not agreed); the draft requires it")]
    NotHttp2(String),
    #[error("HTTP/2: {0}")]
    Http(hyper::Error),
    #[error("{0} redirects ({1} to {2}); the draft's test endpoint must answer itself")]
    Redirect(String, u16, String),
    #[error(
        "{0} answered with Content-Encoding {1}; the draft requires identity (no compression)"
    )]
    Compressed(String, String),
    #[error("{0} answered {1}: {2}")]
    Status(String, u16, String),
    #[error("{0} is not the draft's configuration: {1}")]
    Config(String, ConfigError),
    #[error("{0} took longer than {1} s")]
    Timeout(String, u64),
    #[error("{0}")]
    TlsSetup(#[from] tls::TlsError),
}
