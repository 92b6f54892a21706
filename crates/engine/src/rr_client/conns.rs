//! A worker's loop over the connections it owns: make due requests, send what the window
//! allows, wait (block, spin, poll or epoll), read the answers, expire lost UDP requests.
//! One pass of [`Worker::step`] does each once.
//!
//! The clock is read twice a message: just before a request goes out (closed loop; open
//! loop times requests from their schedule) and just after its answer comes in. Every
//! other decision of a pass (stop, pacing, deadlines, spinning) uses the last reading;
//! only a pass that received nothing reads the clock again.

use std::os::fd::{BorrowedFd, RawFd};
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::flight::{self, Flight};
use super::plan::{ClientPlan, WorkerEnd};
use super::recorder::Recorder;
use super::stamped::{Read, Stamps};
use super::workers::{Core, WorkerCounters, COMPLETED, SENT};
use crate::kstamps;
use crate::marks::TosCounts;
use crate::udp_match::{stamp_cookie, REQUEST_HEADER_BYTES};
use crate::wait::{self, Multi, Recv};

/// What the wait found.
enum Ready {
    /// Nothing: a deadline passed.
    Nothing,
    /// Try a non-blocking receive on the only connection.
    Poll,
    /// Block in the receive on the only connection.
    Blocking,
    /// `ready` lists the readable connections.
    Several,
}

struct Conn {
    fd: RawFd,
    udp: bool,
    flight: Flight,
    tx_left: usize,
    rx_acc: usize,
    dead: bool,
    /// With stages: its messages' readings.
    stamps: Option<Stamps>,
    /// UDP with `plan.read_tos`: its answers' TOS is read and counted.
    marks: bool,
}

struct Worker<'a, 'r> {
    shared: &'a Core,
    counters: &'a WorkerCounters,
    /// The answers by arrival TOS (read on UDP connections with `plan.read_tos`).
    tos: &'a TosCounts,
    rec: &'a mut Recorder<'r>,
    conns: Vec<Conn>,
    /// Epoll over the connections, when there are several.
    multi: Option<Multi>,
    /// The only connection's receive may block: TCP, or UDP with a receive timeout.
    blocking_recv: bool,
    buf: Vec<u8>,
    ready: Vec<usize>,
    /// The last request sent or answer read: hybrid spins for a while after it.
    last_message: Instant,
    /// The last clock reading (see the module's doc).
    now: Instant,
    end: WorkerEnd,
}

/// Runs worker `k` over its connections `owned` (each a socket and whether it is UDP).
pub(super) fn run(
    shared: &Core,
    k: usize,
    owned: &[(RawFd, bool)],
    rec: &mut Recorder<'_>,
) -> WorkerEnd {
    let mut w = match Worker::new(shared, k, owned, rec) {
        Ok(w) => w,
        Err(end) => return end,
    };
    while w.step() {}
    w.finish()
}

impl<'a, 'r> Worker<'a, 'r> {
    fn new(
        shared: &'a Core,
        k: usize,
        owned: &[(RawFd, bool)],
        rec: &'a mut Recorder<'r>,
    ) -> Result<Self, WorkerEnd> {
        let p = &shared.plan;
        let start = Instant::now();
        let n = owned.len();
        let mut conns = Vec::with_capacity(n);
        for (i, &(fd, udp)) in owned.iter().enumerate() {
            let marks = udp && p.read_tos;
            if marks {
                crate::marks::enable_recv_tos(fd).map_err(|e| WorkerEnd {
                    error: Some(format!("IP_RECVTOS: {e}")),
                    ..Default::default()
                })?;
                shared.tos_read.store(true, Ordering::Relaxed);
            }
            conns.push(Conn {
                marks,
                fd,
                udp,
                flight: Flight::new(p, start, i, n),
                tx_left: 0,
                rx_acc: 0,
                dead: false,
                stamps: Stamps::new(fd, udp, p)?,
            });
        }
        let multi = if n > 1 {
            let fds: Vec<RawFd> = conns.iter().map(|c| c.fd).collect();
            let m = Multi::new(&fds, Some(shared.wake.raw())).map_err(|e| WorkerEnd {
                error: Some(format!("epoll: {e}")),
                ..Default::default()
            })?;
            Some(m)
        } else {
            None
        };
        let blocking_recv = n == 1 && (!conns[0].udp || loss_timeout(conns[0].fd, p));
        let buf_len = p.request_bytes.max(p.response_bytes).max(64 * 1024);
        let mut buf = vec![0x5au8; buf_len];
        // Every UDP request carries the cookie; only the sequence number changes.
        if conns.iter().any(|c| c.udp) && p.request_bytes >= REQUEST_HEADER_BYTES {
            stamp_cookie(&mut buf, p.cookie);
        }
        Ok(Worker {
            shared,
            counters: &shared.counters[k],
            tos: &shared.tos[k],
            rec,
            conns,
            multi,
            blocking_recv,
            buf,
            ready: Vec::with_capacity(n),
            last_message: start,
            now: start,
            end: WorkerEnd::default(),
        })
    }

    fn outstanding(&self) -> usize {
        self.conns.iter().map(|c| c.flight.started).sum()
    }

    /// One pass; false when the worker is done (aborted, drained, every connection dead,
    /// or an error in the wait).
    fn step(&mut self) -> bool {
        let Some(sending) = flight::begin_pass(
            &self.shared.plan,
            (self.now, self.shared.aborting.load(Ordering::Relaxed)),
            &mut self.conns,
            |c| (&mut c.flight, c.dead),
            &mut self.end,
        ) else {
            return false;
        };
        self.send_window();
        let Some(ready) = self.wait(sending) else {
            return false;
        };
        self.receive(ready);
        self.expire_udp();
        true
    }

    /// Sends what each connection's window allows; a closed-loop request is timed from
    /// just before its first byte goes out.
    fn send_window(&mut self) {
        let p = &self.shared.plan;
        for c in self.conns.iter_mut().filter(|c| !c.dead) {
            while c.tx_left > 0 || c.flight.may_start(p.window) {
                if c.tx_left == 0 {
                    c.tx_left = p.request_bytes;
                    if !p.open_loop {
                        self.now = Instant::now();
                    }
                    c.flight.start(c.udp, (!p.open_loop).then_some(self.now));
                    self.counters.add_to(SENT, 1);
                    if let Some(st) = &mut c.stamps {
                        st.sent(kstamps::now_real);
                    }
                }
                if c.udp {
                    c.flight.seq.stamp(&mut self.buf);
                }
                let out = &self.buf[..c.tx_left];
                let sent = match c.stamps.as_ref().and_then(Stamps::asking) {
                    Some(ctl) => kstamps::send_stamped(c.fd, out, None, ctl),
                    None => wait::send(c.fd, out),
                };
                match sent {
                    Ok(0) => break,
                    Ok(sent) => {
                        c.tx_left -= sent;
                        // A request going out is activity too: hybrid spins for its answer.
                        self.last_message = self.now;
                    }
                    Err(e) => {
                        c.dead = true;
                        self.end.error = Some(format!("send: {e}"));
                        break;
                    }
                }
            }
            // A wait in the receive itself is not woken by the error queue: its stamps
            // are read once the answer is in, off the round trip. A poll would be woken
            // by them: they are read now, while the request is on its way.
            if !self.blocking_recv {
                c.collect_stamps(false);
            }
        }
    }

    /// When the worker must wake even without an answer.
    fn deadline(&self, sending: bool) -> Option<Instant> {
        let p = &self.shared.plan;
        let live = self.conns.iter().filter(|c| !c.dead);
        let paced = live.map(|c| c.flight.next_due);
        let udp = self.conns.iter().filter(|c| c.udp);
        let loss = udp.filter_map(|c| c.flight.loss_due(p));
        flight::deadline(p, self.rec.due(), paced, loss, sending)
    }

    /// Waits for answers or the deadline; `None` on an error (recorded in the end).
    fn wait(&mut self, sending: bool) -> Option<Ready> {
        let p = &self.shared.plan;
        let now = self.now;
        self.rec.flush_if_due(now);
        let deadline = self.deadline(sending);
        let spin = p.poll.spins(now, self.last_message);
        let outstanding = self.outstanding();
        let (what, result) = match &mut self.multi {
            None if spin => return Some(Ready::Poll),
            // Closed loop on one connection: the blocking receive is the wait (UDP's
            // with the loss timeout as its receive timeout).
            None if outstanding > 0 && p.pace.is_none() && self.blocking_recv => {
                return Some(Ready::Blocking)
            }
            None => (
                "poll",
                wait::wait_readable(self.conns[0].fd, now, deadline).map(|r| (r, Ready::Poll)),
            ),
            Some(m) => (
                "epoll",
                m.wait(now, deadline, spin, &mut self.ready)
                    .map(|r| (r, Ready::Several)),
            ),
        };
        match result {
            Ok((true, ready)) => Some(ready),
            Ok((false, _)) => Some(Ready::Nothing),
            Err(e) => {
                self.end.error = Some(format!("{what}: {e}"));
                None
            }
        }
    }

    /// Reads the answers on the connections the wait found ready; a pass that read
    /// nothing (a timeout, an empty spin) reads the clock.
    fn receive(&mut self, ready: Ready) {
        let targets: &[usize] = match ready {
            Ready::Nothing => &[],
            Ready::Several => &self.ready,
            Ready::Poll | Ready::Blocking => &[0],
        };
        let blocking = matches!(ready, Ready::Blocking);
        let mut last = None;
        for &i in targets {
            let c = &mut self.conns[i];
            if !c.dead {
                let got = read_answers(
                    c,
                    &mut self.buf,
                    blocking,
                    (self.shared, self.counters, &mut *self.rec, self.tos),
                    &mut self.end,
                );
                // After the answers' clock readings; woken with nothing to read, a stamp
                // on the error queue woke the wait.
                c.collect_stamps(got.is_none());
                last = got.or(last);
            }
            if let Some(st) = &mut c.stamps {
                st.file(self.rec, false);
            }
        }
        match last {
            Some(t) => {
                self.now = t;
                self.last_message = t;
            }
            None => self.now = Instant::now(),
        }
    }

    /// UDP requests whose answer is overdue are lost; the slot is freed.
    fn expire_udp(&mut self) {
        let p = &self.shared.plan;
        for c in self.conns.iter_mut().filter(|c| c.udp) {
            self.end.lost += c.flight.expire(p, self.now);
        }
    }

    /// The worker's accounting, once it stopped.
    fn finish(mut self) -> WorkerEnd {
        for c in &mut self.conns {
            c.flight.account(&self.shared.plan, &mut self.end);
            if let Some(st) = &mut c.stamps {
                st.file(self.rec, true);
            }
        }
        self.end
    }
}

impl Conn {
    /// Reads the stamps of its sends from the error queue, when one is awaited (or
    /// `always`: one woke the wait).
    fn collect_stamps(&mut self, always: bool) {
        if let Some(st) = &mut self.stamps {
            st.collect(self.fd, always);
        }
    }
}

/// Gives a UDP socket the loss timeout as its receive timeout, so that a blocking
/// receive is the whole wait (one system call, not a poll and a receive); false if the
/// socket refused.
fn loss_timeout(fd: RawFd, p: &ClientPlan) -> bool {
    // SAFETY: the worker's socket stays open for the worker's life.
    let fd = unsafe { BorrowedFd::borrow_raw(fd) };
    socket2::SockRef::from(&fd)
        .set_read_timeout(Some(p.udp_loss_timeout))
        .is_ok()
}

/// Reads what one ready connection holds: each complete answer frees its request's slot
/// (and, closed loop, queues the next request). Returns when the last data came.
fn read_answers(
    c: &mut Conn,
    buf: &mut [u8],
    blocking: bool,
    (shared, counters, rec, marks): (&Core, &WorkerCounters, &mut Recorder<'_>, &TosCounts),
    end: &mut WorkerEnd,
) -> Option<Instant> {
    let p = &shared.plan;
    let mut last = None;
    loop {
        // With stages, only a read that may complete a sampled answer takes its stamp;
        // with marks, every read takes its TOS.
        let read = match &c.stamps {
            Some(st) => st.rx_read(c.rx_acc, p.response_bytes, buf.len()),
            None => kstamps::RxRead {
                stamped: false,
                len: buf.len(),
            },
        };
        let room = &mut buf[..read.len];
        let (got, rx, tos) = match read.stamped || c.marks {
            true => match kstamps::io::recv_marked(c.fd, room, !blocking, None) {
                Ok((r, rx, tos)) => (Ok(r), rx, tos),
                Err(e) => (Err(e), None, None),
            },
            false => (wait::recv(c.fd, room, !blocking), None, None),
        };
        match got {
            Ok(Recv::Data(got)) => {
                let t = Instant::now();
                last = Some(t);
                let (first, responses) = c.flight.answers(p, c.udp, &mut c.rx_acc, &buf[..got]);
                if c.udp && responses > 0 && c.marks {
                    marks.add(tos);
                }
                let real = c
                    .stamps
                    .as_ref()
                    .filter(|st| st.samples(&buf[..got], responses))
                    .map(|_| kstamps::now_real());
                for _ in 0..responses {
                    let Some(s) = c.flight.answered(p, first, t) else {
                        break;
                    };
                    rec.record(s, t);
                    counters.add_to(COMPLETED, 1);
                }
                if let Some(st) = &mut c.stamps {
                    let read = Read {
                        data: &buf[..got],
                        udp: c.udp,
                        responses,
                        readings: (rx, real.unwrap_or(0)),
                        counted: rec.counts(t),
                    };
                    st.answered(read);
                }
                // A short TCP read drained the socket (or stopped before a sampled
                // answer: the rest, if any, waits for the next pass), and a UDP flow
                // with nothing left in flight has nothing more to read; readiness is
                // level-triggered, so a second call only to hear EAGAIN would be wasted.
                let drained = if c.udp {
                    c.flight.started == 0
                } else {
                    got < buf.len()
                };
                if blocking || drained {
                    return last;
                }
            }
            Ok(Recv::Empty) => return last,
            Ok(Recv::Closed) => {
                c.dead = true;
                if !shared.aborting.load(Ordering::Relaxed) {
                    end.error = Some("the agent closed a connection".into());
                }
                return last;
            }
            Err(e) => {
                c.dead = true;
                end.error = Some(format!("recv: {e}"));
                return last;
            }
        }
    }
}
