//! `sonde serve`: the far end of every test. One test at a time on its own thread; a
//! controller arriving meanwhile is told "busy". Every socket and thread of a test is freed
//! when it ends, whatever happened, and the agent logs one line per test.

use std::io::{self, Read};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use sonde_engine::rr_client::RrSocket;
use sonde_engine::rr_server::ServerTarget;
use sonde_engine::sockopt::{self, SocketOptions};
use sonde_proto::{
    AgentEvent, AgentSession, Key, PeerError, ProtoError, Timeouts, CHALLENGE_BYTES,
};
use sonde_results::{Role, TestSpec, Transport};

use crate::control::{Link, Wake};
use crate::controller::{DATA_HEADER_BYTES, SOFTWARE};
use crate::pps_side::PpsSide;
use crate::rr_side::RrSide;
use crate::side::{worker_threads, Side, Work};
use crate::signals::Interrupt;
use crate::stream_side::StreamSide;
use sonde_probe::hostwatch::HostProbe;

/// The agent's default control port.
pub const DEFAULT_PORT: u16 = 5301;
const DRAIN: Duration = Duration::from_secs(3);
const ACCEPT_DEADLINE: Duration = Duration::from_secs(5);
/// How long a refused controller may take to read our last frame before we close.
const LINGER: Duration = Duration::from_millis(300);
/// Connections in their handshake at once; more are told "busy" at once.
const MAX_PENDING: usize = 32;
/// How long a new controller waits for the running test to finish before "busy".
const BUSY_GRACE: Duration = Duration::from_millis(500);
/// Test types this agent runs.
const CAPABILITIES: &[&str] = &["stream", "ping", "rpc", "pps"];
/// Receive buffer of each packet-rate socket: absorbs bursts between two recvmmsg calls.
const RX_BUFFER_BYTES: usize = 8 << 20;

/// What the agent will run for a controller. A limit refuses a test; it never trims one.
#[derive(Debug, Clone)]
pub struct Limits {
    pub max_duration_ms: u64,
    pub max_connections: u32,
    /// Packets or requests per second a test may ask for; unpaced tests are refused too.
    pub max_rate: Option<f64>,
    pub max_message_bytes: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_duration_ms: 3_600_000,
            max_connections: sonde_results::spec::MAX_CONNECTIONS,
            max_rate: None,
            max_message_bytes: sonde_results::spec::MAX_MESSAGE_BYTES,
        }
    }
}

impl Limits {
    /// The first limit `spec` exceeds, in words naming the agent's flag.
    fn check(&self, spec: &TestSpec) -> Option<String> {
        let (total_ms, conns, rate, msg) = match spec {
            TestSpec::Stream(s) => (s.total_ms(), s.total_connections(), None, s.buffer_bytes),
            TestSpec::Ping(r) | TestSpec::Rpc(r) => (
                r.total_ms(),
                r.connections,
                Some(r.rate_per_s),
                r.request_bytes.max(r.response_bytes),
            ),
            TestSpec::Pps(p) => (
                p.warmup_ms + p.duration_ms,
                p.flows,
                Some(p.rate_pps),
                p.size_bytes,
            ),
        };
        if total_ms > self.max_duration_ms {
            return Some(format!(
                "the test lasts {:.1} s, over this agent's --max-duration of {:.1} s",
                total_ms as f64 / 1e3,
                self.max_duration_ms as f64 / 1e3
            ));
        }
        if conns > self.max_connections {
            return Some(format!(
                "{conns} connections or flows, over this agent's --max-connections of {}",
                self.max_connections
            ));
        }
        if msg > self.max_message_bytes {
            return Some(format!(
                "{msg}-byte messages, over this agent's --max-message of {}",
                self.max_message_bytes
            ));
        }
        if let (Some(max), Some(rate)) = (self.max_rate, rate) {
            match rate {
                Some(r) if r <= max => {}
                Some(r) => {
                    return Some(format!(
                        "{r} per second, over this agent's --max-rate of {max}"
                    ))
                }
                None => {
                    return Some(format!(
                        "an unpaced test; this agent's --max-rate of {max} needs --rate"
                    ))
                }
            }
        }
        None
    }
}

pub struct ServeConfig {
    pub bind: IpAddr,
    pub port: u16,
    pub command: String,
    pub key: Option<Key>,
    pub limits: Limits,
}

/// State shared by the connections being served: the one test slot, and how many
/// connections are in their handshake.
struct Shared {
    cfg: ServeConfig,
    busy: AtomicBool,
    pending: AtomicUsize,
    interrupt: Interrupt,
}

/// Holds the test slot; frees it when dropped, whatever path the test took.
struct Slot<'a>(&'a AtomicBool);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl Shared {
    /// Takes the test slot, waiting a moment for a test that is tidying up, so that
    /// back-to-back tests (lab, --poll all) are not told "busy".
    fn take_slot(&self) -> Option<Slot<'_>> {
        let until = Instant::now() + BUSY_GRACE;
        loop {
            if self
                .busy
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return Some(Slot(&self.busy));
            }
            if Instant::now() >= until {
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

pub fn serve(cfg: ServeConfig, interrupt: &Interrupt) -> anyhow::Result<()> {
    let addr = SocketAddr::new(cfg.bind, cfg.port);
    let listener = TcpListener::bind(addr)
        .with_context(|| format!("cannot listen on {addr} (--bind/--port)"))?;
    listener.set_nonblocking(true)?;
    let local = listener.local_addr()?;
    // Scripts (and `sonde lab`) read this line to learn the port.
    println!(
        "sonde agent listening on {local} (protocol {})",
        sonde_proto::PROTOCOL_VERSION
    );
    let _ = std::io::Write::flush(&mut std::io::stdout());
    tracing::info!(
        "listening on {local}{}",
        if cfg.key.is_some() {
            ", key required"
        } else {
            ""
        }
    );
    if cfg.key.is_none() && !cfg.bind.is_loopback() {
        tracing::warn!("listening on {} without --key-file: anyone who reaches this port can make this host send traffic", cfg.bind);
    }
    let shared = Arc::new(Shared {
        cfg,
        busy: AtomicBool::new(false),
        pending: AtomicUsize::new(0),
        interrupt: interrupt.clone(),
    });
    let mut handles: Vec<std::thread::JoinHandle<()>> = Vec::new();
    while !interrupt.is_set() {
        handles.retain(|h| !h.is_finished());
        let mut pfds = [
            libc::pollfd {
                fd: listener.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: crate::signals::wake_fd().unwrap_or(-1),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: two live pollfds; a negative fd is ignored. A stop signal wakes the wait.
        if unsafe { libc::poll(pfds.as_mut_ptr(), 2, 1000) } <= 0 || pfds[0].revents == 0 {
            continue;
        }
        let (conn, peer) = match listener.accept() {
            Ok(c) => c,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                continue;
            }
        };
        // Each connection shakes hands on its own thread, so an idle or garbage peer holds
        // nothing but its own thread until the handshake deadline (esnet/iperf#788); their
        // number is bounded, and beyond it a peer is told "busy" at once.
        if shared.pending.load(Ordering::Acquire) >= MAX_PENDING {
            answer_busy(conn, peer);
            continue;
        }
        shared.pending.fetch_add(1, Ordering::AcqRel);
        let sh = Arc::clone(&shared);
        let spawned = std::thread::Builder::new()
            .name("sonde-conn".into())
            .spawn(move || {
                let started = Instant::now();
                match run_test(conn, peer, &sh) {
                    Ok(summary) => tracing::info!(
                        "test from {peer}: {summary} ({:.1} s)",
                        started.elapsed().as_secs_f64()
                    ),
                    Err(e) => tracing::warn!(
                        "test from {peer}: {e:#} ({:.1} s)",
                        started.elapsed().as_secs_f64()
                    ),
                }
            });
        match spawned {
            Ok(h) => handles.push(h),
            Err(e) => {
                shared.pending.fetch_sub(1, Ordering::AcqRel);
                tracing::warn!("cannot start a thread for {peer}: {e}");
            }
        }
    }
    for h in handles {
        let _ = h.join();
    }
    tracing::info!("stopped");
    Ok(())
}

fn answer_busy(conn: TcpStream, peer: SocketAddr) {
    let mut session = AgentSession::busy(Instant::now());
    if let Ok(mut link) = Link::new(conn) {
        let _ = link.flush(|| session.poll_transmit());
    }
    tracing::info!("refused {peer}: busy with another test");
}

/// Fills `buf` from the kernel's CSPRNG (getrandom). It does not fail once the pool is
/// initialised, which it is long before an agent can accept connections.
fn fill_random(buf: &mut [u8]) {
    let mut filled = 0;
    while filled < buf.len() {
        // SAFETY: writes at most the remaining length into buf.
        let n =
            unsafe { libc::getrandom(buf[filled..].as_mut_ptr().cast(), buf.len() - filled, 0) };
        if n > 0 {
            filled += n as usize;
        } else if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            panic!("getrandom failed: {}", io::Error::last_os_error());
        }
    }
}

fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    fill_random(&mut b);
    u64::from_ne_bytes(b)
}

/// Runs one test from Hello to Results; returns the log line's summary.
fn run_test(control: TcpStream, peer: SocketAddr, shared: &Shared) -> anyhow::Result<String> {
    // Counted as pending until the handshake ends, one way or the other.
    struct Pending<'a>(&'a AtomicUsize);
    impl Drop for Pending<'_> {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::AcqRel);
        }
    }
    let pending = Pending(&shared.pending);
    let interrupt = &shared.interrupt;
    let local_ip = control.local_addr()?.ip();
    let mut link = Link::new(control)?;
    let mut session = AgentSession::new(
        SOFTWARE,
        &shared.cfg.command,
        CAPABILITIES,
        Timeouts::default(),
        Instant::now(),
    );
    if let Some(key) = &shared.cfg.key {
        let mut challenge = [0u8; CHALLENGE_BYTES];
        fill_random(&mut challenge);
        session = session.require_key(key.clone(), challenge);
    }

    // Handshake until the test is set up.
    let spec = loop {
        link.flush(|| session.poll_transmit())?;
        if interrupt.is_set() {
            anyhow::bail!("agent shutting down");
        }
        if let Err(e) = step(&mut link, &mut session, None) {
            // The session may have queued an Error saying why (version, key): deliver it.
            let _ = link.flush(|| session.poll_transmit());
            link.close_gracefully(LINGER);
            return Err(e.into());
        }
        let mut setup = None;
        while let Some(ev) = session.poll_event() {
            match ev {
                AgentEvent::Setup(s) => setup = Some(s),
                AgentEvent::Hello { software, .. } => tracing::debug!("{peer} runs {software}"),
                _ => {}
            }
        }
        if let Some(s) = setup {
            break s;
        }
    };
    let refuse = |session: &mut AgentSession, link: &mut Link, error: PeerError| -> anyhow::Error {
        let msg = error.to_string();
        session.refuse(error);
        let _ = link.flush(|| session.poll_transmit());
        link.close_gracefully(LINGER);
        anyhow::anyhow!("refused: {msg}")
    };
    drop(pending);
    let Some(_slot) = shared.take_slot() else {
        return Err(refuse(&mut session, &mut link, PeerError::Busy));
    };
    if let Some(why) = shared.cfg.limits.check(&spec) {
        return Err(refuse(
            &mut session,
            &mut link,
            PeerError::Refused { message: why },
        ));
    }
    if let Err(e) = spec.validate() {
        return Err(refuse(
            &mut session,
            &mut link,
            PeerError::InvalidSpec {
                flag: e.flag.into(),
                reason: e.reason.clone(),
            },
        ));
    }
    let spec = place_server_workers(spec);
    let data = match DataEndpoint::open(&spec, local_ip) {
        Ok(d) => d,
        Err(e) => {
            return Err(refuse(
                &mut session,
                &mut link,
                PeerError::Refused {
                    message: e.to_string(),
                },
            ))
        }
    };
    let cookie = random_u64();
    session.ready(data.port()?, cookie, Instant::now())?;
    link.flush(|| session.poll_transmit())?;

    let conns = accept_data(
        &mut link,
        &mut session,
        data.listener(),
        data.expected(&spec),
        cookie,
        peer.ip(),
        interrupt,
    )?;
    let probe = HostProbe::for_peer(peer.ip());
    let mut side: Box<dyn Side> = match (&spec, data) {
        (TestSpec::Stream(s), DataEndpoint::Tcp(_, notes)) => {
            let conns = conns
                .into_iter()
                .enumerate()
                .map(|(i, c)| (i as u32, s.direction_of(i as u32), c))
                .collect();
            Box::new(StreamSide::start(Role::Server, s, conns, probe, notes)?)
        }
        (TestSpec::Ping(r) | TestSpec::Rpc(r), data) => {
            let mut options = Vec::new();
            let target = match data {
                DataEndpoint::Udp(socket) => {
                    options.extend(
                        r.busy_poll_us
                            .map(|us| sockopt::set_busy_poll(socket.as_raw_fd(), us))
                            .unwrap_or_default(),
                    );
                    ServerTarget::Udp {
                        socket,
                        allowed: peer.ip(),
                    }
                }
                DataEndpoint::Tcp(listener, _) if r.connect_per_request => ServerTarget::Accept {
                    listener,
                    allowed: peer.ip(),
                },
                DataEndpoint::UdpGroup(..) => unreachable!("request/response opens one socket"),
                DataEndpoint::Tcp(..) => {
                    let mut socks = Vec::new();
                    for c in conns {
                        c.set_nodelay(true)?;
                        let applied = r
                            .busy_poll_us
                            .map(|us| sockopt::set_busy_poll(c.as_raw_fd(), us))
                            .unwrap_or_default();
                        if socks.is_empty() {
                            options = applied;
                        }
                        socks.push(RrSocket::Tcp(c));
                    }
                    ServerTarget::Sockets(socks)
                }
            };
            Box::new(RrSide::start_server(r, target, probe, Vec::new(), options)?)
        }
        (TestSpec::Pps(p), DataEndpoint::UdpGroup(sockets, notes)) => {
            let port = sockets[0].local_addr()?.port();
            Box::new(PpsSide::start_server(
                p,
                sockets,
                port,
                cookie as u32,
                probe,
                notes,
            )?)
        }
        _ => unreachable!("each test type opens its own kind of endpoint"),
    };
    loop {
        if interrupt.is_set() {
            return Err(refuse(
                &mut session,
                &mut link,
                PeerError::Aborted {
                    message: "the agent is shutting down".into(),
                },
            ));
        }
        if let Some(sample) = side.on_time(Instant::now()) {
            session.send_interval(sample)?;
        }
        link.flush(|| session.poll_transmit())?;
        let deadline = [side.next_deadline(), session.poll_timeout()]
            .into_iter()
            .flatten()
            .min();
        step(&mut link, &mut session, deadline).context("controller lost during the test")?;
        if matches!(session.poll_event(), Some(AgentEvent::Stop)) {
            break;
        }
    }
    // The controller's window ends a little before ours (it started first): what our last
    // interval measured so far is sent rather than lost.
    if let Some(sample) = side.cut_interval() {
        session.send_interval(sample)?;
    }
    side.finish_senders();
    let until = Instant::now() + DRAIN;
    while !side.all_done() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
    let result = side.into_result(false);
    let summary = summarize(&spec, &result);
    session.send_results(result)?;
    link.flush(|| session.poll_transmit())?;
    Ok(summary)
}

/// `--server-cpus auto`: the agent picks its CPUs from its own host, from the far end of
/// the preferred cores, so that a controller on the same host (the lab) picks others.
fn place_server_workers(mut spec: TestSpec) -> TestSpec {
    let (auto, workers, cpus) = match &mut spec {
        TestSpec::Stream(s) => {
            let n = worker_threads(
                Work::Stream,
                s.server_threads,
                s.total_connections() as usize,
            );
            (s.server_cpus_auto, n, &mut s.server_cpus)
        }
        TestSpec::Ping(r) | TestSpec::Rpc(r) => {
            let c = r.connections as usize;
            (
                r.server_cpus_auto,
                worker_threads(Work::RequestResponse, r.server_threads, c),
                &mut r.server_cpus,
            )
        }
        TestSpec::Pps(p) => (
            p.server_cpus_auto,
            p.rx_threads as usize,
            &mut p.server_cpus,
        ),
    };
    if auto {
        let inv = sonde_probe::inventory::collect_live();
        let allowed = sonde_probe::topology::allowed_cpus();
        *cpus = sonde_probe::placement::choose(
            &inv,
            &allowed,
            workers,
            sonde_probe::placement::End::Last,
        );
    }
    spec
}

/// Where a test's data arrives: a TCP listener (with the notes of its options) or a UDP socket.
enum DataEndpoint {
    Tcp(TcpListener, Vec<String>),
    Udp(UdpSocket),
    /// A SO_REUSEPORT group, one socket per receive thread, and notes on their buffers.
    UdpGroup(Vec<UdpSocket>, Vec<String>),
}

impl DataEndpoint {
    fn open(spec: &TestSpec, ip: IpAddr) -> std::io::Result<DataEndpoint> {
        let addr = SocketAddr::new(ip, 0);
        let (opts, backlog) = match spec {
            TestSpec::Stream(s) => (
                SocketOptions {
                    congestion: s.congestion.clone(),
                    nodelay: s.nodelay,
                    sndbuf_bytes: s.sndbuf_bytes,
                    rcvbuf_bytes: s.rcvbuf_bytes,
                },
                s.total_connections(),
            ),
            TestSpec::Ping(r) | TestSpec::Rpc(r) if r.transport == Transport::Udp => {
                return Ok(DataEndpoint::Udp(UdpSocket::bind(addr)?));
            }
            TestSpec::Pps(p) => {
                let (sockets, notes) =
                    sockopt::udp_reuseport_group(addr, p.rx_threads as usize, RX_BUFFER_BYTES)?;
                return Ok(DataEndpoint::UdpGroup(sockets, notes));
            }
            TestSpec::Ping(r) | TestSpec::Rpc(r) => (
                SocketOptions {
                    nodelay: true,
                    ..Default::default()
                },
                r.connections,
            ),
        };
        let (l, notes) = sockopt::listen(addr, &opts, backlog.max(128) as i32)?;
        l.set_nonblocking(true)?;
        Ok(DataEndpoint::Tcp(l, notes))
    }

    fn port(&self) -> std::io::Result<u16> {
        Ok(match self {
            DataEndpoint::Tcp(l, _) => l.local_addr()?.port(),
            DataEndpoint::Udp(u) => u.local_addr()?.port(),
            DataEndpoint::UdpGroup(g, _) => g[0].local_addr()?.port(),
        })
    }

    fn listener(&self) -> Option<&TcpListener> {
        match self {
            DataEndpoint::Tcp(l, _) => Some(l),
            DataEndpoint::Udp(_) | DataEndpoint::UdpGroup(..) => None,
        }
    }

    /// Data connections to accept before the test starts.
    fn expected(&self, spec: &TestSpec) -> usize {
        match (spec, self) {
            (_, DataEndpoint::Udp(_) | DataEndpoint::UdpGroup(..)) => 0,
            (TestSpec::Stream(s), _) => s.total_connections() as usize,
            (TestSpec::Ping(r) | TestSpec::Rpc(r), _) => r.initial_connections() as usize,
            (TestSpec::Pps(_), _) => 0,
        }
    }
}

/// One wait on the control link, fed to the session.
fn step(
    link: &mut Link,
    session: &mut AgentSession,
    deadline: Option<Instant>,
) -> Result<(), ProtoError> {
    let deadline = [deadline, session.poll_timeout()]
        .into_iter()
        .flatten()
        .min();
    match link.wait(deadline, None) {
        Ok(Wake::Data(n)) => session.handle_bytes(link.received(n), Instant::now()),
        Ok(Wake::Eof) | Err(_) => session.handle_eof(),
        Ok(_) => session.handle_timeout(Instant::now()),
    }
}

/// Accepts the test's data connections (only from the controller's address, only with the
/// cookie) until `Start` has arrived and all `total` connections are in, by index.
fn accept_data(
    link: &mut Link,
    session: &mut AgentSession,
    data: Option<&TcpListener>,
    total: usize,
    cookie: u64,
    controller: IpAddr,
    interrupt: &Interrupt,
) -> anyhow::Result<Vec<TcpStream>> {
    let mut slots: Vec<Option<TcpStream>> = (0..total).map(|_| None).collect();
    let mut accepted = 0;
    let mut start_by: Option<Instant> = None;
    while start_by.is_none() || accepted < total {
        if interrupt.is_set() {
            anyhow::bail!("agent shutting down");
        }
        if start_by.is_some_and(|t| Instant::now() > t) {
            let msg = format!("only {accepted} of {total} data connections arrived");
            session.refuse(PeerError::Internal {
                message: msg.clone(),
            });
            let _ = link.flush(|| session.poll_transmit());
            anyhow::bail!(msg);
        }
        let deadline = [start_by, session.poll_timeout()]
            .into_iter()
            .flatten()
            .min();
        let other = data.filter(|_| accepted < total).map(|l| l.as_raw_fd());
        match link.wait(deadline, other)? {
            Wake::Other => {
                let Some(l) = data else { continue };
                let Ok((mut s, from)) = l.accept() else {
                    continue;
                };
                if from.ip() != controller {
                    tracing::warn!("data connection from {from} refused: not the controller");
                    continue;
                }
                s.set_nonblocking(false)?;
                s.set_read_timeout(Some(Duration::from_secs(2)))?;
                let mut header = [0u8; DATA_HEADER_BYTES];
                if s.read_exact(&mut header).is_err() {
                    continue;
                }
                s.set_read_timeout(None)?;
                let got_cookie = u64::from_be_bytes(header[..8].try_into().expect("8 bytes"));
                let index = u32::from_be_bytes(header[8..].try_into().expect("4 bytes")) as usize;
                if got_cookie != cookie || index >= total || slots[index].is_some() {
                    tracing::warn!("data connection from {from} refused: wrong cookie or index");
                    continue;
                }
                slots[index] = Some(s);
                accepted += 1;
            }
            Wake::Data(n) => session.handle_bytes(link.received(n), Instant::now())?,
            Wake::Eof => session.handle_eof()?,
            Wake::Timeout => session.handle_timeout(Instant::now())?,
        }
        if let Some(AgentEvent::Start) = session.poll_event() {
            start_by = Some(Instant::now() + ACCEPT_DEADLINE);
        }
    }
    Ok(slots
        .into_iter()
        .map(|s| s.expect("every slot filled"))
        .collect())
}

fn summarize(spec: &TestSpec, r: &sonde_results::SideResult) -> String {
    if let Some(p) = &r.pps {
        return format!(
            "pps: received {} packets in {:.1} s ({:.0}/s)",
            p.packets,
            r.window_s,
            p.packets as f64 / r.window_s.max(1e-9)
        );
    }
    if let Some(rr) = &r.rr {
        return format!(
            "{} {}: answered {} messages in {:.1} s, {:.2} us CPU per message",
            spec.name(),
            rr.poll,
            rr.messages,
            r.window_s,
            r.process_cpu_s
                .map_or(0.0, |c| c * 1e6 / rr.messages.max(1) as f64)
        );
    }
    let TestSpec::Stream(s) = spec else {
        return spec.name().into();
    };
    let rates: Vec<String> = r
        .directions
        .iter()
        .map(|d| {
            let verb = match d.transfer {
                sonde_results::Transfer::Send => "sent",
                sonde_results::Transfer::Receive => "received",
            };
            format!(
                "{verb} {:.2} Gbit/s",
                sonde_results::stats::bits_per_second(d.bytes, r.window_s) / 1e9
            )
        })
        .collect();
    format!(
        "stream {} x{} for {:.1} s: {}",
        s.direction.as_str(),
        s.connections,
        r.window_s,
        rates.join(", ")
    )
}
