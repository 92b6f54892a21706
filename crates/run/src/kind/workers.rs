//! What every engine's running workers answer, whatever their kind: the part of each
//! kind's engine traits they share, and the receive mode the spec asks of them.

use std::time::Duration;

use sonde_engine::wait::Poll;
use sonde_results::PollMode;

/// Running workers of any kind and engine: what every side asks of them besides its
/// kind's own counters (each kind's engine trait adds those).
pub trait Workers: Send {
    /// The engine, recorded in the result.
    fn engine(&self) -> sonde_results::Engine;
    /// Every worker has ended.
    fn all_done(&self) -> bool;
    /// Every worker stops now.
    fn abort(&self);
    /// How a kernel-bypass engine left the socket path; `None` for kernel sockets.
    fn bypass(&self) -> Option<sonde_results::Bypass> {
        None
    }
    /// Where the workers run when the engine decided it itself (DPDK's lcores).
    fn placed(&self) -> Option<sonde_engine::Placement> {
        None
    }
    /// A process doing the engine's work (DPDK's testpmd), whose CPU is the side's too.
    fn helper(&self) -> Option<u32> {
        None
    }
}

/// The kernel engine's worker types: their own `all_done` and `abort` answer.
macro_rules! kernel_workers {
    ($($t:ty),+) => {$(
        impl $crate::kind::workers::Workers for $t {
            fn engine(&self) -> sonde_results::Engine {
                sonde_results::Engine::Kernel
            }
            fn all_done(&self) -> bool {
                <$t>::all_done(self)
            }
            fn abort(&self) {
                <$t>::abort(self)
            }
        }
    )+};
}
pub(crate) use kernel_workers;

/// The engine's receive mode for the spec's.
pub fn poll_of(mode: PollMode) -> Poll {
    match mode {
        PollMode::Block => Poll::Block,
        PollMode::Busy => Poll::Busy,
        PollMode::Hybrid { spin_us } => Poll::Hybrid(Duration::from_micros(spin_us as u64)),
    }
}
