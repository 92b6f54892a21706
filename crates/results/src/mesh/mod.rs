//! The mesh's figures per peer (`sonde serve --mesh`): what each peer's probes became
//! (answered, lost each way, reordered), its round trips as classic buckets and this
//! minute's HDR histogram, and the probe budget's arithmetic. Pure: times are passed in.

pub mod ledger;
pub mod oneway;
pub mod rtt;
pub mod schedule;

pub use ledger::{Answer, Ledger, Settled};
pub use oneway::{OneWayFigures, OneWayWindow, Stamps, Verdict};
pub use rtt::{Buckets, Minute, MinuteFigures, BUCKETS_S};
pub use schedule::Schedule;

use crate::marks::Fate;

/// Nanoseconds in a minute: the HDR histogram's window.
pub const MINUTE_NS: u64 = 60_000_000_000;

/// How a peer's probes are judged.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Judging {
    /// A probe unanswered this long is lost.
    pub timeout_ns: u64,
    /// A lost probe no later answer places on a direction this long after its timeout
    /// is lost in an unknown direction.
    pub resolve_after_ns: u64,
    /// Probes in flight per peer at most (the ledger's memory bound).
    pub max_flights: usize,
    /// Length of the HDR window (a minute; shorter in tests).
    pub window_ns: u64,
}

impl Default for Judging {
    fn default() -> Judging {
        Judging {
            timeout_ns: 2_000_000_000,
            resolve_after_ns: 10_000_000_000,
            max_flights: 4096,
            window_ns: MINUTE_NS,
        }
    }
}

/// What the metrics show of a peer: the counters its [`PeerStats`] keeps, copied out so
/// that a large mesh's text is encoded without holding the state the prober works on.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PeerFigures {
    pub sent: u64,
    /// Probes settled: answered and lost each way, cumulative.
    pub settled: Settled,
    pub reordered: u64,
    pub duplicates: u64,
    /// ICMP errors about its probes, counted by the prober from its socket's error queue.
    pub unreachable: Unreachable,
    pub rtt: Buckets,
    /// The last full window's percentiles, once one ended with answers in it.
    pub last_window: Option<MinuteFigures>,
    /// The last full window's one-way delays (or a clock fault).
    pub last_oneway: Option<Verdict>,
    /// Each direction's marks, sent against arrived, of the answers whose Class of
    /// Service TLV the peer filled (`serve --mesh-dscp`/`--mesh-ecn`); empty when they
    /// are unmarked.
    pub marks: Fate,
}

/// ICMP errors about the probes sent to a peer: its host said nothing listens on the
/// port, or a router (or its host's neighbours) said the host cannot be reached. A peer
/// that answers nothing and counts none stayed silent.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Unreachable {
    pub port: u64,
    pub host: u64,
}

/// One peer's figures since it was listed (counters only grow while it stays listed).
#[derive(Debug)]
pub struct PeerStats {
    ledger: Ledger,
    /// What the metrics show of it.
    pub shown: PeerFigures,
    minute: Minute,
    window_started_ns: u64,
    window_ns: u64,
    oneway: OneWayWindow,
}

impl PeerStats {
    /// Its figures for the metrics.
    pub fn figures(&self) -> PeerFigures {
        self.shown.clone()
    }

    pub fn new(now_ns: u64, judging: &Judging) -> PeerStats {
        PeerStats {
            ledger: Ledger::new(
                judging.timeout_ns,
                judging.resolve_after_ns,
                judging.max_flights,
            ),
            shown: PeerFigures::default(),
            minute: Minute::default(),
            window_started_ns: now_ns,
            window_ns: judging.window_ns.max(1),
            oneway: OneWayWindow::default(),
        }
    }

    /// Probe `seq` (one more than the last) left at `now_ns`.
    pub fn on_sent(&mut self, seq: u32, now_ns: u64) {
        self.shown.sent += 1;
        let s = self.ledger.sent(seq, now_ns);
        add(&mut self.shown.settled, s);
    }

    /// Probe `seq` left `late_ns` after the time [`PeerStats::on_sent`] was given (its
    /// kernel transmit stamp): see [`Ledger::departed`].
    pub fn on_departed(&mut self, seq: u32, late_ns: u64) -> bool {
        self.ledger.departed(seq, late_ns)
    }

    /// Probe `seq` carried the sender timestamp `t1` (raw): see [`Ledger::carried`].
    pub fn carried(&mut self, seq: u32, t1: u64) {
        self.ledger.carried(seq, t1)
    }

    /// The sender timestamp probe `seq` (in flight) carried, if told.
    pub fn t1(&self, seq: u32) -> Option<u64> {
        self.ledger.t1(seq)
    }

    /// How late probe `seq` left by its kernel stamp (`None`: not stamped, or not in flight).
    pub fn late_ns(&self, seq: u32) -> Option<u64> {
        self.ledger.late_ns(seq)
    }

    /// An answer to probe `seq`, numbered `refl_seq` by the reflector, at `now_ns`; the
    /// reflector held the probe `held_ns` (its round trip is net of that).
    pub fn on_answer(&mut self, seq: u32, refl_seq: u32, now_ns: u64, held_ns: u64) -> Answer {
        let a = self.ledger.answered_after(seq, refl_seq, now_ns, held_ns);
        match a {
            Answer::First { reordered, rtt_ns } => {
                self.shown.reordered += u64::from(reordered);
                self.shown.rtt.record(rtt_ns);
                self.minute.record(rtt_ns);
            }
            Answer::Duplicate => self.shown.duplicates += 1,
            Answer::Unknown => {}
        }
        a
    }

    /// As [`PeerStats::on_answer`], the round trip not recorded: a first answer's is
    /// gross (the reflector's hold not taken out), for the caller to book once it knows
    /// when the reflector's answer really left ([`PeerStats::book_rtt`]).
    pub fn on_answer_held(&mut self, seq: u32, refl_seq: u32, now_ns: u64) -> Answer {
        let a = self.ledger.answered_after(seq, refl_seq, now_ns, 0);
        match a {
            Answer::First { reordered, .. } => self.shown.reordered += u64::from(reordered),
            Answer::Duplicate => self.shown.duplicates += 1,
            Answer::Unknown => {}
        }
        a
    }

    /// A first answer's round trip, net of its reflector's hold, taken by
    /// [`PeerStats::on_answer_held`].
    pub fn book_rtt(&mut self, rtt_ns: u64) {
        self.shown.rtt.record(rtt_ns);
        self.minute.record(rtt_ns);
    }

    /// An answered probe's marks each way, as (sent, arrived) TOS bytes: forward when
    /// the peer said what arrived, reverse when it said what it sent and the kernel gave
    /// the answer's TOS.
    pub fn on_marks(&mut self, forward: Option<(u8, u8)>, reverse: Option<(u8, u8)>) {
        for (way, d) in [
            (&mut self.shown.marks.forward, forward),
            (&mut self.shown.marks.reverse, reverse),
        ] {
            if let Some((sent, arrived)) = d {
                way.get_or_insert_with(Default::default)
                    .record(sent, arrived);
            }
        }
    }

    /// An answered probe's four timestamps, for each direction's delay.
    pub fn on_stamps(&mut self, stamps: Stamps) {
        self.oneway.record(stamps);
    }

    /// Settles what is due and closes the window when it is over.
    pub fn tick(&mut self, now_ns: u64) {
        let s = self.ledger.settle(now_ns);
        add(&mut self.shown.settled, s);
        if now_ns >= self.window_started_ns + self.window_ns {
            self.shown.last_window = self.minute.close();
            self.shown.last_oneway = self.oneway.close();
            self.window_started_ns = now_ns;
        }
    }

    /// When [`PeerStats::tick`] next has something to do (a probe to settle, the window
    /// to close): ticking earlier changes nothing, so a caller may tick only then.
    pub fn next_tick_ns(&self) -> u64 {
        let window_end = self.window_started_ns.saturating_add(self.window_ns);
        self.ledger.next_settle_ns().min(window_end)
    }

    /// Bytes this peer's minute holds (none while it goes unanswered).
    pub fn minute_bytes(&self) -> usize {
        self.minute.heap_bytes()
    }

    /// Losses get no direction: the reflector does not number per session.
    pub fn without_directions(mut self) -> PeerStats {
        self.ledger.directions = false;
        self
    }

    /// Probes in flight now.
    pub fn in_flight(&self) -> usize {
        self.ledger.in_flight()
    }
}

fn add(into: &mut Settled, s: Settled) {
    into.answered += s.answered;
    into.lost_forward += s.lost_forward;
    into.lost_reverse += s.lost_reverse;
    into.lost_unknown += s.lost_unknown;
}

/// Each peer's probe rate: `rate` per second, or an equal share of `budget` per second
/// when all peers at `rate` would exceed it.
pub fn per_peer_rate(rate: f64, budget: f64, peers: usize) -> f64 {
    if peers == 0 {
        return 0.0;
    }
    rate.min(budget / peers as f64).max(0.0)
}

/// A small deterministic generator (xorshift64) for the mesh's model tests.
#[cfg(test)]
fn xorshift(mut state: u64) -> impl FnMut() -> u64 {
    move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_shares_out_when_peers_at_the_rate_would_exceed_it() {
        assert_eq!(per_peer_rate(1.0, 100.0, 50), 1.0);
        assert_eq!(per_peer_rate(1.0, 100.0, 1000), 0.1);
        assert_eq!(per_peer_rate(1.0, 100.0, 0), 0.0);
    }

    /// A 100 ns timeout, resolved 1 us later, 16 flights, 10 us windows.
    fn small_judging() -> Judging {
        Judging {
            timeout_ns: 100,
            resolve_after_ns: 1000,
            max_flights: 16,
            window_ns: 10_000,
        }
    }

    #[test]
    fn a_peer_counts_each_probe_once_and_rolls_its_window() {
        let j = small_judging();
        let mut p = PeerStats::new(0, &j);
        for s in 0..4 {
            p.on_sent(s, s as u64 * 10);
        }
        p.on_answer(0, 0, 50, 0);
        p.on_answer(3, 1, 80, 0);
        p.on_answer(3, 1, 81, 0);
        p.tick(500);
        assert_eq!(p.shown.sent, 4);
        assert_eq!(p.shown.settled.answered, 2);
        // The reflector got none between its 0 and 1: both lost on the way there.
        assert_eq!(p.shown.settled.lost_forward, 2);
        assert_eq!(p.shown.duplicates, 1);
        assert_eq!(p.shown.rtt.count, 2);
        assert!(p.shown.last_window.is_none());
        p.tick(10_000);
        assert_eq!(p.shown.last_window.unwrap().count, 2);
        p.tick(20_001);
        assert!(
            p.shown.last_window.is_none(),
            "an empty window has no figures"
        );
    }

    #[test]
    fn a_peer_is_due_a_tick_when_a_probe_settles_or_its_window_ends() {
        let j = small_judging();
        let mut p = PeerStats::new(0, &j);
        assert_eq!(
            p.next_tick_ns(),
            10_000,
            "nothing in flight: the window's end"
        );
        p.on_sent(0, 5);
        assert_eq!(
            p.next_tick_ns(),
            1105,
            "unanswered: resolved after 100 + 1000"
        );
        p.on_answer(0, 0, 50, 0);
        assert_eq!(p.next_tick_ns(), 0, "answered: settles now");
        p.tick(60);
        assert_eq!(p.shown.settled.answered, 1);
        assert_eq!(p.next_tick_ns(), 10_000);
        assert_eq!(p.minute_bytes(), 4, "one round trip held");
        p.tick(10_000);
        assert_eq!(p.shown.last_window.unwrap().count, 1);
        assert_eq!(p.minute_bytes(), 0);
        assert_eq!(p.next_tick_ns(), 20_000, "the next window from the tick");
    }
}
