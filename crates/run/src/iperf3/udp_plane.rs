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
use sonde_engine::sockopt::socket_drops;
use sonde_engine::wait::Poll;
use sonde_proto::iperf3::udp;
use sonde_results::{Engine, PpsSpec};

use crate::kind::pps::{Drops, RxEngine};
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
    /// Every stream's socket (a second handle on it) and its drop count when handed over:
    /// each socket's own drops are counted, not only those of a port's.
    taps: Vec<(UdpSocket, u64)>,
}

impl Rx {
    /// Receivers for `sockets`, each given a receive buffer for bursts; `seen` gets their
    /// per-stream figures when joined.
    pub fn new(spec: &PpsSpec, wire: Wire, sockets: Vec<UdpSocket>, seen: Seen) -> Rx {
        let mut taps = Vec::new();
        for s in &sockets {
            // As large as the host allows; a smaller one only drops sooner (counted).
            let _ = socket2::SockRef::from(s).set_recv_buffer_size(RX_BUFFER_BYTES);
            if let Ok(tap) = s.try_clone() {
                if let Ok(at) = socket_drops(&tap) {
                    taps.push((tap, at));
                }
            }
        }
        // A socket whose count cannot be read: none is claimed for any.
        if taps.len() != sockets.len() {
            taps.clear();
        }
        Rx {
            spec: spec.clone(),
            wire,
            stage: Lifecycle::Opened(sockets),
            seen,
            taps,
        }
    }

    /// Each stream socket's drops since it was handed over, in stream order; `None` when
    /// any cannot be read.
    pub fn socket_drops(&self) -> Option<Vec<u64>> {
        if self.taps.is_empty() {
            return None;
        }
        let since = |(s, at): &(UdpSocket, u64)| Some(socket_drops(s).ok()?.saturating_sub(*at));
        self.taps.iter().map(since).collect()
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
    /// Every stream socket's own count, summed (they may share a port with other
    /// sockets, or each have its own).
    fn drops(&self) -> Drops {
        match self.socket_drops() {
            Some(d) => Drops::Counted(d.iter().sum()),
            None => Drops::NotCounted,
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel's own count for the socket on loopback `port`: /proc/net/udp's drops.
    fn proc_drops(port: u16) -> u64 {
        sonde_probe::udp::drops_on_port(std::path::Path::new("/"), port).unwrap()
    }

    /// Two streams' sockets (`-P 2`), the second shrunk to the kernel's least receive
    /// buffer and sent a burst nobody reads: its drops are counted, exactly as the kernel
    /// counts them, where the first socket's port alone (the count before) read 0.
    #[test]
    fn every_stream_sockets_drops_are_counted_not_the_first_ones_only() {
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let socks: Vec<UdpSocket> = (0..2)
            .map(|_| {
                let s = UdpSocket::bind("127.0.0.1:0").unwrap();
                s.connect(tx.local_addr().unwrap()).unwrap();
                s
            })
            .collect();
        let ports: Vec<u16> = socks
            .iter()
            .map(|s| s.local_addr().unwrap().port())
            .collect();
        let second = socks[1].try_clone().unwrap();
        let spec = PpsSpec {
            flows: 2,
            ..PpsSpec::default()
        };
        let rx = Rx::new(&spec, wire(false), socks, Seen::default());
        // After Rx::new gave every socket its large buffer: the second's set to the least.
        socket2::SockRef::from(&second)
            .set_recv_buffer_size(1)
            .unwrap();
        for (port, n) in [(ports[0], 5), (ports[1], 2000)] {
            for _ in 0..n {
                tx.send_to(&[7u8; 1000], ("127.0.0.1", port)).unwrap();
            }
        }
        let kernel: Vec<u64> = ports.iter().map(|p| proc_drops(*p)).collect();
        eprintln!("kernel's drops per socket: {kernel:?}");
        assert_eq!(kernel[0], 0, "the first socket had room for its 5");
        assert!(kernel[1] > 1000, "the second overflowed: {kernel:?}");
        assert_eq!(rx.socket_drops(), Some(kernel.clone()));
        match rx.drops() {
            Drops::Counted(d) => assert_eq!(d, kernel[0] + kernel[1]),
            _ => panic!("every socket's drops counted"),
        }
    }
}
