//! The mesh's one thread: its reflector's requests answered, answers matched to their
//! peers, probes due sent, peers settled, the list read again. Probes and settlings are
//! scheduled per peer on heaps of due times, so a wake-up costs the peers due, not the
//! peers listed. Everything happens on grids ([`send_slot`], [`TICK`], [`READ_EVERY`]) so
//! that one wake-up does many things: an arriving packet never wakes the thread. Each is
//! timed by the kernel's receive stamp instead, so a late read lengthens no round trip:
//! an answer's arrival is its stamp, and the reflector's hold (its receive stamp to its
//! send) is written into its answer and taken out by the prober.

use std::collections::BTreeMap;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sonde_engine::kstamps::batch::Batch;
use sonde_proto::stamp::{
    tlv, ErrorEstimate, Mode, ReflectorPacket, SenderPacket, TimeFormat, Timestamp,
};
use sonde_results::mesh::{per_peer_rate, Answer, PeerStats, Schedule, Stamps};

use super::config::MeshConfig;
use super::icmp;
use super::keys::Keys;
use super::peers::Peer;
use super::reflector::{self, Reflector, Times};
use super::state::{MeshState, PeerEntry};
use crate::signals::Interrupt;

/// Packets read per socket per wake-up at most, so that a flood on one socket cannot
/// starve the other or the schedule.
const READ_BATCH: usize = 256;
/// Packets read per system call (`recvmmsg`): a hundred waiting packets a second, read
/// ten times a second, are one call each time.
const READ_SLOTS: usize = 32;
/// The grid probes are settled and windows closed on: a peer is settled at the first
/// multiple of this at or after it has something to settle (as late as before, when every
/// peer was settled this often, but only the peers due).
const TICK: Duration = Duration::from_millis(200);
/// How long a packet may wait in a socket before it is read: both sockets are read on
/// every wake-up, and the thread wakes at least this often. Half a [`TICK`], so that reads
/// share the send grid's wake-ups (less with a short timeout: [`read_every`]). The stop
/// flag is read as often.
const READ_EVERY: Duration = Duration::from_millis(100);
/// How often the clock's error bound is read again (chronyc may take a moment).
const CLOCK_EVERY: Duration = Duration::from_secs(60);
/// Socket buffers asked for: a burst of answers from a thousand peers fits.
const SOCKET_BUFFER: libc::c_int = 4 << 20;
/// One probe in this many asks for the peer's labels once they are known (a probe with
/// the Labels and Boot ID TLVs is 412 bytes, without them 112).
const LABELS_EVERY: u32 = 64;
/// Largest datagram read; a STAMP probe with TLVs is far smaller.
const MAX_DATAGRAM: usize = 2048;

pub(super) struct Prober {
    cfg: MeshConfig,
    reflector_sock: UdpSocket,
    prober_sock: UdpSocket,
    state: Arc<Mutex<MeshState>>,
    /// Address keys: its own to sign probes, each peer's to check its answers.
    keys: Option<Keys>,
    reflector: Reflector,
    ssid: u16,
    /// This host's kernel boot id: a peer whose reflector tells the same reads one clock.
    boot_id: Option<[u8; tlv::BOOT_ID_BYTES]>,
    started: Instant,
    /// Each peer's next probe, by its slot.
    sends: Schedule,
    /// When each peer next has a probe to settle or its window to close, on [`TICK`]'s grid.
    ticks: Schedule,
    /// The reflector's counters as the state last had them.
    published: (u64, u64),
    /// The clock's error bound in ns (u64::MAX: not synchronised), read on its own thread.
    clock_bound: Arc<AtomicU64>,
    batch: Batch,
    out: Vec<u8>,
}

impl Prober {
    pub(super) fn new(
        cfg: MeshConfig,
        reflector_sock: UdpSocket,
        prober_sock: UdpSocket,
        state: Arc<Mutex<MeshState>>,
        clock_bound: Arc<AtomicU64>,
    ) -> Prober {
        let mesh_key = cfg.key.as_ref().map(sonde_proto::mesh::stamp_key);
        let keys = || mesh_key.clone().map(|k| Keys::new(k, cfg.bind));
        let reflector = Reflector::new(keys(), cfg.reflect(), cfg.labels.clone());
        // Best effort: without it a silent peer and a closed port look alike.
        let _ = icmp::enable(prober_sock.as_raw_fd(), cfg.bind.is_ipv4());
        Prober {
            reflector,
            keys: keys(),
            ssid: (crate::random::u64() as u16).max(1),
            boot_id: crate::stamp::clock::boot_id(),
            started: Instant::now(),
            sends: Schedule::default(),
            ticks: Schedule::default(),
            published: (0, 0),
            clock_bound,
            batch: Batch::new(READ_SLOTS, MAX_DATAGRAM),
            out: vec![0; MAX_DATAGRAM],
            cfg,
            reflector_sock,
            prober_sock,
            state,
        }
    }

    fn now_ns(&self) -> u64 {
        self.started.elapsed().as_nanos() as u64
    }

    pub(super) fn run(&mut self, first: Vec<Peer>, interrupt: &Interrupt) {
        self.take_list(first);
        let refresh = self.cfg.refresh_every().as_nanos() as u64;
        let mut next_refresh = self.now_ns() + refresh;
        let every = read_every(self.cfg.judging().timeout_ns);
        while !interrupt.is_set() {
            // Read first: an answer that came before its deadline counts when settled.
            let behind = self.answer_requests() | self.read_answers();
            let now = self.now_ns();
            if now >= next_refresh {
                self.refresh();
                next_refresh = now + refresh;
            }
            let next_probe = self.send_due(now);
            self.settle_due(self.now_ns());
            let next_tick = self.ticks.earliest().unwrap_or(u64::MAX);
            let next_read = (now / every + 1) * every;
            let until = next_probe.min(next_tick).min(next_refresh).min(next_read);
            if !behind {
                sleep(Duration::from_nanos(until.saturating_sub(self.now_ns())));
            }
        }
    }

    /// Reads the list again; on failure keeps the last one and says why once.
    fn refresh(&mut self) {
        if let Some(k) = &mut self.keys {
            k.forget_routes();
        }
        self.reflector.forget_routes();
        match self.cfg.source.read(self.cfg.port) {
            Ok(list) => {
                self.state.lock().unwrap().list_error = None;
                self.take_list(list);
            }
            Err(e) => {
                let mut s = self.state.lock().unwrap();
                if s.list_error.as_deref() != Some(&e) {
                    tracing::warn!("mesh: {e}; probing the last list");
                }
                s.list_error = Some(e);
            }
        }
    }

    /// The list becomes `list`: new peers start (their first probe at a random point of
    /// one period), gone peers and their figures leave, every peer's rate is the share.
    fn take_list(&mut self, list: Vec<Peer>) {
        let family = self.cfg.bind.is_ipv4();
        let list: Vec<Peer> = list
            .into_iter()
            .filter(|p| p.addr.is_ipv4() == family)
            .collect();
        let now = self.now_ns();
        let rate = per_peer_rate(self.cfg.rate, self.cfg.budget, list.len());
        let period = period_ns(rate);
        let mut state = self.state.lock().unwrap();
        let before = state.peers.len();
        let wanted: BTreeMap<SocketAddr, Peer> = list.into_iter().map(|p| (p.addr, p)).collect();
        self.reflector.listed(wanted.keys().map(|a| a.ip()));
        for gone in state.peers.addrs() {
            if !wanted.contains_key(&gone) {
                if let Some(slot) = state.peers.remove(&gone) {
                    self.sends.remove(slot);
                    self.ticks.remove(slot);
                }
            }
        }
        let (mut added, kept) = (0, state.peers.len());
        for (addr, peer) in wanted {
            if let Some(e) = state
                .peers
                .slot_of(&addr)
                .and_then(|s| state.peers.slot_mut(s))
            {
                e.peer = peer;
                continue;
            }
            let mut stats = PeerStats::new(now, &self.cfg.judging());
            if peer.open {
                stats = stats.without_directions();
            }
            let first = now + (crate::random::u64() % period.max(1));
            let tick = tick_at(&stats, now);
            let entry = PeerEntry {
                peer,
                learned: BTreeMap::new(),
                stats,
                next_seq: 0,
                one_clock: false,
            };
            let slot = state.peers.insert(addr, entry);
            self.sends.set(slot, first);
            self.ticks.set(slot, tick);
            added += 1;
        }
        state.rate_per_s = rate * state.peers.len() as f64;
        if added > 0 || kept != before {
            tracing::info!(
                "mesh: {} peers ({added} new, {} gone), {rate:.3} probes/s each",
                state.peers.len(),
                before - kept
            );
        }
    }

    /// Sends the probes due before the end of `now`'s slot; when the next slot with a
    /// probe due begins.
    fn send_due(&mut self, now: u64) -> u64 {
        let mut state = self.state.lock().unwrap();
        let rate = per_peer_rate(self.cfg.rate, self.cfg.budget, state.peers.len());
        let period = period_ns(rate);
        let slot = send_slot(period);
        let horizon = (now / slot + 1) * slot - 1;
        let estimate = self.estimate();
        while let Some((due, slot)) = self.sends.pop_due(horizon) {
            let Some(e) = state.peers.slot_mut(slot) else {
                continue;
            };
            let addr = e.peer.addr;
            let seq = e.next_seq;
            // Its departure, on both clocks: the ledger's, and the packet's T1.
            let (sent, real) = (self.now_ns(), reflector::realtime_ns());
            let probe = SenderPacket {
                seq,
                timestamp: Timestamp::from_unix_ns(real, TimeFormat::Ntp),
                estimate,
                ssid: self.ssid,
            };
            // Under the key of both ends: re-sent to another peer, it checks nowhere.
            let key = self.keys.as_mut().map(|k| k.probe_to(addr.ip()));
            let mode = mode_for(key, &e.peer);
            let mut len = mode.base_bytes();
            // Ask for the peer's labels until it answered them, then now and again.
            if !e.peer.open && (e.learned.is_empty() || seq.is_multiple_of(LABELS_EVERY)) {
                let area = &mut self.out[len..];
                if let Ok(n) = sonde_proto::mesh::put_labels_request(area, mode.key(), seq) {
                    len += n;
                }
            }
            // An ICMP error about an earlier probe (to any peer) fails the next send
            // once (`IP_RECVERR`): it is in the error queue, and this probe goes again.
            let send = |s: &UdpSocket, b: &[u8]| match s.send_to(b, addr) {
                Err(e) if icmp::reported(&e) => s.send_to(b, addr),
                r => r,
            };
            if probe.write(mode, &mut self.out[..len]).is_ok()
                && send(&self.prober_sock, &self.out[..len]).is_ok()
            {
                e.stats.on_sent(seq, sent);
                e.next_seq = seq.wrapping_add(1);
                self.ticks.set(slot, tick_at(&e.stats, sent));
            }
            // Late by more than a period (a stall): start again from now, no burst.
            let next = due + period;
            self.sends
                .set(slot, if next <= horizon { now + period } else { next });
        }
        self.sends.earliest().map_or(u64::MAX, |t| t / slot * slot)
    }

    /// Settles the peers due (each then due again when it next has something to settle).
    fn settle_due(&mut self, now: u64) {
        if self.ticks.earliest().is_none_or(|t| t > now) {
            return;
        }
        let mut state = self.state.lock().unwrap();
        while let Some((_, slot)) = self.ticks.pop_due(now) {
            if let Some(e) = state.peers.slot_mut(slot) {
                e.stats.tick(now);
                self.ticks.set(slot, tick_at(&e.stats, now + 1));
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
        let mut full = false;
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
                };
                if let Some(len) = self.reflector.answer(d.from, request, times, &mut self.out) {
                    let _ = self.reflector_sock.send_to(&self.out[..len], d.from);
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
            let mut state = self.state.lock().unwrap();
            (state.reflected, state.refused) = now;
            self.published = now;
        }
    }

    /// Matches the answers waiting on the prober's socket to their peers' probes; whether
    /// the last read was full (more may wait).
    fn read_answers(&mut self) -> bool {
        let fd = self.prober_sock.as_raw_fd();
        let mut full = false;
        for _ in 0..READ_BATCH / READ_SLOTS {
            // An ICMP error fails one read (it is in the error queue): read again.
            let got = match self.batch.read(fd) {
                Err(e) if icmp::reported(&e) => self.batch.read(fd),
                got => got,
            };
            full = got.unwrap_or(0) == READ_SLOTS;
            self.match_answers();
            if !full {
                break;
            }
        }
        icmp::count(fd, &self.state);
        full
    }

    /// The answers of the last read, each to its peer's probe.
    fn match_answers(&mut self) {
        let mut state = self.state.lock().unwrap();
        for (d, bytes) in self.batch.iter().filter(|(d, _)| d.len <= MAX_DATAGRAM) {
            let from = d.from;
            // When it arrived, on the ledger's clock: the kernel's stamp says how long ago.
            let (now, real) = (self.now_ns(), reflector::realtime_ns());
            let back_ns = d.rx_ns.unwrap_or(real);
            let arrived = now.saturating_sub(real.saturating_sub(back_ns));
            // Only a listed peer's answer, in its mode, for this agent's session.
            let Some(slot) = state.peers.slot_of(&from) else {
                continue;
            };
            let Some(e) = state.peers.slot_mut(slot) else {
                continue;
            };
            let key = self.keys.as_ref().map(|k| k.theirs(from.ip()));
            let mode = mode_for(key.as_deref(), &e.peer);
            let Ok(a) = ReflectorPacket::read(bytes, mode) else {
                continue;
            };
            if let (Some(keys), Some(k)) = (self.keys.as_mut(), &key) {
                keys.trust(from.ip(), k);
            }
            if a.ssid != self.ssid && !e.peer.open {
                continue;
            }
            // A probe's base carries the same key's HMAC as an answer's: one echoed back
            // by a keyless rogue reads as an answer, but with zeros where a reflector
            // writes its receive time.
            if a.receive.0 == 0 {
                continue;
            }
            // Labels only under a verified HMAC TLV: an `open` peer's answers carry none, and
            // whoever holds its address could write any.
            let area = &bytes[mode.base_bytes()..];
            if let Some(k) = mode.key() {
                if let Some(l) = sonde_proto::mesh::read_labels(area, Some(k), a.seq) {
                    e.learned = l;
                }
                // Its boot id, under the same verified HMAC TLV.
                if tlv::check_hmac(area, k, a.seq) == Some(true) {
                    if let Some(id) = tlv::find_boot_id(area) {
                        e.one_clock = Some(id) == self.boot_id;
                    }
                }
            }
            let unix = |t: Timestamp| t.to_unix_ns(TimeFormat::Ntp);
            let held_ns = unix(a.timestamp).saturating_sub(unix(a.receive));
            let answer = e.stats.on_answer(a.sender_seq, a.seq, arrived, held_ns);
            self.ticks.set(slot, tick_at(&e.stats, now));
            if matches!(answer, Answer::First { .. }) {
                let unix = |t| unix(t) as i64;
                let own = self.clock_bound.load(Ordering::Relaxed);
                // One host's two ends read one clock: no offset at all (as ping's "one
                // clock"), whatever either claims.
                let one = e.one_clock.then_some(0);
                e.stats.on_stamps(Stamps {
                    sent_ns: unix(a.sender_timestamp),
                    reflected_in_ns: unix(a.receive),
                    reflected_out_ns: unix(a.timestamp),
                    back_ns: back_ns as i64,
                    own_bound_ns: one.or((own != u64::MAX).then_some(own)),
                    peer_bound_ns: one.or(a
                        .estimate
                        .synchronized
                        .then(|| a.estimate.bound_ns())
                        .flatten()),
                });
            }
        }
    }
}

/// A peer's mode: under `key` (the sender's address key), or unauthenticated for `open`.
fn mode_for<'k>(key: Option<&'k sonde_proto::stamp::StampKey>, peer: &Peer) -> Mode<'k> {
    match key {
        Some(k) if !peer.open => Mode::Authenticated(k),
        _ => Mode::Unauthenticated,
    }
}

/// The send grid's slot for peers probed every `period_ns`: a wake-up sends the probes
/// due before its slot ends, each at most a slot early (timed when it leaves; its peer's
/// rate unchanged). Half a [`TICK`] (or that halved, down to a quarter of the period), so
/// that slots, reads and settling share wake-ups: at a probe per peer every second or
/// slower, 100 ms and ten wake-ups a second for any number of peers.
fn send_slot(period_ns: u64) -> u64 {
    let mut slot = TICK.as_nanos() as u64 / 2;
    while slot > (period_ns / 4).max(1) {
        slot /= 2;
    }
    slot
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

/// When a peer next needs settling, as seen at `now_ns`: now when it already has
/// something to settle (this wake-up settles it), else the first point of [`TICK`]'s grid
/// after that time. Rounding a due time up from `now_ns` instead would let a probe sent
/// just after each grid point move its peer's settling to the next one, again and again:
/// at 20 probes a second, a peer whose probes left just after the grid was never settled.
fn tick_at(stats: &PeerStats, now_ns: u64) -> u64 {
    let next = stats.next_tick_ns();
    if next <= now_ns {
        return now_ns;
    }
    let grid = TICK.as_nanos() as u64;
    next.div_ceil(grid).saturating_mul(grid)
}

fn period_ns(rate: f64) -> u64 {
    if rate <= 0.0 {
        return u64::MAX / 4;
    }
    (1e9 / rate) as u64
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

    /// A peer with something to settle is settled in the wake-up that sees it, whenever
    /// that is; one with nothing due yet on the first grid point after its due time.
    #[test]
    fn a_peer_due_is_settled_now_not_moved_to_the_next_grid_point() {
        let judging = sonde_results::mesh::Judging::default();
        let mut stats = PeerStats::new(0, &judging);
        let ms = 1_000_000;
        stats.on_sent(0, 0);
        let waiting = stats.next_tick_ns();
        assert_eq!(tick_at(&stats, ms), waiting.div_ceil(200 * ms) * 200 * ms);
        stats.on_answer(0, 0, ms, 0);
        // Answered: due now. A probe sent 4 ms after a grid point does not move it on.
        assert_eq!(tick_at(&stats, 404 * ms), 404 * ms);
        stats.on_sent(1, 404 * ms);
        assert_eq!(tick_at(&stats, 404 * ms), 404 * ms);
        stats.tick(404 * ms);
        assert!(tick_at(&stats, 404 * ms + 1) > 404 * ms + 1);
    }

    #[test]
    fn a_short_timeout_reads_the_sockets_often_enough_that_waiting_never_makes_an_answer_late() {
        let ms = 1_000_000;
        assert_eq!(read_every(2_000 * ms), 100 * ms, "the default timeout");
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
                TICK.as_nanos() as u64 % every,
                0,
                "reads share the settling grid"
            );
        }
    }

    #[test]
    fn a_send_slot_divides_the_settling_grid_and_stays_under_a_quarter_of_the_period() {
        let tick = TICK.as_nanos() as u64;
        for (rate, slot_ms) in [
            (0.1, 100.0),
            (1.0, 100.0),
            (2.0, 100.0),
            (10.0, 25.0),
            (100.0, 1.5625),
        ] {
            let period = period_ns(rate);
            let slot = send_slot(period);
            assert_eq!(slot as f64 / 1e6, slot_ms, "at {rate}/s");
            assert_eq!(tick % slot, 0);
            assert!(slot <= period / 4);
        }
        assert_eq!(send_slot(3), 1, "at least a nanosecond");
    }
}
