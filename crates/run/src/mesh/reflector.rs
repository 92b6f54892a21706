//! The mesh agent's STAMP reflector: it answers only probes that carry the fleet key's
//! HMAC (or, on an agent without a key, `--insecure-no-key`, any STAMP probe), with exactly
//! as many bytes as came (the codec's `reflect`), within a rate of answers per second, and
//! numbers what it reflects per session (sender address and SSID): the prober tells from
//! those numbers which way a lost probe went. Sessions are bounded; the least recently
//! heard is forgotten first.

use std::collections::HashMap;
use std::net::SocketAddr;

use sonde_proto::stamp::{
    self, ErrorEstimate, Mode, Reflection, StampKey, SyncSource, TimeFormat, Timestamp,
    TimestampInfo, TimestampMethod,
};

/// Sessions remembered at most (a session is 24 bytes and a map slot).
pub const MAX_SESSIONS: usize = 65_536;

/// Answers per second at most, all senders together, and the burst allowed; and per
/// source address, so that a probe captured and replayed from a spoofed address reaches
/// that address at this rate only, whatever the total allows.
#[derive(Debug, Clone, Copy)]
pub struct Rate {
    pub per_s: f64,
    pub burst: f64,
    pub per_source: u32,
}

#[derive(Debug, Clone, Copy)]
struct Session {
    next: u32,
    heard_ns: u64,
}

pub struct Reflector {
    key: Option<StampKey>,
    /// This agent's labels, answered in a probe's Labels TLV.
    labels: sonde_proto::Labels,
    sessions: HashMap<(SocketAddr, u16), Session>,
    rate: Rate,
    sources: crate::stamp::guard::Limiter,
    tokens: f64,
    refilled_ns: u64,
    pub reflected: u64,
    pub refused: u64,
}

/// The reflector's view of its clock at one moment.
#[derive(Debug, Clone, Copy)]
pub struct Times {
    pub mono_ns: u64,
    pub receive: Timestamp,
    pub transmit: Timestamp,
    pub estimate: ErrorEstimate,
}

impl Reflector {
    pub fn new(key: Option<StampKey>, rate: Rate, labels: sonde_proto::Labels) -> Reflector {
        Reflector {
            key,
            labels,
            sessions: HashMap::new(),
            rate,
            sources: crate::stamp::guard::Limiter::with_room(
                rate.per_source,
                2 * super::peers::MAX_PEERS,
            ),
            tokens: rate.burst,
            refilled_ns: 0,
            reflected: 0,
            refused: 0,
        }
    }

    fn mode(&self) -> Mode<'_> {
        match &self.key {
            Some(k) => Mode::Authenticated(k),
            None => Mode::Unauthenticated,
        }
    }

    /// The answer to `request` from `from` written into `out`, its length; `None` when it
    /// is refused (not a keyed probe, over the rate).
    pub fn answer(
        &mut self,
        from: SocketAddr,
        request: &[u8],
        t: Times,
        out: &mut [u8],
    ) -> Option<usize> {
        let Ok(asked) = stamp::SenderPacket::read(request, self.mode()) else {
            self.refused += 1;
            return None;
        };
        if !self.sources.take(from.ip(), std::time::Instant::now()) || !self.take_token(t.mono_ns) {
            self.refused += 1;
            return None;
        }
        let seq = self.next_seq(from, asked.ssid, t.mono_ns);
        let how = Reflection {
            seq: Some(seq),
            receive: t.receive,
            transmit: t.transmit,
            estimate: t.estimate,
            ttl: 255,
            info: TimestampInfo {
                sync_in: SyncSource::Ntp,
                method_in: TimestampMethod::Software,
                sync_out: SyncSource::Ntp,
                method_out: TimestampMethod::Software,
            },
        };
        match stamp::reflect(request, self.mode(), &how, out) {
            Ok(n) => {
                let base = self.mode().base_bytes();
                let key = self.key.as_ref();
                sonde_proto::mesh::fill_labels(&mut out[base..n], &self.labels, key, seq);
                self.reflected += 1;
                Some(n)
            }
            Err(_) => {
                self.refused += 1;
                None
            }
        }
    }

    fn take_token(&mut self, now_ns: u64) -> bool {
        let dt = now_ns.saturating_sub(self.refilled_ns) as f64 / 1e9;
        self.refilled_ns = now_ns;
        self.tokens = (self.tokens + dt * self.rate.per_s).min(self.rate.burst);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    fn next_seq(&mut self, from: SocketAddr, ssid: u16, now_ns: u64) -> u32 {
        if self.sessions.len() >= MAX_SESSIONS && !self.sessions.contains_key(&(from, ssid)) {
            let oldest = self
                .sessions
                .iter()
                .min_by_key(|(_, s)| s.heard_ns)
                .map(|(k, _)| *k);
            if let Some(k) = oldest {
                self.sessions.remove(&k);
            }
        }
        let s = self.sessions.entry((from, ssid)).or_insert(Session {
            next: 0,
            heard_ns: now_ns,
        });
        let seq = s.next;
        s.next = s.next.wrapping_add(1);
        s.heard_ns = now_ns;
        seq
    }
}

/// A timestamp of the realtime clock now, as STAMP carries it.
pub fn now_timestamp() -> Timestamp {
    Timestamp::from_unix_ns(realtime_ns(), TimeFormat::Ntp)
}

/// The realtime clock in nanoseconds since the Unix epoch.
pub fn realtime_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonde_proto::stamp::{ReflectorPacket, SenderPacket, AUTH_BASE_BYTES};

    fn key(b: &[u8]) -> StampKey {
        StampKey::new(b).unwrap()
    }

    fn times(mono_ns: u64) -> Times {
        Times {
            mono_ns,
            receive: Timestamp(1),
            transmit: Timestamp(2),
            estimate: ErrorEstimate::unknown(TimeFormat::Ntp),
        }
    }

    fn probe(k: &StampKey, seq: u32, ssid: u16) -> Vec<u8> {
        let mut b = vec![0; AUTH_BASE_BYTES];
        let p = SenderPacket {
            seq,
            ssid,
            ..Default::default()
        };
        p.write(Mode::Authenticated(k), &mut b).unwrap();
        b
    }

    #[test]
    fn keyed_probes_are_numbered_per_session_and_others_refused() {
        let k = key(b"0123456789abcdef0123");
        let mut r = Reflector::new(
            Some(k.clone()),
            Rate {
                per_s: 1e6,
                burst: 100.0,
                per_source: 1_000,
            },
            Default::default(),
        );
        let (a, b): (SocketAddr, SocketAddr) = (
            "198.18.2.1:5000".parse().unwrap(),
            "198.18.2.2:5000".parse().unwrap(),
        );
        let mut out = [0u8; 512];
        for (from, seq, ssid, want) in [(a, 7, 1, 0), (a, 9, 1, 1), (b, 3, 1, 0), (a, 10, 2, 0)] {
            let n = r
                .answer(from, &probe(&k, seq, ssid), times(1), &mut out)
                .unwrap();
            assert_eq!(n, AUTH_BASE_BYTES);
            let got = ReflectorPacket::read(&out[..n], Mode::Authenticated(&k)).unwrap();
            assert_eq!((got.seq, got.sender_seq, got.ssid), (want, seq, ssid));
        }
        // Another key's probe, an unauthenticated one, garbage: no answer, counted.
        let other = key(b"another-key-of-16+");
        assert!(r
            .answer(a, &probe(&other, 1, 1), times(2), &mut out)
            .is_none());
        let mut open = vec![0; 44];
        SenderPacket::default()
            .write(Mode::Unauthenticated, &mut open)
            .unwrap();
        assert!(r.answer(a, &open, times(2), &mut out).is_none());
        assert!(r.answer(a, b"junk", times(2), &mut out).is_none());
        assert_eq!((r.reflected, r.refused), (4, 3));
    }

    #[test]
    fn answers_stay_within_the_rate() {
        let k = key(b"0123456789abcdef0123");
        let mut r = Reflector::new(
            Some(k.clone()),
            Rate {
                per_s: 10.0,
                burst: 5.0,
                per_source: 1_000,
            },
            Default::default(),
        );
        let a: SocketAddr = "198.18.2.1:5000".parse().unwrap();
        let mut out = [0u8; 512];
        let answered = (0..100)
            .filter(|i| {
                r.answer(a, &probe(&k, *i, 1), times(1_000_000), &mut out)
                    .is_some()
            })
            .count();
        assert_eq!(answered, 5, "the burst");
        // A second later, ten more tokens, capped at the burst.
        let later = (0..100)
            .filter(|i| {
                r.answer(a, &probe(&k, *i, 1), times(1_001_000_000), &mut out)
                    .is_some()
            })
            .count();
        assert_eq!(later, 5);
        assert_eq!(r.refused, 190);
    }

    /// A probe replayed from one (spoofed) address gets that address its own share only,
    /// and another source is still answered.
    #[test]
    fn one_source_gets_its_own_rate_whatever_the_total_allows() {
        let k = key(b"0123456789abcdef0123");
        let rate = Rate {
            per_s: 1e6,
            burst: 1e6,
            per_source: 10,
        };
        let mut r = Reflector::new(Some(k.clone()), rate, Default::default());
        let (victim, peer): (SocketAddr, SocketAddr) = (
            "198.18.9.9:862".parse().unwrap(),
            "198.18.2.1:5000".parse().unwrap(),
        );
        let mut out = [0u8; 512];
        let replayed = (0..1_000)
            .filter(|_| {
                r.answer(victim, &probe(&k, 7, 1), times(1_000), &mut out)
                    .is_some()
            })
            .count();
        assert_eq!(replayed, 10);
        assert!(r
            .answer(peer, &probe(&k, 0, 2), times(2_000), &mut out)
            .is_some());
    }
}
