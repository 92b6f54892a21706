//! A peer's round trips twice over: cumulative counts in fixed buckets (a Prometheus
//! classic histogram, which `rate()` and `histogram_quantile()` aggregate across pairs of
//! a rack), and this minute's HDR histogram (exact percentiles of the last minute), kept
//! sparse: a minute with no answers costs nothing, one with a few costs their values.

use hdrhistogram::Histogram;

/// Upper bounds of the classic buckets, in seconds: 25 µs to 2.5 s, 1-2.5-5 per decade
/// (a rack's RTT is tens of microseconds; a congested or distant path hundreds of ms).
pub const BUCKETS_S: [f64; 16] = [
    25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3,
    500e-3, 1.0, 2.5,
];

/// Largest round trip the minute's histogram holds, in microseconds (longer ones are
/// clamped): 10 s, beyond any probe's timeout.
const MAX_US: u64 = 10_000_000;

/// Cumulative bucket counts (each bucket counts round trips up to its bound), their sum
/// and count, since the peer was first listed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Buckets {
    /// Per bound of [`BUCKETS_S`], round trips at or below it (cumulative, as exposed).
    pub le: [u64; BUCKETS_S.len()],
    pub count: u64,
    pub sum_s: f64,
}

impl Buckets {
    pub fn record(&mut self, rtt_ns: u64) {
        let s = rtt_ns as f64 / 1e9;
        for (bound, n) in BUCKETS_S.iter().zip(self.le.iter_mut()) {
            if s <= *bound {
                *n += 1;
            }
        }
        self.count += 1;
        self.sum_s += s;
    }
}

/// A minute's round trips in microseconds, 2 significant digits (1 %): 9 KiB a peer.
pub fn minute_histogram() -> Histogram<u32> {
    Histogram::new_with_bounds(1, MAX_US, 2).expect("valid histogram bounds")
}

/// Records `rtt_ns` in a minute's histogram (microseconds, at least 1, clamped).
pub fn record_minute(h: &mut Histogram<u32>, rtt_ns: u64) {
    h.saturating_record((rtt_ns / 1000).clamp(1, MAX_US));
}

/// Round trips a minute keeps as plain values (4 bytes each) before it takes the HDR
/// histogram's 9 KiB: a peer probed once a second has 60 a minute.
pub const FEW: usize = 256;

/// This minute's round trips: none, a few values as they came, or (past [`FEW`]) the HDR
/// histogram. Its figures are the histogram's either way: the few are recorded into one
/// when the minute closes, and a histogram's counts do not depend on the order recorded.
#[derive(Debug, Default)]
pub struct Minute {
    kept: Kept,
}

#[derive(Debug, Default)]
enum Kept {
    #[default]
    None,
    Few(Vec<u32>),
    Hdr(Box<Histogram<u32>>),
}

impl Minute {
    /// Records `rtt_ns` (microseconds, at least 1, clamped, as [`record_minute`]).
    pub fn record(&mut self, rtt_ns: u64) {
        let us = (rtt_ns / 1000).clamp(1, MAX_US);
        match &mut self.kept {
            Kept::None => self.kept = Kept::Few(vec![us as u32]),
            Kept::Few(v) if v.len() < FEW => v.push(us as u32),
            Kept::Few(v) => {
                let mut h = Box::new(minute_histogram());
                for x in v.iter() {
                    h.saturating_record(u64::from(*x));
                }
                h.saturating_record(us);
                self.kept = Kept::Hdr(h);
            }
            Kept::Hdr(h) => h.saturating_record(us),
        }
    }

    /// The minute's figures (none without answers), and an empty minute.
    pub fn close(&mut self) -> Option<MinuteFigures> {
        match std::mem::take(&mut self.kept) {
            Kept::None => None,
            Kept::Few(v) => {
                let mut h = minute_histogram();
                for x in v {
                    h.saturating_record(u64::from(x));
                }
                MinuteFigures::of(&h)
            }
            Kept::Hdr(h) => MinuteFigures::of(&h),
        }
    }

    /// Bytes held beyond the struct itself (for the memory test).
    pub fn heap_bytes(&self) -> usize {
        match &self.kept {
            Kept::None => 0,
            Kept::Few(v) => v.capacity() * 4,
            Kept::Hdr(h) => h.distinct_values() * 4,
        }
    }
}

/// A finished minute's figures, in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct MinuteFigures {
    pub count: u64,
    pub p50_s: f64,
    pub p99_s: f64,
    pub p999_s: f64,
    pub max_s: f64,
}

impl MinuteFigures {
    pub fn of(h: &Histogram<u32>) -> Option<MinuteFigures> {
        if h.is_empty() {
            return None;
        }
        let s = |us: u64| us as f64 / 1e6;
        Some(MinuteFigures {
            count: h.len(),
            p50_s: s(h.value_at_quantile(0.5)),
            p99_s: s(h.value_at_quantile(0.99)),
            p999_s: s(h.value_at_quantile(0.999)),
            max_s: s(h.max()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_cumulative_and_the_minute_holds_percentiles() {
        let mut b = Buckets::default();
        let mut h = minute_histogram();
        for us in [30, 80, 80, 3000] {
            b.record(us * 1000);
            record_minute(&mut h, us * 1000);
        }
        assert_eq!(b.count, 4);
        assert_eq!(b.le[0], 0, "none at or under 25 µs");
        assert_eq!(b.le[1], 1, "30 µs under 50 µs");
        assert_eq!(b.le[2], 3, "and the two 80 µs under 100 µs");
        assert_eq!(b.le[6], 3, "3 ms is above 2.5 ms");
        assert_eq!(b.le[7], 4);
        assert!((b.sum_s - 0.00319).abs() < 1e-9, "{}", b.sum_s);
        let m = MinuteFigures::of(&h).unwrap();
        assert_eq!(m.count, 4);
        assert!((m.p50_s - 80e-6).abs() < 1e-6, "{m:?}");
        assert!((m.max_s - 3e-3).abs() < 3e-5, "{m:?}");
        assert_eq!(MinuteFigures::of(&minute_histogram()), None);
    }

    /// The sparse minute's figures equal the full histogram's, below and past [`FEW`]
    /// values, and an unanswered minute holds nothing.
    #[test]
    fn a_sparse_minute_has_the_full_histograms_figures_and_costs_what_it_holds() {
        let mut m = Minute::default();
        assert_eq!(m.heap_bytes(), 0);
        assert_eq!(m.close(), None);
        // A spread of round trips (20 µs to 30 s, past the clamp) in a scrambled order.
        let rtts: Vec<u64> = (0..3 * FEW as u64)
            .map(|i| (i * 7919 % 1000 + 20) * 1000 * (1 + i % 5).pow(3) + (i % 3) * 10_000_000_000)
            .collect();
        for n in [1, 6, FEW, FEW + 1, 3 * FEW] {
            let mut h = minute_histogram();
            for r in &rtts[..n] {
                record_minute(&mut h, *r);
                m.record(*r);
            }
            let held = m.heap_bytes();
            if n <= FEW {
                assert!(held <= 4 * FEW, "{n} values hold {held} bytes");
            } else {
                assert!(held > 4 * FEW, "past {FEW} values the histogram");
            }
            assert_eq!(m.close(), MinuteFigures::of(&h), "{n} values");
            assert_eq!(m.heap_bytes(), 0, "a closed minute holds nothing");
        }
    }
}
