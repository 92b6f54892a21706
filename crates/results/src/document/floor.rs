//! The tool's own floor (`--self-noise`), measured before a ping or rpc: rr's prelude, a
//! leaf the document's inputs and rr's section both use.

use serde::{Deserialize, Serialize};

use crate::latency::LatencySummary;

/// The tool's own floor: the client's loop against an echo in its own process over a
/// local socket pair, no network; a test's tail close to it is the tool's or the host's,
/// not the path's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SelfNoise {
    /// `unix_stream` (TCP tests) or `unix_seqpacket` (UDP tests: a request a message).
    pub socket: String,
    pub seconds: f64,
    /// Round trips in the window.
    pub messages: u64,
    pub latency_ns: LatencySummary,
}

/// What the rr kind measured on the controller before its test: the floor when the spec
/// asked for it, or why it was not measured (kept as a note on the client's side).
#[derive(Debug, Clone, PartialEq)]
pub struct RrPrelude {
    pub self_noise: Result<SelfNoise, NoFloor>,
}

/// Why the floor was not measured (a note on the client's side, not a failed test).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum NoFloor {
    /// The floor is this host's; the client side ran on the agent named.
    #[error("the client side ran on {0}, not on this host")]
    ClientElsewhere(String),
    /// A spinning loop (`poll`: its `--poll` label) would leave its echo no CPU of its own.
    #[error("not measured: the {poll} loop and its echo would spin on the same CPUs, so the floor would be the scheduler's time slice (give the workers fewer CPUs than this process may use, or --poll block)")]
    SharedCpus { poll: String },
    /// The local socket pair or its threads failed.
    #[error("{0}")]
    Failed(String),
    #[error("no round trip completed")]
    NoRoundTrip,
}
