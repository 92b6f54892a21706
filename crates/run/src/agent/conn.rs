//! The agent's end of one test's control connection, and why a test ended without
//! results: what the test's steps (`one_test`, `data_conns`) share.

use std::io;
use std::time::Duration;

use sonde_proto::{AgentSession, PeerError, ProtoError};

use super::sources::HANDSHAKE_WITHIN;
use crate::control::Link;

/// How long a refused controller may take to read our last frame before we close.
pub(super) const LINGER: Duration = Duration::from_millis(300);

/// Why a test on the agent ended without results; logged, one line.
#[derive(Debug, thiserror::Error)]
pub enum TestError {
    #[error("refused: {0}")]
    Refused(String),
    #[error("agent shutting down")]
    ShuttingDown,
    #[error("{0}")]
    Protocol(#[from] ProtoError),
    #[error("control connection: {0}")]
    Io(#[from] io::Error),
    #[error("controller lost during the test: {0}")]
    Lost(String),
    /// Before `Setup`: logged as a refusal (`refusals`), since anyone can cause it.
    #[error("{0}")]
    Handshake(Box<TestError>),
    #[error("no test set up within {:.0} s of connecting (the handshake's deadline)", HANDSHAKE_WITHIN.as_secs_f64())]
    TooSlow,
}

/// The agent's end of one test: its session and control link.
pub struct Conn {
    pub session: AgentSession,
    pub link: Link,
}

impl Conn {
    /// Tells the controller why, closes gracefully, and returns the error to log.
    pub(super) fn refuse(&mut self, error: PeerError) -> TestError {
        let msg = error.to_string();
        self.session.refuse(error);
        let _ = self.link.send(&mut self.session);
        self.link.close_gracefully(LINGER);
        TestError::Refused(msg)
    }
}
