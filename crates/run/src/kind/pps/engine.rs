//! What an engine implements to be in the packet-rate table ([`PpsBackend`]: preflight and
//! what each end opens), each end's side of it from opening to joining ([`TxEngine`],
//! [`RxEngine`]), and what every engine's workers are told.

use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use sonde_engine::pps::{Blocked, FlowRx, RxPlan, Sending};
use sonde_engine::Placement;
use sonde_results::{PortCounters, PpsSpec, Role, SpecError};

use crate::kind::budget;
use crate::kind::table::Named;
use crate::kind::workers::{poll_of, Workers};

/// Receive buffer of each packet-rate socket: absorbs bursts between two recvmmsg calls.
pub const RX_BUFFER_BYTES: usize = 8 << 20;

/// The controller's side of an engine: what it opened before `Start` (the flows' sockets,
/// testpmd), then the senders started on it.
pub trait TxEngine: Workers {
    /// Starts the senders; they stop by themselves at the window's end.
    fn start(&mut self, placement: Placement, cookie: u32) -> io::Result<()>;
    /// Packets and payload bytes sent so far (monotonic).
    fn counts(&self) -> (u64, u64);
    /// The sends held back by the queue ahead so far (monotonic); `None`: not counted
    /// (a bypass engine's own rings).
    fn blocked(&self) -> Option<Blocked> {
        None
    }
    /// Packets sent per flow, and the first error a worker met.
    fn join(&mut self) -> (Vec<u64>, Option<String>);
    /// A DPDK port's own counters, once joined.
    fn port(&self) -> Option<PortCounters> {
        None
    }
}

/// The agent's side of an engine: what it opened before `Ready` (the socket group, a
/// bypass engine's sockets or testpmd), then the receivers started on it.
pub trait RxEngine: Workers {
    /// Notes on how it receives (the socket group's buffers, or a bypass engine's own).
    fn notes(&self) -> Vec<String>;
    /// The cookie is known and the sender not yet told: what must count from the test's
    /// first datagram (the kernel engine's marks filter) is put in place.
    fn before_ready(&mut self, _cookie: u32) {}
    /// Starts the receivers.
    fn start(&mut self, cookie: u32) -> io::Result<()>;
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
    /// Datagrams by the TOS byte they arrived with (over the whole test) and those
    /// without one, when the spec marks its packets and the engine reads them.
    fn arrived_tos(&self) -> Option<(Vec<(u8, u64)>, u64)> {
        None
    }
    /// How the engine counted the marks (in the kernel, or per datagram and why), once
    /// started.
    fn marks_note(&self) -> Option<String> {
        None
    }
    /// A DPDK port's own counters, once joined.
    fn port(&self) -> Option<PortCounters> {
        None
    }
    /// Receivers of datagrams that carry their send time (iperf3's): each flow's running
    /// jitter (RFC 3550), seconds, as of now.
    fn jitter_s(&self) -> Option<Vec<f64>> {
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

/// A packet-rate engine: what it refuses up front and what each end opens.
pub trait PpsBackend: Named + Sync {
    /// What of a spec this engine does not run, naming the flag: its own part of the
    /// spec (DPDK's devices and queues), checked wherever a spec is admitted
    /// (`kind::refuse`).
    fn refuse(&self, _spec: &PpsSpec) -> Result<(), SpecError> {
        Ok(())
    }
    /// Refuses, before the agent is asked, a sender this host cannot run.
    fn preflight(&self, _spec: &PpsSpec, _agent: SocketAddr) -> io::Result<()> {
        Ok(())
    }
    /// Memory a worker's socket takes on `role`'s side: a kernel socket's buffers.
    fn socket_bytes(&self, role: Role) -> u64 {
        match role {
            Role::Server => 2 * RX_BUFFER_BYTES as u64,
            Role::Client => budget::SOCKET_BYTES,
        }
    }
    /// Controller: opens what the senders send on, before `Start`; `flows` are kernel
    /// sockets connected to the agent's port, each holding its flow's source port.
    fn open_tx(
        &self,
        spec: &PpsSpec,
        flows: Vec<UdpSocket>,
        placement: &Placement,
    ) -> io::Result<Box<dyn TxEngine>>;
    /// Agent: opens what the receivers take packets from, before `Ready`, beside the
    /// SO_REUSEPORT `group` (with its `notes`) bound on `ip` that holds the test's port
    /// for every engine; `peer` sends.
    fn open_rx(
        &self,
        spec: &PpsSpec,
        group: (Vec<UdpSocket>, Vec<String>),
        ip: IpAddr,
        peer: IpAddr,
    ) -> io::Result<Box<dyn RxEngine>>;
}

/// When every engine's senders stop by themselves: the end of warm-up and window.
pub fn senders_stop_at(spec: &PpsSpec) -> Instant {
    Instant::now() + Duration::from_millis(spec.timing.warmup_ms + spec.timing.duration_ms)
}

/// What every engine's senders are told.
pub fn sending(spec: &PpsSpec, cookie: u32) -> Sending {
    Sending {
        payload_bytes: spec.payload_bytes() as usize,
        batch: spec.batch as usize,
        rate_pps: spec.rate_pps,
        stop_at: senders_stop_at(spec),
        cookie,
    }
}

/// What every engine's receivers are told.
pub fn rx_plan(spec: &PpsSpec, cookie: u32) -> RxPlan {
    RxPlan {
        cpus: spec.execution.server_cpus.clone(),
        batch: spec.batch as usize,
        poll: poll_of(spec.poll),
        flows: spec.flows as usize,
        cookie,
        read_tos: spec.execution.marks.data_tos().is_some(),
        tos_by: Default::default(),
    }
}
