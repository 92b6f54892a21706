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
use sonde_engine::xdp::{Attached, Port, Xsk};
use sonde_results::{Bypass, Engine, PollMode, RrSpec, SpecError, Transport};

use super::engine::{EchoEngine, RequestEngine, RrBackend};
use crate::kind::budget::XSK_BYTES;
use crate::kind::connect::connect_udp;
use crate::kind::seam::{DataPort, OpenError, OpenResult};
use crate::kind::table::Named;
use crate::kind::workers::{Lifecycle, Workers};
use crate::kind::xdp::{self as path, flow, path_to, refuse, steer, v4, Steered};

pub struct Xdp;

impl Named for Xdp {
    fn engine(&self) -> Engine {
        Engine::Xdp
    }
}

impl RrBackend for Xdp {
    /// AF_XDP frames carry UDP only (a new connection per request is TCP's, refused with
    /// it).
    fn refuse(&self, spec: &RrSpec) -> Result<(), SpecError> {
        if spec.stages {
            return Err(SpecError {
                flag: "--stages",
                reason: format!(
                    "the stages are the kernel's socket timestamps: --engine {} or {}, not {}",
                    Engine::Kernel,
                    Engine::Uring,
                    Engine::Xdp
                ),
            });
        }
        match spec.transport {
            Transport::Udp => Ok(()),
            Transport::Tcp => Err(SpecError {
                flag: "--engine",
                reason: format!("{} carries UDP only (add --udp)", Engine::Xdp),
            }),
        }
    }

    fn preflight(&self, spec: &RrSpec, agent: IpAddr) -> io::Result<()> {
        preflight(spec, agent)
    }

    fn worker_bytes(&self) -> u64 {
        XSK_BYTES
    }

    fn open_client(&self, spec: &RrSpec, to: DataPort) -> OpenResult<dyn RequestEngine> {
        let sockets = (0..spec.connections)
            .map(|index| connect_udp(to.addr, index, None))
            .collect::<Result<_, _>>()?;
        let port = open_client(spec, sockets).map_err(OpenError::Engine)?;
        Ok(Box::new(port))
    }

    fn open_server(
        &self,
        spec: &RrSpec,
        ip: IpAddr,
        peer: IpAddr,
    ) -> io::Result<Box<dyn EchoEngine>> {
        let socket = UdpSocket::bind(SocketAddr::new(ip, 0))?;
        Ok(Box::new(open_server(spec, socket, ip, peer)?))
    }
}

/// Packets one busy poll may take.
const BUSY_POLL_BUDGET: u32 = 64;

/// Refuses, before the agent is asked, what this host or spec cannot run over AF_XDP.
fn preflight(spec: &RrSpec, agent: IpAddr) -> io::Result<()> {
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

/// What a side keeps of what it steered: the sockets until the start, the program and
/// the bypass record for the side's life.
struct Bypassing<W> {
    stage: Lifecycle<Vec<Xsk>, W>,
    bypass: Bypass,
    notes: Vec<String>,
    /// Attached while the workers run; detached when the side is dropped.
    _program: Attached,
}

impl<W> From<Steered> for Bypassing<W> {
    fn from(s: Steered) -> Self {
        Bypassing {
            stage: Lifecycle::Opened(s.xsks),
            bypass: s.bypass,
            notes: s.notes,
            _program: s.program,
        }
    }
}

/// The controller's answer sockets and program and its flows, then the request workers.
struct Requesting {
    steered: Bypassing<RrClient>,
    flows: Vec<Endpoints>,
    /// The kernel sockets whose source ports the frames use, held so that nothing else
    /// takes those ports during the test.
    _ports: Vec<UdpSocket>,
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
    Ok(Requesting {
        steered: steer(answers, busy(spec))?.into(),
        flows,
        _ports: sockets,
    })
}

impl RequestEngine for Requesting {
    fn options(&self) -> Vec<String> {
        self.steered.notes.clone()
    }

    /// Request workers on the controller's sockets.
    fn start(&mut self, plan: ClientPlan) -> io::Result<()> {
        let (flows, busy_polling) = (self.flows.clone(), self.steered.bypass.busy_poll);
        self.steered.stage.start(|xsks| {
            let target = XdpTarget {
                xsks,
                flows,
                busy_polling,
            };
            rr_client::spawn(target, plan)
        })
    }
    fn counts(&self) -> (u64, u64) {
        self.steered
            .stage
            .running()
            .map_or((0, 0), RrClient::counts)
    }
    fn drain(&self, each: &mut dyn FnMut(u32, &Histogram<u64>)) {
        if let Some(w) = self.steered.stage.running() {
            w.drain(each)
        }
    }
    fn join(&mut self) -> Vec<WorkerEnd> {
        let w = self.steered.stage.running_mut();
        w.map(RrClient::join).unwrap_or_default()
    }
}

/// The agent's request sockets and program, attached before `Ready`, then the echo workers.
struct Answering {
    steered: Bypassing<RrServer>,
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
        steered: steer(requests, busy(spec))?.into(),
        socket,
    })
}

impl EchoEngine for Answering {
    fn port(&self) -> io::Result<u16> {
        Ok(self.socket.local_addr()?.port())
    }

    /// A worker per queue at most.
    fn units(&self, _conns: usize) -> usize {
        self.steered.stage.opened().map_or(0, Vec::len)
    }

    /// Echo workers on the agent's sockets, answering `peer` only.
    fn start(
        &mut self,
        _conns: Vec<TcpStream>,
        peer: IpAddr,
        plan: ServerPlan,
    ) -> io::Result<Vec<String>> {
        let busy_polling = self.steered.bypass.busy_poll;
        self.steered.stage.start(|xsks| {
            let target = XdpServerTarget {
                xsks,
                allowed: peer,
                busy_polling,
            };
            rr_server::spawn(target, plan)
        })?;
        Ok(self.steered.notes.clone())
    }
    fn answered(&self) -> u64 {
        self.steered.stage.running().map_or(0, RrServer::answered)
    }
    fn rejected(&self) -> u64 {
        self.steered.stage.running().map_or(0, RrServer::rejected)
    }
    fn join(&mut self) -> Vec<String> {
        let w = self.steered.stage.running_mut();
        w.map(RrServer::join).unwrap_or_default()
    }
}

/// Each end's `Workers`: its running workers, and the bypass they run on.
macro_rules! bypassing {
    ($($t:ty => $w:ty),+) => {$(
        impl Workers for $t {
            fn engine(&self) -> Engine {
                Engine::Xdp
            }
            fn all_done(&self) -> bool {
                self.steered.stage.running().is_none_or(<$w>::all_done)
            }
            fn abort(&self) {
                if let Some(w) = self.steered.stage.running() {
                    w.abort()
                }
            }
            fn bypass(&self) -> Option<Bypass> {
                Some(self.steered.bypass.clone())
            }
        }
    )+};
}
bypassing!(Requesting => RrClient, Answering => RrServer);
