//! The mesh's one thread: probes due are sent, answers matched to their peers, its
//! reflector's requests answered, peers settled, the list read again; all under one
//! `poll`. Probes and settlings are scheduled per peer on heaps of due times, so a wake-up
//! costs the peers due, not the peers listed. Probes are sent, and peers settled, on grids
//! ([`send_slot`], [`TICK`]) so that one wake-up does several.

use std::collections::BTreeMap;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sonde_proto::stamp::{ErrorEstimate, Mode, ReflectorPacket, SenderPacket, TimeFormat};
use sonde_results::mesh::{per_peer_rate, Answer, PeerStats, Schedule, Stamps};

use super::keys::Keys;
use super::peers::Peer;
use super::reflector::{self, Reflector, Times};
use super::state::{MeshConfig, MeshState, PeerEntry};
use crate::signals::Interrupt;

/// Packets read per socket per wake-up at most, so that a flood on one socket cannot
/// starve the other or the schedule.
const READ_BATCH: usize = 256;
/// The grid probes are settled and windows closed on: a peer is settled at the first
/// multiple of this at or after it has something to settle (as late as before, when every
/// peer was settled this often, but only the peers due).
const TICK: Duration = Duration::from_millis(200);
/// The longest sleep: the stop flag is read at least this often.
const MAX_WAIT: Duration = Duration::from_millis(500);
/// How often the clock's error bound is read again (chronyc may take a moment).
const CLOCK_EVERY: Duration = Duration::from_secs(60);
/// Socket buffers asked for: a burst of answers from a thousand peers fits.
const SOCKET_BUFFER: libc::c_int = 4 << 20;
/// One probe in this many asks for the peer's labels once they are known (a probe with
/// the Labels TLV is 280 bytes, without it 112).
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
    started: Instant,
    /// Each peer's next probe, by its slot.
    sends: Schedule,
    /// When each peer next has a probe to settle or its window to close, on [`TICK`]'s grid.
    ticks: Schedule,
    /// The reflector's counters as the state last had them.
    published: (u64, u64),
    /// The clock's error bound in ns (u64::MAX: not synchronised), read on its own thread.
    clock_bound: Arc<AtomicU64>,
    buf: Vec<u8>,
    out: Vec<u8>,
}

impl Prober {
    pub(super) fn new(
        cfg: MeshConfig,
        reflector_sock: UdpSocket,
        prober_sock: UdpSocket,
        state: Arc<Mutex<MeshState>>,
    ) -> Prober {
        let mesh_key = cfg.key.as_ref().map(sonde_proto::mesh::stamp_key);
        let keys = || mesh_key.clone().map(|k| Keys::new(k, cfg.bind));
        let reflector = Reflector::new(keys(), cfg.reflect, cfg.labels.clone());
        Prober {
            reflector,
            keys: keys(),
            ssid: (crate::random::u64() as u16).max(1),
            started: Instant::now(),
            sends: Schedule::default(),
            ticks: Schedule::default(),
            published: (0, 0),
            clock_bound: Arc::new(AtomicU64::new(u64::MAX)),
            buf: vec![0; MAX_DATAGRAM],
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
        watch_clock(Arc::clone(&self.clock_bound), interrupt.clone());
        self.take_list(first);
        let refresh = self.cfg.refresh.as_nanos() as u64;
        let mut next_refresh = self.now_ns() + refresh;
        while !interrupt.is_set() {
            let now = self.now_ns();
            if now >= next_refresh {
                self.refresh();
                next_refresh = now + refresh;
            }
            let next_probe = self.send_due(now);
            self.settle_due(self.now_ns());
            let next_tick = self.ticks.earliest().unwrap_or(u64::MAX);
            let until = next_probe.min(next_tick).min(next_refresh);
            let wait = Duration::from_nanos(until.saturating_sub(self.now_ns())).min(MAX_WAIT);
            let (requests, answers) = self.wait(wait);
            if requests {
                self.answer_requests();
            }
            if answers {
                self.read_answers();
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
            let mut stats = PeerStats::new(now, &self.cfg.judging);
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
            let probe = SenderPacket {
                seq,
                timestamp: reflector::now_timestamp(),
                estimate,
                ssid: self.ssid,
            };
            let key = self.keys.as_mut().map(|k| k.mine(addr.ip()));
            let mode = mode_for(key, &e.peer);
            let mut len = mode.base_bytes();
            // Ask for the peer's labels until it answered them, then now and again.
            if !e.peer.open && (e.learned.is_empty() || seq.is_multiple_of(LABELS_EVERY)) {
                let area = &mut self.out[len..];
                if let Ok(n) = sonde_proto::mesh::put_labels_request(area, mode.key(), seq) {
                    len += n;
                }
            }
            if probe.write(mode, &mut self.out[..len]).is_ok()
                && self.prober_sock.send_to(&self.out[..len], addr).is_ok()
            {
                let sent = self.started.elapsed().as_nanos() as u64;
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

    /// Sleeps until a socket is readable or `wait` passed: whether each (the reflector's,
    /// the prober's) is.
    fn wait(&self, wait: Duration) -> (bool, bool) {
        let mut pfds = [
            pollfd(self.reflector_sock.as_raw_fd()),
            pollfd(self.prober_sock.as_raw_fd()),
            pollfd(crate::signals::wake_fd().unwrap_or(-1)),
        ];
        // Rounded up: a wait rounded down to 0 ms would spin until a probe is due (poll
        // counts whole milliseconds); a probe sent up to 1 ms late is no matter.
        let ms = wait.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as i32;
        // SAFETY: three live pollfds; a negative fd is ignored.
        let n = unsafe { libc::poll(pfds.as_mut_ptr(), 3, ms) };
        if n < 0 {
            // EINTR: read both, as before every wake-up did.
            return (true, true);
        }
        let ready = |p: &libc::pollfd| p.revents != 0;
        (ready(&pfds[0]), ready(&pfds[1]))
    }

    /// Answers the peers' probes waiting on the reflector's socket.
    fn answer_requests(&mut self) {
        let estimate = self.estimate();
        for _ in 0..READ_BATCH {
            // Empty (or failing): what was answered is published below.
            let Ok((n, from)) = self.reflector_sock.recv_from(&mut self.buf) else {
                break;
            };
            let receive = reflector::now_timestamp();
            let times = Times {
                mono_ns: self.now_ns(),
                receive,
                transmit: reflector::now_timestamp(),
                estimate,
            };
            if let Some(len) = self
                .reflector
                .answer(from, &self.buf[..n], times, &mut self.out)
            {
                let _ = self.reflector_sock.send_to(&self.out[..len], from);
            }
        }
        self.publish();
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

    /// Matches the answers waiting on the prober's socket to their peers' probes.
    fn read_answers(&mut self) {
        let mut state = self.state.lock().unwrap();
        for _ in 0..READ_BATCH {
            let (n, from) = match self.prober_sock.recv_from(&mut self.buf) {
                Ok(r) => r,
                Err(_) => return,
            };
            let now = self.started.elapsed().as_nanos() as u64;
            // Only a listed peer's answer, in its mode, for this agent's session.
            let Some(slot) = state.peers.slot_of(&from) else {
                continue;
            };
            let Some(e) = state.peers.slot_mut(slot) else {
                continue;
            };
            let key = self.keys.as_ref().map(|k| k.theirs(from.ip()));
            let mode = mode_for(key.as_ref(), &e.peer);
            let Ok(a) = ReflectorPacket::read(&self.buf[..n], mode) else {
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
            let back_ns = reflector::realtime_ns() as i64;
            let answer = e.stats.on_answer(a.sender_seq, a.seq, now);
            self.ticks.set(slot, tick_at(&e.stats, now));
            if matches!(answer, Answer::First { .. }) {
                let unix = |t: sonde_proto::stamp::Timestamp| t.to_unix_ns(TimeFormat::Ntp) as i64;
                let own = self.clock_bound.load(Ordering::Relaxed);
                e.stats.on_stamps(Stamps {
                    sent_ns: unix(a.sender_timestamp),
                    reflected_in_ns: unix(a.receive),
                    reflected_out_ns: unix(a.timestamp),
                    back_ns,
                    own_bound_ns: (own != u64::MAX).then_some(own),
                    peer_bound_ns: a
                        .estimate
                        .synchronized
                        .then(|| a.estimate.bound_ns())
                        .flatten(),
                });
            }
            let area = &self.buf[mode.base_bytes()..n];
            if let Some(l) = sonde_proto::mesh::read_labels(area, mode.key(), a.seq) {
                e.learned = l;
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
/// rate unchanged). Half a [`TICK`] (or that halved, down to a 64th of the period), so
/// that slots and settling share wake-ups: at 0.1 probes/s per peer, 100 ms (1 % of the
/// period) and ten wake-ups a second for any number of peers.
fn send_slot(period_ns: u64) -> u64 {
    let mut slot = TICK.as_nanos() as u64 / 2;
    while slot > (period_ns / 64).max(1) {
        slot /= 2;
    }
    slot
}

/// When a peer next needs settling: the first point of [`TICK`]'s grid at or after both
/// `now_ns` and the time it has something to settle.
fn tick_at(stats: &PeerStats, now_ns: u64) -> u64 {
    let grid = TICK.as_nanos() as u64;
    stats
        .next_tick_ns()
        .max(now_ns)
        .div_ceil(grid)
        .saturating_mul(grid)
}

fn period_ns(rate: f64) -> u64 {
    if rate <= 0.0 {
        return u64::MAX / 4;
    }
    (1e9 / rate) as u64
}

fn pollfd(fd: i32) -> libc::pollfd {
    libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }
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

/// Reads the clock's error bound now and every [`CLOCK_EVERY`] on its own thread.
fn watch_clock(bound: Arc<AtomicU64>, interrupt: Interrupt) {
    let _ = std::thread::Builder::new()
        .name("sonde-mesh-clock".into())
        .spawn(move || loop {
            let b = sonde_probe::clock::live().bound;
            let ns = match (b.synchronised, b.error_ns) {
                (true, Some(ns)) => ns,
                _ => u64::MAX,
            };
            bound.store(ns, Ordering::Relaxed);
            if !interrupt.sleep_until(Instant::now() + CLOCK_EVERY) {
                return;
            }
        });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_send_slot_divides_the_settling_grid_and_stays_under_a_64th_of_the_period() {
        let tick = TICK.as_nanos() as u64;
        for (rate, slot_ms) in [(0.1, 100.0), (1.0, 12.5), (10.0, 1.5625)] {
            let period = period_ns(rate);
            let slot = send_slot(period);
            assert_eq!(slot as f64 / 1e6, slot_ms, "at {rate}/s");
            assert_eq!(tick % slot, 0);
            assert!(slot <= period / 64);
        }
        assert_eq!(send_slot(10), 1, "at least a nanosecond");
    }
}
