//! A test's data connections, from `Ready` until `Start` has come and every one is in:
//! only from the controller's address, each opening with the test's cookie and a free
//! index. Headers are read from every waiting connection at once, each within
//! [`HEADER_WITHIN`] of its accept, while the control connection is served, so a silent or
//! wrong connection costs the real ones nothing (the data port is in the clear-text
//! `Ready`: read one at a time, three silent connections once delayed a test by 6 s and
//! six failed it).

use std::collections::VecDeque;
use std::io::{self, Read};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use sonde_proto::{AgentEvent, DataHeader, PeerError, Session, DATA_HEADER_BYTES};

use super::conn::{Conn, TestError};
use super::refusals::{Kind, Refusals};
use super::shared::Shared;
use crate::control::MAX_WAIT;

/// After `Start`, how long the data connections may take to arrive.
const ACCEPT_DEADLINE: Duration = Duration::from_secs(5);
/// From its accept, how long a data connection may take to send its header.
pub(super) const HEADER_WITHIN: Duration = Duration::from_secs(2);
/// Connections waiting for their header at once; a newer one pushes the oldest out (a
/// real connection sends its header at once, so it is never the oldest for long).
const MAX_WAITING: usize = 64;
/// Connections taken from the listener's backlog per turn.
const ACCEPTS_PER_TURN: usize = 64;

/// A connection from the controller's address whose header is not all in yet.
struct Waiting {
    stream: TcpStream,
    from: SocketAddr,
    header: [u8; DATA_HEADER_BYTES],
    have: usize,
    until: Instant,
}

/// What a read of a waiting connection gave.
enum Got {
    More,
    Header,
    Gone(&'static str),
}

impl Waiting {
    /// Reads what has come of the header, never past it (the test's bytes follow).
    fn read(&mut self) -> Got {
        match self.stream.read(&mut self.header[self.have..]) {
            Ok(0) => Got::Gone("closed before its header"),
            Ok(n) => {
                self.have += n;
                if self.have == DATA_HEADER_BYTES {
                    Got::Header
                } else {
                    Got::More
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) =>
            {
                Got::More
            }
            Err(_) => Got::Gone("failed before its header"),
        }
    }
}

/// The data connections in their places, and those still waiting for their header.
struct Accepting<'a> {
    listener: Option<&'a TcpListener>,
    slots: Vec<Option<TcpStream>>,
    accepted: usize,
    waiting: VecDeque<Waiting>,
    cookie: u64,
    controller: IpAddr,
    refusals: &'a Refusals,
}

impl Accepting<'_> {
    fn all_in(&self) -> bool {
        self.accepted == self.slots.len()
    }

    /// The listener and the waiting connections, while places are free.
    fn fds(&self) -> Vec<RawFd> {
        if self.all_in() {
            return Vec::new();
        }
        let listener = self.listener.map(|l| l.as_raw_fd());
        let waiting = self.waiting.iter().map(|w| w.stream.as_raw_fd());
        listener.into_iter().chain(waiting).collect()
    }

    fn refuse(&self, from: SocketAddr, why: impl std::fmt::Display) {
        self.refusals.refused(from.ip(), Kind::Data, || {
            format!("data connection from {from} refused: {why}")
        });
    }

    /// Takes what the listener holds: the controller's connections wait for their header,
    /// any other address's are closed.
    fn accept_new(&mut self) {
        let Some(listener) = self.listener else {
            return;
        };
        for _ in 0..ACCEPTS_PER_TURN {
            let Ok((stream, from)) = listener.accept() else {
                return;
            };
            if from.ip() != self.controller {
                self.refuse(from, "not the controller");
                continue;
            }
            if stream.set_nonblocking(true).is_err() {
                continue;
            }
            if self.waiting.len() >= MAX_WAITING {
                if let Some(old) = self.waiting.pop_front() {
                    self.refuse(old.from, "no header while newer connections came");
                }
            }
            self.waiting.push_back(Waiting {
                stream,
                from,
                header: [0; DATA_HEADER_BYTES],
                have: 0,
                until: Instant::now() + HEADER_WITHIN,
            });
        }
    }

    /// Reads every waiting connection: one with a whole header takes its place or is
    /// closed; one past its deadline is closed.
    fn read_headers(&mut self, now: Instant) {
        for mut w in std::mem::take(&mut self.waiting) {
            match w.read() {
                Got::More if now >= w.until => self.refuse(w.from, "no header in time"),
                Got::More => self.waiting.push_back(w),
                Got::Gone(why) => self.refuse(w.from, why),
                Got::Header => self.place(w),
            }
        }
    }

    fn place(&mut self, w: Waiting) {
        match DataHeader::accept(&w.header, self.cookie, self.slots.len()) {
            Ok(index) if self.slots[index].is_none() => {
                if w.stream.set_nonblocking(false).is_ok() {
                    self.slots[index] = Some(w.stream);
                    self.accepted += 1;
                }
            }
            Ok(index) => self.refuse(w.from, format!("index {index} taken")),
            Err(e) => self.refuse(w.from, e),
        }
    }
}

/// Accepts the test's data connections (only from the controller's address, only with the
/// cookie) until `Start` has arrived and every one is in, by index.
pub(super) fn accept_data(
    conn: &mut Conn,
    data: Option<(&TcpListener, usize)>,
    cookie: u64,
    controller: IpAddr,
    shared: &Shared,
) -> Result<Vec<TcpStream>, TestError> {
    let total = data.map_or(0, |d| d.1);
    let mut a = Accepting {
        listener: data.map(|d| d.0),
        slots: (0..total).map(|_| None).collect(),
        accepted: 0,
        waiting: VecDeque::new(),
        cookie,
        controller,
        refusals: &shared.refusals,
    };
    let mut start_by: Option<Instant> = None;
    while start_by.is_none() || !a.all_in() {
        if shared.interrupt.is_set() {
            return Err(TestError::ShuttingDown);
        }
        if start_by.is_some_and(|t| Instant::now() > t) {
            let message = format!("only {} of {total} data connections arrived", a.accepted);
            conn.session.refuse(PeerError::Internal {
                message: message.clone(),
            });
            let _ = conn.link.send(&mut conn.session);
            return Err(TestError::Refused(message));
        }
        let headers_by = a.waiting.iter().map(|w| w.until).min();
        let until = [start_by, headers_by, conn.session.poll_timeout()]
            .into_iter()
            .flatten()
            .min();
        let mut fds = vec![conn.link.fd()];
        fds.extend(a.fds());
        wait_any(&fds, until);
        // Whatever woke the wait, each is served without blocking.
        conn.link
            .step(&mut conn.session, Some(Instant::now()), None)?;
        if !a.all_in() {
            a.accept_new();
            a.read_headers(Instant::now());
        }
        if let Some(AgentEvent::Start) = conn.session.poll_event() {
            start_by = Some(Instant::now() + ACCEPT_DEADLINE);
        }
    }
    for w in std::mem::take(&mut a.waiting) {
        a.refuse(w.from, "no header before every data connection was in");
    }
    Ok(a.slots.into_iter().flatten().collect())
}

/// Waits until one of `fds` is readable, a stop signal arrives, or `until` (at most
/// `MAX_WAIT`).
fn wait_any(fds: &[RawFd], until: Option<Instant>) {
    let now = Instant::now();
    let until = until.map_or(now + MAX_WAIT, |u| u.min(now + MAX_WAIT));
    let ms = until
        .saturating_duration_since(now)
        .as_micros()
        .div_ceil(1000) as libc::c_int;
    let wake = crate::signals::wake_fd().unwrap_or(-1);
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .chain([&wake])
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // SAFETY: a live array of pollfds of the length given; a negative fd is ignored.
    unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, ms) };
}
