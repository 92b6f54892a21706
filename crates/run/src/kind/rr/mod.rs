//! Request/response: ping (one message in flight, round-trip times; sockperf) and rpc
//! (many connections, many messages in flight; neper tcp_rr and tcp_crr, msg_gen).

mod engine;

pub use engine::UDP_LOSS_TIMEOUT;
mod side;
mod xdp;

pub use engine::{poll_of, EchoEngine, RequestEngine, ENGINES};
use engine::{Answering, Carrier};
pub use side::{Engine, Parts, RrSide};

use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::Instant;

use sonde_engine::rr_client::{RrSocket, Target};
use sonde_engine::rr_server::ServerTarget;
use sonde_engine::sockopt::{self, SocketOptions};
use sonde_engine::{worker_threads, Placement, Work};
use sonde_probe::hostwatch::HostProbe;
use sonde_results::{Role, RrSpec, SideResult, TestSpec, Transport};

use super::{
    budget, ClientEndpoint, DataPort, Demand, Kind, OpenError, OpenResult, ServerEndpoint,
};
use crate::side::Side;

pub struct RequestResponse;

fn spec_of(spec: &TestSpec) -> &RrSpec {
    match spec {
        TestSpec::Ping(r) | TestSpec::Rpc(r) => r,
        _ => unreachable!("kind::of gives ping and rpc specs to the request/response kind"),
    }
}

fn nodelay() -> SocketOptions {
    SocketOptions {
        nodelay: true,
        ..Default::default()
    }
}

/// `--busy-poll` on one socket: the notes on what was applied.
fn busy_poll(spec: &RrSpec, fd: std::os::fd::RawFd) -> Vec<String> {
    spec.busy_poll_us
        .map(|us| sockopt::set_busy_poll(fd, us))
        .unwrap_or_default()
}

/// The workers of `role`'s end over `units` sockets: as asked, else the
/// request/response default.
fn placement(spec: &RrSpec, role: Role, units: usize) -> Placement {
    let ex = &spec.execution;
    let threads = role.pick(spec.client_threads, spec.server_threads);
    let cpus = role.pick(&ex.client_cpus, &ex.server_cpus).clone();
    Placement::new(
        worker_threads(Work::RequestResponse, threads, units),
        cpus,
        units,
    )
}

/// Starts `role`'s workers over `units` sockets (`start` gets their placement and the
/// test's clock) and the side that measures them.
fn start_side(
    spec: &RrSpec,
    role: Role,
    units: usize,
    start: impl FnOnce(Placement, Instant) -> io::Result<Engine>,
    probe: HostProbe,
    socket_options: Vec<String>,
) -> io::Result<Box<dyn Side>> {
    let started = Instant::now();
    let mut placement = placement(spec, role, units);
    let engine = start(placement.clone(), started)?;
    // A bypass engine runs no more workers than it has queues.
    let bypass = match &engine {
        Engine::Client(c) => c.bypass(),
        Engine::Server(s) => s.bypass(),
    };
    if let Some(b) = bypass {
        placement = Placement::new(
            placement.threads.min(b.queues.len()).max(1),
            placement.cpus,
            units,
        );
    }
    Ok(Box::new(RrSide::new(
        spec,
        Parts {
            engine,
            started,
            probe,
            placement,
            notes: Vec::new(),
            socket_options,
        },
    )))
}

impl Kind for RequestResponse {
    fn demand(&self, spec: &TestSpec, role: Role) -> Demand {
        let r = spec_of(spec);
        let message = r.request_bytes.max(r.response_bytes);
        let threads = self.workers(spec, role);
        // A worker's buffer and histograms; a connection's socket and window of messages.
        let per_thread = u64::from(message)
            .max(64 << 10)
            .saturating_add(budget::HISTOGRAM_BYTES);
        let per_conn = u64::from(r.window)
            .saturating_mul(u64::from(message))
            .saturating_add(budget::SOCKET_BYTES);
        let xsks = if r.execution.engine == sonde_results::Engine::Xdp {
            budget::XSK_BYTES
        } else {
            0
        };
        Demand {
            connections: r.connections,
            rate: Some(r.rate_per_s),
            bits_per_s: r.rate_per_s.map(|rate| rate * f64::from(message) * 8.0),
            message_bytes: message,
            threads,
            memory_bytes: budget::total(
                threads,
                per_thread.saturating_add(xsks),
                r.connections,
                per_conn,
            ),
        }
    }

    fn workers(&self, spec: &TestSpec, role: Role) -> usize {
        let r = spec_of(spec);
        placement(r, role, r.connections as usize).threads
    }

    fn prepare(
        &self,
        spec: &mut TestSpec,
        agent: SocketAddr,
        _probe: &HostProbe,
    ) -> Result<(), OpenError> {
        let r = spec_of(spec);
        if r.execution.engine == sonde_results::Engine::Xdp {
            xdp::preflight(r, agent.ip()).map_err(|e| OpenError::Refused(e.to_string()))?;
        }
        Ok(())
    }

    fn open_client(&self, spec: &TestSpec, to: DataPort) -> OpenResult<dyn ClientEndpoint> {
        let r = spec_of(spec);
        let opened = |carrier, options| -> OpenResult<dyn ClientEndpoint> {
            Ok(Box::new(Opened {
                spec: r.clone(),
                carrier,
                options,
                cookie: to.cookie,
            }))
        };
        if r.connect_per_request {
            let target = Target::ConnectPerRequest {
                addr: to.addr,
                opts: nodelay(),
                connections: r.connections as usize,
            };
            return opened(Carrier::Kernel(target), vec!["TCP_NODELAY".into()]);
        }
        if r.execution.engine == sonde_results::Engine::Xdp {
            let sockets = (0..r.connections)
                .map(|index| super::connect_udp(to.addr, index))
                .collect::<Result<_, _>>()?;
            let port =
                xdp::open_client(r, sockets).map_err(|e| OpenError::Refused(e.to_string()))?;
            let notes = port.notes().to_vec();
            return opened(Carrier::Xdp(port), notes);
        }
        let mut sockets = Vec::new();
        let mut options = Vec::new();
        for index in 0..r.connections {
            let (sock, mut applied) = match r.transport {
                Transport::Tcp => {
                    let (s, _) = super::connect_data(to, &nodelay(), index)?;
                    (RrSocket::Tcp(s), vec!["TCP_NODELAY".to_string()])
                }
                Transport::Udp => (
                    RrSocket::Udp(super::connect_udp(to.addr, index)?),
                    Vec::new(),
                ),
            };
            applied.extend(busy_poll(r, sock.fd()));
            if index == 0 {
                options = applied;
            }
            sockets.push(sock);
        }
        opened(Carrier::Kernel(Target::Sockets(sockets)), options)
    }

    fn open_server(
        &self,
        spec: &TestSpec,
        ip: IpAddr,
        peer: IpAddr,
    ) -> io::Result<Box<dyn ServerEndpoint>> {
        let r = spec_of(spec);
        let addr = SocketAddr::new(ip, 0);
        let at = match r.transport {
            Transport::Udp if r.execution.engine == sonde_results::Engine::Xdp => At::Xdp(
                Box::new(xdp::open_server(r, UdpSocket::bind(addr)?, ip, peer)?),
            ),
            Transport::Udp => At::Udp(UdpSocket::bind(addr)?),
            Transport::Tcp => {
                let (l, _) = sockopt::listen(addr, &nodelay(), r.connections.max(128) as i32)?;
                l.set_nonblocking(true)?;
                At::Tcp(l)
            }
        };
        Ok(Box::new(Listening {
            spec: r.clone(),
            at,
        }))
    }

    fn summary(&self, spec: &TestSpec, r: &SideResult) -> String {
        let Some(rr) = &r.rr else {
            return spec.name().into();
        };
        format!(
            "{} {}: answered {} messages in {:.1} s, {:.2} us CPU per message",
            spec.name(),
            rr.poll,
            rr.messages,
            r.window_s,
            r.process_cpu_s
                .map_or(0.0, |c| c * 1e6 / rr.messages.max(1) as f64)
        )
    }
}

/// The controller's sockets (or, connect per request, where to connect).
struct Opened {
    spec: RrSpec,
    carrier: Carrier,
    options: Vec<String>,
    /// Stamped into every UDP request, so that the agent's echo answers it.
    cookie: u64,
}

impl ClientEndpoint for Opened {
    fn start(self: Box<Self>, probe: HostProbe) -> io::Result<Box<dyn Side>> {
        let Opened {
            spec,
            carrier,
            options,
            cookie,
        } = *self;
        let units = spec.connections as usize;
        let start = |placement, started| {
            engine::client(&spec, carrier, (placement, cookie), started).map(Engine::Client)
        };
        start_side(&spec, Role::Client, units, start, probe, options)
    }
}

enum At {
    Udp(UdpSocket),
    Tcp(TcpListener),
    Xdp(Box<xdp::ServerPort>),
}

struct Listening {
    spec: RrSpec,
    at: At,
}

impl ServerEndpoint for Listening {
    fn port(&self) -> io::Result<u16> {
        Ok(match &self.at {
            At::Udp(u) => u.local_addr()?.port(),
            At::Xdp(x) => x.port()?,
            At::Tcp(l) => l.local_addr()?.port(),
        })
    }

    fn listener(&self) -> Option<(&TcpListener, usize)> {
        match &self.at {
            At::Tcp(l) => Some((l, self.spec.initial_connections() as usize)),
            At::Udp(_) | At::Xdp(_) => None,
        }
    }

    fn start(
        self: Box<Self>,
        conns: Vec<TcpStream>,
        peer: IpAddr,
        cookie: u64,
        probe: HostProbe,
    ) -> io::Result<Box<dyn Side>> {
        let Listening { spec, at } = *self;
        let mut options = Vec::new();
        let target = match at {
            At::Xdp(port) => {
                options = port.notes().to_vec();
                Answering::Xdp { port, peer }
            }
            At::Udp(socket) => {
                options = busy_poll(&spec, socket.as_raw_fd());
                Answering::Kernel(ServerTarget::Udp {
                    socket,
                    allowed: peer,
                })
            }
            At::Tcp(listener) if spec.connect_per_request => {
                Answering::Kernel(ServerTarget::Accept {
                    listener,
                    allowed: peer,
                })
            }
            At::Tcp(_) => {
                let mut socks = Vec::new();
                for c in conns {
                    c.set_nodelay(true)?;
                    let applied = busy_poll(&spec, c.as_raw_fd());
                    if socks.is_empty() {
                        options = applied;
                    }
                    socks.push(RrSocket::Tcp(c));
                }
                Answering::Kernel(ServerTarget::Sockets(socks))
            }
        };
        let units = match &target {
            Answering::Kernel(ServerTarget::Sockets(s)) => s.len(),
            Answering::Xdp { port, .. } => port.queues(),
            _ => 1,
        };
        let start = |placement, started| {
            engine::server(&spec, target, (placement, cookie), started).map(Engine::Server)
        };
        start_side(&spec, Role::Server, units, start, probe, options)
    }
}
