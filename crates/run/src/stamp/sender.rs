//! `sonde stamp HOST[:PORT]`: a STAMP session-sender on one UDP socket. Open loop at the
//! spec's rate (each packet at its own time, whatever came back), answers read between
//! sends with the kernel's receive stamp, then for `timeout_ms` after the last; the run's
//! document assembled from the [`Ledger`].

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use sonde_engine::kstamps::datagram::{enable_arrival, recv_arrival};
use sonde_engine::kstamps::{now_real, ErrQueue, TxPoint};
use sonde_proto::stamp::{
    tlv, Mode, ReflectorPacket, SenderPacket, StampKey, TimeFormat, Timestamp, TimestampInfo,
};
use sonde_results::clock::{ClockBound, ClockState};
use sonde_results::document::stamp::{NoAnswer, StampEnd};
use sonde_results::document::{End, IntervalFigures, IntervalSection, LocalStart, Section};
use sonde_results::latency::LatencySummary;
use sonde_results::oneway::{claim, resolve, ClockEnd};
use sonde_results::{Document, StampSpec, TestSpec};

use super::ledger::{split_loss, Arrival, Ledger};
use super::marks::{directions, put_cos, COS_TLV};
use super::silence::Silence;
use crate::controller::SOFTWARE;
use crate::signals::Interrupt;
use sonde_results::marks::Marks;

/// Bytes of the Timestamp Information TLV, of the Boot ID TLV (a sonde reflector's boot id:
/// one host, one clock) and of the HMAC TLV that seals TLVs.
const INFO_TLV: usize = 8;
const BOOT_TLV: usize = tlv::HEADER_BYTES + tlv::BOOT_ID_BYTES;
const HMAC_TLV: usize = 20;

#[derive(Debug, thiserror::Error)]
pub enum StampRunError {
    #[error("HOST {host}: {why}")]
    Resolve { host: String, why: String },
    #[error("HOST {addr}: {what} is no reflector's (STAMP goes to one unicast address)")]
    Broadcast { addr: SocketAddr, what: String },
    #[error("the STAMP socket to {addr}: {source}")]
    Socket {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// The smallest packet of a mode that asks for the reflector's Timestamp Information and
/// boot id, and with `marks` set, for its Class of Service.
pub fn default_size(authenticated: bool, marks: Marks) -> u32 {
    let cos = if marks.data_tos().is_some() {
        COS_TLV
    } else {
        0
    };
    let base = if authenticated {
        sonde_proto::stamp::AUTH_BASE_BYTES + INFO_TLV + BOOT_TLV + HMAC_TLV
    } else {
        sonde_proto::stamp::BASE_BYTES + INFO_TLV + BOOT_TLV
    };
    (base + cos) as u32
}

/// Runs `spec` against its reflector; `key` in authenticated mode.
pub fn run(
    spec: &StampSpec,
    key: Option<&StampKey>,
    command_line: &str,
    interrupt: &Interrupt,
) -> Result<Document, StampRunError> {
    let addr = resolve_addr(&spec.host, spec.port)?;
    run_to(addr, spec, key, command_line, interrupt, None)
}

/// Runs `spec` against the reflector at `addr`, resolved already (an agent sends only to
/// the address a controller gave and its allowlist holds, and resolves no name). With
/// `give_up`, the run stops once that long passes without one answer
/// ([`super::silence`]).
pub fn run_to(
    addr: SocketAddr,
    spec: &StampSpec,
    key: Option<&StampKey>,
    command_line: &str,
    interrupt: &Interrupt,
    give_up: Option<std::time::Duration>,
) -> Result<Document, StampRunError> {
    if let Some(what) = broadcast(addr.ip()) {
        return Err(StampRunError::Broadcast { addr, what });
    }
    let sock_err = |source| StampRunError::Socket { addr, source };
    let bind: SocketAddr = if addr.is_ipv6() {
        "[::]:0"
    } else {
        "0.0.0.0:0"
    }
    .parse()
    .expect("an address");
    let socket = UdpSocket::bind(bind).map_err(sock_err)?;
    socket.connect(addr).map_err(sock_err)?;
    enable_arrival(socket.as_raw_fd(), addr.is_ipv6()).map_err(sock_err)?;
    let tos = spec.execution.marks.data_tos();
    sonde_engine::marks::set_tos_if(socket.as_raw_fd(), tos).map_err(sock_err)?;
    // Send stamps too, numbered per datagram from here: T1 is when the packet reached
    // the driver, not when this thread read the clock to write it.
    sonde_engine::kstamps::enable(socket.as_raw_fd()).map_err(sock_err)?;
    let started_at = crate::controller::now_rfc3339();
    let host =
        sonde_probe::hostwatch::describe(&sonde_probe::hostwatch::HostProbe::for_peer(addr.ip()));
    let local_clock = host.inventory.as_ref().and_then(|i| i.clock.clone());
    let mode = key.map_or(Mode::Unauthenticated, Mode::Authenticated);
    let packets = spec.packets() as usize;
    let mut ledger = Ledger::new(packets, tai_offset_s());
    let mut packet = vec![0u8; spec.packet_bytes as usize];
    let fd = socket.as_raw_fd();
    let gap = Duration::from_secs_f64(1.0 / spec.rate_per_s);
    let start = Instant::now();
    // Our own clock's S bit and bound, as the reflector's answers carry theirs.
    let estimate = local_clock
        .as_ref()
        .map_or_else(Default::default, |c| super::clock::of_state(c).0);
    let mut sent = 0usize;
    let mut rx = Receiver {
        fd,
        buf: vec![0u8; sonde_results::spec::STAMP_MAX_BYTES as usize + 1],
        mode,
        tos,
        errq: ErrQueue::default(),
        sent_ids: Vec::with_capacity(packets),
        unreachable: Unreachable::default(),
        last_answer: None,
    };
    let mut silence = give_up.map(|limit| Silence::new(limit, start));
    let mut gave_up = None;
    while sent < packets && !interrupt.is_set() {
        let due = start + gap.mul_f64(sent as f64);
        rx.drain_until(due, &mut ledger);
        if let Some(s) = &mut silence {
            if let Some(t) = rx.last_answer {
                s.heard(t);
            }
            if s.over(Instant::now()) {
                gave_up = Some(s.limit());
                break;
            }
        }
        let t1 = now_real();
        let p = SenderPacket {
            seq: sent as u32,
            timestamp: Timestamp::from_unix_ns(t1, TimeFormat::Ntp),
            estimate,
            ssid: spec.ssid,
        };
        fill(&mut packet, &p, mode, tos);
        // An ICMP error for an earlier packet fails this send (and is cleared by it): it
        // is counted, and the packet sent again once.
        let went = match socket.send(&packet) {
            Ok(_) => true,
            Err(e) => rx.unreachable.count(&e) && socket.send(&packet).is_ok(),
        };
        if went {
            let interval = (t1_offset(start) / spec.timing.interval_ms.max(1)) as u32;
            ledger.on_sent(sent as u32, t1, interval);
            rx.sent_ids.push(sent as u32);
        }
        sent += 1;
    }
    if gave_up.is_none() {
        let until = Instant::now() + Duration::from_millis(spec.timeout_ms);
        rx.drain_until(until, &mut ledger);
    }
    let partial = interrupt.is_set() || gave_up.is_some();
    let end = end_of(spec, addr, &ledger, local_clock.as_ref(), &rx.unreachable);
    let intervals = intervals_of(&ledger, spec.timing.interval_ms);
    let mut spec = spec.clone();
    spec.timing.duration_ms = start.elapsed().as_millis() as u64;
    let error = match gave_up {
        Some(limit) => Some(format!(
            "stopped after {:.1} s without one answer: an agent's STAMP run ends when its reflector is silent",
            limit.as_secs_f64()
        )),
        None => partial.then(|| "interrupted (Ctrl-C)".to_string()),
    };
    let start = LocalStart {
        spec: TestSpec::Stamp(spec),
        command: command_line.to_string(),
        host,
        started_at,
        software: SOFTWARE.into(),
    };
    Ok(Document::local(
        start,
        intervals,
        End::new(partial, error, Section::Stamp { stamp: end }),
    ))
}

/// What broadcast address `ip` is, if it is one: the limited broadcast, or the directed
/// broadcast of one of this host's subnets (the socket would refuse either, EACCES).
fn broadcast(ip: std::net::IpAddr) -> Option<String> {
    let v4 = match ip {
        std::net::IpAddr::V4(v4) => v4,
        std::net::IpAddr::V6(v6) => v6.to_ipv4_mapped()?,
    };
    if v4.is_broadcast() {
        return Some("the broadcast address".into());
    }
    let subnets = sonde_probe::host::local_subnets();
    let s = sonde_probe::host::broadcast_of(ip, &subnets)?;
    Some(format!(
        "the broadcast address of {} ({})",
        s.network(),
        s.iface
    ))
}

fn t1_offset(start: Instant) -> u64 {
    start.elapsed().as_millis() as u64
}

fn resolve_addr(host: &str, port: u16) -> Result<SocketAddr, StampRunError> {
    use std::net::ToSocketAddrs;
    let err = |why: String| StampRunError::Resolve {
        host: host.to_string(),
        why,
    };
    let mut addrs = (host, port)
        .to_socket_addrs()
        .map_err(|e| err(e.to_string()))?;
    addrs.next().ok_or_else(|| err("no address".into()))
}

/// TAI less UTC from the kernel (`adjtimex`), 37 s when it was never told.
pub(crate) fn tai_offset_s() -> u64 {
    // SAFETY: all-zero is a valid timex; modes 0 reads without changing anything.
    let mut tx: libc::timex = unsafe { std::mem::zeroed() };
    // SAFETY: tx is live and writable.
    let r = unsafe { libc::adjtimex(&mut tx) };
    if r >= 0 && tx.tai > 0 {
        tx.tai as u64
    } else {
        37
    }
}

/// Writes the test packet `p` over `out`: the base, then the TLVs that fit (Class of
/// Service asking for `tos` when marked, Timestamp Information, Extra Padding for the
/// rest, the HMAC TLV last in authenticated mode).
pub fn fill(out: &mut [u8], p: &SenderPacket, mode: Mode, tos: Option<u8>) {
    out.fill(0);
    p.write(mode, out)
        .expect("the spec's size holds the base packet");
    let base = mode.base_bytes();
    let seal = if mode.key().is_some() { HMAC_TLV } else { 0 };
    let area = &mut out[base..];
    if area.len() < INFO_TLV + seal {
        return;
    }
    let body = area.len() - seal;
    // 1 to 3 bytes after a TLV could hold no TLV: padding then.
    let fits =
        |room: usize, need: usize| room >= need && !(1..tlv::HEADER_BYTES).contains(&(room - need));
    let mut at = 0;
    if let Some(t) = tos.filter(|_| fits(body, COS_TLV)) {
        at = put_cos(area, t);
    }
    if fits(body - at, INFO_TLV) {
        tlv::put(&mut area[at..], tlv::TYPE_TIMESTAMP_INFO, 4).expect("room checked");
        at += INFO_TLV;
    }
    let rest = body - at;
    if rest >= BOOT_TLV && !(1..tlv::HEADER_BYTES).contains(&(rest - BOOT_TLV)) {
        tlv::put(&mut area[at..], tlv::TYPE_BOOT_ID, tlv::BOOT_ID_BYTES).expect("room checked");
        at += BOOT_TLV;
    }
    if body - at >= tlv::HEADER_BYTES {
        at += tlv::put_extra_padding(&mut area[at..body]).expect("room checked");
    }
    if let Some(key) = mode.key() {
        tlv::put_hmac(area, at, key, p.seq).expect("room checked");
    }
}

/// The reflector's boot id in an answer's TLVs (`area`, numbered `seq` by the reflector):
/// authenticated, only under the answer's good HMAC TLV (a party on the path could
/// otherwise claim one clock, bound 0, for any pair).
fn boot_id_of(area: &[u8], mode: Mode, seq: u32) -> Option<[u8; tlv::BOOT_ID_BYTES]> {
    tlv::find_boot_id(area).filter(|_| signed(area, mode, seq))
}

/// An answer's TLVs are the reflector's: unauthenticated, or under a good HMAC TLV.
fn signed(area: &[u8], mode: Mode, seq: u32) -> bool {
    mode.key()
        .is_none_or(|k| tlv::check_hmac(area, k, seq) == Some(true))
}

/// What reads the socket: answers, and the kernel's stamps of our sends.
struct Receiver<'k> {
    fd: i32,
    buf: Vec<u8>,
    mode: Mode<'k>,
    /// The TOS byte our packets leave with, when marked.
    tos: Option<u8>,
    errq: ErrQueue,
    /// The sequence number of each datagram sent, by the kernel's id of it (`OPT_ID`
    /// counts the socket's datagrams from 0).
    sent_ids: Vec<u32>,
    unreachable: Unreachable,
    /// When the last valid answer was read.
    last_answer: Option<Instant>,
}

/// The ICMP errors the connected socket reported (as a receive's or a send's error).
#[derive(Debug, Default)]
pub struct Unreachable {
    pub port: u64,
    pub host: u64,
}

impl Unreachable {
    /// Counts `e` if it is an ICMP error's; whether it was.
    fn count(&mut self, e: &std::io::Error) -> bool {
        match e.raw_os_error() {
            Some(libc::ECONNREFUSED) => self.port += 1,
            Some(libc::EHOSTUNREACH | libc::ENETUNREACH) => self.host += 1,
            _ => return false,
        }
        true
    }
}

impl Receiver<'_> {
    /// Reads answers until `until`; each after the send stamps waiting, so that an
    /// answer finds its packet's stamp (taken before the packet could reach the
    /// reflector). One error-queue read per wake-up.
    fn drain_until(&mut self, until: Instant, ledger: &mut Ledger) {
        loop {
            let now = Instant::now();
            if now >= until {
                // A sender behind its schedule never waits: its stamps are read here.
                self.take_send_stamps(ledger);
                return;
            }
            let wait = (until - now).min(Duration::from_millis(50));
            // A stamp queued wakes the wait too (POLLERR): read once per wake-up, before
            // the answer that may need it.
            let got = recv_arrival(self.fd, &mut self.buf, wait);
            self.take_send_stamps(ledger);
            let got = match got {
                Ok(Some(got)) => got,
                Ok(None) => continue,
                Err(e) => {
                    self.unreachable.count(&e);
                    continue;
                }
            };
            let t4 = got.rx_ns.unwrap_or_else(now_real);
            let len = got.len.min(self.buf.len());
            let buf = &self.buf[..len];
            match ReflectorPacket::read(buf, self.mode) {
                Ok(packet) => {
                    let area = buf.get(self.mode.base_bytes()..).unwrap_or_default();
                    let info = TimestampInfo::find(area);
                    let boot_id = boot_id_of(area, self.mode, packet.seq);
                    let marks = match self.tos {
                        Some(sent) if signed(area, self.mode, packet.seq) => {
                            directions(area, sent, got.tos)
                        }
                        _ => (None, None),
                    };
                    ledger.on_answer(&Arrival {
                        packet,
                        len,
                        t4_ns: t4,
                        info,
                        boot_id,
                        marks,
                    });
                    self.last_answer = Some(Instant::now());
                }
                Err(_) => ledger.rejected += 1,
            }
        }
    }

    /// The driver stamps on the socket's error queue, each to its packet.
    fn take_send_stamps(&mut self, ledger: &mut Ledger) {
        let ids = &self.sent_ids;
        let _ = self.errq.drain(self.fd, |s| {
            if let (TxPoint::Driver, Some(&seq)) = (s.point, ids.get(s.key as usize)) {
                ledger.on_kernel_sent(seq, s.ns);
            }
        });
    }
}

/// The reflector's clock as a clock state, for the one-way claim.
fn reflector_state(ledger: &Ledger) -> ClockState {
    let c = &ledger.clock;
    let bound = match (c.synchronized, c.error_ns) {
        (true, Some(ns)) => ClockBound {
            synchronised: true,
            error_ns: Some(ns),
            from: "the reflector's Error Estimate".into(),
            how: "its S bit set, its multiplier and scale".into(),
        },
        _ => ClockBound {
            synchronised: false,
            error_ns: None,
            from: "the reflector's Error Estimate".into(),
            how: "its S bit is unset: reflector not synchronised".into(),
        },
    };
    ClockState {
        bound,
        ..Default::default()
    }
}

/// Why nothing answered, when nothing did: what the network said, else what came back.
pub fn no_answer(sent: u64, received: u64, rejected: u64, icmp: &Unreachable) -> Option<NoAnswer> {
    if received > 0 || sent == 0 {
        return None;
    }
    Some(if icmp.port > 0 {
        NoAnswer::PortUnreachable
    } else if icmp.host > 0 {
        NoAnswer::HostUnreachable
    } else if rejected > 0 {
        NoAnswer::Rejected
    } else {
        NoAnswer::Silent
    })
}

fn end_of(
    spec: &StampSpec,
    addr: SocketAddr,
    l: &Ledger,
    local: Option<&ClockState>,
    icmp: &Unreachable,
) -> StampEnd {
    let sent = l.sent();
    // Without an answer no reflector said anything: neither its clock nor its numbering
    // (--stateful is the user's word for answers that never came).
    let answered = l.received > 0;
    let stateful = answered && (spec.stateful || l.stateful_seen);
    let (f, r, after) = split_loss(sent, l.received, l.last);
    let mut notes = Vec::new();
    if answered && !l.clock.synchronized {
        notes.push("reflector not synchronised (its Error Estimate's S bit is unset): each direction's bound comes from the exchange alone".into());
    }
    if answered && spec.stateful && !l.stateful_seen && f + r > 0 {
        notes.push("--stateful: the reflector's numbers never differed from ours; if it is stateless, the loss on the way there is counted on the way back".into());
    }
    if answered && !stateful && sent > l.received {
        notes.push("a stateless reflector (or one that lost nothing on the way there): loss is not split by direction".into());
    }
    let reflector = reflector_state(l);
    let (turnaround, whole) = l.turnaround_and_whole();
    // A sonde reflector's boot id (its Boot ID TLV): the same as ours, one clock.
    let ours = super::clock::boot_id().map(|id| tlv::boot_id_text(&id));
    let theirs = l.reflector_boot.map(|id| tlv::boot_id_text(&id));
    let one_way = l.oneway.raw().and_then(|raw| {
        resolve(
            Some(&raw),
            &[],
            &claim(
                ClockEnd {
                    boot_id: ours.as_deref(),
                    clock: local,
                },
                ClockEnd {
                    boot_id: theirs.as_deref(),
                    clock: Some(&reflector),
                },
            ),
        )
        .0
    });
    StampEnd {
        reflector: addr.to_string(),
        sent,
        sent_kernel_stamped: l.kernel_stamped,
        answers_clock_timed: l.answers_clock_timed,
        send_path_ns: l.send_path(),
        received: l.received,
        lost: sent - l.received,
        lost_forward: stateful.then_some(f),
        lost_reverse: stateful.then_some(r),
        lost_after_last_answer: stateful.then_some(after),
        duplicates: l.duplicates,
        reordered: l.reordered,
        latency_ns: l.latency(),
        reflector_turnaround_ns: turnaround,
        round_trip_whole_ns: whole,
        oneway: one_way,
        clock: answered.then(|| l.clock.clone()),
        packet_bytes: spec.packet_bytes,
        authenticated: spec.authenticated,
        stateful,
        twamp_light_answers: l.twamp_light,
        rejected_answers: l.rejected,
        port_unreachable: icmp.port,
        host_unreachable: icmp.host,
        no_answer: no_answer(sent, l.received, l.rejected, icmp),
        marks: (!l.marks.is_empty()).then(|| Box::new(l.marks.clone())),
        notes,
    }
}

fn intervals_of(l: &Ledger, interval_ms: u64) -> Vec<IntervalFigures> {
    let secs = interval_ms as f64 / 1e3;
    l.intervals
        .iter()
        .enumerate()
        .map(|(i, (figures, h))| {
            let mut stamp = figures.clone();
            stamp.latency_ns = LatencySummary::of(h);
            IntervalFigures {
                section: IntervalSection::Stamp { stamp },
                ..IntervalFigures::span(i as f64 * secs, (i + 1) as f64 * secs)
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_packets_carry_their_tlvs_sealed_at_every_size() {
        let key = StampKey::new(&[7; 16]).unwrap();
        let p = SenderPacket {
            seq: 3,
            ..Default::default()
        };
        for (mode, base) in [
            (Mode::Unauthenticated, 44),
            (Mode::Authenticated(&key), 112),
        ] {
            for (len, tos) in (base..base + 64)
                .filter(|&l| l == base || l >= base + 4)
                .flat_map(|l| [(l, None), (l, Some(0xb9))])
            {
                let mut out = vec![0xffu8; len];
                fill(&mut out, &p, mode, tos);
                assert_eq!(SenderPacket::read(&out, mode).unwrap(), p, "{len}");
                let area = &out[base..];
                assert!(tlv::iter(area).all(|t| t.is_ok()), "{len}: {area:?}");
                if let Some(key) = mode.key() {
                    let sealed = tlv::check_hmac(area, key, 3);
                    assert!(sealed.is_none() || sealed == Some(true), "{len}");
                    assert_eq!(sealed.is_some(), len >= base + 28, "{len}");
                }
            }
            let mut out = vec![0u8; default_size(mode.key().is_some(), Marks::default()) as usize];
            fill(&mut out, &p, mode, None);
            let kinds: Vec<u8> = tlv::iter(&out[base..]).map(|t| t.unwrap().kind).collect();
            assert!(kinds.contains(&tlv::TYPE_TIMESTAMP_INFO), "{kinds:?}");
            let marked = Marks {
                ecn: Some(sonde_results::marks::Ecn::Ect1),
                ..Default::default()
            };
            let mut out = vec![0u8; default_size(mode.key().is_some(), marked) as usize];
            fill(&mut out, &p, mode, marked.data_tos());
            let kinds: Vec<u8> = tlv::iter(&out[base..]).map(|t| t.unwrap().kind).collect();
            assert_eq!(
                &kinds[..3],
                [4, 3, 253],
                "CoS, Timestamp Information, Boot ID"
            );
            assert!(kinds.contains(&tlv::TYPE_BOOT_ID), "{kinds:?}");
        }
    }

    /// A boot id is believed under the answer's good HMAC TLV only (authenticated), and
    /// as it comes unauthenticated.
    #[test]
    fn a_boot_id_is_believed_only_under_a_good_hmac_when_authenticated() {
        let key = StampKey::new(&[3; 32]).unwrap();
        let mut area = vec![0u8; BOOT_TLV + HMAC_TLV];
        tlv::put(&mut area, tlv::TYPE_BOOT_ID, tlv::BOOT_ID_BYTES)
            .unwrap()
            .copy_from_slice(&[7; 16]);
        tlv::put_hmac(&mut area, BOOT_TLV, &key, 5).unwrap();
        let auth = Mode::Authenticated(&key);
        assert_eq!(boot_id_of(&area, auth, 5), Some([7; 16]));
        assert_eq!(boot_id_of(&area, auth, 6), None, "another number's HMAC");
        let mut forged = area.clone();
        forged[tlv::HEADER_BYTES] ^= 1;
        assert_eq!(boot_id_of(&forged, auth, 5), None, "changed after signing");
        assert_eq!(boot_id_of(&area[..BOOT_TLV], auth, 5), None, "unsigned");
        assert_eq!(
            boot_id_of(&area[..BOOT_TLV], Mode::Unauthenticated, 5),
            Some([7; 16])
        );
    }
}
