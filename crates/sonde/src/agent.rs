//! `sonde serve`: the far end of every test. One test at a time on its own thread; a
//! controller arriving meanwhile is told "busy". Every socket and thread of a test is freed
//! when it ends, whatever happened, and the agent logs one line per test.

use std::io::{self, Read};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use sonde_engine::sockopt::{self, SocketOptions};
use sonde_proto::{AgentEvent, AgentSession, PeerError, ProtoError, Timeouts};
use sonde_results::{Direction, Role, StreamSpec, TestSpec};

use crate::control::{Link, Wake};
use crate::controller::{DATA_HEADER_BYTES, SOFTWARE};
use crate::measure::{HostProbe, StreamSide};
use crate::signals::Interrupt;

/// The agent's default control port.
pub const DEFAULT_PORT: u16 = 5301;
const DRAIN: Duration = Duration::from_secs(3);
const ACCEPT_DEADLINE: Duration = Duration::from_secs(5);

pub struct ServeConfig {
    pub bind: IpAddr,
    pub port: u16,
    pub command: String,
}

pub fn serve(cfg: &ServeConfig, interrupt: &Interrupt) -> anyhow::Result<()> {
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
    tracing::info!("listening on {local}");

    let busy = Arc::new(AtomicBool::new(false));
    let mut current: Option<std::thread::JoinHandle<()>> = None;
    while !interrupt.is_set() {
        let mut pfd = libc::pollfd {
            fd: listener.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one live pollfd.
        if unsafe { libc::poll(&mut pfd, 1, 100) } <= 0 {
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
        if busy.load(Ordering::Acquire) {
            answer_busy(conn, peer);
            continue;
        }
        if let Some(h) = current.take() {
            let _ = h.join();
        }
        busy.store(true, Ordering::Release);
        let (busy2, intr, command) = (Arc::clone(&busy), interrupt.clone(), cfg.command.clone());
        current = Some(
            std::thread::Builder::new()
                .name("sonde-test".into())
                .spawn(move || {
                    let started = Instant::now();
                    match run_test(conn, peer, &command, &intr) {
                        Ok(summary) => tracing::info!(
                            "test from {peer}: {summary} ({:.1} s)",
                            started.elapsed().as_secs_f64()
                        ),
                        Err(e) => tracing::warn!(
                            "test from {peer}: {e:#} ({:.1} s)",
                            started.elapsed().as_secs_f64()
                        ),
                    }
                    busy2.store(false, Ordering::Release);
                })?,
        );
    }
    if let Some(h) = current.take() {
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

fn random_u64() -> u64 {
    let mut v = 0u64;
    // SAFETY: writes at most 8 bytes into v.
    let n = unsafe { libc::getrandom((&mut v as *mut u64).cast(), 8, 0) };
    if n != 8 {
        // getrandom cannot fail for 8 bytes after boot; the time is a poor but harmless stand-in.
        v = Instant::now().elapsed().as_nanos() as u64 ^ std::process::id() as u64;
    }
    v
}

/// Runs one test from Hello to Results; returns the log line's summary.
fn run_test(
    control: TcpStream,
    peer: SocketAddr,
    command: &str,
    interrupt: &Interrupt,
) -> anyhow::Result<String> {
    let local_ip = control.local_addr()?.ip();
    let mut link = Link::new(control)?;
    let mut session = AgentSession::new(
        SOFTWARE,
        command,
        &["stream"],
        Timeouts::default(),
        Instant::now(),
    );

    // Handshake until the test is set up.
    let spec = loop {
        link.flush(|| session.poll_transmit())?;
        if interrupt.is_set() {
            anyhow::bail!("agent shutting down");
        }
        step(&mut link, &mut session, None)?;
        let mut setup = None;
        while let Some(ev) = session.poll_event() {
            match ev {
                AgentEvent::Setup(TestSpec::Stream(s)) => setup = Some(s),
                AgentEvent::Hello { software, .. } => tracing::debug!("{peer} runs {software}"),
                _ => {}
            }
        }
        if let Some(s) = setup {
            break s;
        }
    };
    if let Err(e) = spec.validate() {
        session.refuse(PeerError::InvalidSpec {
            flag: e.flag.into(),
            reason: e.reason.clone(),
        });
        link.flush(|| session.poll_transmit())?;
        anyhow::bail!("refused: {e}");
    }
    let opts = SocketOptions {
        congestion: spec.congestion.clone(),
        nodelay: spec.nodelay,
        sndbuf_bytes: spec.sndbuf_bytes,
        rcvbuf_bytes: spec.rcvbuf_bytes,
    };
    let backlog = spec.total_connections().max(128) as i32;
    let (data, notes) = match sockopt::listen(SocketAddr::new(local_ip, 0), &opts, backlog) {
        Ok(x) => x,
        Err(e) => {
            session.refuse(PeerError::Refused {
                message: e.to_string(),
            });
            link.flush(|| session.poll_transmit())?;
            anyhow::bail!("refused: {e}");
        }
    };
    data.set_nonblocking(true)?;
    let cookie = random_u64();
    session.ready(data.local_addr()?.port(), cookie, Instant::now())?;
    link.flush(|| session.poll_transmit())?;

    let conns = accept_data(
        &mut link,
        &mut session,
        &data,
        &spec,
        cookie,
        peer.ip(),
        interrupt,
    )?;
    drop(data);
    let mut side = StreamSide::start(
        Role::Server,
        &spec,
        conns,
        HostProbe::for_peer(peer.ip()),
        notes,
    )?;
    loop {
        if interrupt.is_set() {
            session.refuse(PeerError::Aborted {
                message: "the agent is shutting down".into(),
            });
            let _ = link.flush(|| session.poll_transmit());
            anyhow::bail!("aborted: agent shutting down");
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
/// cookie) until `Start` has arrived and every connection is in.
fn accept_data(
    link: &mut Link,
    session: &mut AgentSession,
    data: &TcpListener,
    spec: &StreamSpec,
    cookie: u64,
    controller: IpAddr,
    interrupt: &Interrupt,
) -> anyhow::Result<Vec<(u32, Direction, TcpStream)>> {
    let total = spec.total_connections() as usize;
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
        let woke = link.wait(deadline, Some(data.as_raw_fd()))?;
        match woke {
            Wake::Other => {
                let Ok((mut s, from)) = data.accept() else {
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
        .enumerate()
        .map(|(i, s)| {
            (
                i as u32,
                spec.direction_of(i as u32),
                s.expect("every slot filled"),
            )
        })
        .collect())
}

fn summarize(spec: &StreamSpec, r: &sonde_results::SideResult) -> String {
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
        spec.direction.as_str(),
        spec.connections,
        r.window_s,
        rates.join(", ")
    )
}
