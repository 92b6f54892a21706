//! When the reflector's answers really left, told in each session's next answer (RFC 8972
//! §4.7's Follow-Up Telemetry TLV, `sonde_proto::stamp::follow_up`). An answer carries the
//! time read when it was written (its T3): a wait in this host's qdisc or a late send
//! after that read would count at the peer as network time. So each answer whose probe asked
//! asks for the kernel's transmit stamp (the driver's, keyed per send as the prober's
//! probes do), the stamps are read at each wake-up before the requests (from an io_uring
//! ring where the kernel has one for them, else the socket's error queue: `departures`),
//! and the next answer of the session names the last one's number and its stamp. No
//! stamp yet (or none at all): the TLV stays zero, and the peer books that answer by its
//! clock read.
//!
//! [`FollowUps`] is the matching, without I/O; [`Stamps`] the socket's part.

use foldhash::{HashMap, HashMapExt};
use std::net::IpAddr;
use std::os::fd::RawFd;

use sonde_engine::kstamps::sample;
use sonde_engine::kstamps::{datagram, TxPoint};
use sonde_proto::mesh::Clocks;
use sonde_proto::stamp::{FollowUp, SessionId, TimeFormat, Timestamp, TimestampMethod};

use super::departures::StampReader;
use super::tx_stamps::TxStamps;

/// Sessions remembered at most (as the reflector's own table): beyond, one is forgotten
/// (its next answer tells no follow-up); as many of one address as its reflector's
/// session table keeps ([`FollowUps::new`]), the least recently answered forgotten first
/// (so that an address's new sessions, a spoofer's on a keyless mesh among them, forget
/// none of another's).
pub const MAX_SESSIONS: usize = 65_536;
/// How long an answer awaits its stamp: a follow-up is of use until the session's next
/// answer, a probe period later (a second by default; ten at the slowest list's share).
pub const WAIT_NS: u64 = 10_000_000_000;

/// A session's last answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Last {
    seq: u32,
    /// Its clock read (T3), real time.
    t3_ns: u64,
    /// When it really left, by its stamp.
    left_ns: Option<u64>,
}

/// An answer written whose probe asked for a follow-up, until it is sent
/// ([`FollowUps::left`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    pub id: SessionId,
    pub seq: u32,
    /// Its clock read (T3).
    pub t3: Clocks,
}

/// The answers awaiting their stamps and each session's last one.
pub struct FollowUps {
    stamps: TxStamps<SessionId>,
    last: HashMap<SessionId, Last>,
    /// Each address's sessions in `last` (their SSIDs), least recently answered first.
    sources: HashMap<IpAddr, Vec<u16>>,
    /// Sessions of one address remembered at most.
    per_source: usize,
}

impl FollowUps {
    /// Remembering at most `per_source` sessions of one address.
    pub fn new(per_source: usize) -> FollowUps {
        FollowUps {
            stamps: TxStamps::new(WAIT_NS),
            last: HashMap::new(),
            sources: HashMap::new(),
            per_source,
        }
    }

    /// What session `id`'s next answer tells: its last answer's number and real
    /// departure, once stamped (in `format`, the answer's own).
    pub fn told(&self, id: SessionId, format: TimeFormat) -> Option<FollowUp> {
        let last = self.last.get(&id)?;
        Some(FollowUp {
            seq: last.seq,
            timestamp: Timestamp::from_unix_ns(last.left_ns?, format),
            mode: TimestampMethod::Software,
        })
    }

    /// The answer `w` left, asking its stamp under [`FollowUps::next_key`] when `stamped`:
    /// from now it is its session's last; without a stamp it tells nothing.
    pub fn left(&mut self, w: Written, stamped: bool) {
        let Written { id, seq, t3 } = w;
        let ssids = self.sources.entry(id.addr).or_default();
        match ssids.iter().position(|&s| s == id.ssid) {
            Some(i) => _ = ssids.remove(i),
            None if ssids.len() >= self.per_source => {
                let ssid = ssids.remove(0);
                self.last.remove(&SessionId { ssid, ..id });
            }
            None => {}
        }
        ssids.push(id.ssid);
        if self.last.len() >= MAX_SESSIONS && !self.last.contains_key(&id) {
            if let Some(k) = self.last.keys().next().copied() {
                self.last.remove(&k);
                if let Some(s) = self.sources.get_mut(&k.addr) {
                    s.retain(|&ssid| ssid != k.ssid);
                    if s.is_empty() {
                        self.sources.remove(&k.addr);
                    }
                }
            }
        }
        let t3_ns = t3.real_ns;
        let left_ns = None;
        self.last.insert(
            id,
            Last {
                seq,
                t3_ns,
                left_ns,
            },
        );
        if stamped {
            self.stamps.sent(id, seq, t3);
        }
    }

    /// The key the next answer's stamp carries.
    pub fn next_key(&self) -> u32 {
        self.stamps.next_key()
    }

    /// The stamp of key `key` at `real_ns`: its answer's real departure, if that answer
    /// is still its session's last.
    pub fn stamp(&mut self, key: u32, real_ns: u64) {
        let Some(d) = self.stamps.stamp(key, real_ns) else {
            return;
        };
        if let Some(last) = self.last.get_mut(&d.to).filter(|l| l.seq == d.seq) {
            last.left_ns = Some(last.t3_ns + d.late_ns);
        }
    }

    /// Sessions whose last answer is remembered.
    #[cfg(test)]
    pub fn sessions(&self) -> usize {
        self.last.len()
    }

    /// Stops awaiting the stamps of answers written [`WAIT_NS`] before `now_ns`.
    pub fn expire(&mut self, now_ns: u64) {
        self.stamps.expire(now_ns);
    }
}

/// The reflector socket's part: how its sends ask for their stamps, and where the
/// stamps are read.
pub struct Stamps {
    /// Keyed per send (`SCM_TS_OPT_ID`) or by the socket's count; `None`: the socket
    /// cannot (no follow-up is ever told).
    stamping: Option<bool>,
    /// Made at the first send that asks: follow-ups are opt-in, and an agent no peer asks
    /// holds no second ring.
    pub(super) reader: Option<StampReader>,
}

impl Stamps {
    /// Has the socket `fd` stamp the sends that ask (best effort).
    pub fn new(fd: RawFd) -> Stamps {
        let stamping = datagram::enable_departure(fd)
            .ok()
            .map(|()| sample::opt_id_per_send());
        Stamps {
            stamping,
            reader: None,
        }
    }

    /// What a send on `fd` of answers that asked passes `sample::send_batch`: how they
    /// are keyed and the first's key; `None` when the socket cannot stamp.
    pub fn ask(&mut self, fd: RawFd, ups: &FollowUps) -> Option<(bool, u32)> {
        let keyed = self.stamping?;
        self.reader
            .get_or_insert_with(|| StampReader::new(fd, true));
        Some((keyed, ups.next_key()))
    }

    /// The kernel refused the ask: asks less (a key per send, then nothing).
    pub fn refused(&mut self, e: &std::io::Error) {
        tracing::warn!("mesh: an answer's transmit stamp refused ({e}); asking less");
        self.stamping = self.stamping.and_then(|keyed| keyed.then_some(false));
    }

    /// The stamps come on `fd` now (the driver's), each given to `ups`; the answers
    /// written [`WAIT_NS`] before `now_ns` stop waiting.
    pub fn read(&mut self, fd: RawFd, ups: &mut FollowUps, now_ns: u64) {
        // Nothing awaited (no probe asked): no system call.
        let Some(reader) = self.reader.as_mut().filter(|_| ups.stamps.awaiting()) else {
            return;
        };
        let stamp = |s: sonde_engine::kstamps::TxStamp| {
            if s.point == TxPoint::Driver {
                ups.stamp(s.key, s.ns);
            }
        };
        // The reflector's socket takes no ICMP errors (no `IP_RECVERR`).
        reader.read(fd, now_ns, stamp, |_, _| {});
        ups.expire(now_ns);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const REAL0: u64 = 1_780_000_000_000_000_000;

    fn session(k: u8, ssid: u16) -> SessionId {
        SessionId {
            addr: [198, 18, 2, k].into(),
            port: 0,
            ssid,
        }
    }

    fn at(ms: u64) -> Clocks {
        Clocks {
            mono_ns: ms * MS,
            real_ns: REAL0 + ms * MS,
        }
    }

    fn written(id: SessionId, seq: u32, ms: u64) -> Written {
        Written {
            id,
            seq,
            t3: at(ms),
        }
    }

    /// Writes and sends (stamped) answer `seq` of `id` at `ms`; its key.
    fn answer(u: &mut FollowUps, id: SessionId, seq: u32, ms: u64) -> u32 {
        let key = u.next_key();
        u.left(written(id, seq, ms), true);
        key
    }

    fn follow(seq: u32, left_ns: u64) -> Option<FollowUp> {
        Some(FollowUp {
            seq,
            timestamp: Timestamp::from_unix_ns(left_ns, TimeFormat::Ntp),
            mode: TimestampMethod::Software,
        })
    }

    /// Each session's next answer tells its last one's stamp, once stamped; two sessions
    /// of one address apart; a stamp of an answer no longer its session's last tells
    /// nothing.
    #[test]
    fn a_session_tells_its_last_answers_stamp_once_it_came() {
        let mut u = FollowUps::new(4);
        let (a, a2, b) = (session(1, 1), session(1, 2), session(2, 1));
        let ka = answer(&mut u, a, 0, 0);
        let kb = answer(&mut u, b, 0, 1);
        assert_eq!(u.told(a, TimeFormat::Ntp), None, "no stamp yet");
        u.stamp(ka, REAL0 + 40 * MS);
        u.stamp(kb, REAL0 + 2 * MS);
        assert_eq!(u.told(a, TimeFormat::Ntp), follow(0, REAL0 + 40 * MS));
        assert_eq!(u.told(b, TimeFormat::Ntp), follow(0, REAL0 + 2 * MS));
        assert_eq!(u.told(a2, TimeFormat::Ntp), None, "another session");
        // The next answer is the last: until its stamp, nothing; an old key moves nothing.
        let ka1 = answer(&mut u, a, 1, 1000);
        assert_eq!(u.told(a, TimeFormat::Ntp), None);
        u.stamp(ka, REAL0 + 1001 * MS);
        assert_eq!(
            u.told(a, TimeFormat::Ntp),
            None,
            "a stamp of answer 0 again"
        );
        u.stamp(ka1, REAL0 + 1000 * MS + 5);
        assert_eq!(u.told(a, TimeFormat::Ntp), follow(1, REAL0 + 1000 * MS + 5));
    }

    /// An answer sent without a stamp asked tells nothing next; the sessions remembered
    /// are bounded.
    #[test]
    fn without_a_stamp_or_a_send_nothing_is_told_and_sessions_are_bounded() {
        let mut u = FollowUps::new(4);
        let a = session(1, 1);
        let k = answer(&mut u, a, 0, 0);
        u.stamp(k, REAL0 + MS);
        u.left(written(a, 1, 1000), false);
        assert_eq!(u.told(a, TimeFormat::Ntp), None, "answer 1 asked no stamp");
        assert_eq!(u.last[&a].seq, 1);
        for i in 0..MAX_SESSIONS as u32 + 10 {
            let id = SessionId {
                addr: std::net::Ipv4Addr::from(i).into(),
                port: 0,
                ssid: 1,
            };
            u.left(written(id, 0, 3000), false);
        }
        assert_eq!(u.last.len(), MAX_SESSIONS);
    }
}
