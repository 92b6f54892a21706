//! The io_uring engine: the same kernel sockets and the same measuring rules as the
//! kernel engine (`rr_client`, `rr_server`, `stream`), with the system calls batched.
//! Each worker owns one ring (`SINGLE_ISSUER`, `DEFER_TASKRUN`: completions are posted
//! only when the worker asks, on its own thread) with its sockets registered as fixed
//! files; receives are multishot into a ring of provided buffers, so a connection's
//! receive is submitted once, and one `io_uring_enter` per pass submits every send and
//! reaps every completion of all the worker's connections.
//!
//! The crate is `io-uring` (tokio-rs): maintained, thin and safe where it can be, no C
//! library to build, and it exposes every feature used here (buffer rings, multishot
//! receive, `send_zc`, `EXT_ARG` timeouts).

mod bufs;
mod probe;
mod ring;
pub mod rr_client;
pub mod rr_server;
mod stamped;
pub mod stream;
#[cfg(test)]
mod stream_tests;
#[cfg(test)]
mod tests;
pub mod tx_stamps;

pub use probe::{available, Unavailable};

/// User data of a completion: what it completes (high half) and for which connection or
/// buffer (low half).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Recv = 1,
    Send = 2,
    /// The abort's eventfd became readable.
    Wake = 3,
}

pub(crate) fn user_data(op: Op, i: usize) -> u64 {
    ((op as u64) << 32) | i as u64
}

pub(crate) fn op_of(data: u64) -> (Option<Op>, usize) {
    let op = match data >> 32 {
        1 => Some(Op::Recv),
        2 => Some(Op::Send),
        3 => Some(Op::Wake),
        _ => None,
    };
    (op, (data & 0xffff_ffff) as usize)
}
