//! Drives one stream test end to end from the controller's side: connect, handshake,
//! open the data connections, run and sample, collect the agent's results, build the
//! document. Errors before the start are errors; anything that goes wrong after it
//! still yields a document, marked partial, with what was measured.

use std::io::Write;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use sonde_engine::rr_client::{RrSocket, Target};
use sonde_engine::sockopt::{self, SocketOptions};
use sonde_proto::{ClientEvent, ClientSession, ProtoError, Timeouts};
use sonde_results::document::Inputs;
use sonde_results::{
    Direction, Document, IntervalSample, PpsSpec, Role, RrSpec, SideResult, StreamSpec, TestSpec,
    Transport,
};

use crate::control::{Link, Wake};
use crate::pps_side::PpsSide;
use crate::rr_side::RrSide;
use crate::side::Side;
use crate::signals::Interrupt;
use crate::stream_side::StreamSide;
use sonde_probe::hostwatch::HostProbe;

pub const SOFTWARE: &str = concat!("sonde ", env!("CARGO_PKG_VERSION"));
/// After the planned end, how long receivers may take to see every FIN.
const DRAIN: Duration = Duration::from_secs(3);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    #[error("cannot resolve host '{host}': {reason}")]
    Resolve { host: String, reason: String },
    #[error("cannot connect to the agent at {addr}: {source} (is `sonde serve` running there?)")]
    Connect {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("agent at {addr}: {source}")]
    Protocol {
        addr: SocketAddr,
        source: ProtoError,
    },
    #[error("control connection to {addr}: {source}")]
    Io {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("opening data connection {index} to {addr}: {source}")]
    Data {
        index: u32,
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("interrupted before the test started")]
    Interrupted,
    #[error("{0}")]
    Refused(String),
}

pub struct TestRequest {
    pub host: String,
    pub port: u16,
    pub spec: TestSpec,
    /// The exact command line, for the record.
    pub command: String,
    /// The agent's pre-shared key, when it requires one.
    pub key: Option<sonde_proto::Key>,
}

/// What the live display gets: interval `index` as each side measured it.
pub struct LiveInterval<'a> {
    pub client: Option<&'a IntervalSample>,
    pub server: Option<&'a IntervalSample>,
}

pub fn resolve(host: &str, port: u16) -> Result<SocketAddr, ControllerError> {
    let err = |reason: String| ControllerError::Resolve {
        host: host.to_string(),
        reason,
    };
    let mut addrs = (host, port)
        .to_socket_addrs()
        .map_err(|e| err(e.to_string()))?;
    addrs.next().ok_or_else(|| err("no address found".into()))
}

fn now_rfc3339() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

/// Pairs the two sides' interval samples and hands each pair to the display once.
struct Pairing {
    client: Vec<IntervalSample>,
    server: Vec<IntervalSample>,
    shown: usize,
}

impl Pairing {
    fn show(&mut self, live: &mut dyn FnMut(LiveInterval<'_>), force: bool) {
        loop {
            let i = self.shown;
            let (c, s) = (self.client.get(i), self.server.get(i));
            // Wait for the agent's sample unless ours has already moved on (agent late or gone).
            let ready = (c.is_some() && s.is_some())
                || (c.is_some() && (force || self.client.len() > i + 1));
            if !ready {
                return;
            }
            live(LiveInterval {
                client: c,
                server: s,
            });
            self.shown += 1;
        }
    }
}

pub fn run_test(
    req: &TestRequest,
    interrupt: &Interrupt,
    live: &mut dyn FnMut(LiveInterval<'_>),
) -> Result<Document, ControllerError> {
    let addr = resolve(&req.host, req.port)?;
    let started_at = now_rfc3339();
    let mut spec = req.spec.clone();
    // pps counts header bytes by address family: the agent's address decides.
    if let TestSpec::Pps(p) = &mut spec {
        p.ipv6 = addr.is_ipv6();
        p.validate()
            .map_err(|e| ControllerError::Refused(e.to_string()))?;
    }
    let control = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)
        .map_err(|source| ControllerError::Connect { addr, source })?;
    let io_err = |source| ControllerError::Io { addr, source };
    let proto_err = |source| ControllerError::Protocol { addr, source };
    let mut link = Link::new(control).map_err(io_err)?;
    let mut session = ClientSession::new(
        spec.clone(),
        SOFTWARE,
        &req.command,
        Timeouts::default(),
        Instant::now(),
    )
    .with_key(req.key.clone());

    // Handshake until the agent is ready for data connections.
    let mut server_command = None;
    let (data_port, cookie) = loop {
        link.flush(|| session.poll_transmit()).map_err(io_err)?;
        if interrupt.is_set() {
            return Err(ControllerError::Interrupted);
        }
        match link.wait(session.poll_timeout(), None).map_err(io_err)? {
            Wake::Data(n) => session
                .handle_bytes(link.received(n), Instant::now())
                .map_err(proto_err)?,
            Wake::Eof => session.handle_eof().map_err(proto_err)?,
            _ => session.handle_timeout(Instant::now()).map_err(proto_err)?,
        }
        let mut ready = None;
        while let Some(ev) = session.poll_event() {
            match ev {
                ClientEvent::Welcome { command, .. } => server_command = Some(command),
                ClientEvent::Ready { data_port, cookie } => ready = Some((data_port, cookie)),
                _ => {}
            }
        }
        if let Some(r) = ready {
            break r;
        }
    };

    let data_addr = SocketAddr::new(addr.ip(), data_port);
    let probe = HostProbe::for_peer(addr.ip());
    let mut side: Box<dyn Side> = match &spec {
        TestSpec::Stream(s) => {
            let (conns, notes) = open_data_connections(s, data_addr, cookie)?;
            session.start(Instant::now()).map_err(proto_err)?;
            link.flush(|| session.poll_transmit()).map_err(io_err)?;
            Box::new(StreamSide::start(Role::Client, s, conns, probe, notes).map_err(io_err)?)
        }
        TestSpec::Pps(p) => {
            if let Some((iface, mtu)) = probe.mtu() {
                if p.size_bytes > mtu + 14 {
                    return Err(ControllerError::Refused(format!(
                        "invalid --size: {} bytes exceeds {iface}'s MTU of {mtu} bytes plus its 14-byte Ethernet header (no GSO for these packets)",
                        p.size_bytes
                    )));
                }
            }
            let flows = open_flows(p, data_addr)?;
            session.start(Instant::now()).map_err(proto_err)?;
            link.flush(|| session.poll_transmit()).map_err(io_err)?;
            Box::new(
                PpsSide::start_client(p, flows, cookie as u32, probe, Vec::new())
                    .map_err(io_err)?,
            )
        }
        TestSpec::Ping(r) | TestSpec::Rpc(r) => {
            let (target, options) = open_rr_target(r, data_addr, cookie)?;
            session.start(Instant::now()).map_err(proto_err)?;
            link.flush(|| session.poll_transmit()).map_err(io_err)?;
            Box::new(RrSide::start_client(r, target, probe, Vec::new(), options).map_err(io_err)?)
        }
    };

    let mut pairing = Pairing {
        client: Vec::new(),
        server: Vec::new(),
        shown: 0,
    };
    let mut error: Option<String> = None;
    let mut server_result: Option<SideResult> = None;
    let mut stop_sent = false;

    // Run, then wait for the agent's results; any failure ends the loop with `error` set.
    loop {
        if interrupt.is_set() {
            error = Some("interrupted (Ctrl-C)".into());
            break;
        }
        let now = Instant::now();
        if let Some(sample) = side.on_time(now) {
            pairing.client.push(sample);
            pairing.show(live, false);
        }
        if !stop_sent {
            let drained = side.is_draining() && side.all_done();
            let overdue = now > side.planned_end() + DRAIN;
            if drained || overdue {
                if overdue && !drained {
                    error =
                        Some("receivers did not see the end of every connection in time".into());
                }
                side.finish_senders();
                if let Err(e) = session.stop(now) {
                    error = Some(e.to_string());
                    break;
                }
                stop_sent = true;
            }
        }
        if let Err(e) = link.flush(|| session.poll_transmit()) {
            error = Some(format!("control connection: {e}"));
            break;
        }
        let deadline = [side.next_deadline(), session.poll_timeout()]
            .into_iter()
            .flatten()
            .min();
        let step = match link.wait(deadline, None) {
            Ok(Wake::Data(n)) => session.handle_bytes(link.received(n), Instant::now()),
            Ok(Wake::Eof) => session.handle_eof(),
            Ok(_) => session.handle_timeout(Instant::now()),
            Err(e) => Err(ProtoError::Closed(
                if e.kind() == std::io::ErrorKind::ConnectionReset {
                    "running the test"
                } else {
                    "reading"
                },
            )),
        };
        while let Some(ev) = session.poll_event() {
            match ev {
                ClientEvent::Interval(s) => pairing.server.push(s),
                ClientEvent::Results(r) => server_result = Some(*r),
                _ => {}
            }
        }
        pairing.show(live, false);
        if let Err(e) = step {
            error = Some(format!("agent at {addr}: {e}"));
            break;
        }
        if session.is_done() {
            break;
        }
    }
    pairing.show(live, true);
    drop(link);
    let client_result = side.into_result(error.is_some());
    Ok(Document::build(Inputs {
        spec: &spec,
        command: req.command.clone(),
        server_command,
        server_address: addr.to_string(),
        started_at,
        software: SOFTWARE.into(),
        client: &client_result,
        server: server_result.as_ref(),
        client_intervals: &pairing.client,
        server_intervals: &pairing.server,
        error,
    }))
}

type DataConns = (Vec<(u32, Direction, TcpStream)>, Vec<String>);

/// Connects one data connection and sends its header.
fn connect_data(
    addr: SocketAddr,
    opts: &SocketOptions,
    cookie: u64,
    index: u32,
) -> Result<(TcpStream, Vec<String>), ControllerError> {
    let err = |source| ControllerError::Data {
        index,
        addr,
        source,
    };
    let (mut s, notes) = sockopt::connect(addr, opts, CONNECT_TIMEOUT).map_err(err)?;
    let mut header = [0u8; DATA_HEADER_BYTES];
    header[..8].copy_from_slice(&cookie.to_be_bytes());
    header[8..].copy_from_slice(&index.to_be_bytes());
    s.write_all(&header).map_err(err)?;
    Ok((s, notes))
}

/// One UDP socket per flow, each on its own source port, connected to the agent.
fn open_flows(spec: &PpsSpec, addr: SocketAddr) -> Result<Vec<UdpSocket>, ControllerError> {
    let bind: SocketAddr = if addr.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    }
    .parse()
    .expect("literal");
    (0..spec.flows)
        .map(|index| {
            let err = |source| ControllerError::Data {
                index,
                addr,
                source,
            };
            let s = UdpSocket::bind(bind).map_err(err)?;
            s.connect(addr).map_err(err)?;
            Ok(s)
        })
        .collect()
}

/// The sockets of a request/response test, and the socket options applied to them.
fn open_rr_target(
    spec: &RrSpec,
    addr: SocketAddr,
    cookie: u64,
) -> Result<(Target, Vec<String>), ControllerError> {
    let opts = SocketOptions {
        nodelay: true,
        ..Default::default()
    };
    if spec.connect_per_request {
        let target = Target::ConnectPerRequest {
            addr,
            opts,
            connections: spec.connections as usize,
        };
        return Ok((target, vec!["TCP_NODELAY".into()]));
    }
    let mut sockets = Vec::new();
    let mut options = Vec::new();
    for index in 0..spec.connections {
        let err = |source| ControllerError::Data {
            index,
            addr,
            source,
        };
        let (fd, sock) = match spec.transport {
            Transport::Tcp => {
                let (s, _) = connect_data(addr, &opts, cookie, index)?;
                (s.as_raw_fd(), RrSocket::Tcp(s))
            }
            Transport::Udp => {
                let bind: SocketAddr = if addr.is_ipv4() {
                    "0.0.0.0:0"
                } else {
                    "[::]:0"
                }
                .parse()
                .expect("literal");
                let u = UdpSocket::bind(bind).map_err(err)?;
                u.connect(addr).map_err(err)?;
                (u.as_raw_fd(), RrSocket::Udp(u))
            }
        };
        let mut applied = if spec.transport == Transport::Tcp {
            vec!["TCP_NODELAY".to_string()]
        } else {
            Vec::new()
        };
        if let Some(us) = spec.busy_poll_us {
            applied.extend(sockopt::set_busy_poll(fd, us));
        }
        if index == 0 {
            options = applied;
        }
        sockets.push(sock);
    }
    Ok((Target::Sockets(sockets), options))
}

/// Opens every data connection; each begins with the cookie and its test-wide index.
fn open_data_connections(
    spec: &StreamSpec,
    addr: SocketAddr,
    cookie: u64,
) -> Result<DataConns, ControllerError> {
    let opts = SocketOptions {
        congestion: spec.congestion.clone(),
        nodelay: spec.nodelay,
        sndbuf_bytes: spec.sndbuf_bytes,
        rcvbuf_bytes: spec.rcvbuf_bytes,
    };
    let mut conns = Vec::new();
    let mut notes = Vec::new();
    for index in 0..spec.total_connections() {
        let dir = spec.direction_of(index);
        let err = |source| ControllerError::Data {
            index,
            addr,
            source,
        };
        let (mut s, n) = sockopt::connect(addr, &opts, CONNECT_TIMEOUT).map_err(err)?;
        let mut header = [0u8; DATA_HEADER_BYTES];
        header[..8].copy_from_slice(&cookie.to_be_bytes());
        header[8..].copy_from_slice(&index.to_be_bytes());
        s.write_all(&header).map_err(err)?;
        if index == 0 {
            notes.extend(n);
        }
        conns.push((index, dir, s));
    }
    Ok((conns, notes))
}

/// Cookie (8 bytes) and connection index (4 bytes), big-endian.
pub const DATA_HEADER_BYTES: usize = 12;
