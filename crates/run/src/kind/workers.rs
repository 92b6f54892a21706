//! What every engine's running workers answer, whatever their kind: the part of each
//! kind's engine traits they share, and the receive mode the spec asks of them.

use std::io;
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

/// The `Workers` of a socket engine's sides over a [`Lifecycle`] (`stage`) of its worker
/// types: done until started, then as their workers answer; `engine` says which engine a
/// side is (the kernel's, or what its spawner drives: system calls or io_uring).
macro_rules! staged_workers {
    (engine = $e:expr; $($t:ty => $w:ty),+) => {$(
        impl $crate::kind::workers::Workers for $t {
            fn engine(&self) -> sonde_results::Engine {
                let engine: fn(&Self) -> sonde_results::Engine = $e;
                engine(self)
            }
            fn all_done(&self) -> bool {
                self.stage.running().is_none_or(<$w>::all_done)
            }
            fn abort(&self) {
                if let Some(w) = self.stage.running() {
                    w.abort()
                }
            }
        }
    )+};
}
pub(crate) use staged_workers;

/// The engine's receive mode for the spec's.
pub fn poll_of(mode: PollMode) -> Poll {
    match mode {
        PollMode::Block => Poll::Block,
        PollMode::Busy => Poll::Busy,
        PollMode::Hybrid { spin_us } => Poll::Hybrid(Duration::from_micros(spin_us as u64)),
    }
}

/// An engine's side over its life: what it opened before `Start`/`Ready`, then the workers
/// started on it. Before the start nothing runs: nothing is counted and every worker is
/// done, so a side's engine is one object from opening to joining.
pub enum Lifecycle<O, W> {
    Opened(O),
    Running(W),
    /// The start failed, having taken what was opened.
    Failed,
}

impl<O, W> Lifecycle<O, W> {
    /// What was opened, until the start.
    pub fn opened(&self) -> Option<&O> {
        match self {
            Lifecycle::Opened(o) => Some(o),
            _ => None,
        }
    }

    /// Starts the workers on what was opened; a second start is refused.
    pub fn start(&mut self, spawn: impl FnOnce(O) -> io::Result<W>) -> io::Result<()> {
        let Lifecycle::Opened(opened) = std::mem::replace(self, Lifecycle::Failed) else {
            return Err(io::Error::other("the workers were started already"));
        };
        *self = Lifecycle::Running(spawn(opened)?);
        Ok(())
    }

    /// The running workers, once started.
    pub fn running(&self) -> Option<&W> {
        match self {
            Lifecycle::Running(w) => Some(w),
            _ => None,
        }
    }

    pub fn running_mut(&mut self) -> Option<&mut W> {
        match self {
            Lifecycle::Running(w) => Some(w),
            _ => None,
        }
    }
}
