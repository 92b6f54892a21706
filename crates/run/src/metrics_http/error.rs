//! Why a metrics endpoint did not start: a leaf, so the server's parts and the server
//! share it without importing each other.

use std::net::SocketAddr;

use crate::key::KeyError;

/// Why a metrics endpoint did not start: each names the flag and its address or file.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error("--metrics {addr}: cannot listen: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    /// A certificate, key or token file that cannot be used.
    #[error("{flag} {path}: {why}")]
    File {
        flag: &'static str,
        path: String,
        why: String,
    },
    #[error(transparent)]
    Key(#[from] KeyError),
}
