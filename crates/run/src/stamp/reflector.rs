//! `sonde serve --stamp`: a STAMP session-reflector on one UDP socket and one thread. An
//! agent is not an open reflector: it answers only sources in its allowlist (none by
//! default), at most `max_pps` answers a second to each, in authenticated mode only packets
//! whose HMAC checks, each sequence number of a session once and only when stamped within
//! [`MAX_SKEW`] of this host's clock (a captured packet replayed is not answered), and never
//! with more bytes than came in ([`reflect`] answers exactly as many). Stateless, it echoes
//! the sender's sequence number; stateful, it numbers each session's answers from 0, so the
//! sender can tell forward loss from reverse loss. A session is a source address and SSID
//! (authenticated), or a source address, port and SSID (unauthenticated stateful): the
//! codec's table ([`Sessions`]), at most [`PER_SOURCE`] per address and [`MAX_SESSIONS`] in
//! all, the least recently heard forgotten first. Each answer's Error Estimate and
//! Timestamp Information come from this host's clock state and the kernel's software
//! receive stamp.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sonde_engine::kstamps::datagram::{enable_arrival, recv_arrival};
use sonde_engine::kstamps::now_real;
use sonde_proto::stamp::{
    reflect, Heard, Limits, Mode, Reflection, Refusal, SenderPacket, SessionId, Sessions,
    StampError, StampKey, TimeFormat, Timestamp, TimestampInfo,
};

use super::clock;
use super::guard::{allowed, Cidr, Limiter};
use crate::service::{Running, Threads};

/// Longest datagram read; a longer one is refused (its answer would be as long).
pub const MAX_PACKET: usize = 9000;
/// Sessions kept at most; a session idle for [`SESSION_IDLE`] starts anew.
pub const MAX_SESSIONS: usize = 4096;
/// Sessions one source address holds at most (its least recently heard forgotten for a
/// new one), so that one host cannot fill the table.
pub const PER_SOURCE: usize = 64;
const SESSION_IDLE: Duration = Duration::from_secs(60);
/// In authenticated mode, a packet stamped further than this from this host's clock is
/// not answered: under half [`SESSION_IDLE`], so that a packet of a session forgotten for
/// idleness is too old to be answered again.
pub const MAX_SKEW: Duration = Duration::from_secs(10);
/// How long the loop waits for a datagram before it looks at its stop flag.
const TICK: Duration = Duration::from_millis(100);

/// What an operator configured.
#[derive(Debug, Clone)]
pub struct ReflectorConfig {
    pub bind: SocketAddr,
    /// Networks answered; empty: nobody.
    pub allow: Vec<Cidr>,
    /// Answers a second to one source address.
    pub max_pps: u32,
    /// Authenticated mode under this key; `None`: unauthenticated.
    pub key: Option<StampKey>,
    pub stateful: bool,
    /// The DSCPs a request's Class of Service TLV may have its answer sent with.
    pub dscp_policy: sonde_proto::stamp::DscpPolicy,
}

/// What the reflector did with what it received, each datagram counted once.
#[derive(Debug, Default)]
pub struct ReflectorCounts {
    pub received: AtomicU64,
    pub answered: AtomicU64,
    /// From a source outside the allowlist.
    pub unlisted: AtomicU64,
    /// Beyond the source's rate.
    pub over_rate: AtomicU64,
    /// Authenticated: a sequence number its session was answered already (a replay).
    pub replayed: AtomicU64,
    /// Authenticated: stamped further than [`MAX_SKEW`] from this host's clock.
    pub out_of_time: AtomicU64,
    /// Shorter than the mode's base packet, or longer than [`MAX_PACKET`].
    pub malformed: AtomicU64,
    pub bad_hmac: AtomicU64,
    /// Answers the kernel refused to send.
    pub send_failed: AtomicU64,
}

impl ReflectorCounts {
    /// Every counter by name, for its log line.
    pub fn line(&self) -> String {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        format!(
            "received {} answered {} unlisted {} over_rate {} replayed {} out_of_time {} malformed {} bad_hmac {} send_failed {}",
            g(&self.received),
            g(&self.answered),
            g(&self.unlisted),
            g(&self.over_rate),
            g(&self.replayed),
            g(&self.out_of_time),
            g(&self.malformed),
            g(&self.bad_hmac),
            g(&self.send_failed)
        )
    }
}

impl ReflectorConfig {
    /// How it answers, in words for its log line: "stateless, unauthenticated, allow
    /// 198.18.0.0/15, at most 100/s per source".
    pub fn describe(&self) -> String {
        let allow = match self.allow.len() {
            0 => "nobody (no --stamp-allow)".to_string(),
            _ => {
                let each: Vec<String> = self.allow.iter().map(|c| c.to_string()).collect();
                each.join(",")
            }
        };
        format!(
            "{}, {}, allow {allow}, at most {}/s per source",
            if self.stateful {
                "stateful"
            } else {
                "stateless"
            },
            match self.key {
                Some(_) => "authenticated",
                None => "unauthenticated",
            },
            self.max_pps
        )
    }
}

/// What a running reflector shows (its threads, the packet loop's and its clock's, are
/// the [`Running`] service's).
pub struct ReflectorService {
    pub local: SocketAddr,
    pub counts: Arc<ReflectorCounts>,
}

impl ReflectorService {
    /// Binds `cfg.bind` and starts answering on a thread of its own until stopped; the
    /// clock's state is read now and every [`clock::REFRESH`] on another thread.
    pub fn start(cfg: ReflectorConfig) -> io::Result<Running<ReflectorService>> {
        let socket = UdpSocket::bind(cfg.bind)?;
        enable_arrival(socket.as_raw_fd(), cfg.bind.is_ipv6())?;
        let local = socket.local_addr()?;
        let counts = Arc::new(ReflectorCounts::default());
        let clock = clock::Shared::new(&sonde_probe::clock::live());
        let mut threads = Threads::new("stamp reflector");
        let (stop, refreshed) = (threads.stop.clone(), clock.clone());
        threads.spawn("stamp-clock", move || {
            // Until stopped (`sleep_until` is false then): every REFRESH, not once.
            while stop.sleep_until(Instant::now() + clock::REFRESH) {
                refreshed.set(&sonde_probe::clock::live());
            }
        })?;
        let (stop, loop_counts) = (threads.stop.clone(), counts.clone());
        threads.spawn("stamp-reflector", move || {
            let mut state = Loop::new(&cfg, clock, Arc::clone(&loop_counts));
            while !stop.is_set() {
                if let Err(e) = state.once(&socket) {
                    tracing::warn!("stamp reflector: {e}");
                    std::thread::sleep(TICK);
                }
            }
            // Stopped: what it answered and refused, final.
            tracing::info!("stamp reflector: {}", loop_counts.line());
        })?;
        Ok(Running {
            handle: ReflectorService { local, counts },
            threads,
        })
    }
}

/// The packet loop's state.
struct Loop {
    allow: Vec<Cidr>,
    key: Option<StampKey>,
    stateful: bool,
    limiter: Limiter,
    sessions: Sessions,
    /// The monotonic clock's origin for the session table.
    epoch: Instant,
    tai_utc_s: u64,
    /// Told a sonde sender in its Boot ID TLV.
    boot_id: Option<[u8; sonde_proto::stamp::tlv::BOOT_ID_BYTES]>,
    clock: clock::Shared,
    counts: Arc<ReflectorCounts>,
    buf: Vec<u8>,
    out: Vec<u8>,
    /// Each answer's TOS, as its request's Class of Service TLV asks.
    marks: super::marks::AnswerMarks,
    dscp_policy: sonde_proto::stamp::DscpPolicy,
}

impl Loop {
    fn new(cfg: &ReflectorConfig, clock: clock::Shared, counts: Arc<ReflectorCounts>) -> Loop {
        Loop {
            allow: cfg.allow.clone(),
            key: cfg.key.clone(),
            stateful: cfg.stateful,
            limiter: Limiter::new(cfg.max_pps),
            sessions: Sessions::new(Limits {
                max_sessions: MAX_SESSIONS,
                per_source: PER_SOURCE,
                idle_ns: Some(SESSION_IDLE.as_nanos() as u64),
                once: cfg.key.is_some(),
                max_skew_ns: cfg.key.as_ref().map(|_| MAX_SKEW.as_nanos() as u64),
            }),
            epoch: Instant::now(),
            tai_utc_s: super::sender::tai_offset_s(),
            boot_id: clock::boot_id(),
            clock,
            counts,
            buf: vec![0; MAX_PACKET],
            out: vec![0; MAX_PACKET],
            marks: Default::default(),
            dscp_policy: cfg.dscp_policy,
        }
    }

    /// Reads one datagram (or waits a tick) and answers it if the rules say so.
    fn once(&mut self, socket: &UdpSocket) -> io::Result<()> {
        let Some(got) = recv_arrival(socket.as_raw_fd(), &mut self.buf, TICK)? else {
            return Ok(());
        };
        let count = |c: &AtomicU64| c.fetch_add(1, Ordering::Relaxed);
        count(&self.counts.received);
        let now = Instant::now();
        if !allowed(&self.allow, got.from.ip()) {
            count(&self.counts.unlisted);
            return Ok(());
        }
        if got.len > MAX_PACKET {
            count(&self.counts.malformed);
            return Ok(());
        }
        let request = &self.buf[..got.len];
        let mode = match &self.key {
            Some(key) => Mode::Authenticated(key),
            None => Mode::Unauthenticated,
        };
        // Checked (length, HMAC) before it may spend its source's answers or open a
        // session: a keyless rogue sharing or spoofing an allowed address must not
        // silence that sender or fill the session table.
        let asked = match SenderPacket::read(request, mode) {
            Ok(asked) => asked,
            Err(e) => {
                count(if e == StampError::BadHmac {
                    &self.counts.bad_hmac
                } else {
                    &self.counts.malformed
                });
                return Ok(());
            }
        };
        let receive = got.rx_ns.unwrap_or_else(now_real);
        // A replay is refused before it may spend its source's answers, as a bad HMAC.
        let keyed = self.key.is_some();
        let session = SessionId {
            addr: got.from.ip(),
            port: if keyed { 0 } else { got.from.port() },
            ssid: asked.ssid,
        };
        if keyed || self.stateful {
            let mono = now.duration_since(self.epoch).as_nanos() as u64;
            let heard = Heard::of(&asked, self.tai_utc_s, mono, receive);
            if let Err(why) = self.sessions.admit(session, heard) {
                count(match why {
                    Refusal::Replayed => &self.counts.replayed,
                    Refusal::OutOfTime => &self.counts.out_of_time,
                });
                return Ok(());
            }
        }
        if !self.limiter.take(got.from.ip(), now) {
            count(&self.counts.over_rate);
            return Ok(());
        }
        let seq = self.stateful.then(|| self.sessions.number(session));
        let (estimate, source) = self.clock.get();
        let info = TimestampInfo::software(source);
        let mut how = Reflection {
            seq,
            receive: Timestamp::from_unix_ns(receive, TimeFormat::Ntp),
            transmit: Timestamp::default(),
            estimate,
            ttl: got.ttl.unwrap_or(255),
            info,
            boot_id: self.boot_id,
            tos: got.tos,
            dscp_policy: self.dscp_policy,
        };
        how.transmit = Timestamp::from_unix_ns(now_real(), TimeFormat::Ntp);
        match reflect(request, mode, &how, &mut self.out) {
            // A failed send (a local firewall's drop says EPERM) loses one answer: no
            // back-off, which would hold up every answer behind it.
            Ok(len) => match self
                .marks
                .before_send(socket.as_raw_fd(), &self.out[mode.base_bytes()..len])
                .and_then(|()| socket.send_to(&self.out[..len], got.from))
            {
                Ok(_) => {
                    count(&self.counts.answered);
                }
                Err(_) => {
                    count(&self.counts.send_failed);
                }
            },
            Err(e) => {
                count(if e == StampError::BadHmac {
                    &self.counts.bad_hmac
                } else {
                    &self.counts.malformed
                });
            }
        }
        Ok(())
    }
}
