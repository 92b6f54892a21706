//! The AF_XDP engine of a packet-rate side. The sender builds whole frames for the path
//! to the agent; the receiver attaches the redirect program for the test's port and a
//! socket on every receive queue before it reports `Ready`, so that no packet of the test
//! reaches the kernel's socket. Marked (`--dscp`, `--ecn`), the sender's frames carry the
//! TOS byte and the receiver counts the test's frames by the one they arrived with.

use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};

use sonde_engine::pps::FlowRx;
use sonde_engine::xdp::frame::Endpoints;
use sonde_engine::xdp::pps::{XdpReceiver, XdpSender, XdpTxPlan};
use sonde_engine::xdp::{Attached, Port};
use sonde_engine::Placement;
use sonde_results::{Bypass, Engine, PollMode, PpsSpec, Role};

use super::engine::{rx_plan, sending, Drops, PpsBackend, RxEngine, TxEngine};
use crate::kind::budget::XSK_BYTES;
use crate::kind::table::Named;
use crate::kind::workers::{Lifecycle, Workers};
use crate::kind::xdp::{
    self as path, flow, path_to, queues_of, refuse, sockets, steer, v4, Steered, BUSY_POLL_US,
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
    ) -> io::Result<Box<dyn TxEngine>> {
        Ok(Box::new(Flows {
            spec: spec.clone(),
            stage: Lifecycle::Opened(flows),
        }))
    }

    fn open_rx(
        &self,
        spec: &PpsSpec,
        (sockets, _): (Vec<UdpSocket>, Vec<String>),
        ip: IpAddr,
        peer: IpAddr,
    ) -> io::Result<Box<dyn RxEngine>> {
        let port = sockets[0].local_addr()?.port();
        let busy = (spec.poll != PollMode::Block).then_some((BUSY_POLL_US, spec.batch));
        let steered = steer(flow(peer, ip, Port::To(port))?, busy)?;
        Ok(Box::new(Receiving {
            spec: spec.clone(),
            notes: steered.notes.clone(),
            stage: Lifecycle::Opened(steered),
            group: sockets,
        }))
    }
}

/// The controller's flows, whose source ports the frames use, then the senders.
struct Flows {
    spec: PpsSpec,
    stage: Lifecycle<Vec<UdpSocket>, Tx>,
}

impl TxEngine for Flows {
    fn start(&mut self, placement: Placement, cookie: u32) -> io::Result<()> {
        let spec = &self.spec;
        let (cpus, threads) = (placement.cpus, placement.threads);
        self.stage
            .start(|flows| sender(spec, flows, cpus, threads, cookie))
    }
    fn counts(&self) -> (u64, u64) {
        self.stage.running().map_or((0, 0), |t| t.sender.counts())
    }
    fn join(&mut self) -> (Vec<u64>, Option<String>) {
        let w = self.stage.running_mut();
        w.map(|t| t.sender.join()).unwrap_or_default()
    }
}

/// The receive program and a socket per receive queue, opened before `Ready`, then the
/// receivers.
struct Receiving {
    spec: PpsSpec,
    notes: Vec<String>,
    stage: Lifecycle<Steered, Rx>,
    /// The kernel socket group, holding the port until the receivers start.
    group: Vec<UdpSocket>,
}

impl RxEngine for Receiving {
    fn notes(&self) -> Vec<String> {
        self.notes.clone()
    }
    fn start(&mut self, cookie: u32) -> io::Result<()> {
        let spec = &self.spec;
        self.stage
            .start(|steered| receiver(spec, steered, cookie))?;
        self.group.clear();
        Ok(())
    }
    fn counts(&self) -> (u64, u64) {
        self.stage.running().map_or((0, 0), |r| r.receiver.counts())
    }
    fn foreign(&self) -> u64 {
        self.stage.running().map_or(0, |r| r.receiver.foreign())
    }
    fn drops(&self) -> Drops {
        let r = self.stage.running();
        r.map_or(Drops::NotCounted, |r| Drops::Counted(r.receiver.drops()))
    }
    fn arrived_tos(&self) -> Option<(Vec<(u8, u64)>, u64)> {
        self.stage.running().and_then(|r| r.receiver.arrived_tos())
    }
    fn marks_note(&self) -> Option<String> {
        let counted = self.stage.running()?.receiver.arrived_tos().is_some();
        counted.then(|| MARKS_NOTE.to_string())
    }
    fn join(&mut self) -> (Vec<FlowRx>, Option<String>) {
        let w = self.stage.running_mut();
        w.map(|r| r.receiver.join()).unwrap_or_default()
    }
}

/// The note of a receiver counting the marks.
const MARKS_NOTE: &str = "marks read from each frame's IP header by the AF_XDP receiver \
     (no control message, nothing asked of the kernel): frames its ring dropped are not counted";

/// Senders on AF_XDP sockets, one per transmit queue up to `threads`, for the flows the
/// kernel sockets in `flows` hold the ports of.
fn sender(
    spec: &PpsSpec,
    flows: Vec<UdpSocket>,
    cpus: Option<Vec<usize>>,
    threads: usize,
    cookie: u32,
) -> io::Result<Tx> {
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
        sending: sending(spec, cookie),
        flows: endpoints,
        tos: spec.execution.marks.data_tos(),
    };
    let sender = XdpSender::spawn(xsks, plan)?;
    Ok(Tx {
        sender,
        bypass,
        _ports: flows,
    })
}

/// Receivers on the sockets of `port`, one thread per socket.
fn receiver(spec: &PpsSpec, port: Steered, cookie: u32) -> io::Result<Rx> {
    let Steered {
        program,
        xsks,
        bypass,
        ..
    } = port;
    let receiver = XdpReceiver::spawn(xsks, rx_plan(spec, cookie), bypass.busy_poll)?;
    Ok(Rx {
        receiver,
        bypass,
        _program: program,
    })
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

/// Each end's `Workers`: done until started, then its workers and the bypass they run on.
macro_rules! bypassing {
    ($($t:ty => $w:ident),+) => {$(
        impl Workers for $t {
            fn engine(&self) -> Engine {
                Engine::Xdp
            }
            fn all_done(&self) -> bool {
                self.stage.running().is_none_or(|r| r.$w.all_done())
            }
            fn abort(&self) {
                if let Some(r) = self.stage.running() {
                    r.$w.abort()
                }
            }
            fn bypass(&self) -> Option<Bypass> {
                self.stage.running().map(|r| r.bypass.clone())
            }
        }
    )+};
}
bypassing!(Flows => sender, Receiving => receiver);
