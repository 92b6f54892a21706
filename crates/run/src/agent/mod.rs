//! `sonde serve`: the far end of every test. Each test on its own thread, up to
//! `--max-tests` at once; a controller arriving beyond that is told "busy". Every socket and
//! thread of a test is freed when it ends, whatever happened, and the agent logs one line
//! per test.

mod account;
mod amounts;
pub(crate) mod conn;
pub mod consent;
mod data_conns;
mod door;
#[cfg(any(test, feature = "fuzzing"))]
pub mod hostile_spec;
mod limits;
pub(crate) mod one_test;
mod refusals;
mod shared;
mod sources;
mod stamp_part;
mod target;

pub use crate::allow::{Allow, Allowed};
pub use account::{Account, HeldShare, OverShare};
pub use limits::{
    default_memory_bytes, Limits, DEFAULT_CLIENT_BITS_PER_S, DEFAULT_MAX_THREADS,
    DEFAULT_TEST_DSCPS,
};
pub use shared::ServeConfig;
use shared::Shared;

use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sonde_proto::{AgentSession, Session};

use crate::control::Link;
use crate::service::Threads;
use crate::signals::Interrupt;

/// The agent's default control port.
pub const DEFAULT_PORT: u16 = 5301;
/// How long a stopping agent waits for its tests to tidy up (their workers stop at once;
/// the rest is closing sockets) before it exits anyway: SIGTERM ends it within a second.
const STOP_WITHIN: Duration = Duration::from_millis(700);
/// Tests served at once by default: a `sonde load` runs three (its UDP ping, its TCP ping
/// and its load), and one more may check on them. More concurrent tests would mostly
/// measure each other on the same CPUs and NIC.
pub const DEFAULT_MAX_TESTS: usize = 4;

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot listen on {addr} (--bind/--port): {source}")]
    Listen { addr: SocketAddr, source: io::Error },
    #[error("refusing to listen on {0} without --key-file: anyone who reaches that port could make this host send traffic (give it --key-file FILE, bind 127.0.0.1, or say --insecure-no-key on an isolated network)")]
    NoKey(IpAddr),
    #[error("listening socket: {0}")]
    Io(#[from] io::Error),
}

/// Binds the control port and says so on stdout (scripts wait for that line), then
/// serves on a thread of its own until its service is stopped.
pub fn start(cfg: ServeConfig) -> Result<Threads, ServeError> {
    if cfg.key.is_none() && !cfg.bind.is_loopback() && !cfg.insecure_no_key {
        return Err(ServeError::NoKey(cfg.bind));
    }
    let addr = SocketAddr::new(cfg.bind, cfg.port);
    let listener = TcpListener::bind(addr).map_err(|source| ServeError::Listen { addr, source })?;
    listener.set_nonblocking(true)?;
    let local = listener.local_addr()?;
    // Probed before the line below, which scripts wait for: what this host runs is fixed
    // by then (and logged).
    let uring = sonde_engine::uring::available();
    // What an agent that did not live to restore it left switched, put back before
    // anything is served.
    restore_left(&cfg.stamping);
    // Scripts (and `sonde lab`) read this line to learn the port.
    println!(
        "sonde agent listening on {local} (protocol {})",
        sonde_proto::PROTOCOL_VERSION
    );
    let _ = std::io::Write::flush(&mut std::io::stdout());
    log_listening(&cfg, local);
    match uring {
        Ok(()) => tracing::info!("engines: kernel sockets, io_uring"),
        Err(e) => tracing::info!("engines: kernel sockets; no io_uring ({e})"),
    }
    let mut threads = Threads::new("agent");
    let interrupt = threads.stop.clone();
    threads.spawn("sonde-agent", move || serve(listener, cfg, interrupt))?;
    Ok(threads)
}

/// Accepts controllers until `interrupt`, then waits a moment for their tests to tidy up.
fn serve(listener: TcpListener, cfg: ServeConfig, interrupt: Interrupt) {
    let account = Arc::clone(&cfg.account);
    let shared = Arc::new(Shared {
        cfg,
        running: AtomicUsize::new(0),
        sources: sources::Sources::new(sources::CAPS),
        refusals: refusals::Refusals::default(),
        account,
        interrupt: interrupt.clone(),
    });
    let mut handles: Vec<std::thread::JoinHandle<()>> = Vec::new();
    // With a key, a connection that finds no place waits at the door for its `Hello`,
    // whose ticket may prove the key (issue 52); without one, nothing proves it.
    let mut door = door::Door::default();
    let mut gate = shared.cfg.key.clone().map(sonde_proto::TicketGate::new);
    while !interrupt.is_set() {
        handles.retain(|h| !h.is_finished());
        shared.refusals.tick(Instant::now());
        let (peer_waiting, spoke) = wait_for_peer(&listener, &door);
        for left in door.step(&spoke, Instant::now()) {
            let let_in = at_the_door(left, &shared, gate.as_mut());
            if let Some((w, place)) = let_in {
                handles.extend(spawn(w, &shared, place));
            }
        }
        if !peer_waiting {
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
        // number is bounded (`sources`), and beyond it a peer is told "busy" at once.
        let accepted = Instant::now();
        let source = match shared.sources.enter(peer.ip()) {
            Ok(s) => s,
            Err(full) if gate.is_none() => {
                answer_busy(conn);
                shared
                    .refusals
                    .refused(peer.ip(), refusals::Kind::Busy, || {
                        format!("refused {peer}: busy with {}", full.words())
                    });
                continue;
            }
            Err(_) => {
                let w = door::Waiting {
                    stream: conn,
                    peer,
                    accepted,
                    bytes: Vec::new(),
                };
                match door.admit(w) {
                    Ok(Some(out)) => {
                        at_the_door(out, &shared, gate.as_mut());
                    }
                    Ok(None) => {}
                    Err(e) => tracing::warn!("cannot wait for {peer}'s Hello: {e}"),
                }
                continue;
            }
        };
        let w = door::Waiting {
            stream: conn,
            peer,
            accepted,
            bytes: Vec::new(),
        };
        handles.extend(spawn(w, &shared, source));
    }
    // Bounded: a test that does not tidy up in time is left to the process's exit (its
    // helpers die with it: PR_SET_PDEATHSIG).
    let until = Instant::now() + STOP_WITHIN;
    while handles.iter().any(|h| !h.is_finished()) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
    shared.refusals.flush();
    let left = handles.iter().filter(|h| !h.is_finished()).count();
    if left > 0 {
        tracing::warn!("stopped with {left} test(s) still tidying up");
    } else {
        tracing::info!("stopped");
    }
}

/// Records are read where an agent could have written them: with `--allow hwstamps`, or
/// an explicit `--state-dir` (an agent restarted without the allow still undoes).
fn restore_left(stamping: &crate::hwstamps::Stamping) {
    if !stamping.allowed && stamping.state_dir.is_none() {
        return;
    }
    for line in stamping.restore_left() {
        tracing::warn!("{line}");
    }
}

fn log_listening(cfg: &ServeConfig, local: SocketAddr) {
    let key = if cfg.key.is_some() {
        ", key required"
    } else {
        ""
    };
    tracing::info!(
        "listening on {local}{key}; allowed: {}",
        cfg.allow.describe()
    );
    if cfg.key.is_none() && !cfg.bind.is_loopback() {
        tracing::warn!("listening on {} without --key-file (--insecure-no-key): anyone who reaches this port can make this host send traffic", cfg.bind);
    }
}

/// Waits up to a second for a controller to connect or one at the door to speak, at most
/// until the door's next deadline; a stop signal ends the wait early. Whether a
/// connection waits to be accepted, and which at the door spoke (in the door's order).
fn wait_for_peer(listener: &TcpListener, door: &door::Door) -> (bool, Vec<bool>) {
    let fd = |fd: i32| libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let mut pfds = vec![
        fd(listener.as_raw_fd()),
        fd(crate::signals::wake_fd().unwrap_or(-1)),
    ];
    pfds.extend(door.fds().into_iter().map(fd));
    let ms = door.next_deadline().map_or(1000, |d| {
        let left = d.saturating_duration_since(Instant::now());
        left.as_millis().min(1000) as i32 + 1
    });
    // SAFETY: live pollfds, as many as given; a negative fd is ignored.
    let n = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, ms) };
    if n <= 0 {
        return (false, Vec::new());
    }
    let spoke = pfds[2..].iter().map(|p| p.revents != 0).collect();
    (pfds[0].revents != 0, spoke)
}

/// What to do with a connection leaving the door: let in with a place (a key holder's
/// ticket: one kept for key holders; else an ordinary one if one came free), or told
/// "busy", the refusal logged.
fn at_the_door(
    left: door::Left,
    shared: &Shared,
    gate: Option<&mut sonde_proto::TicketGate>,
) -> Option<(door::Waiting, sources::Entered)> {
    let (w, first) = match left {
        door::Left::Spoke(w, first) => (w, first),
        door::Left::Turned(w, pushed) => {
            let peer = w.peer;
            answer_busy(w.stream);
            shared.refusals.refused(peer.ip(), refusals::Kind::Busy, || {
                let why = if pushed {
                    "newer connections of its address or network came while it waited for its Hello".to_string()
                } else {
                    format!("it sent no Hello within {:.1} s", door::DOOR_WAIT.as_secs_f64())
                };
                format!("refused {peer}: busy: no handshake place free, and {why}")
            });
            return None;
        }
    };
    let ticket = match (&first, gate) {
        (
            sonde_proto::frame::FirstFrame::Hello {
                nonce,
                agent,
                ticket,
            },
            Some(gate),
        ) => {
            let local = w.stream.local_addr().map(|a| a.ip());
            let reached: Vec<IpAddr> = local
                .into_iter()
                .chain(shared.cfg.reached_at.iter().copied())
                .collect();
            let unix_ms = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64);
            let hello = (nonce.as_str(), agent.as_str(), ticket.as_ref());
            Some(gate.check(hello, &reached, unix_ms, Instant::now()))
        }
        _ => None,
    };
    let placed = match &ticket {
        Some(Ok(())) => shared.sources.enter_ticketed(w.peer.ip()),
        _ => shared.sources.enter(w.peer.ip()),
    };
    match placed {
        Ok(place) => Some((w, place)),
        Err(full) => {
            let peer = w.peer;
            answer_busy(w.stream);
            shared
                .refusals
                .refused(peer.ip(), refusals::Kind::Busy, || {
                    let why = match ticket {
                        Some(Err(e)) => format!(" ({e})"),
                        _ => String::new(),
                    };
                    format!("refused {peer}: busy with {}{why}", full.words())
                });
            None
        }
    }
}

/// The connection's test on its own thread, its socket blocking again.
fn spawn(
    w: door::Waiting,
    shared: &Arc<Shared>,
    place: sources::Entered,
) -> Option<std::thread::JoinHandle<()>> {
    let peer = w.peer;
    let started = w
        .stream
        .set_nonblocking(false)
        .and_then(|()| spawn_test(w, Arc::clone(shared), place));
    match started {
        Ok(h) => Some(h),
        Err(e) => {
            tracing::warn!("cannot start a thread for {peer}: {e}");
            None
        }
    }
}

/// One controller's test on its own thread, logged when it ends (a failed handshake as a
/// refusal, so that churn cannot flood the log).
fn spawn_test(
    w: door::Waiting,
    shared: Arc<Shared>,
    source: sources::Entered,
) -> io::Result<std::thread::JoinHandle<()>> {
    let door::Waiting {
        stream: conn,
        peer,
        accepted,
        bytes,
    } = w;
    std::thread::Builder::new()
        .name("sonde-conn".into())
        .spawn(move || {
            let started = Instant::now();
            let secs = || started.elapsed().as_secs_f64();
            match one_test::run(conn, (peer, accepted, bytes), source, &shared) {
                Ok(summary) => tracing::info!("test from {peer}: {summary} ({:.1} s)", secs()),
                Err(conn::TestError::Handshake(e)) => {
                    let kind = refusals::Kind::Handshake;
                    shared.refusals.refused(peer.ip(), kind, || {
                        format!("test from {peer}: {e} ({:.1} s)", secs())
                    })
                }
                Err(e) => tracing::warn!("test from {peer}: {e} ({:.1} s)", secs()),
            }
        })
}

/// Tells a connection the agent is busy.
fn answer_busy(conn: TcpStream) {
    let mut session = AgentSession::busy(Instant::now());
    if let Ok(mut link) = Link::new(conn) {
        let _ = link.flush(|| session.poll_transmit());
    }
}
