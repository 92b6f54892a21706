//! The mesh agent's STAMP reflector: it answers only probes signed under the key of their
//! source address and this agent's (`sonde_proto::mesh::probe_key`; on an agent without a
//! key, `--insecure-no-key`, any STAMP probe from the addresses of its own peer list), each
//! sequence number of a session once (the codec's session table: a window of the last 64,
//! as IPsec's anti-replay), with exactly as many bytes as came (the codec's `reflect`),
//! signed under its own address's key, within a rate of answers per second, and numbers
//! what it reflects per session (sender address and SSID): the prober tells from those
//! numbers which way a lost probe went. Sessions are bounded, [`PER_SOURCE`] per address;
//! the least recently heard is forgotten first. Each answer tells, in the probe's
//! Follow-Up Telemetry TLV, when its session's last answer really left ([`FollowUps`]).

use foldhash::{HashSet, HashSetExt};
use std::net::{IpAddr, SocketAddr};

use sonde_proto::mesh::{reflect_probe, Own};
use sonde_proto::stamp::{
    self, DscpPolicy, ErrorEstimate, Heard, Limits, Mode, Reflection, SessionId, Sessions,
    StampKey, SyncSource, Timestamp, TimestampInfo,
};

use super::follow_ups::{FollowUps, Written};
use super::keys::Keys;

/// Sessions remembered at most (a session is about 40 bytes and a map slot).
pub const MAX_SESSIONS: usize = 65_536;
/// Sessions one source address holds at most: a peer's prober has one SSID, a new one
/// at each restart.
pub const PER_SOURCE: usize = 4;

/// Answers per second at most, all senders together, and the burst allowed; and per
/// source address, whatever the total allows.
#[derive(Debug, Clone, Copy)]
pub struct Rate {
    pub per_s: f64,
    pub burst: f64,
    pub per_source: u32,
}

/// The mesh agent's own reflector (keyed, per-source sessions); `sonde serve --stamp`'s
/// unauthenticated one is `crate::stamp::reflector`.
pub struct MeshReflector {
    keys: Option<Keys>,
    /// This agent's labels, answered in a probe's Labels TLV.
    labels: sonde_proto::Labels,
    sessions: Sessions,
    /// Without a key: the sources answered, its listed peers' addresses.
    listed: HashSet<IpAddr>,
    /// Told a peer in its probe's Boot ID TLV.
    boot_id: Option<[u8; stamp::tlv::BOOT_ID_BYTES]>,
    rate: Rate,
    sources: crate::stamp::guard::Limiter,
    /// `Times::mono_ns` counts from here: the per-source limiter reads the same clock as
    /// the total's, the caller's.
    epoch: std::time::Instant,
    tokens: f64,
    refilled_ns: u64,
    /// The DSCPs a probe's Class of Service TLV may have its answer sent with besides the
    /// one it arrived with and CS0: this agent's own `--mesh-dscp`, no other.
    dscp_policy: DscpPolicy,
    /// Each session's last answer and its real departure, told in the next.
    pub follow_ups: FollowUps,
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
    /// The TTL (hop limit) the request came with, returned to its sender.
    pub ttl: u8,
    /// The TOS byte the request came with, told in its Class of Service TLV; `None`: the
    /// kernel did not say (the TLV is left unfilled, the answer unmarked).
    pub tos: Option<u8>,
}

impl MeshReflector {
    pub fn new(keys: Option<Keys>, rate: Rate, labels: sonde_proto::Labels) -> MeshReflector {
        let keyed = keys.is_some();
        MeshReflector {
            keys,
            labels,
            sessions: Sessions::new(Limits {
                max_sessions: MAX_SESSIONS,
                per_source: PER_SOURCE,
                idle_ns: None,
                once: keyed,
                max_skew_ns: None,
            }),
            listed: HashSet::new(),
            boot_id: crate::stamp::clock::boot_id(),
            rate,
            sources: crate::stamp::guard::Limiter::with_room(
                rate.per_source,
                2 * super::peers::MAX_PEERS,
            ),
            epoch: std::time::Instant::now(),
            tokens: rate.burst,
            refilled_ns: 0,
            dscp_policy: DscpPolicy::default(),
            follow_ups: FollowUps::new(PER_SOURCE),
            reflected: 0,
            refused: 0,
        }
    }

    /// Lets answers take `policy`'s DSCPs at a probe's asking (besides the arrived one and CS0).
    pub fn set_dscp_policy(&mut self, policy: DscpPolicy) {
        self.dscp_policy = policy;
    }

    /// Forgets the routing lookups of its own addresses (the list is read again).
    pub fn forget_routes(&mut self) {
        if let Some(k) = &mut self.keys {
            k.forget_routes();
        }
    }

    /// The peers listed now: without a key, the only sources answered.
    pub fn listed(&mut self, peers: impl IntoIterator<Item = IpAddr>) {
        self.listed = peers.into_iter().map(|ip| ip.to_canonical()).collect();
    }

    /// The answer to `request` from `from` written into `out`: its length, and when its
    /// probe asked for a follow-up, what its session's next answer will tell once it is
    /// sent ([`FollowUps::left`]); `None` when it is refused (not signed under the key of
    /// `from` and this agent, or without a key from a source not listed; a sequence number
    /// answered already; over the rate).
    pub fn answer(
        &mut self,
        from: SocketAddr,
        request: &[u8],
        t: Times,
        out: &mut [u8],
    ) -> Option<(usize, Option<Written>)> {
        let ip = from.ip();
        let refused = match &self.keys {
            // Too short to check: refused before a key is derived for its source.
            Some(_) => request.len() < stamp::AUTH_BASE_BYTES,
            None => !self.listed.contains(&ip.to_canonical()),
        };
        if refused {
            self.refused += 1;
            return None;
        }
        let theirs = self.keys.as_mut().map(|k| k.probe_from(ip));
        let mode = theirs
            .as_deref()
            .map_or(Mode::Unauthenticated, Mode::Authenticated);
        let Ok(asked) = stamp::SenderPacket::read(request, mode) else {
            self.refused += 1;
            return None;
        };
        let session = SessionId {
            addr: ip,
            port: 0,
            ssid: asked.ssid,
        };
        // Keyed: a replayed sequence number is refused before it spends its source's
        // answers (keyless, nothing is refused here).
        if self
            .sessions
            .admit(session, Heard::of(&asked, 0, t.mono_ns, 0))
            .is_err()
        {
            self.refused += 1;
            return None;
        }
        if let (Some(k), Some(key)) = (&mut self.keys, &theirs) {
            k.trust_probe(ip, key);
        }
        let now = self.epoch + std::time::Duration::from_nanos(t.mono_ns);
        if !self.sources.take(ip, now) || !self.take_token(t.mono_ns) {
            self.refused += 1;
            return None;
        }
        let seq = self.sessions.number(session);
        let how = Reflection {
            seq: Some(seq),
            receive: t.receive,
            transmit: t.transmit,
            estimate: t.estimate,
            ttl: t.ttl,
            info: TimestampInfo::software(SyncSource::Ntp),
            boot_id: self.boot_id,
            tos: t.tos,
            dscp_policy: self.dscp_policy,
        };
        let own = Own {
            labels: &self.labels,
            told: self.follow_ups.told(session, t.estimate.format),
        };
        // The answer under this agent's own key for the address it leaves from.
        let mine: Option<&StampKey> = self.keys.as_mut().map(|k| k.mine(ip));
        let answer = mine.map_or(Mode::Unauthenticated, Mode::Authenticated);
        match reflect_probe(&asked, request, (mode, answer), &how, own, out) {
            Ok((n, wants)) => {
                // Only a probe that asks gets its answer's departure stamped and told.
                let written = wants.then(|| Written {
                    id: session,
                    seq,
                    t3: sonde_proto::mesh::Clocks {
                        mono_ns: t.mono_ns,
                        real_ns: t.transmit.to_unix_ns(t.estimate.format),
                    },
                });
                self.reflected += 1;
                Some((n, written))
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
    use sonde_proto::mesh::{address_key, probe_key};
    use sonde_proto::stamp::{ReflectorPacket, SenderPacket, TimeFormat, AUTH_BASE_BYTES};

    /// This reflector's own address: its answers are signed under its key.
    const OWN: &str = "198.18.2.100";

    fn mesh() -> StampKey {
        StampKey::new(b"0123456789abcdef0123").unwrap()
    }

    /// The key of `from`'s probes to this reflector.
    fn key_of(from: SocketAddr) -> StampKey {
        probe_key(&mesh(), from.ip(), OWN.parse().unwrap())
    }

    fn reflector(rate: Rate) -> MeshReflector {
        let keys = Keys::new(mesh(), OWN.parse().unwrap());
        MeshReflector::new(Some(keys), rate, Default::default())
    }

    fn times(mono_ns: u64) -> Times {
        Times {
            mono_ns,
            receive: Timestamp(1),
            transmit: Timestamp(2),
            estimate: ErrorEstimate::unknown(TimeFormat::Ntp),
            ttl: 64,
            tos: None,
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

    fn addrs() -> (SocketAddr, SocketAddr) {
        (
            "198.18.2.1:5000".parse().unwrap(),
            "198.18.2.2:5000".parse().unwrap(),
        )
    }

    #[test]
    fn probes_keyed_for_their_source_are_numbered_per_session_and_others_refused() {
        let mut r = reflector(Rate {
            per_s: 1e6,
            burst: 100.0,
            per_source: 1_000,
        });
        let (a, b) = addrs();
        let own = address_key(&mesh(), OWN.parse().unwrap());
        let mut out = [0u8; 512];
        for (from, seq, ssid, want) in [(a, 7, 1, 0), (a, 9, 1, 1), (b, 3, 1, 0), (a, 10, 2, 0)] {
            let (n, _) = r
                .answer(from, &probe(&key_of(from), seq, ssid), times(1), &mut out)
                .unwrap();
            assert_eq!(n, AUTH_BASE_BYTES);
            // The answer checks under the reflector's own address key only.
            assert!(ReflectorPacket::read(&out[..n], Mode::Authenticated(&key_of(from))).is_err());
            let got = ReflectorPacket::read(&out[..n], Mode::Authenticated(&own)).unwrap();
            assert_eq!((got.seq, got.sender_seq, got.ssid), (want, seq, ssid));
            assert_eq!(got.sender_ttl, 64, "the request's TTL, returned");
        }
        // Another key's probe, the fleet's mesh key itself, b's probe from a, an
        // unauthenticated one, garbage: no answer, counted.
        let other = StampKey::new(b"another-key-of-16+").unwrap();
        for k in [other, mesh(), key_of(b)] {
            assert!(r.answer(a, &probe(&k, 11, 1), times(2), &mut out).is_none());
        }
        let mut open = vec![0; 44];
        SenderPacket::default()
            .write(Mode::Unauthenticated, &mut open)
            .unwrap();
        assert!(r.answer(a, &open, times(2), &mut out).is_none());
        assert!(r.answer(a, b"junk", times(2), &mut out).is_none());
        assert_eq!((r.reflected, r.refused), (4, 5));
    }

    /// A sequence number is answered once per session: a replay, even from the true
    /// source and port, is refused; reordered ones within the window are answered once,
    /// older ones never; another session (SSID) has its own window.
    #[test]
    fn each_sequence_number_of_a_session_is_answered_once() {
        let mut r = reflector(Rate {
            per_s: 1e6,
            burst: 1e6,
            per_source: 100_000,
        });
        let (a, _) = addrs();
        let other_port: SocketAddr = "198.18.2.1:6000".parse().unwrap();
        let k = key_of(a);
        let mut out = [0u8; 512];
        let mut ask = |from, seq, ssid| {
            r.answer(from, &probe(&k, seq, ssid), times(1), &mut out)
                .is_some()
        };
        let got: Vec<bool> = [
            (a, 100, 1),
            (a, 100, 1),
            (other_port, 100, 1),
            (a, 98, 1),
            (a, 98, 1),
            (a, 200, 1),
            (a, 137, 1),
            (a, 136, 1),
            (a, 137, 1),
            (a, 100, 2),
            (a, u32::MAX, 3),
            (a, 0, 3),
            (a, u32::MAX, 3),
        ]
        .iter()
        .map(|&(from, seq, ssid)| ask(from, seq, ssid))
        .collect();
        assert_eq!(
            got,
            [true, false, false, true, false, true, true, false, false, true, true, true, false]
        );
    }

    /// H2: a probe of `a`'s to another reflector, re-sent from `a`'s address, does not
    /// check here: no answer, and `a`'s own probes (numbered lower, the same SSID) are all
    /// answered after it. The same probe signed with `a`'s address key alone (the key
    /// before the fix) is refused too.
    #[test]
    fn a_probe_for_another_reflector_is_refused_and_moves_no_window() {
        let mut r = reflector(Rate {
            per_s: 1e6,
            burst: 1e6,
            per_source: 100_000,
        });
        let (a, _) = addrs();
        let elsewhere = probe_key(&mesh(), a.ip(), "198.18.2.7".parse().unwrap());
        let mut out = [0u8; 512];
        for k in [elsewhere, address_key(&mesh(), a.ip())] {
            assert!(r
                .answer(a, &probe(&k, 623, 1), times(1), &mut out)
                .is_none());
        }
        let own = (0..100)
            .filter(|i| {
                r.answer(a, &probe(&key_of(a), *i, 1), times(2), &mut out)
                    .is_some()
            })
            .count();
        assert_eq!((own, r.refused), (100, 2));
    }

    /// L3: without a key, only the listed peers' addresses are answered.
    #[test]
    fn a_keyless_reflector_answers_its_listed_peers_only() {
        let rate = Rate {
            per_s: 1e6,
            burst: 1e6,
            per_source: 1_000,
        };
        let mut r = MeshReflector::new(None, rate, Default::default());
        let (a, b) = addrs();
        r.listed([a.ip()]);
        let mut open = vec![0; 44];
        SenderPacket::default()
            .write(Mode::Unauthenticated, &mut open)
            .unwrap();
        let mut out = [0u8; 512];
        assert!(r.answer(a, &open, times(1), &mut out).is_some());
        assert!(r.answer(b, &open, times(1), &mut out).is_none());
        let mapped: SocketAddr = "[::ffff:198.18.2.1]:5000".parse().unwrap();
        assert!(r.answer(mapped, &open, times(1), &mut out).is_some());
        assert_eq!((r.reflected, r.refused), (2, 1));
    }

    #[test]
    fn answers_stay_within_the_rate() {
        let mut r = reflector(Rate {
            per_s: 10.0,
            burst: 5.0,
            per_source: 1_000,
        });
        let (a, _) = addrs();
        let k = key_of(a);
        let mut out = [0u8; 512];
        let answered = (0..100)
            .filter(|i| {
                r.answer(a, &probe(&k, *i, 1), times(1_000_000), &mut out)
                    .is_some()
            })
            .count();
        assert_eq!(answered, 5, "the burst");
        // A second later, ten more tokens, capped at the burst.
        let later = (100..200)
            .filter(|i| {
                r.answer(a, &probe(&k, *i, 1), times(1_001_000_000), &mut out)
                    .is_some()
            })
            .count();
        assert_eq!(later, 5);
        assert_eq!(r.refused, 190);
    }

    /// A peer's probe replayed from another (spoofed) address is never answered there; one
    /// source gets its own rate only, whatever the total allows.
    #[test]
    fn a_probe_from_another_source_is_refused_and_one_source_gets_its_own_rate() {
        let rate = Rate {
            per_s: 1e6,
            burst: 1e6,
            per_source: 10,
        };
        let mut r = reflector(rate);
        let (peer, _) = addrs();
        let victim: SocketAddr = "198.18.9.9:862".parse().unwrap();
        let mut out = [0u8; 512];
        let replayed = (0..1_000)
            .filter(|i| {
                r.answer(victim, &probe(&key_of(peer), *i, 1), times(1_000), &mut out)
                    .is_some()
            })
            .count();
        assert_eq!(replayed, 0);
        // All at one moment: the source's burst, one second's worth.
        let own = (0..100)
            .filter(|i| {
                r.answer(peer, &probe(&key_of(peer), *i, 2), times(2_000), &mut out)
                    .is_some()
            })
            .count();
        assert_eq!(own, 10);
        // A second later, ten more.
        let later = (100..200)
            .filter(|i| {
                let at = times(1_000_002_000);
                r.answer(peer, &probe(&key_of(peer), *i, 2), at, &mut out)
                    .is_some()
            })
            .count();
        assert_eq!(later, 10);
    }

    /// A keyed peer's probe that arrived CS0 asking (in its Class of Service TLV) for CS7 or
    /// EF on the answer: an unmarked mesh's reflector answers CS0 and says it refused (RPD
    /// 1); a mesh marked EF grants EF (its own class), never CS7.
    #[test]
    fn a_probe_can_ask_only_for_the_mesh_class_on_its_answer() {
        use sonde_proto::stamp::tlv;
        let rate = Rate {
            per_s: 1e6,
            burst: 1e6,
            per_source: 1_000,
        };
        let (a, _) = addrs();
        let k = key_of(a);
        let asking = |seq: u32, dscp: u8| {
            let mut b = vec![0; AUTH_BASE_BYTES + 512];
            let n = sonde_proto::mesh::marks::put_request(
                &mut b[AUTH_BASE_BYTES..],
                Some(&k),
                seq,
                Some(dscp << 2),
                false,
                true,
            )
            .unwrap();
            b.truncate(AUTH_BASE_BYTES + n);
            let p = SenderPacket {
                seq,
                ssid: 1,
                ..Default::default()
            };
            p.write(Mode::Authenticated(&k), &mut b).unwrap();
            b
        };
        let answered = |r: &mut MeshReflector, seq, dscp| {
            let mut out = [0u8; 512];
            let t = Times {
                tos: Some(0),
                ..times(1)
            };
            let (n, _) = r.answer(a, &asking(seq, dscp), t, &mut out).unwrap();
            let cos = tlv::class_of_service(&out[AUTH_BASE_BYTES..n]).unwrap();
            (cos.dscp1, cos.rpd, cos.answer_tos() >> 2)
        };
        let mut plain = reflector(rate);
        assert_eq!(answered(&mut plain, 1, 56), (56, 1, 0));
        assert_eq!(answered(&mut plain, 2, 46), (46, 1, 0));
        let mut ef = reflector(rate);
        ef.set_dscp_policy(DscpPolicy::allowing([46]));
        assert_eq!(answered(&mut ef, 1, 46), (46, 0, 46));
        assert_eq!(answered(&mut ef, 2, 56), (56, 1, 0));
    }
}
