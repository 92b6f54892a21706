//! What a stream side needs of a data plane ([`StreamEngine`]: running workers), and what
//! an engine implements to be in the stream kind's table ([`StreamBackend`]). Each engine
//! (kernel sockets, io_uring) is a module implementing [`StreamBackend`]; the side does
//! not change.

use std::io;

use sonde_engine::stream::ConnEnd;
use sonde_engine::{Placement, StreamConn, TcpInfo};
use sonde_results::{SpecError, StreamSpec};

use crate::kind::table::Named;
use crate::kind::workers::Workers;

/// Running stream workers, seen from the side that samples them.
pub trait StreamEngine: Workers {
    /// Connections, in test-wide index order.
    fn connections(&self) -> usize;
    /// Monotonic (bytes, calls) of connection `i`.
    fn counters(&self, i: usize) -> (u64, u64);
    fn is_sender(&self, i: usize) -> bool;
    /// The kernel's view of connection `i`, where there is one.
    fn tcp_info(&self, i: usize) -> Option<TcpInfo>;
    /// Senders half-close and stop; receivers read on until the peer's FIN.
    fn finish(&self);
    /// Waits for the workers; how each connection ended, by index.
    fn join(&mut self) -> Vec<ConnEnd>;
    /// What the engine has to say for the result once it ended (how its sends went).
    fn notes(&self) -> Vec<String> {
        Vec::new()
    }
}

/// The socket engines' `StreamEngine` over their `conns()` (`sonde_engine::stream::Conns`)
/// and their own `finish` and `join`; the items after the type are the engine's own.
macro_rules! socket_stream_engine {
    ($t:ty $(, $extra:item)*) => {
        impl $crate::kind::stream::engine::StreamEngine for $t {
            fn connections(&self) -> usize {
                self.conns().len()
            }
            fn counters(&self, i: usize) -> (u64, u64) {
                self.conns().counters(i)
            }
            fn is_sender(&self, i: usize) -> bool {
                self.conns().is_sender(i)
            }
            fn tcp_info(&self, i: usize) -> Option<sonde_engine::TcpInfo> {
                sonde_engine::sockopt::tcp_info(self.conns().fd(i))
            }
            fn finish(&self) {
                <$t>::finish(self)
            }
            fn join(&mut self) -> Vec<sonde_engine::stream::ConnEnd> {
                <$t>::join(self)
            }
            $($extra)*
        }
    };
}
pub(super) use socket_stream_engine;

/// A stream engine: starts its workers on the connections both ends opened.
pub trait StreamBackend: Named + Sync {
    /// Refuses, naming the flag, what of `spec` this engine does not run (checked once,
    /// with the engine, by `kind::refuse` wherever a spec is admitted).
    fn refuse(&self, _spec: &StreamSpec) -> Result<(), SpecError> {
        Ok(())
    }
    /// The flag of `spec` that only this engine runs, when it is asked (`--zerocopy`).
    fn owns(&self, _spec: &StreamSpec) -> Option<&'static str> {
        None
    }
    /// Bytes of buffers a connection of `buffer_bytes` buffers takes (the kernel engine:
    /// its one buffer; io_uring: the send buffer and its receive buffers), for the memory
    /// budget.
    fn bytes_per_connection(&self, buffer_bytes: u32) -> u64 {
        u64::from(buffer_bytes)
    }
    /// Starts the workers on `conns` (each with whether this end sends on it), as
    /// `spec` asks (its buffer size, zero-copy sends).
    fn start(
        &self,
        conns: Vec<StreamConn>,
        placement: Placement,
        spec: &StreamSpec,
    ) -> io::Result<Box<dyn StreamEngine>>;
}
