//! Which probe each kernel transmit stamp belongs to, without I/O. A probe is written with
//! a clock read (its T1) and sent with a key its stamp will carry (`SCM_TS_OPT_ID`: the
//! key given; on kernels before 6.13 the socket's count of stamped sends, which the keys
//! here follow). Its stamp, read later from the error queue, says how long after T1 it
//! really left: that lateness moves the probe's departure in the prober's machine
//! (`Prober::departed`). A probe whose stamp never comes keeps its clock read; a stamp
//! for no probe awaited (late, a second one, another's) moves nothing. Each is counted.
//! The reflector's answers are matched alike (`follow_ups`), each named by its session
//! rather than its destination: `T`.

use std::collections::VecDeque;
use std::net::SocketAddr;

use sonde_proto::mesh::Clocks;

/// Probes awaiting their stamp at most: beyond, the oldest stops waiting.
pub const MAX_PENDING: usize = 65_536;

/// A probe sent, awaiting its stamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Pending<T> {
    to: T,
    seq: u32,
    /// Its T1 (real time) and when that was on the ledger's clock.
    at: Clocks,
}

/// A probe's departure by its stamp: it left `late_ns` after its T1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Departed<T = SocketAddr> {
    pub to: T,
    pub seq: u32,
    pub late_ns: u64,
}

/// What became of the stamps and the probes awaiting them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counts {
    /// Stamps matched to their probe.
    pub matched: u64,
    /// Probes no stamp came for within the wait: their clock read stands.
    pub missing: u64,
    /// Stamps of a key given but no longer awaited: after the wait, or a second one.
    pub stale: u64,
    /// Stamps of a key never given, or not within the wait after their probe's T1: no
    /// probe of these.
    pub foreign: u64,
}

/// The probes awaiting their stamps, by key, in sending order.
pub struct TxStamps<T = SocketAddr> {
    /// Keys `base..base + pending.len()`; `None`: stamped already.
    pending: VecDeque<Option<Pending<T>>>,
    base: u32,
    /// Keys given before `base`.
    before: u64,
    /// How long a probe awaits its stamp (and how late a stamp may say it left).
    wait_ns: u64,
    pub counts: Counts,
}

impl<T: Copy> TxStamps<T> {
    /// Probes await their stamps `wait_ns` (the probes' timeout: an answer later than
    /// that counts for nothing anyway).
    pub fn new(wait_ns: u64) -> TxStamps<T> {
        TxStamps {
            pending: VecDeque::new(),
            base: 0,
            before: 0,
            wait_ns,
            counts: Counts::default(),
        }
    }

    /// The key the next probe's stamp carries.
    pub fn next_key(&self) -> u32 {
        self.base.wrapping_add(self.pending.len() as u32)
    }

    /// Probe `seq` to `to`, written with T1 at `at`, left with [`TxStamps::next_key`].
    pub fn sent(&mut self, to: T, seq: u32, at: Clocks) {
        if self.pending.len() >= MAX_PENDING {
            self.pop();
        }
        self.pending.push_back(Some(Pending { to, seq, at }));
    }

    /// The stamp of key `key` at `real_ns` (the kernel's real-time clock): the probe it
    /// times, if one awaits it and the stamp falls within the wait after its T1.
    pub fn stamp(&mut self, key: u32, real_ns: u64) -> Option<Departed<T>> {
        let i = key.wrapping_sub(self.base) as usize;
        let wait = self.wait_ns;
        match self.pending.get(i).copied() {
            Some(Some(p)) => {
                // Before its T1 or long after: not this probe's (a key out of step).
                let Some(late_ns) = real_ns.checked_sub(p.at.real_ns).filter(|l| *l <= wait) else {
                    self.counts.foreign += 1;
                    return None;
                };
                self.pending[i] = None;
                self.counts.matched += 1;
                self.trim();
                Some(Departed {
                    to: p.to,
                    seq: p.seq,
                    late_ns,
                })
            }
            Some(None) => {
                self.counts.stale += 1;
                None
            }
            None => {
                let back = u64::from(self.base.wrapping_sub(key));
                match back > 0 && back <= self.before && back < 1 << 31 {
                    true => self.counts.stale += 1,
                    false => self.counts.foreign += 1,
                }
                None
            }
        }
    }

    /// Stops awaiting the stamps of probes written `wait_ns` or more before `now_ns`
    /// (the ledger's clock).
    pub fn expire(&mut self, now_ns: u64) {
        while let Some(front) = self.pending.front() {
            match front {
                Some(p) if now_ns < p.at.mono_ns.saturating_add(self.wait_ns) => return,
                _ => self.pop(),
            }
        }
    }

    /// Whether any key given is still awaited (or not yet trimmed off the front).
    pub fn awaiting(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Probes awaiting their stamps now.
    #[cfg(test)]
    pub fn pending(&self) -> usize {
        self.pending.iter().flatten().count()
    }

    /// The oldest key stops being awaited (counted missing if no stamp came).
    fn pop(&mut self) {
        if let Some(p) = self.pending.pop_front() {
            self.counts.missing += u64::from(p.is_some());
            self.base = self.base.wrapping_add(1);
            self.before += 1;
        }
        self.trim();
    }

    /// Keys stamped already leave the front.
    fn trim(&mut self) {
        while let Some(None) = self.pending.front() {
            self.pending.pop_front();
            self.base = self.base.wrapping_add(1);
            self.before += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const REAL0: u64 = 1_780_000_000_000_000_000;

    fn to(k: u8) -> SocketAddr {
        SocketAddr::from(([198, 18, 2, k], 862))
    }

    /// Probe `seq` to peer `k` written at `mono` ms.
    fn send(d: &mut TxStamps, k: u8, seq: u32, mono: u64) -> u32 {
        let key = d.next_key();
        let at = Clocks {
            mono_ns: mono * MS,
            real_ns: REAL0 + mono * MS,
        };
        d.sent(to(k), seq, at);
        key
    }

    fn departed(k: u8, seq: u32, late_ns: u64) -> Option<Departed> {
        Some(Departed {
            to: to(k),
            seq,
            late_ns,
        })
    }

    /// Stamps in any order each time their own probe, by key, with how late it left.
    #[test]
    fn each_stamp_times_the_probe_of_its_key() {
        let mut d = TxStamps::new(100 * MS);
        let keys: Vec<u32> = (0..3).map(|i| send(&mut d, i as u8, 7, i)).collect();
        assert_eq!(keys, [0, 1, 2]);
        assert_eq!(d.stamp(2, REAL0 + 2 * MS + 40_000), departed(2, 7, 40_000));
        assert_eq!(d.stamp(0, REAL0 + 3 * MS), departed(0, 7, 3 * MS));
        assert_eq!(d.pending(), 1);
        assert_eq!(d.stamp(1, REAL0 + MS), departed(1, 7, 0));
        assert_eq!(d.pending(), 0);
        d.expire(u64::MAX);
        assert_eq!(
            d.counts,
            Counts {
                matched: 3,
                ..Counts::default()
            }
        );
    }

    /// A stamp that never comes: the probe stops waiting after the wait, counted
    /// missing; the stamp arriving after that moves nothing (stale).
    #[test]
    fn a_stamp_late_or_never_leaves_the_clock_read_counted() {
        let mut d = TxStamps::new(100 * MS);
        let (a, b) = (send(&mut d, 1, 0, 0), send(&mut d, 2, 0, 50));
        d.expire(99 * MS);
        assert_eq!(d.pending(), 2, "within the wait");
        d.expire(100 * MS);
        assert_eq!((d.pending(), d.counts.missing), (1, 1));
        assert_eq!(d.stamp(a, REAL0 + MS), None, "too late");
        assert_eq!(d.counts.stale, 1);
        assert_eq!(d.stamp(b, REAL0 + 51 * MS), departed(2, 0, MS));
        d.expire(u64::MAX);
        let c = d.counts;
        assert_eq!((c.matched, c.missing, c.stale, c.foreign), (1, 1, 1, 0));
    }

    /// A second stamp for one key (before or after the keys before it were stamped) and
    /// a stamp of a key never given or outside its probe's wait move nothing; the
    /// probe's own stamp still times it.
    #[test]
    fn a_stamp_twice_or_not_ours_moves_nothing() {
        let mut d = TxStamps::new(100 * MS);
        let keys: Vec<u32> = (0..3).map(|i| send(&mut d, 1, i, 10 * i as u64)).collect();
        assert_eq!(d.stamp(keys[1], REAL0 + 10 * MS), departed(1, 1, 0));
        assert_eq!(
            d.stamp(keys[1], REAL0 + 11 * MS),
            None,
            "twice, awaited below it"
        );
        assert_eq!(d.stamp(keys[0], REAL0), departed(1, 0, 0));
        assert_eq!(d.stamp(keys[0], REAL0), None, "twice, at the front");
        assert_eq!(d.counts.stale, 2);
        assert_eq!(d.stamp(99, REAL0 + 20 * MS), None, "never given");
        assert_eq!(d.stamp(u32::MAX, REAL0 + 20 * MS), None, "never given");
        assert_eq!(d.stamp(keys[2], REAL0 + 19 * MS), None, "before its T1");
        assert_eq!(d.stamp(keys[2], REAL0 + 121 * MS), None, "past the wait");
        assert_eq!(d.counts.foreign, 4);
        assert_eq!(d.stamp(keys[2], REAL0 + 21 * MS), departed(1, 2, MS));
        assert_eq!(d.counts.matched, 3);
    }

    /// Keys wrap around u32 as the kernel's do; the oldest probe stops waiting when too
    /// many are.
    #[test]
    fn keys_wrap_and_the_awaited_are_bounded() {
        let mut d = TxStamps::new(100 * MS);
        d.base = u32::MAX;
        let keys: Vec<u32> = (0..3).map(|i| send(&mut d, 1, i, 0)).collect();
        assert_eq!(keys, [u32::MAX, 0, 1]);
        assert_eq!(d.stamp(0, REAL0 + 5), departed(1, 1, 5));
        assert_eq!(d.stamp(u32::MAX, REAL0 + 6), departed(1, 0, 6));
        assert_eq!(d.stamp(1, REAL0 + 7), departed(1, 2, 7));
        for i in 0..MAX_PENDING as u32 + 5 {
            send(&mut d, 2, i, 1);
        }
        assert_eq!((d.pending(), d.counts.missing), (MAX_PENDING, 5));
    }
}
