//! The AF_XDP engine of a packet-rate side. The sender builds whole frames for the path
//! to the agent; the receiver attaches the redirect program for the test's port and a
//! socket on every receive queue before it reports `Ready`, so that no packet of the test
//! reaches the kernel's socket.

use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};

use sonde_engine::pps::FlowRx;
use sonde_engine::xdp::frame::Endpoints;
use sonde_engine::xdp::pps::{XdpReceiver, XdpSender, XdpTxPlan};
use sonde_engine::xdp::{Attached, Port};
use sonde_engine::Placement;
use sonde_results::{Bypass, Engine, PollMode, PpsSpec, Role};

use super::engine::{
    rx_plan, senders_stop_at, Drops, PpsBackend, RxEngine, RxPort, TxEngine, TxPort,
};
use crate::kind::budget::XSK_BYTES;
use crate::kind::table::Named;
use crate::kind::xdp::{
    self as path, flow, path_to, queues_of, refuse, sockets, steer, v4, xdp_workers, Steered,
    BUSY_POLL_US,
};

pub struct Xdp;

impl Named for Xdp {
    fn engine(&self) -> Engine {
        Engine::Xdp
    }
}

impl PpsBackend for Xdp {
    fn preflight(&self, spec: &PpsSpec, agent: SocketAddr) -> io::Result<()> {
        path::preflight(agent.ip(), spec.size_bytes)
    }

    /// A worker's UMEM and rings.
    fn socket_bytes(&self, _role: Role) -> u64 {
        XSK_BYTES
    }

    /// Nothing to open early: the senders' sockets are opened when they start.
    fn open_tx(
        &self,
        spec: &PpsSpec,
        flows: Vec<UdpSocket>,
        _placement: &Placement,
    ) -> io::Result<Box<dyn TxPort>> {
        Ok(Box::new(Flows {
            spec: spec.clone(),
            flows,
        }))
    }

    fn open_rx(
        &self,
        spec: &PpsSpec,
        (sockets, _): (Vec<UdpSocket>, Vec<String>),
        ip: IpAddr,
        peer: IpAddr,
    ) -> io::Result<Box<dyn RxPort>> {
        let port = sockets[0].local_addr()?.port();
        let busy = (spec.poll != PollMode::Block).then_some((BUSY_POLL_US, spec.batch));
        Ok(Box::new(Receiving {
            spec: spec.clone(),
            steered: steer(flow(peer, ip, Port::To(port))?, busy)?,
            _group: sockets,
        }))
    }
}

/// The controller's flows, whose source ports the frames use.
struct Flows {
    spec: PpsSpec,
    flows: Vec<UdpSocket>,
}

impl TxPort for Flows {
    fn start(self: Box<Self>, placement: Placement, cookie: u32) -> io::Result<Box<dyn TxEngine>> {
        let Flows { spec, flows } = *self;
        sender(&spec, flows, placement.cpus, placement.threads, cookie)
    }
}

/// The receive program and a socket per receive queue, opened before `Ready`.
struct Receiving {
    spec: PpsSpec,
    steered: Steered,
    /// The kernel socket group, holding the port until the receivers start.
    _group: Vec<UdpSocket>,
}

impl RxPort for Receiving {
    fn notes(&self) -> Vec<String> {
        self.steered.notes.clone()
    }
    fn start(self: Box<Self>, cookie: u32) -> io::Result<Box<dyn RxEngine>> {
        let Receiving { spec, steered, .. } = *self;
        receiver(&spec, steered, cookie)
    }
}

/// Senders on AF_XDP sockets, one per transmit queue up to `threads`, for the flows the
/// kernel sockets in `flows` hold the ports of.
fn sender(
    spec: &PpsSpec,
    flows: Vec<UdpSocket>,
    cpus: Option<Vec<usize>>,
    threads: usize,
    cookie: u32,
) -> io::Result<Box<dyn TxEngine>> {
    let first = flows.first().ok_or_else(|| refuse("no flows".into()))?;
    let (local, peer) = (first.local_addr()?, first.peer_addr()?);
    let (iface, src_mac, dst_mac) = path_to(v4(local.ip())?, v4(peer.ip())?)?;
    let (index, _, tx_queues) = queues_of(&iface)?;
    let queues: Vec<u32> = (0..tx_queues.min(threads.max(1) as u32)).collect();
    let xsks = sockets(&iface, index, &queues)?;
    let bypass = Bypass {
        interface: iface,
        queues,
        zero_copy: xsks.iter().all(|x| x.zero_copy),
        ..Default::default()
    };
    let endpoints = flows
        .iter()
        .map(|f| {
            Ok(Endpoints {
                src_mac,
                dst_mac,
                src: SocketAddr::new(local.ip(), f.local_addr()?.port()),
                dst: peer,
            })
        })
        .collect::<io::Result<_>>()?;
    let plan = XdpTxPlan {
        cpus,
        payload_bytes: spec.payload_bytes() as usize,
        batch: spec.batch as usize,
        rate_pps: spec.rate_pps,
        stop_at: senders_stop_at(spec),
        cookie,
        flows: endpoints,
    };
    let sender = XdpSender::spawn(xsks, plan)?;
    Ok(Box::new(Tx {
        sender,
        bypass,
        _ports: flows,
    }))
}

/// Receivers on the sockets of `port`, one thread per socket.
fn receiver(spec: &PpsSpec, port: Steered, cookie: u32) -> io::Result<Box<dyn RxEngine>> {
    let Steered {
        program,
        xsks,
        bypass,
        ..
    } = port;
    let receiver = XdpReceiver::spawn(xsks, rx_plan(spec, cookie), bypass.busy_poll)?;
    Ok(Box::new(Rx {
        receiver,
        bypass,
        _program: program,
    }))
}

struct Tx {
    sender: XdpSender,
    bypass: Bypass,
    /// The kernel sockets whose source ports the frames use, held so that nothing else
    /// takes those ports during the test.
    _ports: Vec<UdpSocket>,
}

struct Rx {
    receiver: XdpReceiver,
    bypass: Bypass,
    /// Attached while the receivers run; detached when the side is dropped.
    _program: Attached,
}

impl TxEngine for Tx {
    fn counts(&self) -> (u64, u64) {
        self.sender.counts()
    }
    fn join(&mut self) -> (Vec<u64>, Option<String>) {
        self.sender.join()
    }
}

impl RxEngine for Rx {
    fn counts(&self) -> (u64, u64) {
        self.receiver.counts()
    }
    fn foreign(&self) -> u64 {
        self.receiver.foreign()
    }
    fn drops(&self) -> Drops {
        Drops::Counted(self.receiver.drops())
    }
    fn join(&mut self) -> (Vec<FlowRx>, Option<String>) {
        self.receiver.join()
    }
}

xdp_workers!(Tx => sender, Rx => receiver);
