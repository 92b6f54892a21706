//! One test end to end from the controller's side: connect, handshake, open the data
//! connections through the test's kind, drive the shared control loop, collect the
//! agent's results, build the document. Errors before the start are errors; anything
//! that goes wrong after it still yields a document, marked partial, with what was
//! measured.

use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Instant;

use sonde_proto::{ClientSession, PeerError, ProtoError, Timeouts};
use sonde_results::{IntervalSample, TestSpec};

use crate::control::Link;
use crate::kind::{self, Kind, OpenError, CONNECT_TIMEOUT};

mod busy;
mod direct;
mod running;
pub mod stamp_from;
pub mod third_party;

pub use busy::BUSY_RETRY_FOR;
pub use direct::run_test;
pub use running::{handshake, Handshake, Record, Running};

pub const SOFTWARE: &str = concat!("sonde ", env!("CARGO_PKG_VERSION"));

#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    #[error("cannot resolve host '{host}': {reason}")]
    Resolve { host: String, reason: String },
    #[error("cannot connect to the agent at {addr}: {source} (is `sonde serve` running there?)")]
    Connect {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("agent at {addr}: {source}")]
    Protocol {
        addr: SocketAddr,
        source: ProtoError,
    },
    #[error("control connection to {addr}: {source}")]
    Io {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Open(#[from] OpenError),
    #[error("interrupted before the test started")]
    Interrupted,
    #[error("agent at {addr}: {}; tried {tries} times in {secs:.1} s (a controller tries a busy agent for up to {within_s:.0} s, waiting 0.1 s doubling to 1 s between tries) and gave up", PeerError::Busy)]
    Busy {
        addr: SocketAddr,
        tries: u32,
        secs: f64,
        within_s: f64,
    },
}

pub struct TestRequest {
    pub host: String,
    pub port: u16,
    pub spec: TestSpec,
    /// The exact command line, for the record.
    pub command: String,
    /// The agent's pre-shared key, when it requires one (both agents' with `from`).
    pub key: Option<sonde_proto::Key>,
    /// A test between two agents: this one runs the client side against `host`.
    pub from: Option<String>,
    /// A fleet's run: its pair, recorded in the document.
    pub fleet: Option<sonde_results::document::FleetPair>,
}

/// What the live display gets: interval `index` as each side measured it.
pub struct LiveInterval<'a> {
    pub client: Option<&'a IntervalSample>,
    pub server: Option<&'a IntervalSample>,
}

pub fn resolve(host: &str, port: u16) -> Result<SocketAddr, ControllerError> {
    let err = |reason: String| ControllerError::Resolve {
        host: host.to_string(),
        reason,
    };
    let mut addrs = (host, port)
        .to_socket_addrs()
        .map_err(|e| err(e.to_string()))?;
    addrs.next().ok_or_else(|| err("no address found".into()))
}

pub fn now_rfc3339() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

/// What every test starts from, whichever host runs its client side: the serving agent's
/// address, the start time, the test's kind and the spec it will fit to the path.
pub(crate) struct Begun {
    pub server: SocketAddr,
    pub started_at: String,
    pub kind: &'static dyn Kind,
    pub spec: TestSpec,
}

/// Resolves the serving agent and checks that the spec's kind runs on its engine.
pub(crate) fn begin(req: &TestRequest) -> Result<Begun, ControllerError> {
    let server = resolve(&req.host, req.port)?;
    let started_at = now_rfc3339();
    kind::check_engine(&req.spec).map_err(OpenError::Spec)?;
    let kind = kind::of(&req.spec).expect("check_engine refuses a spec without a kind");
    Ok(Begun {
        server,
        started_at,
        kind,
        spec: req.spec.clone(),
    })
}

/// A fresh controller session for `spec`, with its nonce and the request's key.
/// The session with the agent at `agent` (the address dialled, which the proofs name).
pub(crate) fn session(req: &TestRequest, spec: &TestSpec, agent: SocketAddr) -> ClientSession {
    ClientSession::new(
        spec.clone(),
        SOFTWARE,
        &req.command,
        Timeouts::default(),
        Instant::now(),
    )
    .with_nonce(crate::random::nonce())
    .with_key(req.key.clone())
    .dialling(agent.ip())
    .with_ticket_at(unix_ms())
}

/// This host's wall clock in ms since the epoch, for `Hello`'s ticket.
pub(crate) fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The control connection to the agent at `addr`.
pub(crate) fn connect(addr: SocketAddr) -> Result<Link, ControllerError> {
    let control = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)
        .map_err(|source| ControllerError::Connect { addr, source })?;
    Link::new(control).map_err(|source| ControllerError::Io { addr, source })
}

#[cfg(test)]
mod tests;
