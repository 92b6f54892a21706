//! The mesh's prober as a machine without I/O, the shape the control protocol has: the
//! caller owns the sockets and the clocks. In: the peer list ([`Prober::set_list`]), each
//! datagram read from the prober's socket with its arrival ([`Prober::handle_answer`]),
//! each probe's departure ([`Prober::sent`]), each ICMP error ([`Prober::unreachable`]),
//! the time ([`Prober::handle_timeout`]). Out: the probes due, written into the caller's
//! buffer ([`Prober::poll_probe`]), and when to call again ([`Prober::poll_timeout`]).
//!
//! Probes and settlings are scheduled per peer on heaps of due times, so that a wake-up
//! costs the peers due, not the peers listed, and both fall on grids (a send slot, [`TICK_NS`])
//! so that one wake-up does many things.
//!
//! A probe's departure is an event of its own, given after the send: a probe polled is
//! not in its peer's ledger until [`Prober::sent`] says when it left, and one never sent
//! (the send failed) is simply never `sent` (its number is used again). So a caller may
//! poll a batch, send it in one call and give each probe the time the kernel stamped on
//! it (a TX timestamp read from the socket's error queue) instead of the time before the
//! send; an answer handled before its probe's `sent` counts for nothing, so such a caller
//! reads the error queue before the answers (the stamp is queued when the driver takes
//! the probe, before any answer can arrive).

use std::net::{IpAddr, SocketAddr};

use sonde_results::mesh::{per_peer_rate, Answer, Judging, PeerStats, Schedule, Stamps};

use super::held::{Held, Reflections};
use super::peers::{Peer, PeerEntry, PeerKeys, Peers};
use super::{address_key, marks, probe_key, read_labels};
use crate::stamp::{
    follow_up, tlv, ErrorEstimate, Mode, ReflectorPacket, SenderPacket, StampKey, TimeFormat,
    Timestamp,
};

/// The grid probes are settled and windows closed on: a peer is settled at the first
/// multiple of this at or after it has something to settle.
pub const TICK_NS: u64 = 200_000_000;
/// One probe in this many asks for the peer's labels once they are known (a probe with
/// the Labels and Boot ID TLVs is 412 bytes, without them 112; with follow-ups each also
/// carries the zeroed Follow-Up Telemetry TLV, and a bare one the HMAC TLV: 432 and 152).
pub const LABELS_EVERY: u32 = 64;

/// What the machine is told once.
#[derive(Debug, Clone)]
pub struct ProberConfig {
    /// Probes per second per peer.
    pub rate_per_s: f64,
    /// Probes per second at most, all peers together.
    pub budget_per_s: f64,
    pub judging: Judging,
    /// The mesh's STAMP key ([`super::stamp_key`]); none: unauthenticated probes.
    pub key: Option<StampKey>,
    /// This prober's session (SSID): answers for another are not its.
    pub ssid: u16,
    /// This host's kernel boot id: a peer whose reflector tells the same reads one clock.
    pub boot_id: Option<[u8; tlv::BOOT_ID_BYTES]>,
    /// Seeds where in its first period each new peer's first probe falls.
    pub seed: u64,
    /// The TOS byte the probes leave with (`--mesh-dscp`/`--mesh-ecn`): each then carries a
    /// Class of Service TLV and its answer tells each direction's fate. None: unmarked.
    pub tos: Option<u8>,
    /// Each probe carries the zeroed Follow-Up Telemetry TLV, its peer's reflector tells
    /// in it its last answer's real departure, and each first answer is booked with the
    /// next, T3 corrected (`held`). Off: booked at once, T3 the reflector's clock read.
    pub follow_up: bool,
}

/// A listed peer and the address this agent's probes to it leave from (the probe key
/// names it: the bound address, or the routing table's source towards the peer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub peer: Peer,
    pub from: IpAddr,
}

/// One moment on both clocks: the ledger's (monotonic) and the wire's (Unix time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Clocks {
    pub mono_ns: u64,
    pub real_ns: u64,
}

/// A probe written into the caller's buffer: its first `len` bytes go to `to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe {
    pub to: SocketAddr,
    pub seq: u32,
    pub len: usize,
}

/// What one datagram on the prober's socket was, in the order the guards look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Matched {
    /// From an address the list does not name.
    NotListed,
    /// Not an answer in its peer's mode: too short, or not signed under the peer's
    /// address key (a forgery, or an answer of another peer's re-sent from this one).
    Unchecked,
    /// Another prober's session (SSID), from a keyed peer; or an answer echoing another
    /// sender timestamp than its probe carried (another prober's, of the same SSID).
    OtherSession,
    /// No receive time: a probe echoed back by a keyless rogue reads as an answer, but
    /// with zeros where a reflector writes when it received the probe.
    NoReceiveTime,
    /// An answer of the peer's, and what its ledger made of it: the first for its probe,
    /// a duplicate, or nothing (a probe settled, late, never sent, or a copy again).
    Answer(Answer),
}

/// What an ICMP error said of a probe's destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unreachable {
    /// Its host said nothing listens on the port.
    Port,
    /// A router or its host's neighbours said the host cannot be reached.
    Host,
}

/// The first answers counted by where their probe's departure (T1) came from: the
/// kernel's transmit stamp ([`Prober::departed`]), or the clock read the probe was written
/// with, before its send (no stamp came before its answer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Departures {
    pub kernel: u64,
    pub process: u64,
}

/// How a new list changed the peers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ListChange {
    pub added: usize,
    pub gone: usize,
}

pub struct Prober {
    cfg: ProberConfig,
    peers: Peers,
    /// Each peer's next probe, by its slot.
    sends: Schedule,
    /// When each peer next has a probe to settle or its window to close, on [`TICK_NS`]'s grid.
    ticks: Schedule,
    /// The generator of first probes' offsets (xorshift64).
    random: u64,
    departures: Departures,
    reflections: Reflections,
}

impl Prober {
    pub fn new(cfg: ProberConfig) -> Prober {
        Prober {
            random: cfg.seed.max(1),
            cfg,
            peers: Peers::default(),
            sends: Schedule::default(),
            ticks: Schedule::default(),
            departures: Departures::default(),
            reflections: Reflections::default(),
        }
    }

    /// The first answers so far, by where their probes' departures came from.
    pub fn departures(&self) -> Departures {
        self.departures
    }

    /// The first answers booked so far, by where their reflector's departure (T3) came
    /// from (see `held`).
    pub fn reflections(&self) -> Reflections {
        self.reflections
    }

    /// The listed peers and their figures.
    pub fn peers(&self) -> &Peers {
        &self.peers
    }

    /// Probes per second scheduled now, all peers together.
    pub fn rate_per_s(&self) -> f64 {
        self.per_peer_rate() * self.peers.len() as f64
    }

    fn per_peer_rate(&self) -> f64 {
        per_peer_rate(self.cfg.rate_per_s, self.cfg.budget_per_s, self.peers.len())
    }

    /// The list becomes `list` at `now_ns`: new peers start (their first probe at a
    /// random point of one period), gone peers and their figures leave, every peer's rate
    /// is the share.
    pub fn set_list(&mut self, now_ns: u64, list: Vec<Listed>) -> ListChange {
        let wanted: std::collections::BTreeMap<SocketAddr, Listed> =
            list.into_iter().map(|l| (l.peer.addr, l)).collect();
        let period = period_ns(per_peer_rate(
            self.cfg.rate_per_s,
            self.cfg.budget_per_s,
            wanted.len(),
        ));
        let mut change = ListChange::default();
        for gone in self.peers.addrs() {
            if !wanted.contains_key(&gone) {
                if let Some(slot) = self.peers.remove(&gone) {
                    self.sends.remove(slot);
                    self.ticks.remove(slot);
                    change.gone += 1;
                }
            }
        }
        for (addr, l) in wanted {
            if let Some((_, e)) = self.peers.find_mut(&addr) {
                // Its probes leave from another address now (a route changed): new keys.
                if e.keys.as_ref().is_some_and(|k| k.from != l.from) {
                    e.keys = keys_of(self.cfg.key.as_ref(), &l);
                }
                e.peer = l.peer;
                continue;
            }
            let mut stats = PeerStats::new(now_ns, &self.cfg.judging);
            if l.peer.open {
                stats = stats.without_directions();
            }
            let first = now_ns + self.next_random() % period.max(1);
            let tick = tick_at(&stats, now_ns);
            let entry = PeerEntry {
                keys: keys_of(self.cfg.key.as_ref(), &l),
                peer: l.peer,
                learned: Default::default(),
                stats,
                next_seq: 0,
                one_clock: false,
                held: None,
                polled: None,
            };
            let slot = self.peers.insert(addr, entry);
            self.sends.set(slot, first);
            self.ticks.set(slot, tick);
            change.added += 1;
        }
        change
    }

    /// The next probe due before the end of `now`'s send slot, written into `out` (its
    /// T1 is `now.real_ns`, its error `estimate`); none when no more are due. Its peer's
    /// next probe is scheduled a period on (from now, after a stall: no burst).
    pub fn poll_probe(
        &mut self,
        now: Clocks,
        estimate: ErrorEstimate,
        out: &mut [u8],
    ) -> Option<Probe> {
        let period = period_ns(self.per_peer_rate());
        let slot = send_slot(period);
        let horizon = (now.mono_ns / slot + 1) * slot - 1;
        while let Some((due, at)) = self.sends.pop_due(horizon) {
            let Some(e) = self.peers.slot_mut(at) else {
                continue;
            };
            let next = due + period;
            let next = if next <= horizon {
                now.mono_ns + period
            } else {
                next
            };
            self.sends.set(at, next);
            let seq = e.next_seq;
            let mode = match &e.keys {
                Some(k) => Mode::Authenticated(&k.probe),
                None => Mode::Unauthenticated,
            };
            let mut len = mode.base_bytes();
            // Ask for the peer's labels until it answered them, then now and again.
            let labels = !e.peer.open && (e.learned.is_empty() || seq.is_multiple_of(LABELS_EVERY));
            let tlvs = &mut out[len..];
            if let Ok(n) = marks::put_request(
                tlvs,
                mode.key(),
                seq,
                self.cfg.tos,
                labels,
                self.cfg.follow_up,
            ) {
                len += n;
            }
            let probe = SenderPacket {
                seq,
                timestamp: Timestamp::from_unix_ns(now.real_ns, TimeFormat::Ntp),
                estimate,
                ssid: self.cfg.ssid,
            };
            if probe.write(mode, &mut out[..len]).is_ok() {
                e.polled = Some((seq, probe.timestamp.0));
                return Some(Probe {
                    to: e.peer.addr,
                    seq,
                    len,
                });
            }
        }
        None
    }

    /// Probe `seq` to `to` left at `at_ns` (the ledger's clock): from now its answer
    /// counts. A number the machine did not poll last for that peer changes nothing.
    pub fn sent(&mut self, to: SocketAddr, seq: u32, at_ns: u64) {
        let Some((slot, e)) = self.peers.find_mut(&to) else {
            return;
        };
        if seq != e.next_seq {
            return;
        }
        e.stats.on_sent(seq, at_ns);
        if let Some((_, t1)) = e.polled.take().filter(|p| p.0 == seq) {
            e.stats.carried(seq, t1);
        }
        e.next_seq = seq.wrapping_add(1);
        self.ticks.set(slot, next_tick(e, at_ns));
    }

    /// Probe `seq` to `to` left `late_ns` after the clock read it was written with (T1) and
    /// [`Prober::sent`] was given: the kernel's transmit stamp, read from the error queue.
    /// Its round trip, its deadline and its T1 in the one-way figures count from the
    /// stamp. Taken while the probe is in flight and unanswered, once; whether it was.
    pub fn departed(&mut self, to: SocketAddr, seq: u32, late_ns: u64) -> bool {
        // Its settling moves later, never earlier: the tick set at `sent` finds nothing
        // yet and sets the next.
        self.peers
            .find_mut(&to)
            .is_some_and(|(_, e)| e.stats.on_departed(seq, late_ns))
    }

    /// A datagram `bytes` from `from` on the prober's socket, arrived at `arrived` (on
    /// the ledger's clock, and on the real-time clock: the kernel's receive stamp);
    /// `own_bound_ns` is this host's clock error bound (`None`: not synchronised).
    pub fn handle_answer(
        &mut self,
        from: SocketAddr,
        bytes: &[u8],
        arrived: Clocks,
        own_bound_ns: Option<u64>,
    ) -> Matched {
        self.handle_marked_answer(from, bytes, arrived, None, own_bound_ns)
    }

    /// [`Prober::handle_answer`] with the TOS byte the answer arrived with (`tos`, from
    /// the kernel): with marked probes, each first answer's directions are counted. A
    /// first answer's round trip returned is what the answer itself says; its figures
    /// are booked with the peer's next answer, T3 corrected by its follow-up (`held`).
    pub fn handle_marked_answer(
        &mut self,
        from: SocketAddr,
        bytes: &[u8],
        arrived: Clocks,
        tos: Option<u8>,
        own_bound_ns: Option<u64>,
    ) -> Matched {
        let marked = self.cfg.tos;
        let period = period_ns(self.per_peer_rate());
        let ssid = self.cfg.ssid;
        let (boot_id, mesh) = (self.cfg.boot_id, self.cfg.key.as_ref());
        // Only a listed peer's answer, in its mode, for this agent's session.
        let Some((slot, e)) = self.peers.find_mut(&from) else {
            return Matched::NotListed;
        };
        // A keyed peer's answers are signed under its address key: derived until one
        // checks under it, kept from then (a spoofed source costs a derivation, no room).
        let derived = match (&e.keys, mesh) {
            (Some(k), Some(mesh)) if k.answer.is_none() => {
                Some(Box::new(address_key(mesh, from.ip())))
            }
            _ => None,
        };
        let key = match (&e.keys, &derived) {
            (_, Some(d)) => Some(&**d),
            (Some(k), None) => k.answer.as_deref(),
            (None, None) => None,
        };
        let mode = key.map_or(Mode::Unauthenticated, Mode::Authenticated);
        let Ok(a) = ReflectorPacket::read(bytes, mode) else {
            return Matched::Unchecked;
        };
        if let (Some(k), Some(d)) = (&mut e.keys, derived) {
            k.answer = Some(d);
        }
        let key = e.keys.as_ref().and_then(|k| k.answer.as_deref());
        let mode = key.map_or(Mode::Unauthenticated, Mode::Authenticated);
        if a.ssid != ssid && !e.peer.open {
            return Matched::OtherSession;
        }
        // A keyed answer echoes the timestamp its probe carried: one echoing another's is
        // another prober's of the same SSID (16 random bits), re-sent from the peer's
        // address (its answers are signed under that address's key alone).
        if e.keys.is_some()
            && e.stats
                .t1(a.sender_seq)
                .is_some_and(|t| t != a.sender_timestamp.0)
        {
            return Matched::OtherSession;
        }
        if a.receive.0 == 0 {
            return Matched::NoReceiveTime;
        }
        // The TLVs' HMAC checked once, for all that is read from them.
        let tlvs = tlv::Checked::new(&bytes[mode.base_bytes()..], mode.key(), a.seq);
        // Labels and boot id only under a verified HMAC TLV: an `open` peer's answers
        // carry none, and whoever holds its address could write any.
        if let Some(t) = tlvs.filter(|_| mode.key().is_some()) {
            if let Some(l) = read_labels(t) {
                e.learned = l;
            }
            if let Some(id) = tlv::find_boot_id(t.area()) {
                e.one_clock = Some(id) == boot_id;
            }
        }
        let unix = |t: Timestamp| t.to_unix_ns(TimeFormat::Ntp);
        let held_ns = unix(a.timestamp).saturating_sub(unix(a.receive));
        let late_ns = e.stats.late_ns(a.sender_seq);
        let mut answer = e.stats.on_answer_held(a.sender_seq, a.seq, arrived.mono_ns);
        if let Answer::First { rtt_ns: gross, .. } = &mut answer {
            match late_ns {
                Some(_) => self.departures.kernel += 1,
                None => self.departures.process += 1,
            }
            if let Some(sent) = marked {
                let (forward, reverse) = marks::directions(tlvs, sent, tos);
                e.stats.on_marks(forward, reverse);
            }
            // The answer before it, booked now: by this one's follow-up (keyed, under its
            // verified HMAC TLV) when it names that answer.
            let told = match self.cfg.follow_up {
                true => tlvs.and_then(follow_up::find),
                false => None,
            };
            if let Some(h) = e.held.take() {
                h.book(&mut e.stats, told, &mut self.reflections);
            }
            let unix = |t| unix(t) as i64;
            // One host's two ends read one clock: no offset at all (as ping's "one
            // clock"), whatever either claims.
            let one = e.one_clock.then_some(0);
            let stamps = Stamps {
                // T1 as the kernel stamped it, when it did.
                sent_ns: unix(a.sender_timestamp) + late_ns.unwrap_or(0) as i64,
                reflected_in_ns: unix(a.receive),
                reflected_out_ns: unix(a.timestamp),
                back_ns: arrived.real_ns as i64,
                own_bound_ns: one.or(own_bound_ns),
                peer_bound_ns: one.or(a
                    .estimate
                    .synchronized
                    .then(|| a.estimate.bound_ns())
                    .flatten()),
            };
            let held = Held {
                refl_seq: a.seq,
                gross_ns: *gross,
                stamps,
                due_ns: arrived.mono_ns.saturating_add(2 * period),
            };
            // Without follow-ups nothing will correct it: booked at once, T3 the clock read.
            match self.cfg.follow_up {
                true => e.held = Some(held),
                false => held.book(&mut e.stats, None, &mut self.reflections),
            }
            // What the answer itself says (the caller's figure; the one booked may be
            // corrected by the next answer's follow-up).
            if held_ns < *gross {
                *gross -= held_ns;
            }
        }
        let tick = next_tick(e, arrived.mono_ns);
        self.ticks.set(slot, tick);
        Matched::Answer(answer)
    }

    /// An ICMP error about a probe to `to`, counted on its peer.
    pub fn unreachable(&mut self, to: SocketAddr, kind: Unreachable) {
        if let Some((_, e)) = self.peers.find_mut(&to) {
            let u = &mut e.stats.shown.unreachable;
            match kind {
                Unreachable::Port => u.port += 1,
                Unreachable::Host => u.host += 1,
            }
        }
    }

    /// Settles the peers due at `now_ns` (each then due again when it next has something
    /// to settle) and closes their windows when over.
    pub fn handle_timeout(&mut self, now_ns: u64) {
        while let Some((_, slot)) = self.ticks.pop_due(now_ns) {
            if let Some(e) = self.peers.slot_mut(slot) {
                // No next answer in time: the held one by its clock read.
                if let Some(h) = e.held.filter(|h| h.due_ns <= now_ns) {
                    e.held = None;
                    h.book(&mut e.stats, None, &mut self.reflections);
                }
                e.stats.tick(now_ns);
                self.ticks.set(slot, next_tick(e, now_ns + 1));
            }
        }
    }

    /// When next to call: the start of the send slot of the next probe due, or the next
    /// settling, whichever is first (`u64::MAX`: nothing scheduled).
    pub fn poll_timeout(&mut self) -> u64 {
        let slot = send_slot(period_ns(self.per_peer_rate()));
        let probe = self.sends.earliest().map_or(u64::MAX, |t| t / slot * slot);
        probe.min(self.ticks.earliest().unwrap_or(u64::MAX))
    }

    fn next_random(&mut self) -> u64 {
        let mut x = self.random;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.random = x;
        x
    }
}

/// A listed peer's keys under the mesh key `mesh`: none for an `open` peer (its probes
/// and answers are unauthenticated) or without a key.
fn keys_of(mesh: Option<&StampKey>, l: &Listed) -> Option<PeerKeys> {
    let mesh = mesh.filter(|_| !l.peer.open)?;
    Some(PeerKeys {
        from: l.from,
        // Under the key of both ends: re-sent to another peer, it checks nowhere.
        probe: probe_key(mesh, l.from, l.peer.addr.ip()),
        answer: None,
    })
}

/// The send grid's slot for peers probed every `period_ns`: a wake-up sends the probes
/// due before its slot ends, each at most a slot early (timed when it leaves; its peer's
/// rate unchanged). A [`TICK_NS`] (or that halved, down to half the period), so that
/// slots, reads and settling share wake-ups: at two probes per peer a second or slower,
/// 200 ms and five wake-ups a second for any number of peers.
pub fn send_slot(period_ns: u64) -> u64 {
    let mut slot = TICK_NS;
    while slot > (period_ns / 2).max(1) {
        slot /= 2;
    }
    slot
}

/// When a peer next needs settling, as seen at `now_ns`: now when it already has
/// something to settle (this wake-up settles it), else the first point of [`TICK_NS`]'s grid
/// after that time. Rounding a due time up from `now_ns` instead would let a probe sent
/// just after each grid point move its peer's settling to the next one, again and again:
/// at 20 probes a second, a peer whose probes left just after the grid was never settled.
pub fn tick_at(stats: &PeerStats, now_ns: u64) -> u64 {
    let next = stats.next_tick_ns();
    if next <= now_ns {
        return now_ns;
    }
    next.div_ceil(TICK_NS).saturating_mul(TICK_NS)
}

/// When a peer next needs settling ([`tick_at`]) or its held answer booking, on the
/// same grid.
fn next_tick(e: &PeerEntry, now_ns: u64) -> u64 {
    let held = match e.held {
        Some(h) if h.due_ns <= now_ns => now_ns,
        Some(h) => h.due_ns.div_ceil(TICK_NS).saturating_mul(TICK_NS),
        None => u64::MAX,
    };
    tick_at(&e.stats, now_ns).min(held)
}

/// Nanoseconds between a peer's probes at `rate` a second.
pub fn period_ns(rate: f64) -> u64 {
    if rate <= 0.0 {
        return u64::MAX / 4;
    }
    (1e9 / rate) as u64
}
