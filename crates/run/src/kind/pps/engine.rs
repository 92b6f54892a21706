//! What a packet-rate side needs of a data plane, and the kernel-socket engine that
//! provides it: sendmmsg senders on the controller, a SO_REUSEPORT group of recvmmsg
//! receivers on the agent. The AF_XDP engine (`xdp`) and the DPDK one (`dpdk`,
//! dpdk-testpmd) implement the same two traits.

use std::io;
use std::net::{IpAddr, UdpSocket};
use std::time::{Duration, Instant};

use sonde_engine::pps::{FlowRx, PpsReceiver, PpsSender, RxPlan, TxPlan};
use sonde_engine::Placement;
use sonde_results::{Engine, PortCounters, PpsSpec};

use super::{dpdk, xdp};
use crate::kind::rr::poll_of;
use crate::kind::{kernel_workers, no_engine, Workers};

/// Running senders.
pub trait TxEngine: Workers {
    /// Packets and payload bytes sent so far (monotonic).
    fn counts(&self) -> (u64, u64);
    /// Packets sent per flow, and the first error a worker met.
    fn join(&mut self) -> (Vec<u64>, Option<String>);
    /// A DPDK port's own counters, once joined.
    fn port(&self) -> Option<PortCounters> {
        None
    }
}

/// Running receivers.
pub trait RxEngine: Workers {
    /// Packets and payload bytes received so far (monotonic).
    fn counts(&self) -> (u64, u64);
    /// Datagrams that were not this test's.
    fn foreign(&self) -> u64;
    /// Who counts the packets dropped before the receivers took them, once joined.
    fn drops(&self) -> Drops {
        Drops::SocketGroup
    }
    /// Per-flow accounting, and the first error a worker met.
    fn join(&mut self) -> (Vec<FlowRx>, Option<String>);
    /// A DPDK port's own counters, once joined.
    fn port(&self) -> Option<PortCounters> {
        None
    }
}

/// Where a receiving side's drops are counted.
pub enum Drops {
    /// The kernel socket group's own counter (/proc/net/udp), read by the side.
    SocketGroup,
    /// Counted by the engine's own rings or device.
    Counted(u64),
    /// The engine's device does not count them.
    NotCounted,
}

/// The engines a packet-rate side can run, by name.
pub const ENGINES: &[Engine] = &[Engine::Kernel, Engine::Xdp, Engine::Dpdk];

/// What a sending side opened before `Start`: the flows (kernel sockets holding their
/// source ports) and a bypass engine's own port.
pub struct TxPort {
    pub flows: Vec<UdpSocket>,
    pub dpdk: Option<dpdk::TxPort>,
}

/// Opens what the spec's engine sends on; only DPDK has anything to start this early
/// (testpmd takes a second or two to bring its port up).
pub fn open_tx(spec: &PpsSpec, flows: Vec<UdpSocket>, placement: &Placement) -> io::Result<TxPort> {
    let dpdk = match spec.execution.engine {
        Engine::Dpdk => Some(dpdk::open_tx(spec, &flows, placement)?),
        _ => None,
    };
    Ok(TxPort { flows, dpdk })
}

/// Starts the spec's engine's senders on `port`; they stop by themselves at the window's
/// end.
pub fn sender(
    spec: &PpsSpec,
    port: TxPort,
    placement: Placement,
    cookie: u32,
) -> io::Result<Box<dyn TxEngine>> {
    let TxPort { flows, dpdk } = port;
    match (spec.execution.engine, dpdk) {
        (Engine::Kernel, _) => kernel_tx(spec, flows, placement, cookie),
        (Engine::Xdp, _) => xdp::sender(spec, flows, placement.cpus, placement.threads, cookie),
        (Engine::Dpdk, Some(d)) => dpdk::sender(spec, d, flows),
        (other, _) => Err(no_engine("pps", other)),
    }
}

/// Where a receiving side takes packets from: its kernel socket group, and for a bypass
/// engine what it opened before `Ready`.
pub struct RxPort {
    pub sockets: Vec<UdpSocket>,
    pub xdp: Option<xdp::RxPort>,
    pub dpdk: Option<dpdk::RxPort>,
}

/// Opens what the spec's engine receives on, beside the socket group bound to `port`
/// (which holds the port for every engine).
pub fn open_rx(
    spec: &PpsSpec,
    sockets: Vec<UdpSocket>,
    (ip, peer): (IpAddr, IpAddr),
) -> io::Result<RxPort> {
    let port = sockets[0].local_addr()?.port();
    let (mut xdp, mut dpdk) = (None, None);
    match spec.execution.engine {
        Engine::Xdp => xdp = Some(xdp::open_rx(spec, ip, peer, port)?),
        Engine::Dpdk => dpdk = Some(dpdk::open_rx(spec, ip)?),
        _ => {}
    }
    Ok(RxPort { sockets, xdp, dpdk })
}

/// Starts the spec's engine's receivers on `port`.
pub fn receiver(spec: &PpsSpec, port: RxPort, cookie: u32) -> io::Result<Box<dyn RxEngine>> {
    match (spec.execution.engine, port.xdp, port.dpdk) {
        (Engine::Kernel, _, _) => kernel_rx(spec, port.sockets, cookie),
        (Engine::Xdp, Some(x), _) => xdp::receiver(spec, x, cookie),
        (Engine::Dpdk, _, Some(d)) => dpdk::receiver(d),
        (other, _, _) => Err(no_engine("pps", other)),
    }
}

/// Starts kernel-socket senders.
fn kernel_tx(
    spec: &PpsSpec,
    flows: Vec<UdpSocket>,
    placement: Placement,
    cookie: u32,
) -> io::Result<Box<dyn TxEngine>> {
    let plan = TxPlan {
        placement,
        payload_bytes: spec.payload_bytes() as usize,
        batch: spec.batch as usize,
        rate_pps: spec.rate_pps,
        stop_at: senders_stop_at(spec),
        cookie,
        gso: spec.gso,
    };
    Ok(Box::new(PpsSender::spawn(flows, plan)?))
}

/// Starts a kernel-socket receiver on each socket of a SO_REUSEPORT group.
fn kernel_rx(
    spec: &PpsSpec,
    sockets: Vec<UdpSocket>,
    cookie: u32,
) -> io::Result<Box<dyn RxEngine>> {
    Ok(Box::new(PpsReceiver::spawn(
        sockets,
        rx_plan(spec, cookie),
    )?))
}

/// When every engine's senders stop by themselves: the end of warm-up and window.
pub(super) fn senders_stop_at(spec: &PpsSpec) -> Instant {
    Instant::now() + Duration::from_millis(spec.timing.warmup_ms + spec.timing.duration_ms)
}

/// What every engine's receivers are told.
pub(super) fn rx_plan(spec: &PpsSpec, cookie: u32) -> RxPlan {
    RxPlan {
        cpus: spec.execution.server_cpus.clone(),
        batch: spec.batch as usize,
        poll: poll_of(spec.poll),
        flows: spec.flows as usize,
        cookie,
    }
}

kernel_workers!(PpsSender, PpsReceiver);

impl TxEngine for PpsSender {
    fn counts(&self) -> (u64, u64) {
        PpsSender::counts(self)
    }
    fn join(&mut self) -> (Vec<u64>, Option<String>) {
        PpsSender::join(self)
    }
}

impl RxEngine for PpsReceiver {
    fn counts(&self) -> (u64, u64) {
        PpsReceiver::counts(self)
    }
    fn foreign(&self) -> u64 {
        PpsReceiver::foreign(self)
    }
    fn join(&mut self) -> (Vec<FlowRx>, Option<String>) {
        PpsReceiver::join(self)
    }
}
