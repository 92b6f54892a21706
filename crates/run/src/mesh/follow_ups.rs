//! When the reflector's answers really left, told in each session's next answer (RFC 8972
//! §4.7's Follow-Up Telemetry TLV, `sonde_proto::stamp::follow_up`). An answer carries the
//! time read just before its send (its T3): a wait in this host's qdisc or a late send
//! after that read would count, at the peer, as network time. So each answer asks for the
//! kernel's transmit stamp (the driver's, keyed per send as the prober's probes do), the
//! stamps are read from the socket's error queue in batches at each wake-up, before the
//! requests, and the next answer of the session names the last one's number and its
//! stamp. No stamp yet (or none at all): the TLV stays zero, and the peer books that
//! answer by its clock read.
//!
//! [`FollowUps`] is the matching, without I/O; [`Sender`] the socket's part.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::os::fd::RawFd;

use sonde_engine::kstamps::sample;
use sonde_engine::kstamps::{datagram, ErrQueue, Queued, TxPoint};
use sonde_proto::mesh::Clocks;
use sonde_proto::stamp::{FollowUp, SessionId, TimeFormat, Timestamp, TimestampMethod};

use super::tx_stamps::TxStamps;

/// Sessions remembered at most (as the reflector's own table): beyond, one is forgotten
/// (its next answer tells no follow-up).
pub const MAX_SESSIONS: usize = 65_536;
/// How long an answer awaits its stamp: a follow-up is of use until the session's next
/// answer, a probe period later (a second by default; ten at the slowest list's share).
pub const WAIT_NS: u64 = 10_000_000_000;
/// Error-queue messages read per wake-up at most: a wake-up's answers, many times over.
const MAX_PER_CALL: usize = 1024;

/// A session's last answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Last {
    seq: u32,
    /// Its clock read (T3), real time.
    t3_ns: u64,
    /// When it really left, by its stamp.
    left_ns: Option<u64>,
}

/// The answers awaiting their stamps and each session's last one.
pub struct FollowUps {
    stamps: TxStamps<SessionId>,
    last: HashMap<SessionId, Last>,
    /// The answer written last, until its send says whether it left.
    written: Option<(SessionId, u32, Clocks)>,
}

impl Default for FollowUps {
    fn default() -> Self {
        FollowUps {
            stamps: TxStamps::new(WAIT_NS),
            last: HashMap::new(),
            written: None,
        }
    }
}

impl FollowUps {
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

    /// Answer `seq` of session `id` written with T3 at `t3`: sent next ([`FollowUps::left`]).
    pub fn written(&mut self, id: SessionId, seq: u32, t3: Clocks) {
        self.written = Some((id, seq, t3));
    }

    /// The answer written last left, asking its stamp under [`FollowUps::next_key`] when
    /// `stamped`: from now it is its session's last; without a stamp it tells nothing.
    pub fn left(&mut self, stamped: bool) {
        let Some((id, seq, t3)) = self.written.take() else {
            return;
        };
        if !self.last.contains_key(&id) && self.last.len() >= MAX_SESSIONS {
            let any = self.last.keys().next().copied();
            any.map(|k| self.last.remove(&k));
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

    /// Stops awaiting the stamps of answers written [`WAIT_NS`] before `now_ns`.
    pub fn expire(&mut self, now_ns: u64) {
        self.stamps.expire(now_ns);
    }
}

/// The reflector socket's part: answers sent asking for their stamps, the stamps read.
pub struct Sender {
    /// Keyed per send (`SCM_TS_OPT_ID`) or by the socket's count; `None`: the socket
    /// cannot (no follow-up is ever told).
    stamping: Option<bool>,
    queue: ErrQueue,
}

impl Sender {
    /// Has the socket `fd` queue the stamps of the sends that ask (best effort).
    pub fn new(fd: RawFd) -> Sender {
        let stamping = datagram::enable_departure(fd)
            .ok()
            .map(|()| sample::opt_id_per_send());
        Sender {
            stamping,
            queue: ErrQueue::default(),
        }
    }

    /// Sends the answer `bytes` to `to` on `fd`, asking for its stamp when its probe asked
    /// for a follow-up ([`FollowUps::written`]), and tells `ups` it left; the kernel
    /// refusing the ask, asks less (a key per send, then any).
    pub fn send(&mut self, fd: RawFd, bytes: &[u8], to: SocketAddr, ups: &mut FollowUps) {
        if ups.written.is_none() {
            let _ = sample::send_batch(fd, &[(bytes, to)], None);
            return;
        }
        loop {
            let ask = self.stamping.map(|keyed| (keyed, ups.next_key()));
            match sample::send_batch(fd, &[(bytes, to)], ask) {
                Ok(1) => return ups.left(ask.is_some()),
                Err(e) if ask.is_some() && e.raw_os_error() == Some(libc::EINVAL) => {
                    tracing::warn!("mesh: an answer's transmit stamp refused ({e}); asking less");
                    self.stamping = self.stamping.and_then(|keyed| keyed.then_some(false));
                }
                _ => return ups.written = None,
            }
        }
    }

    /// The stamps queued on `fd` now (the driver's), each given to `ups`; the answers
    /// written [`WAIT_NS`] before `now_ns` stop waiting.
    pub fn read(&mut self, fd: RawFd, ups: &mut FollowUps, now_ns: u64) -> io::Result<usize> {
        // Nothing awaited (no probe asked): no system call.
        if !ups.stamps.awaiting() {
            return Ok(0);
        }
        let got = self.queue.drain_all(fd, MAX_PER_CALL, |m| {
            if let Queued::Stamp(s) = m {
                if s.point == TxPoint::Driver {
                    ups.stamp(s.key, s.ns);
                }
            }
        });
        ups.expire(now_ns);
        got
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

    /// Writes and sends (stamped) answer `seq` of `id` at `ms`; its key.
    fn answer(u: &mut FollowUps, id: SessionId, seq: u32, ms: u64) -> u32 {
        let key = u.next_key();
        u.written(id, seq, at(ms));
        u.left(true);
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
        let mut u = FollowUps::default();
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

    /// An answer sent without a stamp asked (or not sent) tells nothing next; the
    /// sessions remembered are bounded.
    #[test]
    fn without_a_stamp_or_a_send_nothing_is_told_and_sessions_are_bounded() {
        let mut u = FollowUps::default();
        let a = session(1, 1);
        let k = answer(&mut u, a, 0, 0);
        u.stamp(k, REAL0 + MS);
        u.written(a, 1, at(1000));
        u.left(false);
        assert_eq!(u.told(a, TimeFormat::Ntp), None, "answer 1 asked no stamp");
        u.written(a, 2, at(2000));
        // Never sent: its session's last stays answer 1.
        u.written = None;
        u.left(true);
        assert_eq!(u.last[&a].seq, 1);
        for i in 0..MAX_SESSIONS as u32 + 10 {
            let id = SessionId {
                addr: std::net::Ipv4Addr::from(i).into(),
                port: 0,
                ssid: 1,
            };
            u.written(id, 0, at(3000));
            u.left(false);
        }
        assert_eq!(u.last.len(), MAX_SESSIONS);
    }
}
