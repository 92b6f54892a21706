//! Request workers on io_uring. The rules are the kernel engine's (`rr_client::flight`:
//! windows, pacing, open loop, UDP loss; the recorder's intervals); only the system calls
//! differ. Each pass queues every due request of every connection (a TCP connection's due
//! requests as one send, one send in flight per connection so its bytes stay in order; a
//! UDP request a datagram of its own), then one `io_uring_enter` submits them and waits,
//! and the completions are read: each receive completion is one buffer of answers.
//!
//! The clock is read twice a pass at most: before the pass's first request is queued
//! (closed loop; open loop times requests from their schedule) and when completions
//! arrive, which is when the answers they carry are seen.

use std::os::fd::RawFd;
use std::time::Instant;

use io_uring::{cqueue, opcode, squeue, types};

use super::bufs::count_within;
use super::ring::{Uring, GROUP};
use super::stamped::{MsgLayout, TxAsk};
use super::{op_of, user_data, Op};
use crate::kstamps::now_real;
use crate::rr_client::flight::{self, Flight};
use crate::rr_client::recorder::{self, Recorder};
use crate::rr_client::stamped::{Read, Stamps};
use crate::rr_client::workers::{Core, WorkerCounters, COMPLETED, SENT};
use crate::rr_client::{ClientPlan, RrClient, RrSocket, Sockets, WorkerEnd};
use crate::udp_match::{stamp_cookie, REQUEST_HEADER_BYTES};

/// Receive buffers a worker's ring holds, at most, in bytes (an echo's UDP answers as
/// much again): what the agent's memory budget counts per worker.
pub const RECEIVE_BYTES: usize = 4 << 20;

struct Conn {
    udp: bool,
    flight: Flight,
    rx_acc: usize,
    dead: bool,
    /// A multishot receive is armed.
    armed: bool,
    /// TCP: bytes of the send in flight (0: none).
    sending: usize,
    /// UDP: the next of the connection's `window` request buffers.
    slot: usize,
    fd: RawFd,
    /// With stages: its messages' readings.
    stamps: Option<Stamps>,
    /// Sampled stages: a sampled send's header per request buffer (TCP: one).
    asks: Vec<TxAsk>,
}

impl RrClient {
    /// Request workers on io_uring, over `sockets` (TCP connections or connected UDP).
    pub fn spawn_uring(sockets: Vec<RrSocket>, plan: ClientPlan) -> std::io::Result<RrClient> {
        super::available().map_err(std::io::Error::other)?;
        let units = sockets.len();
        let (placement, shared) = Sockets::placed(plan, sockets, units)?;
        let deal = placement.clone();
        RrClient::start(&placement, shared, move |s: &Sockets, k| {
            recorder::recording(&s.core, k, |rec| {
                let owned: Vec<(RawFd, bool)> = deal
                    .owned(k, units)
                    .into_iter()
                    .map(|i| (s.sockets[i].fd(), matches!(s.sockets[i], RrSocket::Udp(_))))
                    .collect();
                run(&s.core, k, &owned, rec)
            })
        })
    }
}

struct Worker<'a, 'r> {
    core: &'a Core,
    counters: &'a WorkerCounters,
    rec: &'a mut Recorder<'r>,
    conns: Vec<Conn>,
    /// TCP: `window` requests of constant bytes; UDP: `window` datagrams per connection.
    tx: Vec<u8>,
    ring: Uring,
    /// With stages: the receives' layout, with room for the receive stamp.
    stamped: Option<MsgLayout>,
    last_message: Instant,
    now: Instant,
    end: WorkerEnd,
}

fn failed(what: &str, e: impl std::fmt::Display) -> WorkerEnd {
    WorkerEnd {
        error: Some(format!("io_uring {what}: {e}")),
        ..Default::default()
    }
}

/// Runs worker `k` over its connections `owned` (each a socket and whether it is UDP).
fn run(core: &Core, k: usize, owned: &[(RawFd, bool)], rec: &mut Recorder<'_>) -> WorkerEnd {
    let p = &core.plan;
    let start = Instant::now();
    let n = owned.len();
    let fds: Vec<RawFd> = owned.iter().map(|&(fd, _)| fd).collect();
    let mut stamps = Vec::with_capacity(n);
    for &(fd, udp) in owned {
        match Stamps::new(fd, udp, p) {
            Ok(s) => stamps.push(s),
            Err(end) => return end,
        }
    }
    let stamped = p.stages.then(MsgLayout::stamped);
    let (count, size) = receive_buffers(p, n);
    let size = size + stamped.as_ref().map_or(0, MsgLayout::overhead);
    let ring = match Uring::polled(&fds, count, size, p.sqpoll) {
        Ok(r) => r,
        Err(e) => return failed("setup", e),
    };
    let udp = owned.iter().any(|&(_, u)| u);
    let per_conn = p.window * p.request_bytes;
    let mut tx = vec![0x5au8; if udp { per_conn * n } else { per_conn }];
    if udp && p.request_bytes >= REQUEST_HEADER_BYTES {
        for d in tx.chunks_mut(p.request_bytes) {
            stamp_cookie(d, p.cookie);
        }
    }
    let mut w = Worker {
        core,
        counters: &core.counters[k],
        rec,
        conns: owned
            .iter()
            .zip(stamps)
            .enumerate()
            .map(|(i, (&(fd, udp), stamps))| Conn {
                udp,
                flight: Flight::new(p, start, i, n),
                rx_acc: 0,
                dead: false,
                armed: false,
                sending: 0,
                slot: 0,
                fd,
                asks: match p.stages && p.stage_every > 1 {
                    true => (0..if udp { p.window } else { 1 })
                        .map(|_| TxAsk::new())
                        .collect(),
                    false => Vec::new(),
                },
                stamps,
            })
            .collect(),
        tx,
        ring,
        stamped,
        last_message: start,
        now: start,
        end: WorkerEnd::default(),
    };
    while w.step() {}
    for c in &mut w.conns {
        c.flight.account(p, &mut w.end);
        if let Some(st) = &mut c.stamps {
            st.collect(c.fd, true);
            st.file(w.rec, true);
        }
    }
    w.end
}

/// How many receive buffers and how large: each holds a connection's window of answers
/// (a UDP answer whole), two per connection, within [`RECEIVE_BYTES`].
fn receive_buffers(p: &ClientPlan, conns: usize) -> (u16, usize) {
    let size = (p.window * p.response_bytes).clamp(4096, 64 << 10);
    (count_within(conns * 2, size, RECEIVE_BYTES), size)
}

impl Worker<'_, '_> {
    fn outstanding(&self) -> usize {
        self.conns.iter().map(|c| c.flight.started).sum()
    }

    /// One pass; false when the worker is done (aborted, drained, every connection dead,
    /// or the ring failed).
    fn step(&mut self) -> bool {
        let p = &self.core.plan;
        let Some(sending) = flight::begin_pass(
            p,
            (self.now, self.core.aborting()),
            &mut self.conns,
            |c| (&mut c.flight, c.dead),
            &mut self.end,
        ) else {
            return false;
        };
        let sends = match self.queue() {
            Ok(n) => n,
            Err(e) => {
                self.end.error = Some(format!("io_uring submit: {e}"));
                return false;
            }
        };
        if let Err(e) = self.wait(sending, sends) {
            self.end.error = Some(format!("io_uring_enter: {e}"));
            return false;
        }
        self.complete();
        for c in self.conns.iter_mut().filter(|c| c.udp) {
            self.end.lost += c.flight.expire(p, self.now);
        }
        true
    }

    /// Arms the receives that ended and queues the requests each window allows; returns
    /// how many sends will post a completion (UDP's post only their errors).
    fn queue(&mut self) -> std::io::Result<usize> {
        let p = &self.core.plan;
        let mut stamped = false;
        // With stages: the real clock, read with the pass's first request.
        let mut real = 0;
        let mut completing = 0;
        for i in 0..self.conns.len() {
            let c = &mut self.conns[i];
            if c.dead {
                continue;
            }
            if !c.armed {
                let recv = match &self.stamped {
                    Some(l) => l.recv(i),
                    None => opcode::RecvMulti::new(types::Fixed(i as u32), GROUP).build(),
                };
                self.ring.push(&recv.user_data(user_data(Op::Recv, i)))?;
                c.armed = true;
            }
            if c.sending > 0 || !c.flight.may_start(p.window) {
                continue;
            }
            if !p.open_loop && !stamped {
                self.now = Instant::now();
                stamped = true;
            }
            if c.stamps.is_some() && real == 0 {
                real = now_real();
            }
            let at = (!p.open_loop).then_some(self.now);
            if c.udp {
                while c.flight.may_start(p.window) {
                    c.flight.start(true, at);
                    if let Some(st) = &mut c.stamps {
                        st.sent(|| real);
                    }
                    self.counters.add_to(SENT, 1);
                    let off = (i * p.window + c.slot) * p.request_bytes;
                    let d = &mut self.tx[off..off + p.request_bytes];
                    c.flight.seq.stamp(d);
                    let ask = c.stamps.as_ref().and_then(Stamps::asking);
                    let send = match ask {
                        Some(ctl) => c.asks[c.slot].send(i, d, ctl, libc::MSG_NOSIGNAL),
                        None => {
                            opcode::Send::new(types::Fixed(i as u32), d.as_ptr(), d.len() as u32)
                                .flags(libc::MSG_NOSIGNAL)
                                .build()
                        }
                    }
                    .flags(squeue::Flags::SKIP_SUCCESS);
                    c.slot = (c.slot + 1) % p.window;
                    self.ring.push(&send.user_data(user_data(Op::Send, i)))?;
                }
            } else {
                let (mut due, mut ask) = (0, None);
                while c.flight.may_start(p.window) {
                    c.flight.start(false, at);
                    if let Some(st) = &mut c.stamps {
                        st.sent(|| real);
                        ask = ask.or(st.asking().copied());
                    }
                    due += 1;
                }
                self.counters.add_to(SENT, due as u64);
                c.sending = due * p.request_bytes;
                let flags = libc::MSG_NOSIGNAL | libc::MSG_WAITALL;
                // One send of the window's requests: its stamp is its last byte's, which
                // the book gives every message up to it (as coalesced sends').
                let send = match ask {
                    Some(ctl) => c.asks[0].send(i, &self.tx[..c.sending], &ctl, flags),
                    None => opcode::Send::new(
                        types::Fixed(i as u32),
                        self.tx.as_ptr(),
                        c.sending as u32,
                    )
                    .flags(flags)
                    .build(),
                };
                self.ring.push(&send.user_data(user_data(Op::Send, i)))?;
                completing += 1;
            }
            self.last_message = self.now;
        }
        Ok(completing)
    }

    /// Submits and waits for an answer besides the `sends` queued (or the deadline), or
    /// polls when spinning.
    fn wait(&mut self, sending: bool, sends: usize) -> std::io::Result<()> {
        let p = &self.core.plan;
        let now = self.now;
        self.rec.flush_if_due(now);
        if p.poll.spins(now, self.last_message) {
            return self.ring.poll();
        }
        let live = self.conns.iter().filter(|c| !c.dead);
        let paced = live.map(|c| c.flight.next_due);
        let loss = self.conns.iter().filter(|c| c.udp);
        let loss = loss.filter_map(|c| c.flight.loss_due(p));
        let deadline = flight::deadline(p, self.rec.due(), paced, loss, sending);
        // Nothing in flight: only the deadline can end the wait.
        let want = if self.outstanding() > 0 { sends + 1 } else { 1 };
        self.ring.wait(now, deadline, want)
    }

    /// Goes through the completions taken: answers (timed now), sends, ended receives.
    fn complete(&mut self) {
        let t = Instant::now();
        self.now = t;
        let real = self.stamped.as_ref().map_or(0, |_| now_real());
        // (One clock read a pass: cheaper than asking which answers are sampled.)
        let mut cqes = std::mem::take(&mut self.ring.cqes);
        for cqe in &cqes {
            match op_of(cqe.user_data()) {
                (Some(Op::Recv), i) => self.received(i, cqe, (t, real)),
                (Some(Op::Send), i) => self.sent(i, cqe.result()),
                (Some(Op::Wake) | None, _) => {}
            }
        }
        self.ring.bufs.publish();
        cqes.clear();
        self.ring.cqes = cqes;
        if self.stamped.is_some() {
            self.file_stages();
        }
    }

    /// With stages: reads the stamps of the sends the last enter made, and files the
    /// messages they completed.
    fn file_stages(&mut self) {
        for c in &mut self.conns {
            if let Some(st) = &mut c.stamps {
                st.collect(c.fd, false);
                st.file(self.rec, false);
            }
        }
    }

    /// A receive completed at `t` (and at `real` on the real clock, with stages).
    fn received(&mut self, i: usize, cqe: &cqueue::Entry, (t, real): (Instant, u64)) {
        let p = &self.core.plan;
        let res = cqe.result();
        let c = &mut self.conns[i];
        if !cqueue::more(cqe.flags()) {
            c.armed = false;
        }
        if res <= 0 {
            match -res {
                libc::ENOBUFS => {}
                0 if self.core.aborting() => c.dead = true,
                0 => {
                    c.dead = true;
                    self.end.error = Some("the agent closed a connection".into());
                }
                e => {
                    c.dead = true;
                    if !self.core.aborting() {
                        let e = std::io::Error::from_raw_os_error(e);
                        self.end.error = Some(format!("recv: {e}"));
                    }
                }
            }
            return;
        }
        let Some(bid) = cqueue::buffer_select(cqe.flags()) else {
            return;
        };
        let buf = self.ring.bufs.get(bid, res as usize);
        let (data, rx) = match &self.stamped {
            Some(l) => l.data(buf),
            None => (buf, None),
        };
        self.last_message = t;
        let (first, responses) = c.flight.answers(p, c.udp, &mut c.rx_acc, data);
        for _ in 0..responses {
            let Some(s) = c.flight.answered(p, first, t) else {
                break;
            };
            self.rec.record(s, t);
            self.counters.add_to(COMPLETED, 1);
        }
        if let Some(st) = &mut c.stamps {
            st.answered(Read {
                data,
                udp: c.udp,
                responses,
                readings: (rx, real),
                counted: self.rec.counts(t),
            });
        }
        self.ring.bufs.recycle(bid);
    }

    fn sent(&mut self, i: usize, res: i32) {
        let c = &mut self.conns[i];
        if res < 0 {
            c.dead = true;
            if !self.core.aborting() {
                let e = std::io::Error::from_raw_os_error(-res);
                self.end.error = Some(format!("send: {e}"));
            }
            return;
        }
        if c.udp {
            return;
        }
        // MSG_WAITALL: a short send is one a signal or the peer cut.
        if (res as usize) < c.sending && !self.core.aborting() {
            c.dead = true;
            self.end.error = Some(format!("send: {res} of {} bytes sent", c.sending));
        }
        c.sending = 0;
    }
}
