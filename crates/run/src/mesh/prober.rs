//! The mesh's one thread, a socket loop around the prober's machine
//! (`sonde_proto::mesh::Prober`, which decides what to send when, what an answer is, and
//! when a probe is settled): its reflector's requests answered, answers read and handed
//! to the machine, the probes it polls sent, the list read again. Everything happens on
//! grids (the machine's send slots and settling, [`READ_EVERY`]) so that one wake-up does
//! many things: an arriving packet never wakes the thread. Each is timed by the kernel's
//! receive stamp instead, so a late read lengthens no round trip: an answer's arrival is
//! its stamp, and the reflector's hold (its receive stamp to its send) is written into its
//! answer and taken out by the machine.
//!
//! A probe's departure is its kernel transmit stamp (`SO_TIMESTAMPING`'s software stamp,
//! asked for on each send with a control message, keyed per send), read at the next
//! wake-up and before the answers, from an io_uring ring where the kernel has one for
//! them, else with the ICMP errors from the error queue, many a call (`departures`):
//! a send that left late no longer lengthens its round trip. A stamp never wakes the
//! thread. Without one (the kernel gave none in time) the clock read the probe was
//! written with stands, and its answer is counted so (`Prober::departures`).
//!
//! The machine lives in the state the metrics read, behind its mutex; the mutex is taken
//! for each decision and never held across a send or a read.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use sonde_engine::kstamps::batch::Batch;
use sonde_engine::kstamps::sample::{self, SEND_BATCH};
use sonde_engine::kstamps::{datagram, TxPoint};
use sonde_proto::mesh::{Clocks, ListChange, Listed, Probe, Unreachable};
use sonde_proto::stamp::{ErrorEstimate, TimeFormat, Timestamp};

use super::answers::Answers;
use super::config::MeshConfig;
use super::departures::StampReader;
use super::icmp;
use super::keys::Keys;
use super::peers::Peer;
use super::reflector::{self, MeshReflector, Times};
use super::state::MeshState;
use super::tx_stamps::{Departed, TxStamps};
use crate::signals::Interrupt;
use crate::stamp::marks::answer_tos;

/// Packets read per socket per wake-up at most, so that a flood on one socket cannot
/// starve the other or the schedule.
const READ_BATCH: usize = 256;
/// Packets read per system call (`recvmmsg`): a hundred waiting packets a second, read
/// five times a second, are one call each time.
const READ_SLOTS: usize = 32;
/// How long a packet may wait in a socket before it is read: both sockets are read on
/// every wake-up, and the thread wakes at least this often. The machine's settling grid
/// (`TICK_NS`), so that reads share the send grid's wake-ups (less with a short timeout:
/// [`read_every`]). The stop flag is read as often. A wake-up costs the thread more than
/// its calls: five a second cost it 11-16 % less than ten (BENCHMARKS.md, issue 54).
const READ_EVERY: Duration = Duration::from_millis(200);
/// Probes one `sendmmsg` sends at most. A wake-up's probes leave in calls of this many:
/// with a veth's receive path in NAPI threads on the agents' CPUs, a wake-up's 20 probes
/// in one call lengthened the mean round trip by 40-60 us, in calls of 8 by 15-35 us;
/// with [`let_the_stack_run`] after the sends, not at all (BENCHMARKS.md, issue 54).
const SEND_CHUNK: usize = 8;
/// How often the clock's error bound is read again (chronyc may take a moment).
const CLOCK_EVERY: Duration = Duration::from_secs(60);
/// Socket buffers asked for: a burst of answers from a thousand peers fits.
const SOCKET_BUFFER: libc::c_int = 4 << 20;
/// Largest datagram read; a STAMP probe with TLVs is far smaller.
const MAX_DATAGRAM: usize = 2048;

pub(super) struct SocketLoop {
    cfg: MeshConfig,
    reflector_sock: UdpSocket,
    prober_sock: UdpSocket,
    /// What the metrics read, the prober's machine in it.
    state: Arc<Mutex<MeshState>>,
    /// With a key: the address this agent's packets to a peer leave from (a routing
    /// lookup when bound to the unspecified address), which a probe's key names.
    routes: Option<Keys>,
    reflector: MeshReflector,
    /// The answers' sends, each asking for its transmit stamp when its probe asked for a
    /// follow-up, and the stamps read.
    answers: Answers,
    started: Instant,
    /// The reflector's counters as the state last had them.
    published: (u64, u64),
    /// The clock's error bound in ns (u64::MAX: not synchronised), read on its own thread.
    clock_bound: Arc<AtomicU64>,
    batch: Batch,
    out: Vec<u8>,
    /// ICMP errors read, before they are counted under the lock.
    unreachable: Vec<(SocketAddr, Unreachable)>,
    /// The probes awaiting their transmit stamps, and the stamps matched, before they
    /// are given to the machine under the lock.
    tx_stamps: TxStamps,
    departed: Vec<Departed>,
    /// The prober socket's stamps and ICMP errors, from a ring or its error queue.
    stamp_reader: StampReader,
    /// The probes of a batch, their bytes in `out` (one [`MAX_DATAGRAM`] each), and those
    /// that left, given to the machine as sent with the next poll.
    polled: Vec<Probe>,
    left: Vec<Probe>,
    /// How a send asks for its stamp: keyed per send (`SCM_TS_OPT_ID`) or by the
    /// socket's count; `None`: the socket cannot (every clock read stands).
    stamping: Option<bool>,
}

impl SocketLoop {
    pub(super) fn new(
        cfg: MeshConfig,
        reflector_sock: UdpSocket,
        prober_sock: UdpSocket,
        state: Arc<Mutex<MeshState>>,
        clock_bound: Arc<AtomicU64>,
        started: Instant,
    ) -> SocketLoop {
        let mesh_key = cfg.key.as_ref().map(sonde_proto::mesh::stamp_key);
        let keys = || mesh_key.clone().map(|k| Keys::new(k, cfg.bind));
        let mut reflector = MeshReflector::new(keys(), cfg.reflect(), cfg.labels.clone());
        reflector.set_dscp_policy(cfg.dscp_policy());
        // Best effort: without it a silent peer and a closed port look alike.
        let _ = icmp::enable(prober_sock.as_raw_fd(), cfg.bind.is_ipv4());
        // Best effort: without it each probe is timed by its clock read, as counted.
        let stamping = datagram::enable_departure(prober_sock.as_raw_fd())
            .ok()
            .map(|()| sample::opt_id_per_send());
        SocketLoop {
            tx_stamps: TxStamps::new(cfg.judging().timeout_ns),
            departed: Vec::new(),
            stamp_reader: StampReader::new(prober_sock.as_raw_fd(), stamping.is_some()),
            polled: Vec::with_capacity(SEND_BATCH),
            left: Vec::with_capacity(SEND_BATCH),
            stamping,
            reflector,
            answers: Answers::new(reflector_sock.as_raw_fd()),
            routes: keys(),
            started,
            published: (0, 0),
            clock_bound,
            batch: Batch::new(READ_SLOTS, MAX_DATAGRAM),
            out: vec![0; SEND_BATCH * MAX_DATAGRAM],
            unreachable: Vec::new(),
            cfg,
            reflector_sock,
            prober_sock,
            state,
        }
    }

    fn now_ns(&self) -> u64 {
        self.started.elapsed().as_nanos() as u64
    }

    fn clocks(&self) -> Clocks {
        Clocks {
            mono_ns: self.now_ns(),
            real_ns: reflector::realtime_ns(),
        }
    }

    /// The state, for one decision (a panic elsewhere left it as it was: keep going).
    fn lock(&self) -> MutexGuard<'_, MeshState> {
        lock(&self.state)
    }

    /// Runs until `interrupt`, the machine holding its first list already.
    pub(super) fn run(&mut self, interrupt: &Interrupt) {
        let first: Vec<IpAddr> = self.lock().peers().iter().map(|(a, _)| a.ip()).collect();
        self.reflector.listed(first);
        let refresh = self.cfg.refresh_every().as_nanos() as u64;
        let mut next_refresh = self.now_ns() + refresh;
        let every = read_every(self.cfg.judging().timeout_ns);
        while !interrupt.is_set() {
            // Read first: an answer that came before its deadline counts when settled.
            let reflected = self.reflector.reflected;
            let requests_behind = self.answer_requests();
            if self.reflector.reflected != reflected {
                let_the_stack_run();
            }
            let behind = requests_behind | self.read_answers();
            let now = self.now_ns();
            if now >= next_refresh {
                self.refresh();
                next_refresh = now + refresh;
            }
            if self.send_due() {
                let_the_stack_run();
            }
            let next = {
                let now = self.now_ns();
                let mut s = self.lock();
                s.prober.handle_timeout(now);
                s.prober.poll_timeout()
            };
            let next_read = (now / every + 1) * every;
            let until = next.min(next_refresh).min(next_read);
            if !behind {
                sleep(Duration::from_nanos(until.saturating_sub(self.now_ns())));
            }
        }
    }

    /// Reads the list again; on failure keeps the last one and says why once.
    fn refresh(&mut self) {
        if let Some(k) = &mut self.routes {
            k.forget_routes();
        }
        self.reflector.forget_routes();
        match self.cfg.source.read(self.cfg.port) {
            Ok(list) => {
                self.lock().list_error = None;
                self.take_list(list);
            }
            Err(e) => {
                let e = e.to_string();
                let mut s = self.lock();
                if s.list_error.as_deref() != Some(&e) {
                    tracing::warn!("mesh: {e}; probing the last list");
                }
                s.list_error = Some(e);
            }
        }
    }

    /// The list becomes `list` (its peers of the sockets' family), each with the address
    /// its probes leave from (looked up before the lock is taken).
    fn take_list(&mut self, list: Vec<Peer>) {
        let listed = listed(self.cfg.bind, &mut self.routes, list);
        self.reflector
            .listed(listed.iter().map(|l| l.peer.addr.ip()));
        let now = self.now_ns();
        let (change, peers, rate) = {
            let mut s = self.lock();
            let change = s.prober.set_list(now, listed);
            let peers = s.prober.peers().len();
            (change, peers, s.prober.rate_per_s() / peers.max(1) as f64)
        };
        say(change, peers, rate);
    }

    /// Sends the probes the machine has due, [`SEND_BATCH`] polled under the lock at a
    /// time (one clock read their T1) and sent after it is released, [`SEND_CHUNK`] to a
    /// `sendmmsg`, their departures given to the machine with the next poll: the clock
    /// read, until each one's stamp says how late it left. Whether any left.
    fn send_due(&mut self) -> bool {
        let estimate = self.estimate();
        let (mut at, mut any) = (0, false);
        loop {
            let now = self.clocks();
            {
                let mut s = lock(&self.state);
                for p in self.left.drain(..) {
                    s.prober.sent(p.to, p.seq, at);
                }
                self.polled.clear();
                while self.polled.len() < SEND_BATCH {
                    let from = self.polled.len() * MAX_DATAGRAM;
                    let out = &mut self.out[from..from + MAX_DATAGRAM];
                    match s.prober.poll_probe(now, estimate, out) {
                        Some(p) => self.polled.push(p),
                        None => break,
                    }
                }
            }
            if self.polled.is_empty() {
                return any;
            }
            self.send_polled(now);
            any |= !self.left.is_empty();
            at = now.mono_ns;
        }
    }

    /// Sends the probes polled, each asking for its transmit stamp under its key; those
    /// that left go to `left`. One the kernel refuses is skipped (its number goes again),
    /// after one more try when an ICMP error about an earlier probe failed it
    /// (`IP_RECVERR`: the error is in the error queue); a full socket ends the batch.
    fn send_polled(&mut self, now: Clocks) {
        let fd = self.prober_sock.as_raw_fd();
        let (mut i, mut again) = (0, true);
        while i < self.polled.len() {
            let none: (&[u8], SocketAddr) = (&[], SocketAddr::from(([0, 0, 0, 0], 0)));
            let mut msgs = [none; SEND_BATCH];
            for (m, (k, p)) in msgs.iter_mut().zip(self.polled.iter().enumerate().skip(i)) {
                *m = (&self.out[k * MAX_DATAGRAM..k * MAX_DATAGRAM + p.len], p.to);
            }
            let ask = self
                .stamping
                .map(|keyed| (keyed, self.tx_stamps.next_key()));
            let n = (self.polled.len() - i).min(SEND_CHUNK);
            match sample::send_batch(fd, &msgs[..n], ask) {
                Ok(0) => return,
                Ok(n) => {
                    for p in &self.polled[i..i + n] {
                        self.tx_stamps.sent(p.to, p.seq, now);
                        self.left.push(*p);
                    }
                    (i, again) = (i + n, true);
                }
                Err(e) if icmp::reported(&e) && again => {
                    self.stamp_reader.reported();
                    again = false
                }
                // The kernel refuses the ask (a key per send, then any): ask less.
                Err(e) if ask.is_some() && e.raw_os_error() == Some(libc::EINVAL) => {
                    tracing::warn!("mesh: a probe's transmit stamp refused ({e}); asking less");
                    self.stamping = self.stamping.and_then(|keyed| keyed.then_some(false));
                }
                Err(_) => (i, again) = (i + 1, true),
            }
        }
    }

    fn estimate(&self) -> ErrorEstimate {
        match self.clock_bound.load(Ordering::Relaxed) {
            u64::MAX => ErrorEstimate::unknown(TimeFormat::Ntp),
            b => ErrorEstimate::from_bound_ns(b, true, TimeFormat::Ntp),
        }
    }

    /// Answers the peers' probes waiting on the reflector's socket, each stamped with its
    /// arrival (the kernel's stamp) and its answer's departure; whether the last read was
    /// full (more may wait).
    fn answer_requests(&mut self) -> bool {
        let estimate = self.estimate();
        let fd = self.reflector_sock.as_raw_fd();
        let answer_base = match self.cfg.key {
            Some(_) => sonde_proto::stamp::AUTH_BASE_BYTES,
            None => sonde_proto::stamp::BASE_BYTES,
        };
        let mut full = false;
        // The last answers' stamps first: each session's next answer tells its own.
        let now = self.now_ns();
        let ups = &mut self.reflector.follow_ups;
        self.answers.read_stamps(fd, ups, now);
        for _ in 0..READ_BATCH / READ_SLOTS {
            // Empty (or failing): what was answered is published below.
            full = self.batch.read(fd).unwrap_or(0) == READ_SLOTS;
            // A datagram longer than the buffer (cut) is no probe of a mesh's.
            for (d, request) in self.batch.iter().filter(|(d, _)| d.len <= MAX_DATAGRAM) {
                let transmit = reflector::realtime_ns();
                let times = Times {
                    mono_ns: self.now_ns(),
                    receive: Timestamp::from_unix_ns(d.rx_ns.unwrap_or(transmit), TimeFormat::Ntp),
                    transmit: Timestamp::from_unix_ns(transmit, TimeFormat::Ntp),
                    estimate,
                    ttl: d.ttl.unwrap_or(255),
                    tos: d.tos,
                };
                let out = &mut self.out;
                if let Some((len, written)) = self.reflector.answer(d.from, request, times, out) {
                    // Marked as its CoS TLV says (only a marked probe carries one).
                    let tos = answer_tos(out.get(answer_base..len).unwrap_or(&[]));
                    let ups = &mut self.reflector.follow_ups;
                    let bytes = (&out[..len], d.from);
                    self.answers.send(fd, ups, bytes, tos, written);
                }
            }
            if !full {
                break;
            }
        }
        self.publish();
        full
    }

    /// The reflector's counters into the state, when they moved.
    fn publish(&mut self) {
        let now = (self.reflector.reflected, self.reflector.refused);
        if now != self.published {
            let mut s = lock(&self.state);
            (s.reflected, s.refused) = now;
            self.published = now;
        }
    }

    /// Hands the answers waiting on the prober's socket to the machine, and counts the
    /// ICMP errors queued; whether the last read was full (more may wait).
    fn read_answers(&mut self) -> bool {
        let fd = self.prober_sock.as_raw_fd();
        self.read_error_queue(fd);
        let mut full = false;
        for _ in 0..READ_BATCH / READ_SLOTS {
            // An ICMP error fails one read (it is in the error queue): read again.
            let got = match self.batch.read(fd) {
                Err(e) if icmp::reported(&e) => {
                    self.stamp_reader.reported();
                    self.batch.read(fd)
                }
                got => got,
            };
            let n = got.unwrap_or(0);
            full = n == READ_SLOTS;
            if n > 0 {
                self.match_answers();
            }
            if !full {
                break;
            }
        }
        full
    }

    /// The prober socket's stamps and errors: each transmit stamp moves its probe's departure
    /// (read before the answers: a stamp is queued as its probe leaves, before any answer
    /// to it can come), each ICMP error is counted on its peer.
    fn read_error_queue(&mut self, fd: RawFd) {
        let now = self.now_ns();
        let mut errors = std::mem::take(&mut self.unreachable);
        let mut departed = std::mem::take(&mut self.departed);
        let waiting = &mut self.tx_stamps;
        let stamp = |s: sonde_engine::kstamps::TxStamp| {
            if s.point == TxPoint::Driver {
                departed.extend(waiting.stamp(s.key, s.ns));
            }
        };
        self.stamp_reader
            .read(fd, now, stamp, |to, kind| errors.push((to, kind)));
        let missing = self.tx_stamps.counts.missing;
        self.tx_stamps.expire(self.now_ns());
        let c = self.tx_stamps.counts;
        if missing == 0 && c.missing > 0 {
            tracing::warn!(
                "mesh: a probe's transmit stamp did not come in time ({} matched, {} missing, \
                 {} stale, {} foreign); such probes are timed by the clock read before their \
                 send (sonde_mesh_answered_departures_total{{clock=\"process\"}})",
                c.matched,
                c.missing,
                c.stale,
                c.foreign
            );
        }
        if !errors.is_empty() || !departed.is_empty() {
            let mut s = self.lock();
            for d in departed.drain(..) {
                s.prober.departed(d.to, d.seq, d.late_ns);
            }
            for (to, kind) in errors.drain(..) {
                s.prober.unreachable(to, kind);
            }
        }
        (self.unreachable, self.departed) = (errors, departed);
    }

    /// The answers of the last read, each handed to the machine with its arrival.
    fn match_answers(&mut self) {
        // Now on both clocks: each answer's kernel stamp says how long ago it came.
        let now = self.clocks();
        let own = match self.clock_bound.load(Ordering::Relaxed) {
            u64::MAX => None,
            b => Some(b),
        };
        let mut s = lock(&self.state);
        for (d, bytes) in self.batch.iter().filter(|(d, _)| d.len <= MAX_DATAGRAM) {
            let back_ns = d.rx_ns.unwrap_or(now.real_ns);
            let age_ns = now.real_ns.saturating_sub(back_ns);
            let arrived = Clocks {
                mono_ns: now.mono_ns.saturating_sub(age_ns),
                real_ns: back_ns,
            };
            s.prober
                .handle_marked_answer(d.from, bytes, arrived, d.tos, own);
        }
    }
}

/// The peers of `list` the sockets reach (the family of `bind`, their address), each
/// with the address its probes leave from (with a key: `routes`' lookup).
pub(super) fn listed(bind: IpAddr, routes: &mut Option<Keys>, list: Vec<Peer>) -> Vec<Listed> {
    list.into_iter()
        .filter(|p| p.addr.is_ipv4() == bind.is_ipv4())
        .map(|peer| Listed {
            from: match routes {
                Some(k) => k.source_toward(peer.addr.ip()),
                None => bind,
            },
            peer,
        })
        .collect()
}

/// Logs a list's change: `peers` now, probed at `rate` a second each.
pub(super) fn say(change: ListChange, peers: usize, rate: f64) {
    if change.added > 0 || change.gone > 0 {
        tracing::info!(
            "mesh: {peers} peers ({} new, {} gone), {rate:.3} probes/s each",
            change.added,
            change.gone
        );
    }
}

/// The state, for one decision (a panic elsewhere left it as it was: keep going).
fn lock(state: &Mutex<MeshState>) -> MutexGuard<'_, MeshState> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How often the sockets are read with a probe timeout of `timeout_ns`: [`READ_EVERY`], or
/// that halved until it is at most an eighth of the timeout or under a millisecond. A probe waits
/// that long at most in its peer's socket and its answer as long in ours: an answer from
/// a peer with the same timeout is never late for having waited.
fn read_every(timeout_ns: u64) -> u64 {
    let mut every = READ_EVERY.as_nanos() as u64;
    while every > timeout_ns / 8 && every > 1_000_000 {
        every /= 2;
    }
    every
}

/// Sleeps `wait` or until a stop signal: the sockets are not watched (they are read on
/// the grid).
fn sleep(wait: Duration) {
    let mut pfd = libc::pollfd {
        fd: crate::signals::wake_fd().unwrap_or(-1),
        events: libc::POLLIN,
        revents: 0,
    };
    // Rounded up: a wait rounded down to 0 ms would spin until a probe is due (poll
    // counts whole milliseconds); a probe sent up to 1 ms late is no matter.
    let ms = wait.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as i32;
    // SAFETY: one live pollfd; a negative fd is ignored.
    unsafe { libc::poll(&mut pfd, 1, ms) };
}

/// Gives the CPU to a thread the sends woke, if one waits on it: with a veth's receive
/// path in NAPI threads, the datagrams just sent wait for this CPU, and a round trip
/// counts the wait (the stamps are taken before it). A system call when nothing waits.
fn let_the_stack_run() {
    // SAFETY: no arguments; it only asks the scheduler.
    unsafe { libc::sched_yield() };
}

/// Larger socket buffers (best effort: the kernel caps them at its rmem_max).
pub(super) fn grow_buffers(s: &UdpSocket) {
    for opt in [libc::SO_RCVBUF, libc::SO_SNDBUF] {
        // SAFETY: a live socket and an int option of the right size.
        unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&SOCKET_BUFFER as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
    }
}

/// Reads the clock's error bound now and every [`CLOCK_EVERY`] until `interrupt` (the
/// mesh's second thread).
pub(super) fn watch_clock(bound: &AtomicU64, interrupt: &Interrupt) {
    loop {
        let b = sonde_probe::clock::live().bound;
        let ns = match (b.synchronised, b.error_ns) {
            (true, Some(ns)) => ns,
            _ => u64::MAX,
        };
        bound.store(ns, Ordering::Relaxed);
        if !interrupt.sleep_until(Instant::now() + CLOCK_EVERY) {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_timeout_reads_the_sockets_often_enough_that_waiting_never_makes_an_answer_late() {
        let ms = 1_000_000;
        assert_eq!(read_every(2_000 * ms), 200 * ms, "the default timeout");
        assert_eq!(read_every(300 * ms), 25 * ms);
        assert_eq!(
            read_every(ms),
            781_250,
            "the grid's first step under a millisecond"
        );
        for timeout in [ms, 50 * ms, 300 * ms, 800 * ms, 2_000 * ms, 60_000 * ms] {
            let every = read_every(timeout);
            assert!(every <= (timeout / 8).max(ms), "{timeout}: {every}");
            assert_eq!(
                sonde_proto::mesh::prober::TICK_NS % every,
                0,
                "reads share the settling grid"
            );
        }
    }
}
