//! A message's stages from its ten readings, what the echo tells the client in its answer,
//! and the per-interval histograms of each stage.

use hdrhistogram::Histogram;

use crate::rr_client::handoff::{fresh, Filing};

/// The stages of a round trip, in the order a message meets them. Each is a difference
/// of two readings on one host's clock; `Outside` is the round trip minus all the others
/// (wire, NICs, hypervisor), so the seven sum to the round trip exactly.
pub const STAGES: usize = 7;
/// Client: the application's send call to the qdisc (`TX_SCHED`).
pub const CLIENT_SEND: usize = 0;
/// Client: the qdisc to the driver (`TX_SOFTWARE`).
pub const CLIENT_QDISC: usize = 1;
/// Between the client's driver and its receive stamp, less the echo's time inside its host.
pub const OUTSIDE: usize = 2;
/// Echo: the request's receive stamp (`RX_SOFTWARE`) to the application reading it.
pub const SERVER_WAKE: usize = 3;
/// Echo: the application read the request to it sending the answer.
pub const SERVER_TURN: usize = 4;
/// Echo: the answer's send call to its driver (`TX_SOFTWARE`).
pub const SERVER_SEND: usize = 5;
/// Client: the answer's receive stamp to the application reading it.
pub const CLIENT_WAKE: usize = 6;

/// "Not known" in an answer's figures.
pub const UNKNOWN: u32 = u32::MAX;
/// Bytes of the echo's figures in an answer.
pub const FIGURE_BYTES: usize = 28;

/// What the echo measured of its part, carried in an answer: its wake-up and turnaround
/// for this answer (`tag`: its request's index, or UDP sequence), the send stack of an
/// earlier answer (`sent_tag`), known only once that answer was handed to the driver, and
/// the request's arrival on the echo's real-time clock (`rx_at`, 0: unknown), from which
/// the client takes each direction's delay (the rest are spans on one clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EchoFigures {
    pub tag: u32,
    pub wake_ns: u32,
    pub turnaround_ns: u32,
    pub sent_tag: u32,
    pub send_ns: u32,
    pub rx_at: u64,
}

impl EchoFigures {
    /// Writes the figures into an answer's first [`FIGURE_BYTES`].
    pub fn write(&self, to: &mut [u8]) {
        let words = [
            self.tag,
            self.wake_ns,
            self.turnaround_ns,
            self.sent_tag,
            self.send_ns,
        ];
        for (chunk, w) in to[..20].chunks_exact_mut(4).zip(words) {
            chunk.copy_from_slice(&w.to_be_bytes());
        }
        to[20..FIGURE_BYTES].copy_from_slice(&self.rx_at.to_be_bytes());
    }

    /// Reads figures from an answer's first bytes; `None` when it is too short.
    /// Whether figures at `from`'s start tell an earlier answer's send stack (without
    /// reading the rest: most answers tell none).
    #[inline]
    pub fn tells_send(from: &[u8]) -> bool {
        from.get(12..16)
            .is_some_and(|b| u32::from_be_bytes(b.try_into().expect("4 bytes")) != UNKNOWN)
    }

    pub fn read(from: &[u8]) -> Option<EchoFigures> {
        let b = from.get(..FIGURE_BYTES)?;
        let w = |i: usize| u32::from_be_bytes(b[i * 4..i * 4 + 4].try_into().expect("4 bytes"));
        Some(EchoFigures {
            tag: w(0),
            wake_ns: w(1),
            turnaround_ns: w(2),
            sent_tag: w(3),
            send_ns: w(4),
            rx_at: u64::from_be_bytes(b[20..FIGURE_BYTES].try_into().expect("8 bytes")),
        })
    }
}

/// A nanosecond span as carried in figures: [`UNKNOWN`] when unknown or too long.
pub fn span32(from: u64, to: u64) -> u32 {
    to.checked_sub(from)
        .and_then(|d| u32::try_from(d).ok())
        .filter(|&d| d != UNKNOWN)
        .unwrap_or(UNKNOWN)
}

/// The client's readings of one message (real time, ns) and the echo's figures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Readings {
    pub app_send: u64,
    pub sched: u64,
    pub driver: u64,
    pub rx: u64,
    pub app_recv: u64,
    pub wake: u32,
    pub turnaround: u32,
    pub send: u32,
    /// The request's arrival on the echo's real-time clock (0: unknown).
    pub echo_rx: u64,
}

/// Why a message has no stages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unsplit {
    /// A reading never came (a stamp the kernel did not give, an answer too short).
    Missing,
    /// The readings are out of order: a stage would be negative.
    Disordered,
}

impl Readings {
    /// The seven stages, summing to `app_recv - app_send` exactly.
    pub fn stages(&self) -> Result<[u64; STAGES], Unsplit> {
        let known = [
            self.app_send,
            self.sched,
            self.driver,
            self.rx,
            self.app_recv,
        ]
        .iter()
        .all(|&v| v != 0)
            && [self.wake, self.turnaround, self.send]
                .iter()
                .all(|&v| v != UNKNOWN);
        if !known {
            return Err(Unsplit::Missing);
        }
        let echo = self.wake as u64 + self.turnaround as u64 + self.send as u64;
        let d = |a: u64, b: u64| b.checked_sub(a).ok_or(Unsplit::Disordered);
        let between = d(self.driver, self.rx)?;
        let mut s = [0; STAGES];
        s[CLIENT_SEND] = d(self.app_send, self.sched)?;
        s[CLIENT_QDISC] = d(self.sched, self.driver)?;
        s[OUTSIDE] = between.checked_sub(echo).ok_or(Unsplit::Disordered)?;
        s[SERVER_WAKE] = self.wake as u64;
        s[SERVER_TURN] = self.turnaround as u64;
        s[SERVER_SEND] = self.send as u64;
        s[CLIENT_WAKE] = d(self.rx, self.app_recv)?;
        Ok(s)
    }
}

impl Readings {
    /// The message as an exchange of the two clocks, for its one-way delays: when it left
    /// (the client's driver stamp), the echo's arrival less that, and the client's
    /// arrival less the echo's driver stamp (its arrival plus its three spans). `None`
    /// without the echo's arrival or a stage split.
    pub fn exchange(&self) -> Option<[i64; 3]> {
        self.stages().ok().and_then(|_| self.exchange_of_split())
    }

    /// [`exchange`](Self::exchange) of readings already split into stages.
    fn exchange_of_split(&self) -> Option<[i64; 3]> {
        if self.echo_rx == 0 {
            return None;
        }
        let echo_sent = self.echo_rx + self.wake as u64 + self.turnaround as u64 + self.send as u64;
        Some([
            self.driver as i64,
            self.echo_rx as i64 - self.driver as i64,
            self.rx as i64 - echo_sent as i64,
        ])
    }
}

/// Exchanges one filing keeps at most (24 bytes each): a worker's interval beyond a
/// million split messages counts the rest in `exchanges_dropped`.
pub const EXCHANGES_KEPT: usize = 1 << 20;

/// One interval's histogram of each stage, and the messages that could not be split.
#[derive(Debug, Clone)]
pub struct StageHists {
    pub stages: [Histogram<u64>; STAGES],
    pub missing: u64,
    pub disordered: u64,
    /// Each split message's exchange ([`Readings::exchange`]), for its one-way delays.
    pub exchanges: Vec<[i64; 3]>,
    pub exchanges_dropped: u64,
}

impl StageHists {
    /// Empty histograms of 1 ns to a minute at 3 significant digits, as the round trip's.
    pub fn new() -> StageHists {
        StageHists {
            stages: std::array::from_fn(|_| fresh()),
            missing: 0,
            disordered: 0,
            exchanges: Vec::new(),
            exchanges_dropped: 0,
        }
    }

    /// Files one message's readings: its stages and its exchange.
    #[inline]
    pub fn file(&mut self, r: &Readings) {
        let split = r.stages();
        // Every message split, sampled or not, sums to its round trip on the real clock.
        debug_assert!(split.map_or(true, |s| s.iter().sum::<u64>() == r.app_recv - r.app_send));
        let exchange = split.is_ok().then(|| r.exchange_of_split()).flatten();
        self.record(split);
        if let Some(x) = exchange {
            if self.exchanges.len() < EXCHANGES_KEPT {
                self.exchanges.push(x);
            } else {
                self.exchanges_dropped += 1;
            }
        }
    }

    /// Files one message: its stages, or why it has none.
    #[inline]
    pub fn record(&mut self, split: Result<[u64; STAGES], Unsplit>) {
        match split {
            Ok(s) => {
                for (h, v) in self.stages.iter_mut().zip(s) {
                    // A stage of 0 ns is recorded as 1: the histograms start at 1.
                    h.saturating_record(v.max(1));
                }
            }
            Err(Unsplit::Missing) => self.missing += 1,
            Err(Unsplit::Disordered) => self.disordered += 1,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.stages[0].is_empty() && self.missing == 0 && self.disordered == 0
    }

    pub fn reset(&mut self) {
        self.stages.iter_mut().for_each(Histogram::reset);
        (self.missing, self.disordered) = (0, 0);
        self.exchanges.clear();
        self.exchanges_dropped = 0;
    }

    /// Adds `other`'s messages to these.
    pub fn add(&mut self, other: &StageHists) {
        for (h, o) in self.stages.iter_mut().zip(&other.stages) {
            h.add(o).expect("same bounds");
        }
        self.missing += other.missing;
        self.disordered += other.disordered;
        let room = EXCHANGES_KEPT.saturating_sub(self.exchanges.len());
        let take = other.exchanges.len().min(room);
        self.exchanges.extend_from_slice(&other.exchanges[..take]);
        self.exchanges_dropped += other.exchanges_dropped + (other.exchanges.len() - take) as u64;
    }
}

impl Filing for StageHists {
    fn blank() -> Self {
        StageHists::new()
    }
    fn like(&self) -> Self {
        StageHists::new()
    }
    fn clear(&mut self) {
        self.reset()
    }
}

impl Default for StageHists {
    fn default() -> Self {
        StageHists::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn readings() -> Readings {
        Readings {
            app_send: 1_000,
            sched: 1_400,
            driver: 1_900,
            rx: 30_000,
            app_recv: 33_000,
            wake: 6_000,
            turnaround: 800,
            send: 2_200,
            echo_rx: 0,
        }
    }

    /// The echo's arrival stamp makes the message an exchange whose two raw one-way
    /// delays sum to the round trip outside the hosts.
    #[test]
    fn an_exchange_splits_the_outside_between_the_directions() {
        let r = Readings {
            echo_rx: 1_000_000_000_012_000,
            ..readings()
        };
        assert_eq!(readings().exchange(), None);
        let [at, f, rv] = r.exchange().unwrap();
        assert_eq!(at, 1_900);
        assert_eq!(f, 1_000_000_000_012_000 - 1_900);
        assert_eq!(f + rv, r.stages().unwrap()[OUTSIDE] as i64);
    }

    #[test]
    fn the_stages_sum_to_the_round_trip_exactly() {
        let r = readings();
        let s = r.stages().unwrap();
        assert_eq!(s.iter().sum::<u64>(), r.app_recv - r.app_send);
        assert_eq!(s, [400, 500, 19_100, 6_000, 800, 2_200, 3_000]);
    }

    #[test]
    fn a_missing_reading_or_a_negative_stage_is_counted_not_guessed() {
        let mut h = StageHists::new();
        h.record(
            Readings {
                rx: 0,
                ..readings()
            }
            .stages(),
        );
        h.record(
            Readings {
                send: UNKNOWN,
                ..readings()
            }
            .stages(),
        );
        // The echo's residence longer than the client saw between its stamps.
        h.record(
            Readings {
                wake: 60_000,
                ..readings()
            }
            .stages(),
        );
        h.record(
            Readings {
                sched: 900,
                ..readings()
            }
            .stages(),
        );
        assert_eq!((h.missing, h.disordered), (2, 2));
        assert!(h.stages.iter().all(Histogram::is_empty));
    }

    /// A filing keeps at most [`EXCHANGES_KEPT`] exchanges; the rest are counted.
    #[test]
    fn exchanges_beyond_the_budget_are_counted_not_kept() {
        let mut full = StageHists::new();
        full.exchanges = vec![[1, 2, 3]; EXCHANGES_KEPT - 2];
        let mut more = StageHists::new();
        more.exchanges = vec![[4, 5, 6]; 5];
        more.exchanges_dropped = 1;
        full.add(&more);
        assert_eq!(full.exchanges.len(), EXCHANGES_KEPT);
        assert_eq!(full.exchanges_dropped, 4);
        let r = Readings {
            echo_rx: 10_000,
            ..readings()
        };
        full.file(&r);
        assert_eq!(
            (full.exchanges.len(), full.exchanges_dropped),
            (EXCHANGES_KEPT, 5)
        );
    }

    #[test]
    fn figures_cross_an_answer_unchanged_and_short_answers_carry_none() {
        let f = EchoFigures {
            tag: 7,
            wake_ns: 1234,
            turnaround_ns: UNKNOWN,
            sent_tag: 6,
            send_ns: 99,
            rx_at: 1_800_000_000_123_456_789,
        };
        let mut answer = [0u8; 64];
        f.write(&mut answer);
        assert_eq!(EchoFigures::read(&answer), Some(f));
        assert!(EchoFigures::tells_send(&answer));
        let silent = EchoFigures {
            sent_tag: UNKNOWN,
            ..f
        };
        silent.write(&mut answer);
        assert!(!EchoFigures::tells_send(&answer));
        assert!(!EchoFigures::tells_send(&answer[..15]));
        f.write(&mut answer);
        assert_eq!(EchoFigures::read(&answer[..FIGURE_BYTES - 1]), None);
        assert_eq!(span32(10, 5), UNKNOWN);
        assert_eq!(span32(5, 5 + u32::MAX as u64), UNKNOWN);
        assert_eq!(span32(5, 10), 5);
    }
}
