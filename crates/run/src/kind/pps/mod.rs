//! Packet rate: small UDP packets over many flows, counted by sender and receiver
//! (dpdk-testpmd's txonly/rxonly, with kernel sockets). Its engines are [`ENGINES`]; each
//! implements [`PpsBackend`] in its own module.

mod dpdk;
mod engine;
mod kernel;
mod side;
mod xdp;

pub use engine::{Drops, PpsBackend, RxEngine, TxEngine};
pub use kernel::Flows as KernelFlows;
pub use side::PpsSide;

use std::io;
use std::net::{IpAddr, SocketAddr, TcpStream};

use sonde_engine::{sockopt, Placement};
use sonde_probe::hostwatch::HostProbe;
use sonde_results::spec::TestName;
use sonde_results::{Engine, PpsSpec, Role, SideResult, SpecError, TestSpec};

use super::seam::{
    ClientEndpoint, DataPort, Demand, OpenError, OpenResult, ServerEndpoint, TypedKind,
};
use super::table;
use super::workers::Workers;
use crate::side::Side;
use engine::RX_BUFFER_BYTES;

/// The packet-rate engines, the default first: every choice of one is [`backend`].
pub const ENGINES: &[&dyn PpsBackend] = &[&kernel::Kernel, &xdp::Xdp, &dpdk::Dpdk];

/// The engines of [`ENGINES`].
pub fn engines() -> Vec<Engine> {
    table::engines(ENGINES)
}

/// The engines of [`ENGINES`] this host can run.
pub fn runnable() -> Vec<Engine> {
    table::runnable(ENGINES)
}

/// What of a pps spec its engine does not run, naming the flag (DPDK's own part).
pub fn refuse(spec: &TestSpec) -> Result<(), SpecError> {
    let Some((p, _)) = Pps::own(spec) else {
        return Ok(());
    };
    table::refuse(ENGINES, p.execution.engine, |_| None, |e| e.refuse(p))
}

/// The packet-rate engine that is `engine`, or why none is.
pub fn backend(engine: Engine) -> io::Result<&'static dyn PpsBackend> {
    table::find(ENGINES, "pps", engine)
}

fn refused(e: io::Error) -> OpenError {
    OpenError::Engine(e)
}

pub struct Pps;

impl Pps {
    /// The workers of one part (`Client`: the senders, `Server`: the receivers) and their
    /// memory: each one's stack, its batch of packets and, receiving, its socket's doubled
    /// SO_RCVBUF; an AF_XDP worker's UMEM and rings instead.
    fn part_demand(&self, p: &PpsSpec, part: Role) -> (usize, u64) {
        let threads = self.workers(p, part);
        let batch = u64::from(p.batch).saturating_mul(u64::from(p.size_bytes));
        let socket = backend(p.execution.engine).map_or(0, |b| b.socket_bytes(part));
        let bytes = super::budget::total(threads, batch.saturating_add(socket), 0, 0);
        (threads, bytes)
    }
}

impl TypedKind for Pps {
    type Spec = PpsSpec;

    fn own(spec: &TestSpec) -> Option<(&PpsSpec, TestName)> {
        match spec {
            TestSpec::Pps(p) => Some((p, TestName::Pps)),
            _ => None,
        }
    }

    fn own_mut(spec: &mut TestSpec) -> Option<&mut PpsSpec> {
        match spec {
            TestSpec::Pps(p) => Some(p),
            _ => None,
        }
    }

    /// `role`'s part of the test's direction and, with `--bidir` (iperf3's: `serve
    /// --iperf3` serving `iperf3 -c -u --bidir`), its part of the far end's direction too,
    /// as a stream `--bidir` counts both directions' connections: the senders of one and
    /// the receivers of the other, their flows and memory. The rate and bits stay each
    /// way's, as a stream's (`--max-bitrate` is each way for the agent's own tests).
    fn demand(&self, p: &PpsSpec, role: Role) -> Demand {
        let parts: &[Role] = match p.bidir {
            true => &[Role::Client, Role::Server],
            false => &[role],
        };
        let (threads, memory_bytes) = parts.iter().fold((0usize, 0u64), |(t, m), &part| {
            let (pt, pm) = self.part_demand(p, part);
            (t.saturating_add(pt), m.saturating_add(pm))
        });
        Demand {
            connections: p.flows.saturating_mul(parts.len() as u32),
            rate: Some(p.rate_pps),
            bits_per_s: p.rate_pps.map(|r| r * f64::from(p.size_bytes) * 8.0),
            message_bytes: p.size_bytes,
            threads,
            memory_bytes,
        }
    }

    fn workers(&self, p: &PpsSpec, role: Role) -> usize {
        role.pick(p.tx_threads, p.rx_threads) as usize
    }

    /// Header bytes are counted by address family, and packets must fit the path's MTU
    /// (no GSO for them).
    fn fit_address(&self, p: &mut PpsSpec, agent: SocketAddr) {
        p.ipv6 = agent.is_ipv6();
    }

    fn prepare(
        &self,
        p: &mut PpsSpec,
        agent: SocketAddr,
        probe: &HostProbe,
    ) -> Result<(), OpenError> {
        self.fit_address(p, agent);
        p.validate()?;
        backend(p.execution.engine)
            .and_then(|b| b.preflight(p, agent))
            .map_err(refused)?;
        if let Some((iface, mtu)) = probe.mtu() {
            if p.size_bytes > mtu + 14 {
                return Err(OpenError::Spec(SpecError {
                    flag: "--size",
                    reason: format!(
                        "{} bytes exceeds {iface}'s MTU of {mtu} bytes plus its 14-byte Ethernet header (no GSO for these packets)",
                        p.size_bytes
                    ),
                }));
            }
        }
        Ok(())
    }

    fn open_client(&self, p: &PpsSpec, to: DataPort) -> OpenResult<dyn ClientEndpoint> {
        let flows = (0..p.flows)
            .map(|index| super::connect::connect_udp(to.addr, index, p.execution.marks.data_tos()))
            .collect::<Result<_, _>>()?;
        let placement = Placement::new(
            p.tx_threads as usize,
            p.execution.client_cpus.clone(),
            p.flows as usize,
        );
        let sender = backend(p.execution.engine)
            .and_then(|b| b.open_tx(p, flows, &placement))
            .map_err(refused)?;
        Ok(Box::new(Flows {
            spec: p.clone(),
            sender,
            placement,
            cookie: to.cookie as u32,
        }))
    }

    fn open_server(
        &self,
        p: &PpsSpec,
        ip: IpAddr,
        peer: IpAddr,
    ) -> io::Result<Box<dyn ServerEndpoint>> {
        let (sockets, notes) = sockopt::udp_reuseport_group(
            SocketAddr::new(ip, 0),
            p.rx_threads as usize,
            RX_BUFFER_BYTES,
        )?;
        let number = sockets[0].local_addr()?.port();
        let receivers = sockets.len();
        let receiver = backend(p.execution.engine)?.open_rx(p, (sockets, notes), ip, peer)?;
        Ok(Box::new(Group {
            spec: p.clone(),
            notes: receiver.notes(),
            receiver,
            number,
            receivers,
        }))
    }

    fn summary(&self, _spec: &PpsSpec, _test: TestName, r: &SideResult) -> String {
        let packets = r.pps().map_or(0, |p| p.packets);
        format!(
            "pps: received {packets} packets in {:.1} s ({:.0}/s)",
            r.window_s,
            packets as f64 / r.window_s.max(1e-9)
        )
    }
}

/// The controller's flows: a UDP socket each, on its own source port, and what the
/// engine opened beside them.
struct Flows {
    spec: PpsSpec,
    sender: Box<dyn TxEngine>,
    placement: Placement,
    cookie: u32,
}

impl ClientEndpoint for Flows {
    fn start(self: Box<Self>, probe: HostProbe) -> io::Result<Box<dyn Side>> {
        let Flows {
            spec,
            mut sender,
            placement,
            cookie,
        } = *self;
        sender.start(placement.clone(), cookie)?;
        let placement = by_bypass(placement, sender.as_ref());
        let probe = with_helper(probe, sender.as_ref());
        Ok(Box::new(PpsSide::client(&spec, sender, placement, probe)))
    }
}

/// A bypass engine runs a worker per queue it has a socket on, whatever was asked; DPDK
/// runs its forwarding lcores where it placed them.
fn by_bypass(asked: Placement, workers: &dyn Workers) -> Placement {
    if let Some(placed) = workers.placed() {
        return placed;
    }
    match workers.bypass() {
        Some(b) => Placement::new(b.queues.len(), asked.cpus, b.queues.len()),
        None => asked,
    }
}

/// The probe, counting the engine's helper process's CPU as the side's own.
fn with_helper(mut probe: HostProbe, workers: &dyn Workers) -> HostProbe {
    if let Some(pid) = workers.helper() {
        probe.count_process(pid);
    }
    probe
}

/// The agent's SO_REUSEPORT group, a socket per receiving thread, and what a bypass
/// engine opened beside it.
struct Group {
    spec: PpsSpec,
    receiver: Box<dyn RxEngine>,
    notes: Vec<String>,
    /// The group's port, and how many sockets it has.
    number: u16,
    receivers: usize,
}

impl ServerEndpoint for Group {
    fn port(&self) -> io::Result<u16> {
        Ok(self.number)
    }

    fn before_ready(&mut self, cookie: u64) {
        self.receiver.before_ready(cookie as u32);
    }

    fn start(
        self: Box<Self>,
        _conns: Vec<TcpStream>,
        _peer: IpAddr,
        cookie: u64,
        probe: HostProbe,
    ) -> io::Result<Box<dyn Side>> {
        let Group {
            spec,
            mut receiver,
            notes,
            number,
            receivers: n,
        } = *self;
        let placement = Placement::new(n, spec.execution.server_cpus.clone(), n);
        receiver.start(cookie as u32)?;
        let placement = by_bypass(placement, receiver.as_ref());
        let probe = with_helper(probe, receiver.as_ref());
        Ok(Box::new(PpsSide::server(
            &spec, receiver, number, placement, probe, notes,
        )))
    }
}
