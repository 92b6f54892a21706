//! A session-reflector's sessions, without I/O, for every reflector of sonde's (`serve
//! --stamp`, the mesh's): which session a test packet belongs to, whether it is due an
//! answer (each sequence number once, the sender's timestamp near the reflector's clock:
//! RFC 8762 §4.4's protection against replay in authenticated mode) and the number a
//! stateful reflector gives its answer (RFC 8762 §4.3.1). The caller passes the time in:
//! a monotonic clock for idleness and eviction, the real-time clock for the timestamp.
//!
//! Memory is bounded, and no sender is locked out by others: a source address holds at
//! most [`Limits::per_source`] sessions (its own least recently heard forgotten for a new
//! one), the table at most [`Limits::max_sessions`] (when full, the least recently heard
//! sixteenth is forgotten at once, a cost shared by the next sixteenth of new sessions).
//! A forgotten session that speaks again starts anew: numbered from 0, its window empty.

use foldhash::{HashMap, HashMapExt};
use std::net::IpAddr;

/// Sequence numbers below a session's highest still answered once (reordered), as IPsec's
/// anti-replay window.
pub const WINDOW: u32 = 64;

/// Which session a packet belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SessionId {
    pub addr: IpAddr,
    /// The sender's port, or 0 where a reflector does not tell sessions apart by port
    /// (authenticated mode: a replay from another port is the same session's).
    pub port: u16,
    pub ssid: u16,
}

/// A reflector's policy for its sessions.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_sessions: usize,
    pub per_source: usize,
    /// A session unheard this long starts anew at its next packet; `None`: never.
    pub idle_ns: Option<u64>,
    /// Each sequence number of a session is answered once (a sender that starts again,
    /// its timestamps newer than any answered, starts a new session).
    pub once: bool,
    /// A packet whose timestamp is further than this from the reflector's real-time clock
    /// is refused; `None`: not checked.
    pub max_skew_ns: Option<u64>,
}

/// Why a packet gets no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("its sequence number was answered already in its session (a replay)")]
    Replayed,
    #[error("its timestamp is further from the reflector's clock than the bound")]
    OutOfTime,
}

/// What the reflector knows of one packet.
#[derive(Debug, Clone, Copy)]
pub struct Heard {
    pub seq: u32,
    /// The sender's timestamp, nanoseconds since 1970 on UTC's scale.
    pub sent_ns: u64,
    /// The monotonic clock.
    pub mono_ns: u64,
    /// The reflector's real-time clock (its receive stamp), nanoseconds since 1970.
    pub real_ns: u64,
}

impl Heard {
    /// What a reflector knows of the test packet `p` received at `mono_ns` and `real_ns`;
    /// a PTP timestamp (TAI) is brought to UTC's scale by `tai_utc_s`.
    pub fn of(p: &super::SenderPacket, tai_utc_s: u64, mono_ns: u64, real_ns: u64) -> Heard {
        let format = p.estimate.format;
        let mut sent_ns = p.timestamp.to_unix_ns(format);
        if format == super::TimeFormat::Ptp {
            sent_ns = sent_ns.saturating_sub(tai_utc_s * 1_000_000_000);
        }
        Heard {
            seq: p.seq,
            sent_ns,
            mono_ns,
            real_ns,
        }
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct Session {
    /// The number of its next answer.
    next: u32,
    heard_ns: u64,
    /// The highest sequence number answered, and which of the [`WINDOW`] below it were
    /// (bit i: `top - i`; none yet when 0).
    top: u32,
    seen: u64,
    /// The newest sender's timestamp answered.
    newest_sent_ns: u64,
    /// Packets stamped before this belong to the sender's run before it started again.
    floor_ns: u64,
}

impl Session {
    /// Whether `seq` is new to this session (then it is marked).
    fn fresh(&mut self, seq: u32) -> bool {
        let ahead = seq.wrapping_sub(self.top) as i32;
        if self.seen == 0 || ahead > 0 {
            let shift = if self.seen == 0 { 64 } else { ahead as u32 };
            self.seen = if shift >= 64 {
                1
            } else {
                (self.seen << shift) | 1
            };
            self.top = seq;
            return true;
        }
        let back = self.top.wrapping_sub(seq);
        if back >= WINDOW || self.seen & (1 << back) != 0 {
            return false;
        }
        self.seen |= 1 << back;
        true
    }
}

/// One reflector's sessions.
#[derive(Debug)]
pub struct Sessions {
    limits: Limits,
    map: HashMap<SessionId, Session>,
    /// Each source address's sessions (at most `per_source`).
    by_source: HashMap<IpAddr, Vec<SessionId>>,
}

impl Sessions {
    pub fn new(limits: Limits) -> Sessions {
        Sessions {
            limits: Limits {
                max_sessions: limits.max_sessions.max(1),
                per_source: limits.per_source.max(1),
                ..limits
            },
            map: HashMap::new(),
            by_source: HashMap::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Whether the packet `p` of session `id` is due an answer; if so it is recorded (its
    /// number marked, the session heard, made if new). A refused packet opens no session
    /// and moves none.
    pub fn admit(&mut self, id: SessionId, p: Heard) -> Result<(), Refusal> {
        if let Some(bound) = self.limits.max_skew_ns {
            if p.sent_ns.abs_diff(p.real_ns) > bound {
                return Err(Refusal::OutOfTime);
            }
        }
        if !self.map.contains_key(&id) {
            self.make_room(id);
            self.by_source.entry(id.addr).or_default().push(id);
            self.map.insert(id, Session::default());
        }
        let s = self.map.get_mut(&id).expect("made above");
        if (self.limits.idle_ns).is_some_and(|i| p.mono_ns.saturating_sub(s.heard_ns) >= i) {
            *s = Session::default();
        }
        if self.limits.once && (p.sent_ns < s.floor_ns || !s.fresh(p.seq)) {
            // Answered already: a replay, unless the sender started again (a replay's
            // timestamp is never newer than every one answered; the HMAC covers it).
            // The run before is over then: its packets are replays, whatever their number.
            if p.sent_ns <= s.newest_sent_ns {
                return Err(Refusal::Replayed);
            }
            *s = Session {
                floor_ns: p.sent_ns,
                ..Session::default()
            };
            s.fresh(p.seq);
        }
        s.heard_ns = p.mono_ns;
        s.newest_sent_ns = s.newest_sent_ns.max(p.sent_ns);
        Ok(())
    }

    /// The number of session `id`'s next answer (stateful mode), after [`Sessions::admit`].
    pub fn number(&mut self, id: SessionId) -> u32 {
        let s = self.map.get_mut(&id).map(|s| {
            let n = s.next;
            s.next = n.wrapping_add(1);
            n
        });
        s.unwrap_or(0)
    }

    /// Room for `id`'s new session: its source's least recently heard one forgotten at
    /// the source's cap, the least recently heard sixteenth of all at the table's.
    fn make_room(&mut self, id: SessionId) {
        let mine = self.by_source.get(&id.addr).map_or(0, Vec::len);
        if mine >= self.limits.per_source {
            let oldest = self.by_source[&id.addr]
                .iter()
                .copied()
                .min_by_key(|k| self.map.get(k).map_or(0, |s| s.heard_ns));
            if let Some(k) = oldest {
                self.forget(k);
            }
        }
        if self.map.len() >= self.limits.max_sessions {
            let n = (self.limits.max_sessions / 16).max(1);
            let mut by_age: Vec<(u64, SessionId)> =
                self.map.iter().map(|(k, s)| (s.heard_ns, *k)).collect();
            by_age.select_nth_unstable_by_key(n - 1, |(heard, _)| *heard);
            for (_, k) in by_age.into_iter().take(n) {
                self.forget(k);
            }
        }
    }

    fn forget(&mut self, id: SessionId) {
        self.map.remove(&id);
        if let Some(list) = self.by_source.get_mut(&id.addr) {
            list.retain(|k| *k != id);
            if list.is_empty() {
                self.by_source.remove(&id.addr);
            }
        }
    }
}

#[cfg(test)]
#[path = "session_tests.rs"]
mod tests;
