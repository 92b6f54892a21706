//! What a packet-rate side needs of a data plane, and the kernel-socket engine that
//! provides it: sendmmsg senders on the controller, a SO_REUSEPORT group of recvmmsg
//! receivers on the agent. AF_XDP and DPDK engines implement the same two traits.

use std::io;
use std::net::UdpSocket;
use std::time::{Duration, Instant};

use sonde_engine::pps::{FlowRx, PpsReceiver, PpsSender, RxPlan, TxPlan};
use sonde_engine::Placement;
use sonde_results::PpsSpec;

use crate::kind::rr::poll_of;
use crate::kind::{kernel_workers, no_engine, Workers, KERNEL};

/// Running senders.
pub trait TxEngine: Workers {
    /// Packets and payload bytes sent so far (monotonic).
    fn counts(&self) -> (u64, u64);
    /// Packets sent per flow, and the first error a worker met.
    fn join(&mut self) -> (Vec<u64>, Option<String>);
}

/// Running receivers.
pub trait RxEngine: Workers {
    /// Packets and payload bytes received so far (monotonic).
    fn counts(&self) -> (u64, u64);
    /// Datagrams that were not this test's.
    fn foreign(&self) -> u64;
    /// Per-flow accounting, and the first error a worker met.
    fn join(&mut self) -> (Vec<FlowRx>, Option<String>);
}

/// The engines a packet-rate side can run, by name.
pub const ENGINES: &[&str] = &[KERNEL];

/// Starts the spec's engine's senders on `flows`; they stop by themselves at the window's
/// end.
pub fn sender(
    spec: &PpsSpec,
    flows: Vec<UdpSocket>,
    placement: Placement,
    cookie: u32,
) -> io::Result<Box<dyn TxEngine>> {
    match spec.execution.engine.as_str() {
        KERNEL => kernel_tx(spec, flows, placement, cookie),
        other => Err(no_engine("pps", other)),
    }
}

/// Starts the spec's engine's receivers on `sockets`.
pub fn receiver(
    spec: &PpsSpec,
    sockets: Vec<UdpSocket>,
    cookie: u32,
) -> io::Result<Box<dyn RxEngine>> {
    match spec.execution.engine.as_str() {
        KERNEL => kernel_rx(spec, sockets, cookie),
        other => Err(no_engine("pps", other)),
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
        stop_at: Instant::now()
            + Duration::from_millis(spec.timing.warmup_ms + spec.timing.duration_ms),
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
    let plan = RxPlan {
        cpus: spec.execution.server_cpus.clone(),
        batch: spec.batch as usize,
        poll: poll_of(spec.poll),
        flows: spec.flows as usize,
        cookie,
    };
    Ok(Box::new(PpsReceiver::spawn(sockets, plan)?))
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
