//! `sonde fleet --every --metrics ADDR:PORT`: `GET /metrics` answered with the exporter's
//! OpenMetrics text. One thread serves up to [`MAX_CONNECTIONS`] connections at once,
//! all non-blocking under one `poll`, each given [`REQUEST_DEADLINE`] from its accept for
//! its whole request and [`CLOSE_DEADLINE`] for everything: a slow, silent or endless
//! client (slowloris) holds one place for two seconds at most and delays no other
//! scrape. When every place is taken the oldest connection is dropped, so a flood cannot
//! keep a new scrape out. The body is rendered at most once a period and shared by the
//! connections it is written to, within a byte budget ([`body`]). Over TLS, each new
//! connection's handshake is budgeted by its source address and network before any
//! crypto ([`handshakes`]), so that a flood of unfinished handshakes from a few
//! addresses cannot take the thread from a scraper.

mod body;
mod error;
mod handshakes;
mod request;
mod tls;

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::signals::Interrupt;

pub use body::WRITE_BUDGET;
use body::{Bodies, Rendered};
pub use error::MetricsError;
use handshakes::{Handshakes, Lane, Pending};
pub use request::Token;
use request::{Step, MAX_REQUEST_BYTES};
use tls::Wire;
pub use tls::{config as tls_config, TlsConfig};

/// Who may scrape, and how: a bearer token, TLS, both or neither.
#[derive(Default)]
pub struct Access {
    pub token: Option<Token>,
    pub tls: Option<TlsConfig>,
}

/// Connections served at once; beyond it the oldest is dropped.
pub const MAX_CONNECTIONS: usize = 128;
/// From accept to the end of the request's headers.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(2);
/// From accept to the close: the answer written and the client's rest read away.
pub const CLOSE_DEADLINE: Duration = Duration::from_secs(5);
/// What is read and dropped after the answer (pipelined requests), at most.
const DRAIN_BYTES: usize = 256 << 10;
/// How often the serving thread looks at its stop flag while nothing happens.
const STOP_CHECK: Duration = Duration::from_millis(500);
/// Connections taken from the listener per wake-up, so that serving goes on in a flood.
const ACCEPT_BATCH: usize = 256;
/// Connections the kernel completes before we accept them: a flood that outruns the
/// accept loop fills std's 128 in a moment, and a scrape's SYN dropped then waits a
/// second for its retry.
const LISTEN_BACKLOG: i32 = 1024;

/// A listener on `addr` with [`LISTEN_BACKLOG`] (std's `bind` gives 128).
fn listen(addr: SocketAddr) -> std::io::Result<TcpListener> {
    use socket2::{Domain, Socket, Type};
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    s.set_reuse_address(true)?;
    s.bind(&addr.into())?;
    s.listen(LISTEN_BACKLOG)?;
    Ok(s.into())
}

/// Listens on `addr` and serves `body()` at `/metrics` until `interrupt`, as `access`
/// says, rendered again at most once per `period` (zero: at every request); the error
/// names the address.
pub fn serve(
    addr: SocketAddr,
    body: impl Fn() -> String + Send + 'static,
    period: Duration,
    access: Access,
    interrupt: Interrupt,
) -> Result<(SocketAddr, JoinHandle<()>), MetricsError> {
    let listening = listen(addr).and_then(|l| {
        l.set_nonblocking(true)?;
        Ok((l.local_addr()?, l))
    });
    let (local, listener) = listening.map_err(|source| MetricsError::Listen { addr, source })?;
    let handle = std::thread::spawn(move || {
        let mut server = Server {
            listener,
            conns: VecDeque::new(),
            access,
            bodies: Bodies::new(Box::new(body), period),
            handshakes: Handshakes::new(Instant::now()),
        };
        while !interrupt.is_set() {
            server.turn(Instant::now());
        }
    });
    Ok((local, handle))
}

/// Where a connection is in its short life.
enum Phase {
    /// Reading the request line and headers into the buffer.
    Reading(Vec<u8>),
    /// Writing the answer.
    Writing(Out),
    /// Answer sent and our side shut: reading the client's rest away (so that the kernel
    /// does not reset the connection under our answer), until its EOF.
    Draining(usize),
}

/// An answer being written: its head, the shared body if any, and how far it went.
struct Out {
    head: Vec<u8>,
    body: Option<Arc<Rendered>>,
    at: usize,
}

impl Out {
    /// What is left to write, of the head and then of the body.
    fn rest(&self) -> &[u8] {
        match (self.at.checked_sub(self.head.len()), &self.body) {
            (None, _) => &self.head[self.at..],
            (Some(at), Some(b)) => &b.bytes[at..],
            (Some(_), None) => &[],
        }
    }
}

struct Conn {
    stream: Wire,
    accepted: Instant,
    phase: Phase,
    /// A TLS connection's source and how its handshake was admitted.
    handshake: Option<(IpAddr, Lane)>,
}

impl Conn {
    fn deadline(&self) -> Instant {
        match self.phase {
            Phase::Reading(_) => self.accepted + REQUEST_DEADLINE,
            _ => self.accepted + CLOSE_DEADLINE,
        }
    }

    fn events(&self) -> libc::c_short {
        match self.phase {
            Phase::Writing(..) => libc::POLLOUT,
            // TLS may hold a handshake's or a close's records for the socket.
            _ if self.stream.wants_write() => libc::POLLIN | libc::POLLOUT,
            _ => libc::POLLIN,
        }
    }

    /// The body this connection is being written: its generation and length.
    fn held(&self) -> Option<(u64, usize)> {
        match &self.phase {
            Phase::Writing(Out { body: Some(b), .. }) => Some((b.generation, b.bytes.len())),
            _ => None,
        }
    }

    /// Moves on as far as the socket allows; false once the connection is over.
    fn advance(&mut self, access: &Access, bodies: &mut Bodies) -> bool {
        loop {
            let go = match &mut self.phase {
                Phase::Reading(buf) => read_request(&mut self.stream, buf, access, bodies),
                Phase::Writing(out) => write_answer(&mut self.stream, out),
                Phase::Draining(left) => return drain(&mut self.stream, left),
            };
            match go {
                Go::Wait => return true,
                Go::Close => return false,
                Go::Next(p) => self.phase = p,
            }
        }
    }
}

enum Go {
    Wait,
    Close,
    Next(Phase),
}

fn read_request(stream: &mut Wire, buf: &mut Vec<u8>, access: &Access, bodies: &mut Bodies) -> Go {
    let mut chunk = [0u8; 2048];
    let room = MAX_REQUEST_BYTES - buf.len();
    let (n, eof) = match stream.read(&mut chunk[..room.min(2048)]) {
        Ok(0) => (0, true),
        Ok(n) => (n, false),
        Err(e) if e.kind() == ErrorKind::WouldBlock => return Go::Wait,
        Err(e) if e.kind() == ErrorKind::Interrupted => {
            return Go::Next(Phase::Reading(std::mem::take(buf)))
        }
        Err(_) => return Go::Close,
    };
    buf.extend_from_slice(&chunk[..n]);
    if eof && buf.is_empty() {
        return Go::Close;
    }
    let full = eof || buf.len() >= MAX_REQUEST_BYTES;
    let out = match request::step(buf, full, access.token.as_ref()) {
        Step::More => return Go::Next(Phase::Reading(std::mem::take(buf))),
        Step::Answer(head) => Out {
            head,
            body: None,
            at: 0,
        },
        Step::Metrics => {
            let body = bodies.get(Instant::now());
            Out {
                head: request::metrics_head(body.bytes.len()),
                body: Some(body),
                at: 0,
            }
        }
    };
    Go::Next(Phase::Writing(out))
}

fn write_answer(stream: &mut Wire, out: &mut Out) -> Go {
    while !out.rest().is_empty() {
        match stream.write(out.rest()) {
            Ok(0) => return Go::Close,
            Ok(n) => out.at += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Go::Wait,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return Go::Close,
        }
    }
    match stream.flush() {
        Err(e) if e.kind() == ErrorKind::WouldBlock => return Go::Wait,
        Err(_) => return Go::Close,
        Ok(()) => {}
    }
    stream.close_write();
    Go::Next(Phase::Draining(DRAIN_BYTES))
}

/// True while the client's rest is still coming.
fn drain(stream: &mut Wire, left: &mut usize) -> bool {
    let mut chunk = [0u8; 4096];
    loop {
        match stream.read(&mut chunk) {
            Ok(0) => return false,
            Ok(n) if n >= *left => return false,
            Ok(n) => *left -= n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
}

struct Server {
    listener: TcpListener,
    /// Oldest first.
    conns: VecDeque<Conn>,
    access: Access,
    bodies: Bodies,
    handshakes: Handshakes,
}

impl Server {
    /// One wait in `poll` and what it woke for: connections past their deadline closed,
    /// ready ones moved on, new ones accepted.
    fn turn(&mut self, now: Instant) {
        self.conns.retain(|c| c.deadline() > now);
        let wait = self
            .conns
            .iter()
            .map(|c| c.deadline().saturating_duration_since(now))
            .fold(STOP_CHECK, Duration::min);
        let mut fds: Vec<libc::pollfd> = std::iter::once((self.listener.as_raw_fd(), libc::POLLIN))
            .chain(
                self.conns
                    .iter()
                    .map(|c| (c.stream.socket().as_raw_fd(), c.events())),
            )
            .map(|(fd, events)| libc::pollfd {
                fd,
                events,
                revents: 0,
            })
            .collect();
        // Rounded up, so that a deadline a few microseconds away does not spin.
        let ms = wait.as_millis() as libc::c_int + 1;
        // SAFETY: `fds` is a valid array of `fds.len()` pollfds for the call.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if n <= 0 {
            return;
        }
        let (access, bodies) = (&self.access, &mut self.bodies);
        let mut i = 0;
        self.conns.retain_mut(|c| {
            i += 1;
            fds[i].revents == 0 || c.advance(access, bodies)
        });
        if fds[0].revents != 0 {
            self.accept();
        }
        self.keep_budget();
    }

    /// Closes the connections holding the oldest bodies while those held pass
    /// [`WRITE_BUDGET`].
    fn keep_budget(&mut self) {
        let held: Vec<_> = self.conns.iter().map(Conn::held).collect();
        let current = self.bodies.current_generation();
        let close = body::over_budget(&held, current, WRITE_BUDGET);
        if close.contains(&true) {
            let mut i = 0;
            self.conns.retain(|_| {
                i += 1;
                !close[i - 1]
            });
        }
    }

    /// The TLS connections still in their handshake, by source.
    fn pending(&self) -> Pending {
        let mut p = Pending::default();
        for c in &self.conns {
            if let Some((source, lane)) = c.handshake.filter(|_| c.stream.handshaking()) {
                p.add(source, lane);
            }
        }
        p
    }

    fn accept(&mut self) {
        let mut pending = None;
        for _ in 0..ACCEPT_BATCH {
            let Ok((stream, peer)) = self.listener.accept() else {
                return;
            };
            let handshake = match self.access.tls {
                None => None,
                Some(_) => {
                    let p = pending.get_or_insert_with(|| self.pending());
                    // Refused before any crypto: closed at once.
                    let Some(lane) = self.handshakes.admit(peer.ip(), Instant::now(), p) else {
                        continue;
                    };
                    p.add(peer.ip(), lane);
                    Some((peer.ip(), lane))
                }
            };
            // The head goes out at once, the body's last segment without waiting for an ACK.
            if stream.set_nonblocking(true).is_err() || stream.set_nodelay(true).is_err() {
                continue;
            }
            let Ok(stream) = Wire::new(stream, self.access.tls.as_ref()) else {
                continue;
            };
            if self.conns.len() >= MAX_CONNECTIONS {
                self.conns.pop_front();
            }
            let mut conn = Conn {
                stream,
                accepted: Instant::now(),
                phase: Phase::Reading(Vec::new()),
                handshake,
            };
            // A scrape's request is usually there already: answered without a wait.
            if conn.advance(&self.access, &mut self.bodies) {
                self.conns.push_back(conn);
            }
        }
    }
}

#[cfg(test)]
mod tests;
