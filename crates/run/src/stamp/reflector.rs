//! `sonde serve --stamp`: a STAMP session-reflector on one UDP socket and one thread. An
//! agent is not an open reflector: it answers only sources in its allowlist (none by
//! default), at most `max_pps` answers a second to each, in authenticated mode only packets
//! whose HMAC checks, and never with more bytes than came in ([`reflect`] answers exactly
//! as many). Stateless, it echoes the sender's sequence number; stateful, it numbers each
//! session's answers (source address and port, SSID) from 0, so the sender can tell
//! forward loss from reverse loss. Each answer's Error Estimate and Timestamp Information
//! come from this host's clock state and the kernel's software receive stamp.

use std::collections::HashMap;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use sonde_engine::stamps::datagram::{enable_arrival, recv_arrival};
use sonde_engine::stamps::now_real;
use sonde_proto::stamp::{
    reflect, Mode, Reflection, SenderPacket, StampError, StampKey, TimeFormat, Timestamp,
    TimestampInfo, TimestampMethod,
};

use super::clock;
use super::guard::{allowed, Cidr, Limiter};
use crate::signals::Interrupt;

/// Longest datagram read; a longer one is refused (its answer would be as long).
pub const MAX_PACKET: usize = 9000;
/// Stateful sessions kept at most; a session idle for [`SESSION_IDLE`] is forgotten.
pub const MAX_SESSIONS: usize = 4096;
const SESSION_IDLE: Duration = Duration::from_secs(60);
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
}

/// What the reflector did with what it received, each datagram counted once.
#[derive(Debug, Default)]
pub struct ReflectorCounts {
    pub received: AtomicU64,
    pub answered: AtomicU64,
    /// From a source outside the allowlist.
    pub unlisted: AtomicU64,
    /// Beyond the source's rate, or no room for its session.
    pub over_rate: AtomicU64,
    /// Shorter than the mode's base packet, or longer than [`MAX_PACKET`].
    pub malformed: AtomicU64,
    pub bad_hmac: AtomicU64,
    /// Answers the kernel refused to send.
    pub send_failed: AtomicU64,
}

impl ReflectorCounts {
    /// `received answered unlisted over_rate malformed bad_hmac`, for its log line.
    pub fn line(&self) -> String {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        format!(
            "received {} answered {} unlisted {} over_rate {} malformed {} bad_hmac {} send_failed {}",
            g(&self.received),
            g(&self.answered),
            g(&self.unlisted),
            g(&self.over_rate),
            g(&self.malformed),
            g(&self.bad_hmac),
            g(&self.send_failed)
        )
    }
}

/// A running reflector.
pub struct Reflector {
    pub local: SocketAddr,
    pub counts: Arc<ReflectorCounts>,
    thread: Option<JoinHandle<()>>,
}

impl Reflector {
    /// Binds `cfg.bind` and starts answering on a thread of its own until `stop` is set;
    /// the clock's state is read now and every [`clock::REFRESH`] on another thread.
    pub fn start(cfg: ReflectorConfig, stop: Interrupt) -> io::Result<Reflector> {
        let socket = UdpSocket::bind(cfg.bind)?;
        enable_arrival(socket.as_raw_fd(), cfg.bind.is_ipv6())?;
        let local = socket.local_addr()?;
        let counts = Arc::new(ReflectorCounts::default());
        let clock = clock::Shared::new(&sonde_probe::clock::live());
        spawn_refresh(clock.clone(), stop.clone());
        let loop_counts = counts.clone();
        let thread = std::thread::Builder::new()
            .name("stamp-reflector".into())
            .spawn(move || {
                let mut state = Loop::new(&cfg, clock, loop_counts);
                while !stop.is_set() {
                    if let Err(e) = state.once(&socket) {
                        tracing::warn!("stamp reflector: {e}");
                        std::thread::sleep(TICK);
                    }
                }
            })?;
        Ok(Reflector {
            local,
            counts,
            thread: Some(thread),
        })
    }

    /// Waits for the loop to end (after its stop flag is set).
    pub fn join(mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn spawn_refresh(clock: clock::Shared, stop: Interrupt) {
    let _ = std::thread::Builder::new()
        .name("stamp-clock".into())
        .spawn(move || {
            while !stop.sleep_until(Instant::now() + clock::REFRESH) {
                clock.set(&sonde_probe::clock::live());
            }
        });
}

/// The packet loop's state.
struct Loop {
    allow: Vec<Cidr>,
    key: Option<StampKey>,
    stateful: bool,
    limiter: Limiter,
    sessions: HashMap<(SocketAddr, u16), (u32, Instant)>,
    clock: clock::Shared,
    counts: Arc<ReflectorCounts>,
    buf: Vec<u8>,
    out: Vec<u8>,
}

impl Loop {
    fn new(cfg: &ReflectorConfig, clock: clock::Shared, counts: Arc<ReflectorCounts>) -> Loop {
        Loop {
            allow: cfg.allow.clone(),
            key: cfg.key.clone(),
            stateful: cfg.stateful,
            limiter: Limiter::new(cfg.max_pps),
            sessions: HashMap::new(),
            clock,
            counts,
            buf: vec![0; MAX_PACKET],
            out: vec![0; MAX_PACKET],
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
        if let Err(e) = SenderPacket::read(request, mode) {
            count(if e == StampError::BadHmac {
                &self.counts.bad_hmac
            } else {
                &self.counts.malformed
            });
            return Ok(());
        }
        if !self.limiter.take(got.from.ip(), now) {
            count(&self.counts.over_rate);
            return Ok(());
        }
        let receive = got.rx_ns.unwrap_or_else(now_real);
        let session = (got.from, ssid(request, mode));
        let seq = match self.stateful {
            true => match next_seq(&mut self.sessions, session, now) {
                Some(seq) => Some(seq),
                None => {
                    count(&self.counts.over_rate);
                    return Ok(());
                }
            },
            false => None,
        };
        let (estimate, source) = self.clock.get();
        let info = TimestampInfo {
            sync_in: source,
            method_in: TimestampMethod::Software,
            sync_out: source,
            method_out: TimestampMethod::Software,
        };
        let mut how = Reflection {
            seq,
            receive: Timestamp::from_unix_ns(receive, TimeFormat::Ntp),
            transmit: Timestamp::default(),
            estimate,
            ttl: got.ttl.unwrap_or(255),
            info,
        };
        how.transmit = Timestamp::from_unix_ns(now_real(), TimeFormat::Ntp);
        match reflect(request, mode, &how, &mut self.out) {
            // A failed send (a local firewall's drop says EPERM) loses one answer: no
            // back-off, which would hold up every answer behind it.
            Ok(len) => match socket.send_to(&self.out[..len], got.from) {
                Ok(_) => {
                    count(&self.counts.answered);
                }
                Err(_) => {
                    count(&self.counts.send_failed);
                }
            },
            Err(e) => {
                let bad_hmac = e == StampError::BadHmac;
                count(if bad_hmac {
                    &self.counts.bad_hmac
                } else {
                    &self.counts.malformed
                });
                // A refused packet takes no number of its session.
                if let (Some(_), Some((next, _))) = (seq, self.sessions.get_mut(&session)) {
                    *next = next.wrapping_sub(1);
                }
            }
        }
        Ok(())
    }
}

/// The SSID field of a request, 0 when it is too short to hold one.
fn ssid(request: &[u8], mode: Mode) -> u16 {
    let at = match mode {
        Mode::Unauthenticated => 14,
        Mode::Authenticated(_) => 26,
    };
    request
        .get(at..at + 2)
        .map_or(0, |b| u16::from_be_bytes([b[0], b[1]]))
}

/// The session's next sequence number, or `None` when the table is full of live sessions.
fn next_seq(
    sessions: &mut HashMap<(SocketAddr, u16), (u32, Instant)>,
    key: (SocketAddr, u16),
    now: Instant,
) -> Option<u32> {
    if !sessions.contains_key(&key) && sessions.len() >= MAX_SESSIONS {
        sessions.retain(|_, (_, last)| now.duration_since(*last) < SESSION_IDLE);
        if sessions.len() >= MAX_SESSIONS {
            return None;
        }
    }
    let (next, last) = sessions.entry(key).or_insert((0, now));
    if now.duration_since(*last) >= SESSION_IDLE {
        *next = 0;
    }
    let seq = *next;
    *next = next.wrapping_add(1);
    *last = now;
    Some(seq)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_session_numbers_its_answers_from_zero_until_idle() {
        let mut sessions = HashMap::new();
        let t0 = Instant::now();
        let a: SocketAddr = "198.18.0.1:40000".parse().unwrap();
        let b: SocketAddr = "198.18.0.1:40001".parse().unwrap();
        let seqs: Vec<_> = (0..3)
            .map(|_| next_seq(&mut sessions, (a, 7), t0))
            .collect();
        assert_eq!(seqs, [Some(0), Some(1), Some(2)]);
        // Another port, or another SSID, is another session.
        assert_eq!(next_seq(&mut sessions, (b, 7), t0), Some(0));
        assert_eq!(next_seq(&mut sessions, (a, 8), t0), Some(0));
        // Idle past SESSION_IDLE: a new session from 0.
        assert_eq!(next_seq(&mut sessions, (a, 7), t0 + SESSION_IDLE), Some(0));
    }

    #[test]
    fn a_full_session_table_refuses_new_sessions_not_live_ones() {
        let mut sessions = HashMap::new();
        let t0 = Instant::now();
        for port in 0..MAX_SESSIONS as u16 {
            let from = SocketAddr::from(([198, 18, 0, 1], port));
            assert!(next_seq(&mut sessions, (from, 0), t0).is_some());
        }
        let old = SocketAddr::from(([198, 18, 0, 1], 0));
        let new = SocketAddr::from(([198, 18, 0, 9], 1));
        assert_eq!(next_seq(&mut sessions, (new, 0), t0), None);
        assert_eq!(next_seq(&mut sessions, (old, 0), t0), Some(1));
        // Once the others are idle, room again.
        assert_eq!(
            next_seq(&mut sessions, (new, 0), t0 + SESSION_IDLE),
            Some(0)
        );
    }

    #[test]
    fn the_ssid_is_read_where_each_mode_keeps_it() {
        let key = StampKey::new(&[1; 16]).unwrap();
        let mut open = [0u8; 44];
        open[14..16].copy_from_slice(&0xbeefu16.to_be_bytes());
        assert_eq!(ssid(&open, Mode::Unauthenticated), 0xbeef);
        let mut auth = [0u8; 112];
        auth[26..28].copy_from_slice(&0x1234u16.to_be_bytes());
        assert_eq!(ssid(&auth, Mode::Authenticated(&key)), 0x1234);
        assert_eq!(ssid(&[0; 10], Mode::Unauthenticated), 0);
    }
}
