//! The request/response kind's kernel-socket engine: a TCP connection or connected UDP
//! socket per connection on the controller (or a new TCP connection per request), and on
//! the agent an echo socket, the TCP connections or a listener to accept from. The io_uring
//! engine (`uring.rs`) opens the same sockets and drives them with its own workers
//! ([`Spawners`]).

use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;

use hdrhistogram::Histogram;
use sonde_engine::rr_client::{ClientPlan, RrClient, RrSocket, Target, WorkerEnd};
use sonde_engine::rr_server::{RrServer, ServerPlan, ServerTarget};
use sonde_engine::sockopt::{self, SocketOptions};
use sonde_results::{Engine, RrSpec, Transport};

use super::engine::{ClientPort, EchoEngine, RequestEngine, RrBackend, ServerPort};
use crate::kind::connect::{connect_data, connect_udp};
use crate::kind::seam::{DataPort, OpenResult};
use crate::kind::table::Named;

pub struct Kernel;

impl Named for Kernel {
    fn engine(&self) -> Engine {
        Engine::Kernel
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

/// What starts the workers on the opened sockets: system calls or io_uring.
#[derive(Clone, Copy)]
pub(super) struct Spawners {
    pub client: fn(Target, ClientPlan) -> io::Result<RrClient>,
    pub server: fn(ServerTarget, ServerPlan) -> io::Result<RrServer>,
}

const SYSCALLS: Spawners = Spawners {
    client: RrClient::spawn,
    server: RrServer::spawn,
};

impl RrBackend for Kernel {
    fn open_client(&self, r: &RrSpec, to: DataPort) -> OpenResult<dyn ClientPort> {
        open_client(r, to, SYSCALLS)
    }

    fn open_server(
        &self,
        r: &RrSpec,
        ip: IpAddr,
        _peer: IpAddr,
    ) -> io::Result<Box<dyn ServerPort>> {
        open_server(r, ip, SYSCALLS)
    }
}

/// The controller's sockets, for workers `spawn` starts.
pub(super) fn open_client(r: &RrSpec, to: DataPort, spawn: Spawners) -> OpenResult<dyn ClientPort> {
    if r.connect_per_request {
        let target = Target::ConnectPerRequest {
            addr: to.addr,
            opts: nodelay(),
            connections: r.connections as usize,
        };
        return Ok(Box::new(Client {
            target,
            options: vec!["TCP_NODELAY".into()],
            spawn,
        }));
    }
    let mut sockets = Vec::new();
    let mut options = Vec::new();
    for index in 0..r.connections {
        let (sock, mut applied) = match r.transport {
            Transport::Tcp => {
                let (s, _) = connect_data(to, &nodelay(), index)?;
                (RrSocket::Tcp(s), vec!["TCP_NODELAY".to_string()])
            }
            Transport::Udp => (RrSocket::Udp(connect_udp(to.addr, index)?), Vec::new()),
        };
        applied.extend(busy_poll(r, sock.fd()));
        if index == 0 {
            options = applied;
        }
        sockets.push(sock);
    }
    Ok(Box::new(Client {
        target: Target::Sockets(sockets),
        options,
        spawn,
    }))
}

/// The agent's echo socket or listener, for workers `spawn` starts.
pub(super) fn open_server(
    r: &RrSpec,
    ip: IpAddr,
    spawn: Spawners,
) -> io::Result<Box<dyn ServerPort>> {
    {
        let addr = SocketAddr::new(ip, 0);
        let at = match r.transport {
            Transport::Udp => At::Udp(UdpSocket::bind(addr)?),
            Transport::Tcp => {
                let (l, _) = sockopt::listen(addr, &nodelay(), r.connections.max(128) as i32)?;
                l.set_nonblocking(true)?;
                At::Tcp(l)
            }
        };
        Ok(Box::new(Server {
            spec: r.clone(),
            at,
            spawn,
        }))
    }
}

/// The controller's sockets (or, connect per request, where to connect).
struct Client {
    target: Target,
    options: Vec<String>,
    spawn: Spawners,
}

impl ClientPort for Client {
    fn options(&self) -> Vec<String> {
        self.options.clone()
    }
    fn start(self: Box<Self>, plan: ClientPlan) -> io::Result<Box<dyn RequestEngine>> {
        Ok(Box::new((self.spawn.client)(self.target, plan)?))
    }
}

enum At {
    Udp(UdpSocket),
    Tcp(TcpListener),
}

/// The agent's echo socket or listener.
struct Server {
    spec: RrSpec,
    at: At,
    spawn: Spawners,
}

impl ServerPort for Server {
    fn port(&self) -> io::Result<u16> {
        Ok(match &self.at {
            At::Udp(u) => u.local_addr()?.port(),
            At::Tcp(l) => l.local_addr()?.port(),
        })
    }

    fn listener(&self) -> Option<(&TcpListener, usize)> {
        match &self.at {
            At::Tcp(l) => Some((l, self.spec.initial_connections() as usize)),
            At::Udp(_) => None,
        }
    }

    fn units(&self, conns: usize) -> usize {
        match &self.at {
            At::Tcp(_) if !self.spec.connect_per_request => conns,
            _ => 1,
        }
    }

    fn start(
        self: Box<Self>,
        conns: Vec<TcpStream>,
        peer: IpAddr,
        plan: ServerPlan,
    ) -> io::Result<(Box<dyn EchoEngine>, Vec<String>)> {
        let Server { spec, at, spawn } = *self;
        let mut options = Vec::new();
        let target = match at {
            At::Udp(socket) => {
                options = busy_poll(&spec, socket.as_raw_fd());
                ServerTarget::Udp {
                    socket,
                    allowed: peer,
                }
            }
            At::Tcp(listener) if spec.connect_per_request => ServerTarget::Accept {
                listener,
                allowed: peer,
            },
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
                ServerTarget::Sockets(socks)
            }
        };
        Ok((Box::new((spawn.server)(target, plan)?), options))
    }
}

/// Kernel sockets' workers say which engine drives them (system calls or io_uring).
macro_rules! socket_workers {
    ($($t:ty),+) => {$(
        impl crate::kind::workers::Workers for $t {
            fn engine(&self) -> sonde_results::Engine {
                match <$t>::engine(self) {
                    sonde_engine::Driver::Syscalls => sonde_results::Engine::Kernel,
                    sonde_engine::Driver::Uring => sonde_results::Engine::Uring,
                }
            }
            fn all_done(&self) -> bool {
                <$t>::all_done(self)
            }
            fn abort(&self) {
                <$t>::abort(self)
            }
        }
    )+};
}
socket_workers!(RrClient, RrServer);

impl RequestEngine for RrClient {
    fn counts(&self) -> (u64, u64) {
        RrClient::counts(self)
    }
    fn drain(&self, each: &mut dyn FnMut(u32, &Histogram<u64>)) {
        RrClient::drain(self, each)
    }
    fn drain_stages(&self, each: &mut dyn FnMut(u32, &sonde_engine::stamps::StageHists)) {
        RrClient::drain_stages(self, each)
    }
    fn join(&mut self) -> Vec<WorkerEnd> {
        RrClient::join(self)
    }
}

impl EchoEngine for RrServer {
    fn answered(&self) -> u64 {
        RrServer::answered(self)
    }
    fn rejected(&self) -> u64 {
        RrServer::rejected(self)
    }
    fn join(&mut self) -> Vec<String> {
        RrServer::join(self)
    }
    fn syscalls(&self) -> Option<u64> {
        Some(RrServer::syscalls(self))
    }
}
