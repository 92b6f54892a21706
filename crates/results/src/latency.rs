//! Latency figures from HDR histograms (values in nanoseconds). Workers record into their
//! own histogram; histograms are merged (threads, intervals) and summarised once.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Highest latency a histogram holds: a minute. Larger values are clamped to it.
pub const MAX_LATENCY_NS: u64 = 60_000_000_000;

/// A histogram with the bounds and precision (3 significant digits) used everywhere.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_NS, 3).expect("valid histogram bounds")
}

/// Latency percentiles in nanoseconds. `p999` is P99.9, `p9999` is P99.99.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    pub count: u64,
    pub min: u64,
    pub mean: f64,
    pub stddev: f64,
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub p999: u64,
    pub p9999: u64,
    pub max: u64,
}

impl LatencySummary {
    /// `None` for an empty histogram: no latency was measured, which is not zero latency.
    pub fn of(h: &Histogram<u64>) -> Option<LatencySummary> {
        if h.is_empty() {
            return None;
        }
        Some(LatencySummary {
            count: h.len(),
            min: h.min(),
            mean: h.mean(),
            stddev: h.stdev(),
            p50: h.value_at_quantile(0.50),
            p90: h.value_at_quantile(0.90),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            p9999: h.value_at_quantile(0.9999),
            max: h.max(),
        })
    }
}

/// Adds `from` into `into` (same bounds by construction).
pub fn merge(into: &mut Histogram<u64>, from: &Histogram<u64>) {
    into.add(from).expect("histograms share bounds");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn within(got: u64, want: u64) -> bool {
        // 3 significant digits: relative error below 0.1 %.
        (got as f64 - want as f64).abs() <= want as f64 * 0.001
    }

    #[test]
    fn uniform_1_to_100000() {
        let mut h = new_histogram();
        for v in 1..=100_000u64 {
            h.record(v).unwrap();
        }
        let s = LatencySummary::of(&h).unwrap();
        assert_eq!(s.count, 100_000);
        assert_eq!(s.min, 1);
        assert!(within(s.max, 100_000), "{}", s.max);
        assert!(within(s.p50, 50_000), "{}", s.p50);
        assert!(within(s.p90, 90_000), "{}", s.p90);
        assert!(within(s.p99, 99_000), "{}", s.p99);
        assert!(within(s.p999, 99_900), "{}", s.p999);
        assert!(within(s.p9999, 99_990), "{}", s.p9999);
        assert!((s.mean - 50_000.5).abs() < 50.0, "{}", s.mean);
        // Population stddev of 1..=n is sqrt((n^2 - 1) / 12).
        assert!((s.stddev - 28_867.5).abs() < 30.0, "{}", s.stddev);
    }

    #[test]
    fn tail_outliers_show_in_the_tail_only() {
        let mut h = new_histogram();
        h.record_n(10_000, 9_980).unwrap();
        h.record_n(50_000_000, 20).unwrap();
        let s = LatencySummary::of(&h).unwrap();
        assert!(within(s.p50, 10_000));
        assert!(within(s.p99, 10_000));
        assert!(within(s.p999, 50_000_000), "{}", s.p999);
        assert!(within(s.max, 50_000_000));
    }

    #[test]
    fn merge_across_threads_equals_recording_in_one() {
        let mut all = new_histogram();
        let mut parts = vec![new_histogram(), new_histogram(), new_histogram()];
        for v in 1..=30_000u64 {
            let x = v * 37 % 1_000_003;
            all.record(x).unwrap();
            parts[(v % 3) as usize].record(x).unwrap();
        }
        let mut merged = new_histogram();
        for p in &parts {
            merge(&mut merged, p);
        }
        assert_eq!(LatencySummary::of(&merged), LatencySummary::of(&all));
        assert!(LatencySummary::of(&new_histogram()).is_none());
    }
}
