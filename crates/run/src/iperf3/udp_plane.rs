//! iperf3's UDP data plane: each stream a connected socket that opens with iperf3's
//! connect handshake (the client's 4 bytes, the server's 4 back), then the packet-rate
//! kind's own senders and receivers over those sockets writing and reading iperf3's
//! datagrams (`sonde_engine::pps::Wire::Iperf3`), inside a `PpsSide` as any pps test.
//! The receivers' iperf3 figures (lost, out of order, jitter per stream) are kept for the
//! results an iperf3 peer expects.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use sonde_engine::pps::{FlowRx, PpsReceiver, RxPlan, Wire};
use sonde_engine::wait::Poll;
use sonde_proto::iperf3::udp;
use sonde_results::{Engine, PpsSpec};

use crate::kind::pps::RxEngine;
use crate::kind::workers::{staged_workers, Lifecycle};

/// Receive buffer of each stream's socket: absorbs bursts between two reads.
const RX_BUFFER_BYTES: usize = 4 << 20;
/// Largest datagram the receivers read whole (their buffers' size).
pub const MAX_DATAGRAM_BYTES: u32 = sonde_engine::pps::IPERF3_DATAGRAM_BYTES as u32;

/// The wire of a test with `wide` counters.
pub fn wire(wide: bool) -> Wire {
    Wire::Iperf3 { wide }
}

/// Client: one stream's socket connected to the server at `addr`, marked `tos`, through
/// the handshake: sends CONNECT once (a second would open the server's next stream) and
/// waits for the reply until `until`: one deadline for all the test's streams, so a
/// server answering each just in time cannot hold the client a wait per stream.
pub fn connect(addr: SocketAddr, tos: Option<u8>, until: Instant) -> io::Result<UdpSocket> {
    let any: SocketAddr = match addr {
        SocketAddr::V4(_) => (std::net::Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let s = UdpSocket::bind(any)?;
    s.connect(addr)?;
    sonde_engine::marks::set_tos_if(std::os::fd::AsRawFd::as_raw_fd(&s), tos)?;
    s.send(&udp::CONNECT)?;
    let mut buf = [0u8; 64];
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "no reply to a stream's UDP connect datagram in time",
            ));
        }
        s.set_read_timeout(Some(left))?;
        match s.recv(&mut buf) {
            Ok(n) if udp::is_reply(&buf[..n]) => break,
            // Anything else before the reply is not the handshake's: waited past.
            Ok(_) => continue,
            Err(e) if sonde_engine::wait::timed_out(&e) => continue,
            Err(e) => return Err(e),
        }
    }
    s.set_read_timeout(None)?;
    Ok(s)
}

/// The senders of a test on its streams' sockets: the kernel engine's, in iperf3's form.
pub use crate::kind::pps::KernelFlows as Tx;

/// What the receivers counted per stream, once joined (iperf3's figures in each).
pub type Seen = Arc<Mutex<Vec<FlowRx>>>;

/// The receivers of a test, one a stream's socket.
pub struct Rx {
    spec: PpsSpec,
    wire: Wire,
    stage: Lifecycle<Vec<UdpSocket>, PpsReceiver>,
    seen: Seen,
}

impl Rx {
    /// Receivers for `sockets`, each given a receive buffer for bursts; `seen` gets their
    /// per-stream figures when joined.
    pub fn new(spec: &PpsSpec, wire: Wire, sockets: Vec<UdpSocket>, seen: Seen) -> Rx {
        for s in &sockets {
            // As large as the host allows; a smaller one only drops sooner (counted).
            let _ = socket2::SockRef::from(s).set_recv_buffer_size(RX_BUFFER_BYTES);
        }
        Rx {
            spec: spec.clone(),
            wire,
            stage: Lifecycle::Opened(sockets),
            seen,
        }
    }
}

impl Rx {
    /// The running receivers' counts, for a guard beside the side driving them.
    pub fn live_counts(&self) -> Option<sonde_engine::pps::RxCounts> {
        self.stage.running().map(PpsReceiver::live_counts)
    }
}

impl RxEngine for Rx {
    fn notes(&self) -> Vec<String> {
        Vec::new()
    }
    fn start(&mut self, cookie: u32) -> io::Result<()> {
        let plan = RxPlan {
            cpus: self.spec.execution.server_cpus.clone(),
            batch: self.spec.batch as usize,
            poll: Poll::Block,
            flows: self.spec.flows as usize,
            cookie,
            read_tos: false,
            tos_by: Default::default(),
        };
        let wire = self.wire;
        self.stage
            .start(|sockets| PpsReceiver::spawn_wire(sockets, plan, wire))
    }
    fn counts(&self) -> (u64, u64) {
        self.stage.running().map_or((0, 0), PpsReceiver::counts)
    }
    fn foreign(&self) -> u64 {
        self.stage.running().map_or(0, PpsReceiver::foreign)
    }
    fn jitter_s(&self) -> Option<Vec<f64>> {
        self.stage.running().and_then(PpsReceiver::jitter_s)
    }
    fn join(&mut self) -> (Vec<FlowRx>, Option<String>) {
        let w = self.stage.running_mut();
        let (flows, err) = w.map(PpsReceiver::join).unwrap_or_default();
        if let Ok(mut seen) = self.seen.lock() {
            *seen = flows.clone();
        }
        (flows, err)
    }
}

staged_workers!(engine = |_| Engine::Kernel; Rx => PpsReceiver);
