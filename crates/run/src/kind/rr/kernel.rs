//! The request/response kind's kernel-socket engine: a TCP connection or connected UDP
//! socket per connection on the controller (or a new TCP connection per request), and on
//! the agent an echo socket, the TCP connections or a listener to accept from. The io_uring
//! engine (`uring.rs`) opens the same sockets and drives them with its own workers
//! ([`Spawners`]). io_uring's workers read no TOS: UDP marks are counted for them by a
//! socket filter in the kernel (`sonde_engine::marks::filter`), the requests on the echo's
//! socket (from before `Ready`) and the answers on the controller's connected sockets.

use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};

use hdrhistogram::Histogram;
use sonde_engine::marks::filter::{Match, TosFilter};
use sonde_engine::rr_client::{ClientPlan, RrClient, RrSocket, Target, WorkerEnd};
use sonde_engine::rr_server::{RrServer, ServerPlan, ServerTarget};
use sonde_engine::sockopt::{self, SocketOptions};
use sonde_results::{Engine, RrSpec, SpecError, Transport};

use super::engine::{reads_tos, ArrivedTos, EchoEngine, RequestEngine, RrBackend};
use crate::kind::connect::{connect_data, connect_udp};
use crate::kind::seam::{DataPort, OpenResult};
use crate::kind::table::Named;
use crate::kind::workers::{staged_workers, Lifecycle};

pub struct Kernel;

impl Named for Kernel {
    fn engine(&self) -> Engine {
        Engine::Kernel
    }
}

fn nodelay(r: &RrSpec) -> SocketOptions {
    SocketOptions {
        nodelay: true,
        tos: r.execution.marks.data_tos(),
        ..Default::default()
    }
}

/// `--busy-poll` on one socket: the notes on what was applied.
fn busy_poll(spec: &RrSpec, fd: std::os::fd::RawFd) -> Vec<String> {
    spec.busy_poll_us
        .map(|us| sockopt::set_busy_poll(fd, us))
        .unwrap_or_default()
}

/// What starts the workers on the opened sockets (system calls or io_uring), and the
/// engine that is.
#[derive(Clone, Copy)]
pub(super) struct Spawners {
    pub engine: Engine,
    pub client: fn(Target, ClientPlan) -> io::Result<RrClient>,
    pub server: fn(ServerTarget, ServerPlan) -> io::Result<RrServer>,
}

const SYSCALLS: Spawners = Spawners {
    engine: Engine::Kernel,
    client: RrClient::spawn,
    server: RrServer::spawn,
};

impl RrBackend for Kernel {
    /// The stages (this engine's and io_uring's kernel timestamps) are taken on open
    /// connections.
    fn refuse(&self, spec: &RrSpec) -> Result<(), SpecError> {
        if spec.stages && spec.connect_per_request {
            return Err(SpecError {
                flag: "--stages",
                reason: "not with --crr: stages are taken on open connections".into(),
            });
        }
        Ok(())
    }

    fn open_client(&self, r: &RrSpec, to: DataPort) -> OpenResult<dyn RequestEngine> {
        open_client(r, to, SYSCALLS)
    }

    fn open_server(
        &self,
        r: &RrSpec,
        ip: IpAddr,
        _peer: IpAddr,
    ) -> io::Result<Box<dyn EchoEngine>> {
        open_server(r, ip, SYSCALLS)
    }
}

/// Where the workers `spawn` starts read no TOS (io_uring's) and the spec asks for the
/// marks: a filter counting what `matching` takes on `fds`, or why the kernel refused it
/// (the side says so, and that the marks were not read).
fn tos_filter(
    r: &RrSpec,
    spawn: Spawners,
    fds: &[RawFd],
    matching: Match,
) -> Option<Result<TosFilter, String>> {
    if spawn.engine == Engine::Kernel || !reads_tos(r) {
        return None;
    }
    Some(TosFilter::attach_matching(fds, matching).map_err(|e| first_line(&e)))
}

/// The first line of `e` (a refused BPF program's error carries the verifier's log after it).
fn first_line(e: &io::Error) -> String {
    e.to_string().lines().next().unwrap_or_default().to_string()
}

/// What a filter counted, or why there is none; `None` where there is no filter.
fn counted(filter: &Option<Result<TosFilter, String>>) -> Option<ArrivedTos> {
    filter
        .as_ref()
        .map(|f| f.as_ref().map(TosFilter::snapshot).map_err(Clone::clone))
}

/// The controller's sockets, for workers `spawn` starts.
pub(super) fn open_client(
    r: &RrSpec,
    to: DataPort,
    spawn: Spawners,
) -> OpenResult<dyn RequestEngine> {
    if r.connect_per_request {
        let target = Target::ConnectPerRequest {
            addr: to.addr,
            opts: nodelay(r),
            connections: r.connections as usize,
        };
        return Ok(Box::new(Client {
            stage: Lifecycle::Opened(target),
            options: vec!["TCP_NODELAY".into()],
            spawn,
            filter: None,
        }));
    }
    let mut sockets = Vec::new();
    let mut options = Vec::new();
    for index in 0..r.connections {
        let (sock, mut applied) = match r.transport {
            Transport::Tcp => {
                let (s, _) = connect_data(to, &nodelay(r), index)?;
                (RrSocket::Tcp(s), vec!["TCP_NODELAY".to_string()])
            }
            Transport::Udp => {
                let tos = r.execution.marks.data_tos();
                (RrSocket::Udp(connect_udp(to.addr, index, tos)?), Vec::new())
            }
        };
        applied.extend(busy_poll(r, sock.fd()));
        if index == 0 {
            options = applied;
        }
        sockets.push(sock);
    }
    let fds: Vec<RawFd> = sockets.iter().map(RrSocket::fd).collect();
    let answers = Match::Length {
        bytes: r.response_bytes,
    };
    Ok(Box::new(Client {
        filter: tos_filter(r, spawn, &fds, answers),
        stage: Lifecycle::Opened(Target::Sockets(sockets)),
        options,
        spawn,
    }))
}

/// The agent's echo socket or listener, for workers `spawn` starts.
pub(super) fn open_server(
    r: &RrSpec,
    ip: IpAddr,
    spawn: Spawners,
) -> io::Result<Box<dyn EchoEngine>> {
    let addr = SocketAddr::new(ip, 0);
    let at = match r.transport {
        Transport::Udp => {
            let u = UdpSocket::bind(addr)?;
            sonde_engine::marks::set_tos_if(u.as_raw_fd(), r.execution.marks.data_tos())?;
            At::Udp(u)
        }
        Transport::Tcp => {
            let (l, _) = sockopt::listen(addr, &nodelay(r), r.connections.max(128) as i32)?;
            l.set_nonblocking(true)?;
            At::Tcp(l)
        }
    };
    let port = match &at {
        At::Udp(u) => u.local_addr()?.port(),
        At::Tcp(l) => l.local_addr()?.port(),
    };
    Ok(Box::new(Server {
        spec: r.clone(),
        port,
        stage: Lifecycle::Opened(at),
        spawn,
        filter: None,
    }))
}

/// The controller's sockets (or, connect per request, where to connect), then the
/// request workers on them.
struct Client {
    stage: Lifecycle<Target, RrClient>,
    options: Vec<String>,
    spawn: Spawners,
    /// The answers' marks, counted in the kernel for workers that read none.
    filter: Option<Result<TosFilter, String>>,
}

impl RequestEngine for Client {
    fn options(&self) -> Vec<String> {
        self.options.clone()
    }
    fn start(&mut self, plan: ClientPlan) -> io::Result<()> {
        let spawn = self.spawn.client;
        self.stage.start(|target| spawn(target, plan))
    }
    fn counts(&self) -> (u64, u64) {
        self.stage.running().map_or((0, 0), RrClient::counts)
    }
    fn drain(&self, each: &mut dyn FnMut(u32, &Histogram<u64>)) {
        if let Some(w) = self.stage.running() {
            w.drain(each)
        }
    }
    fn drain_stages(&self, each: &mut dyn FnMut(u32, &sonde_engine::kstamps::StageHists)) {
        if let Some(w) = self.stage.running() {
            w.drain_stages(each)
        }
    }
    fn join(&mut self) -> Vec<WorkerEnd> {
        self.stage
            .running_mut()
            .map(RrClient::join)
            .unwrap_or_default()
    }
    /// A new connection's calls are not counted: the side says so.
    fn counts_syscalls(&self) -> bool {
        true
    }
    fn arrived_tos(&self) -> Option<ArrivedTos> {
        counted(&self.filter).or_else(|| self.stage.running()?.arrived_tos().map(Ok))
    }
}

enum At {
    Udp(UdpSocket),
    Tcp(TcpListener),
}

/// The agent's echo socket or listener, then the echo workers.
struct Server {
    spec: RrSpec,
    port: u16,
    stage: Lifecycle<At, RrServer>,
    spawn: Spawners,
    /// The requests' marks, counted in the kernel for workers that read none.
    filter: Option<Result<TosFilter, String>>,
}

impl EchoEngine for Server {
    fn port(&self) -> io::Result<u16> {
        Ok(self.port)
    }

    fn listener(&self) -> Option<(&TcpListener, usize)> {
        match self.stage.opened()? {
            At::Tcp(l) => Some((l, self.spec.initial_connections() as usize)),
            At::Udp(_) => None,
        }
    }

    fn units(&self, conns: usize) -> usize {
        match self.stage.opened() {
            Some(At::Tcp(_)) if !self.spec.connect_per_request => conns,
            _ => 1,
        }
    }

    fn start(
        &mut self,
        conns: Vec<TcpStream>,
        peer: IpAddr,
        plan: ServerPlan,
    ) -> io::Result<Vec<String>> {
        let (spec, spawn) = (&self.spec, self.spawn.server);
        let mut options = Vec::new();
        self.stage.start(|at| {
            let target = match at {
                At::Udp(socket) => {
                    options = busy_poll(spec, socket.as_raw_fd());
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
                        let applied = busy_poll(spec, c.as_raw_fd());
                        if socks.is_empty() {
                            options = applied;
                        }
                        socks.push(RrSocket::Tcp(c));
                    }
                    ServerTarget::Sockets(socks)
                }
            };
            spawn(target, plan)
        })?;
        Ok(options)
    }

    fn answered(&self) -> u64 {
        self.stage.running().map_or(0, RrServer::answered)
    }
    fn rejected(&self) -> u64 {
        self.stage.running().map_or(0, RrServer::rejected)
    }
    fn join(&mut self) -> Vec<String> {
        self.stage
            .running_mut()
            .map(RrServer::join)
            .unwrap_or_default()
    }
    fn syscalls(&self) -> Option<u64> {
        self.stage.running().map(RrServer::syscalls)
    }

    fn stamps(&self) -> Option<sonde_engine::kstamps::StampKinds> {
        self.stage.running().map(RrServer::stamps)
    }
    fn arrived_tos(&self) -> Option<ArrivedTos> {
        counted(&self.filter).or_else(|| self.stage.running()?.arrived_tos().map(Ok))
    }
    /// The echo's socket takes the filter before the controller knows its port, so that
    /// it counts the test's first request.
    fn before_ready(&mut self, cookie: u64) {
        let Some(At::Udp(u)) = self.stage.opened() else {
            return;
        };
        let requests = Match::Request {
            cookie,
            bytes: self.spec.request_bytes,
        };
        self.filter = tos_filter(&self.spec, self.spawn, &[u.as_raw_fd()], requests);
    }
}

staged_workers!(engine = |s| s.spawn.engine; Client => RrClient, Server => RrServer);
