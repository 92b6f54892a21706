//! The probes of one peer in flight, settled into answered, lost forward and lost back.
//!
//! A STAMP reflector in stateful mode numbers what it reflects per session, so between two
//! answered probes (sender numbers `s0 < s1`, reflector numbers `r0 < r1`) the reflector
//! received `r1 - r0 - 1` of the `s1 - s0 - 1` probes in between: the rest were lost on the
//! way there, and of those it received, the ones never answered were lost on the way back.
//! A probe is settled once its deadline passed; an unanswered one whose gap no later answer
//! closes within [`Ledger::resolve_after`] is lost in an unknown direction (a peer gone
//! silent). Counters only grow: every probe is counted exactly once.

use std::collections::VecDeque;

/// One probe in flight.
#[derive(Debug, Clone, Copy)]
struct Flight {
    seq: u32,
    sent_ns: u64,
    /// The reflector's number for it, once answered.
    answered: Option<u32>,
    /// A second answer came (counted once: a captured answer re-sent a thousand times
    /// is one duplicate, as the network's copy would be).
    duplicated: bool,
    /// How long after the clock read given to [`Ledger::sent`] the kernel stamped its
    /// departure (already in `sent_ns`); `None`: timed by that clock read.
    late_ns: Option<u64>,
    /// The sender timestamp its probe carried, which its answer echoes (0: not told).
    t1: u64,
}

/// How one probe ended, for the caller's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Settled {
    pub answered: u64,
    pub lost_forward: u64,
    pub lost_reverse: u64,
    pub lost_unknown: u64,
}

impl Settled {
    fn add(&mut self, o: Settled) {
        self.answered += o.answered;
        self.lost_forward += o.lost_forward;
        self.lost_reverse += o.lost_reverse;
        self.lost_unknown += o.lost_unknown;
    }
}

/// What an answer was: the first for its probe (and whether it came out of order), the
/// first duplicate, or another copy, or one for a probe already settled or never sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    First { reordered: bool, rtt_ns: u64 },
    Duplicate,
    Unknown,
}

/// The probes of one peer in flight, in sending order.
#[derive(Debug)]
pub struct Ledger {
    flights: VecDeque<Flight>,
    /// The last settled answered probe: (sender number, reflector number).
    last: Option<(u32, u32)>,
    /// Highest sender number answered so far (for reordering).
    highest: Option<u32>,
    /// A probe unanswered this long after it was sent is lost.
    pub timeout_ns: u64,
    /// An unanswered probe no later answer explains this long after its deadline is lost
    /// in an unknown direction.
    pub resolve_after_ns: u64,
    /// Most probes kept in flight; beyond, the oldest is settled at once.
    pub max_flights: usize,
    /// Whether the reflector numbers what it reflects per session (an agent's does; a
    /// stateless one echoes the sender's numbers): without it a loss has no direction.
    pub directions: bool,
}

impl Ledger {
    pub fn new(timeout_ns: u64, resolve_after_ns: u64, max_flights: usize) -> Ledger {
        Ledger {
            flights: VecDeque::new(),
            last: None,
            highest: None,
            timeout_ns,
            resolve_after_ns,
            max_flights: max_flights.max(1),
            directions: true,
        }
    }

    /// Probes in flight (settled ones are gone).
    pub fn in_flight(&self) -> usize {
        self.flights.len()
    }

    /// A probe numbered `seq` left at `sent_ns`. Numbers must grow by one per probe.
    pub fn sent(&mut self, seq: u32, sent_ns: u64) -> Settled {
        let mut out = Settled::default();
        while self.flights.len() >= self.max_flights {
            out.add(self.force_oldest());
        }
        self.flights.push_back(Flight {
            seq,
            sent_ns,
            answered: None,
            duplicated: false,
            late_ns: None,
            t1: 0,
        });
        out
    }

    /// Probe `seq` left `late_ns` after the time [`Ledger::sent`] was given (the kernel's
    /// transmit stamp, read after the send): its round trip and its deadline count from
    /// there. Taken for an unanswered probe in flight, once; whether it was.
    pub fn departed(&mut self, seq: u32, late_ns: u64) -> bool {
        let Some(f) = flight_mut(&mut self.flights, seq) else {
            return false;
        };
        if f.answered.is_some() || f.late_ns.is_some() {
            return false;
        }
        f.sent_ns = f.sent_ns.saturating_add(late_ns);
        f.late_ns = Some(late_ns);
        true
    }

    /// Probe `seq` (in flight) carried the sender timestamp `t1` (its raw bits).
    pub fn carried(&mut self, seq: u32, t1: u64) {
        if let Some(f) = flight_mut(&mut self.flights, seq) {
            f.t1 = t1;
        }
    }

    /// The sender timestamp probe `seq` (in flight) carried; `None`: not told (or not in
    /// flight).
    pub fn t1(&self, seq: u32) -> Option<u64> {
        let front = self.flights.front()?;
        let i = seq.checked_sub(front.seq)? as usize;
        Some(self.flights.get(i)?.t1).filter(|&t| t != 0)
    }

    /// How late probe `seq` (in flight) left after the time [`Ledger::sent`] was given, by
    /// its kernel stamp; `None`: no stamp (or not in flight).
    pub fn late_ns(&self, seq: u32) -> Option<u64> {
        let front = self.flights.front()?;
        let i = seq.checked_sub(front.seq)? as usize;
        self.flights.get(i)?.late_ns
    }

    /// The answer to probe `seq`, numbered `refl_seq` by the reflector, received at `now_ns`.
    pub fn answered(&mut self, seq: u32, refl_seq: u32, now_ns: u64) -> Answer {
        self.answered_after(seq, refl_seq, now_ns, 0)
    }

    /// As [`Ledger::answered`], the reflector having held the probe `held_ns` (its own
    /// receive and transmit stamps, one clock): the round trip is net of it. A hold as long
    /// as the whole round trip is a reflector's error and is not taken out.
    pub fn answered_after(&mut self, seq: u32, refl_seq: u32, now_ns: u64, held_ns: u64) -> Answer {
        let Some(f) = flight_mut(&mut self.flights, seq) else {
            return Answer::Unknown;
        };
        if f.answered.is_some() {
            if std::mem::replace(&mut f.duplicated, true) {
                return Answer::Unknown;
            }
            return Answer::Duplicate;
        }
        if now_ns.saturating_sub(f.sent_ns) > self.timeout_ns {
            // Too late: it will be settled as lost, as its deadline said.
            return Answer::Unknown;
        }
        f.answered = Some(refl_seq);
        let reordered = self.highest.is_some_and(|h| seq < h);
        self.highest = Some(self.highest.map_or(seq, |h| h.max(seq)));
        let gross = now_ns.saturating_sub(f.sent_ns);
        Answer::First {
            reordered,
            rtt_ns: if held_ns < gross {
                gross - held_ns
            } else {
                gross
            },
        }
    }

    /// Settles every probe whose fate is known at `now_ns`.
    pub fn settle(&mut self, now_ns: u64) -> Settled {
        let mut out = Settled::default();
        while let Some(front) = self.flights.front().copied() {
            let due = front.sent_ns + self.timeout_ns;
            if let Some(r) = front.answered {
                self.flights.pop_front();
                self.close(front.seq, r);
                out.answered += 1;
                continue;
            }
            // Unanswered: the gap up to the next answered probe, once all of it is due.
            match self.flights.iter().position(|f| f.answered.is_some()) {
                Some(next) => {
                    let last_due = self.flights[next - 1].sent_ns + self.timeout_ns;
                    if now_ns < last_due {
                        break;
                    }
                    out.add(self.close_gap(next));
                }
                None if now_ns >= due + self.resolve_after_ns => {
                    self.flights.pop_front();
                    out.lost_unknown += 1;
                }
                None => break,
            }
        }
        out
    }

    /// When [`Ledger::settle`] next has something to do: now (0) for an answered oldest
    /// probe, else when the oldest gap is all due (or, with no later answer, resolved);
    /// `u64::MAX` with nothing in flight. Settling earlier settles nothing.
    pub fn next_settle_ns(&self) -> u64 {
        let Some(front) = self.flights.front() else {
            return u64::MAX;
        };
        if front.answered.is_some() {
            return 0;
        }
        match self.flights.iter().position(|f| f.answered.is_some()) {
            Some(next) => self.flights[next - 1].sent_ns + self.timeout_ns,
            None => front.sent_ns + self.timeout_ns + self.resolve_after_ns,
        }
    }

    /// Settles the `n` unanswered probes before the answered one at index `n`, split by
    /// the reflector's numbers.
    fn close_gap(&mut self, n: usize) -> Settled {
        let next = self.flights[n];
        let (s1, r1) = (next.seq, next.answered.expect("answered"));
        // Probes the reflector received between the last answered one and this one.
        let received = match self.last {
            _ if !self.directions => None,
            // The reflector numbered from 0 again (it restarted): nothing known.
            Some((_, r0)) if r1 <= r0 => None,
            Some((s0, r0)) if s1 > s0 => Some((r1 - r0 - 1) as u64),
            Some(_) => None,
            None => None,
        };
        let gap = self.flights.drain(..n).count() as u64;
        let mut out = Settled::default();
        match received {
            Some(received) => {
                // Of the gap, the reflector got at most all of it.
                let back = received.min(gap);
                out.lost_reverse = back;
                out.lost_forward = gap - back;
            }
            None => out.lost_unknown = gap,
        }
        out
    }

    fn close(&mut self, seq: u32, refl: u32) {
        self.last = Some((seq, refl));
    }

    /// The oldest probe settled now, the ledger being full.
    fn force_oldest(&mut self) -> Settled {
        let f = self.flights.pop_front().expect("not empty");
        match f.answered {
            Some(r) => {
                self.close(f.seq, r);
                Settled {
                    answered: 1,
                    ..Settled::default()
                }
            }
            None => Settled {
                lost_unknown: 1,
                ..Settled::default()
            },
        }
    }
}

/// Probe `seq` among `flights` (numbered in sending order).
fn flight_mut(flights: &mut VecDeque<Flight>, seq: u32) -> Option<&mut Flight> {
    let front = flights.front()?;
    let i = seq.checked_sub(front.seq)? as usize;
    flights.get_mut(i)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn ledger() -> Ledger {
        Ledger::new(100 * MS, 1000 * MS, 64)
    }

    #[test]
    fn a_gap_is_split_by_the_reflectors_numbers() {
        let mut l = ledger();
        for s in 0..10 {
            l.sent(s, s as u64 * MS);
        }
        // 0 answered (r 0); 1..=4 never come back; the reflector got 1 and 2 (their answers
        // lost on the way back), 3 and 4 were lost on the way there; 5 answered as r 3.
        assert!(matches!(l.answered(0, 0, 5 * MS), Answer::First { .. }));
        assert!(matches!(l.answered(5, 3, 9 * MS), Answer::First { .. }));
        for s in 6..10 {
            l.answered(s, s - 2, 12 * MS);
        }
        // Nothing settles before the gap's last probe is due.
        let early = l.settle(50 * MS);
        assert_eq!(early.answered, 1, "{early:?}");
        assert_eq!(early.lost_forward + early.lost_reverse, 0);
        let s = l.settle(200 * MS);
        assert_eq!(
            s,
            Settled {
                answered: 5,
                lost_forward: 2,
                lost_reverse: 2,
                lost_unknown: 0
            }
        );
        assert_eq!(l.in_flight(), 0);
    }

    #[test]
    fn a_silent_peer_loses_probes_in_an_unknown_direction_after_the_resolve_time() {
        let mut l = ledger();
        l.sent(0, 0);
        l.answered(0, 0, MS);
        l.sent(1, 10 * MS);
        l.sent(2, 20 * MS);
        assert_eq!(l.settle(500 * MS).answered, 1);
        assert_eq!(l.settle(500 * MS).lost_unknown, 0, "not yet resolved");
        let s = l.settle(1200 * MS);
        assert_eq!(s.lost_unknown, 2, "{s:?}");
    }

    /// A reflector that held a probe (it reads on a schedule) is taken out of the round
    /// trip; the deadline is the answer's arrival's; a hold longer than the round trip is
    /// the reflector's error, and the whole round trip stands.
    #[test]
    fn a_reflectors_hold_is_taken_out_of_the_round_trip_but_not_out_of_the_deadline() {
        let mut l = ledger();
        for s in 0..3 {
            l.sent(s, 0);
        }
        let first = |rtt_ns| Answer::First {
            reordered: false,
            rtt_ns,
        };
        assert_eq!(l.answered_after(0, 0, 90 * MS, 88 * MS), first(2 * MS));
        assert_eq!(l.answered_after(1, 1, 3 * MS, 9 * MS), first(3 * MS));
        let late = l.timeout_ns + MS;
        assert_eq!(l.answered_after(2, 2, late, late), Answer::Unknown);
    }

    /// A kernel stamp moves a probe's departure (its round trip and deadline) once, only
    /// while it is unanswered and in flight.
    #[test]
    fn a_transmit_stamp_moves_an_unanswered_probes_departure_once() {
        let mut l = ledger();
        for s in 0..3 {
            l.sent(s, s as u64 * 10 * MS);
        }
        assert!(l.departed(1, 3 * MS));
        assert!(!l.departed(1, 5 * MS), "a second stamp");
        assert_eq!(l.late_ns(1), Some(3 * MS));
        assert_eq!((l.late_ns(0), l.late_ns(9)), (None, None));
        let first = |rtt_ns| Answer::First {
            reordered: false,
            rtt_ns,
        };
        // Sent (read) at 10 ms, stamped at 13 ms, back at 20 ms: 7 ms.
        assert_eq!(l.answered(1, 0, 20 * MS), first(7 * MS));
        assert_eq!(
            l.answered(0, 1, 20 * MS),
            Answer::First {
                reordered: true,
                rtt_ns: 20 * MS
            }
        );
        assert!(!l.departed(0, MS), "answered already");
        assert!(!l.departed(7, MS), "never sent");
        // The deadline from the stamp: probe 2 (20 ms, stamped 5 ms late) is due at 25 ms
        // plus the timeout.
        assert!(l.departed(2, 5 * MS));
        l.settle(0);
        assert_eq!(
            l.next_settle_ns(),
            25 * MS + l.timeout_ns + l.resolve_after_ns
        );
    }

    #[test]
    fn late_duplicate_and_foreign_answers_count_nothing_and_reordering_is_seen() {
        let mut l = ledger();
        for s in 0..3 {
            l.sent(s, 0);
        }
        assert_eq!(
            l.answered(1, 0, MS),
            Answer::First {
                reordered: false,
                rtt_ns: MS
            }
        );
        assert_eq!(l.answered(1, 0, MS), Answer::Duplicate);
        // L6: a captured answer re-sent again and again is one duplicate, not a thousand.
        for _ in 0..1000 {
            assert_eq!(l.answered(1, 0, MS), Answer::Unknown);
        }
        assert_eq!(
            l.answered(0, 1, 2 * MS),
            Answer::First {
                reordered: true,
                rtt_ns: 2 * MS
            }
        );
        assert_eq!(l.answered(7, 0, MS), Answer::Unknown);
        assert_eq!(
            l.answered(2, 2, 200 * MS),
            Answer::Unknown,
            "past its deadline"
        );
        let s = l.settle(2000 * MS);
        assert_eq!(s.answered, 2);
        assert_eq!(s.lost_unknown, 1, "{s:?}");
    }

    #[test]
    fn a_restarted_reflector_leaves_its_gap_unknown_and_a_full_ledger_settles_the_oldest() {
        let mut l = ledger();
        for s in 0..4 {
            l.sent(s, 0);
        }
        l.answered(0, 40, MS);
        l.answered(3, 0, MS);
        let s = l.settle(2000 * MS);
        assert_eq!((s.answered, s.lost_unknown), (2, 2), "{s:?}");
        let mut stateless = ledger();
        stateless.directions = false;
        for s in 0..4 {
            stateless.sent(s, 0);
        }
        stateless.answered(0, 0, MS);
        stateless.answered(3, 3, MS);
        let s = stateless.settle(2000 * MS);
        assert_eq!(
            (s.answered, s.lost_unknown, s.lost_reverse),
            (2, 2, 0),
            "{s:?}"
        );
        let mut small = Ledger::new(100 * MS, 1000 * MS, 2);
        small.sent(0, 0);
        small.sent(1, 0);
        assert_eq!(small.sent(2, 0).lost_unknown, 1);
        assert_eq!(small.in_flight(), 2);
    }

    /// Over many mixes of sends, answers (late, early, duplicate, missing) and settles, a
    /// settle before [`Ledger::next_settle_ns`] changes nothing and one at it changes
    /// something: a ledger settled only then is never settled late, and never for nothing.
    #[test]
    fn the_next_settle_time_is_exactly_when_settling_first_does_something() {
        let mut next = super::super::xorshift(0x9e37_79b9_7f4a_7c15_u64);
        for _ in 0..200 {
            let mut l = Ledger::new(100 * MS, 1000 * MS, 8);
            let (mut now, mut seq, mut refl) = (0, 0u32, 0u32);
            for _ in 0..60 {
                now += next() % (80 * MS);
                match next() % 4 {
                    0 | 1 => {
                        l.sent(seq, now);
                        seq += 1;
                    }
                    2 if seq > 0 => {
                        let s = seq - 1 - (next() % u64::from(seq.min(4))) as u32;
                        if l.answered(s, refl, now) != Answer::Unknown {
                            refl += 1 + (next() % 2) as u32;
                        }
                    }
                    _ => {
                        let at = l.next_settle_ns();
                        if at > now {
                            assert_eq!(l.settle(now), Settled::default(), "early at {now}");
                            continue;
                        }
                        let before = l.in_flight();
                        let s = l.settle(at.max(now.saturating_sub(next() % MS)));
                        assert!(s != Settled::default() && l.in_flight() < before);
                    }
                }
            }
            // With nothing more sent or answered, settling at each next time empties it.
            while l.in_flight() > 0 {
                let at = l.next_settle_ns();
                assert!(at < u64::MAX);
                if at > 0 {
                    assert_eq!(l.settle(at - 1), Settled::default(), "a ns early");
                }
                assert!(l.settle(at) != Settled::default(), "nothing at {at}");
            }
            assert_eq!(l.next_settle_ns(), u64::MAX);
        }
    }
}
