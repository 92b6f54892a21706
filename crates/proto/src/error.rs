//! Errors of the control protocol. `ProtoError` is what went wrong on this side;
//! `PeerError` is what a peer tells us went wrong on its side, carried in `Message::Error`.

use serde::{Deserialize, Serialize};

/// An error the peer reported, typed so the receiver can act on it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PeerError {
    #[error("the agent is busy: it runs as many tests as its --max-tests allows, or holds as many connections in their handshake as it takes from one address; try again when one ends")]
    Busy,
    #[error("protocol version mismatch: agent speaks {agent}, controller speaks {client}; run the same sonde version on both hosts")]
    VersionMismatch { agent: u32, client: u32 },
    #[error("the agent refused the test: invalid {flag}: {reason}")]
    InvalidSpec { flag: String, reason: String },
    #[error("the agent does not run '{test}' (test/engine): is --engine right, is it the same sonde build, and does the agent allow it (sonde serve --allow dpdk,xdp,third-party)?")]
    Unsupported { test: String },
    #[error("the agent refused: {message}")]
    Refused { message: String },
    #[error("the agent requires a key: pass the same key file with --key-file")]
    AuthRequired,
    #[error("the agent refused the key: authentication failed (is --key-file the agent's key?)")]
    AuthFailed,
    #[error("the agent failed: {message}")]
    Internal { message: String },
    #[error("the controller gave up: {message}")]
    Aborted { message: String },
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProtoError {
    #[error("frame of {len} bytes exceeds the {max}-byte limit (is the peer a sonde agent?)")]
    Oversized { len: usize, max: usize },
    #[error("connection closed in the middle of a frame ({have} of {need} bytes)")]
    Truncated { have: usize, need: usize },
    #[error("malformed message: {0}")]
    Malformed(String),
    #[error("peer is not a sonde controller or agent (bad magic)")]
    BadMagic,
    #[error("protocol version mismatch: we speak {ours}, the peer speaks {theirs}; run the same sonde version on both hosts")]
    VersionMismatch { ours: u32, theirs: u32 },
    #[error("unexpected {got} message while {state}")]
    Unexpected {
        state: &'static str,
        got: &'static str,
    },
    #[error("timed out {0}")]
    Timeout(&'static str),
    #[error("peer closed the control connection while {0}")]
    Closed(&'static str),
    #[error("control message {seq} failed its integrity check: altered, replayed or reordered on the way, or sent with another key")]
    BadMac { seq: u64 },
    #[error("the agent could not prove it holds the key and is the agent at {agent}: is --key-file the agent's key, or is something in between impersonating it or handing this session to another agent?")]
    AgentProof { agent: String },
    #[error("the agent does not ask for a key, but this controller has one (--key-file or SONDE_KEY_FILE): refusing an agent that cannot prove the key (start it with --key-file, or drop the key here)")]
    AgentWithoutKey,
    #[error("{0}")]
    Peer(PeerError),
    #[error("misbehaving agent, test ended: {0}")]
    Excess(crate::bounds::Excess),
    #[error("cannot {action} while {state}")]
    InvalidCall {
        action: &'static str,
        state: &'static str,
    },
}
