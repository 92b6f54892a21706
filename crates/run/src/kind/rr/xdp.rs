//! The AF_XDP engine of a request/response side. The agent attaches the redirect program
//! for its echo port, with a socket on every receive queue, before it reports `Ready`; the
//! controller attaches one for the answers (UDP from the agent's port) before it says
//! `Start`, and sends whole request frames built for the path to the agent. The kernel
//! sockets of both ends stay open, holding their ports, while no test packet reaches them.

use std::io;
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};

use hdrhistogram::Histogram;
use sonde_engine::rr_client::{ClientPlan, RrClient, WorkerEnd};
use sonde_engine::rr_server::{RrServer, ServerPlan};
use sonde_engine::xdp::frame::{payload_offset, Endpoints};
use sonde_engine::xdp::rr_client::{self, XdpTarget};
use sonde_engine::xdp::rr_server::{self, XdpServerTarget};
use sonde_engine::xdp::{Attached, Port};
use sonde_results::{Bypass, Engine, PollMode, RrSpec};

use super::engine::{ClientPort, EchoEngine, RequestEngine, RrBackend, ServerPort};
use crate::kind::budget::XSK_BYTES;
use crate::kind::connect::connect_udp;
use crate::kind::seam::{DataPort, OpenError, OpenResult};
use crate::kind::table::Named;
use crate::kind::xdp::{self as path, flow, path_to, refuse, steer, v4, xdp_workers, Steered};

pub struct Xdp;

impl Named for Xdp {
    fn engine(&self) -> Engine {
        Engine::Xdp
    }
}

impl RrBackend for Xdp {
    fn preflight(&self, spec: &RrSpec, agent: IpAddr) -> io::Result<()> {
        preflight(spec, agent)
    }

    fn worker_bytes(&self) -> u64 {
        XSK_BYTES
    }

    fn open_client(&self, spec: &RrSpec, to: DataPort) -> OpenResult<dyn ClientPort> {
        let sockets = (0..spec.connections)
            .map(|index| connect_udp(to.addr, index))
            .collect::<Result<_, _>>()?;
        let port = open_client(spec, sockets).map_err(|e| OpenError::Refused(e.to_string()))?;
        Ok(Box::new(port))
    }

    fn open_server(
        &self,
        spec: &RrSpec,
        ip: IpAddr,
        peer: IpAddr,
    ) -> io::Result<Box<dyn ServerPort>> {
        let socket = UdpSocket::bind(SocketAddr::new(ip, 0))?;
        Ok(Box::new(open_server(spec, socket, ip, peer)?))
    }
}

/// Packets one busy poll may take.
const BUSY_POLL_BUDGET: u32 = 64;

/// Refuses, before the agent is asked, what this host or spec cannot run over AF_XDP.
fn preflight(spec: &RrSpec, agent: IpAddr) -> io::Result<()> {
    if spec.connect_per_request {
        return Err(refuse(
            "--crr opens a TCP connection per request; AF_XDP carries UDP".into(),
        ));
    }
    let message = spec.request_bytes.max(spec.response_bytes);
    let frame = payload_offset(&SocketAddr::new(agent, 0)) as u32 + message;
    path::preflight(agent, frame)
}

/// Busy polling on the sockets when the spec spins or asks for it: (µs, budget).
fn busy(spec: &RrSpec) -> Option<(u32, u32)> {
    let us = match (spec.busy_poll_us, spec.poll) {
        (Some(us), _) => us,
        (None, PollMode::Block) => return None,
        (None, _) => path::BUSY_POLL_US,
    };
    Some((us, BUSY_POLL_BUDGET))
}

/// The controller's answer sockets and program, and its flows.
struct Requesting {
    steered: Steered,
    flows: Vec<Endpoints>,
    /// The kernel sockets whose source ports the frames use, held so that nothing else
    /// takes those ports during the test.
    ports: Vec<UdpSocket>,
}

/// Attaches the answers' program and builds the flows of `sockets` (one per connection,
/// each connected to the agent's echo port).
fn open_client(spec: &RrSpec, sockets: Vec<UdpSocket>) -> io::Result<Requesting> {
    let first = sockets
        .first()
        .ok_or_else(|| refuse("no connections".into()))?;
    let (local, peer) = (first.local_addr()?, first.peer_addr()?);
    let (_, src_mac, dst_mac) = path_to(v4(local.ip())?, v4(peer.ip())?)?;
    let flows = sockets
        .iter()
        .map(|s| {
            Ok(Endpoints {
                src_mac,
                dst_mac,
                src: s.local_addr()?,
                dst: peer,
            })
        })
        .collect::<io::Result<_>>()?;
    // Refused before a packet is sent when the agent's port is a well-known one.
    let answers = flow(peer.ip(), local.ip(), Port::From(peer.port()))?;
    let steered = steer(answers, busy(spec))?;
    Ok(Requesting {
        steered,
        flows,
        ports: sockets,
    })
}

impl ClientPort for Requesting {
    fn options(&self) -> Vec<String> {
        self.steered.notes.clone()
    }

    /// Request workers on the controller's sockets.
    fn start(self: Box<Self>, plan: ClientPlan) -> io::Result<Box<dyn RequestEngine>> {
        let Requesting {
            steered,
            flows,
            ports,
        } = *self;
        let target = XdpTarget {
            xsks: steered.xsks,
            flows,
            busy_polling: steered.bypass.busy_poll,
        };
        Ok(Box::new(Requests {
            client: rr_client::spawn(target, plan)?,
            bypass: steered.bypass,
            _program: steered.program,
            _ports: ports,
        }))
    }
}

/// The agent's request sockets and program, attached before `Ready`.
struct Answering {
    steered: Steered,
    /// The kernel socket that holds the echo port for the test.
    socket: UdpSocket,
}

/// Attaches the requests' program for `peer`'s packets to the port of `socket` at `ip`.
fn open_server(
    spec: &RrSpec,
    socket: UdpSocket,
    ip: IpAddr,
    peer: IpAddr,
) -> io::Result<Answering> {
    let port = socket.local_addr()?.port();
    let requests = flow(peer, ip, Port::To(port))?;
    Ok(Answering {
        steered: steer(requests, busy(spec))?,
        socket,
    })
}

impl ServerPort for Answering {
    fn port(&self) -> io::Result<u16> {
        Ok(self.socket.local_addr()?.port())
    }

    /// A worker per queue at most.
    fn units(&self, _conns: usize) -> usize {
        self.steered.xsks.len()
    }

    /// Echo workers on the agent's sockets, answering `peer` only.
    fn start(
        self: Box<Self>,
        _conns: Vec<TcpStream>,
        peer: IpAddr,
        plan: ServerPlan,
    ) -> io::Result<(Box<dyn EchoEngine>, Vec<String>)> {
        let Answering { steered, socket } = *self;
        let target = XdpServerTarget {
            xsks: steered.xsks,
            allowed: peer,
            busy_polling: steered.bypass.busy_poll,
        };
        let echo = Echo {
            server: rr_server::spawn(target, plan)?,
            bypass: steered.bypass,
            _program: steered.program,
            _port: socket,
        };
        Ok((Box::new(echo), steered.notes))
    }
}

struct Requests {
    client: RrClient,
    bypass: Bypass,
    /// Attached while the workers run; detached when the side is dropped.
    _program: Attached,
    _ports: Vec<UdpSocket>,
}

struct Echo {
    server: RrServer,
    bypass: Bypass,
    _program: Attached,
    _port: UdpSocket,
}

impl RequestEngine for Requests {
    fn counts(&self) -> (u64, u64) {
        self.client.counts()
    }
    fn drain(&self, each: &mut dyn FnMut(u32, &Histogram<u64>)) {
        self.client.drain(each)
    }
    fn join(&mut self) -> Vec<WorkerEnd> {
        self.client.join()
    }
}

impl EchoEngine for Echo {
    fn answered(&self) -> u64 {
        self.server.answered()
    }
    fn rejected(&self) -> u64 {
        self.server.rejected()
    }
    fn join(&mut self) -> Vec<String> {
        self.server.join()
    }
}

xdp_workers!(Requests => client, Echo => server);
