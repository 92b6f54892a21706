//! What a stream side needs of a data plane, and the kernel-socket engine that provides it.
//! Another engine (io_uring, say) implements [`StreamEngine`]; the side does not change.

use std::io;
use std::net::TcpStream;

use sonde_engine::sockopt::tcp_info;
use sonde_engine::stream::ConnEnd;
use sonde_engine::{Placement, StreamConn, StreamWorkers, TcpInfo};

use sonde_results::Engine;

use crate::kind::{kernel_workers, no_engine, Workers};

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
}

/// The engines a stream side can run, by name.
pub const ENGINES: &[Engine] = &[Engine::Kernel];

/// Starts the engine named `name` on `conns` (each with whether this end sends on it).
pub fn start(
    engine: Engine,
    conns: Vec<(TcpStream, bool)>,
    placement: Placement,
    buffer_bytes: usize,
) -> io::Result<Box<dyn StreamEngine>> {
    match engine {
        Engine::Kernel => kernel(conns, placement, buffer_bytes),
        other => Err(no_engine("stream", other)),
    }
}

/// Starts the kernel-socket workers: blocking send/recv, or epoll across connections.
fn kernel(
    conns: Vec<(TcpStream, bool)>,
    placement: Placement,
    buffer_bytes: usize,
) -> io::Result<Box<dyn StreamEngine>> {
    let conns = conns
        .into_iter()
        .map(|(stream, send)| StreamConn { stream, send })
        .collect();
    Ok(Box::new(StreamWorkers::spawn(
        conns,
        placement,
        buffer_bytes,
    )?))
}

kernel_workers!(StreamWorkers);

impl StreamEngine for StreamWorkers {
    fn connections(&self) -> usize {
        StreamWorkers::len(self)
    }
    fn counters(&self, i: usize) -> (u64, u64) {
        StreamWorkers::counters(self, i)
    }
    fn is_sender(&self, i: usize) -> bool {
        StreamWorkers::is_sender(self, i)
    }
    fn tcp_info(&self, i: usize) -> Option<TcpInfo> {
        tcp_info(self.fd(i))
    }
    fn finish(&self) {
        StreamWorkers::finish(self)
    }
    fn join(&mut self) -> Vec<ConnEnd> {
        StreamWorkers::join(self)
    }
}
