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
use sonde_results::{Bypass, PollMode, PpsSpec};

use super::engine::{rx_plan, senders_stop_at, Drops, RxEngine, TxEngine};
use crate::kind::xdp::{
    flow, path_to, queues_of, refuse, sockets, steer, v4, xdp_workers, Steered, BUSY_POLL_US,
};

/// Senders on AF_XDP sockets, one per transmit queue up to `threads`, for the flows the
/// kernel sockets in `flows` hold the ports of.
pub fn sender(
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

/// The receive program and a socket per receive queue, opened before `Ready`.
pub type RxPort = Steered;

/// Attaches the redirect program for `peer`'s packets to UDP `port` at `ip`.
pub fn open_rx(spec: &PpsSpec, ip: IpAddr, peer: IpAddr, port: u16) -> io::Result<RxPort> {
    let busy = (spec.poll != PollMode::Block).then_some((BUSY_POLL_US, spec.batch));
    steer(flow(peer, ip, Port::To(port))?, busy)
}

/// Receivers on the sockets of `port`, one thread per socket.
pub fn receiver(spec: &PpsSpec, port: RxPort, cookie: u32) -> io::Result<Box<dyn RxEngine>> {
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
