//! What both ends' sessions have in common, so that one loop can carry bytes and time
//! between a socket and either of them.

use std::time::Instant;

use crate::{AgentSession, ClientSession, ProtoError};

pub trait Session {
    /// The next frame to write, if any.
    fn poll_transmit(&mut self) -> Option<Vec<u8>>;
    /// When `handle_timeout` must be called at the latest.
    fn poll_timeout(&self) -> Option<Instant>;
    fn handle_bytes(&mut self, bytes: &[u8], now: Instant) -> Result<(), ProtoError>;
    /// End of stream from the peer.
    fn handle_eof(&mut self) -> Result<(), ProtoError>;
    fn handle_timeout(&mut self, now: Instant) -> Result<(), ProtoError>;
}

macro_rules! session {
    ($t:ty) => {
        impl Session for $t {
            fn poll_transmit(&mut self) -> Option<Vec<u8>> {
                <$t>::poll_transmit(self)
            }
            fn poll_timeout(&self) -> Option<Instant> {
                <$t>::poll_timeout(self)
            }
            fn handle_bytes(&mut self, bytes: &[u8], now: Instant) -> Result<(), ProtoError> {
                <$t>::handle_bytes(self, bytes, now)
            }
            fn handle_eof(&mut self) -> Result<(), ProtoError> {
                <$t>::handle_eof(self)
            }
            fn handle_timeout(&mut self, now: Instant) -> Result<(), ProtoError> {
                <$t>::handle_timeout(self, now)
            }
        }
    };
}

session!(ClientSession);
session!(AgentSession);
