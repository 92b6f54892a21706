//! Latency figures from HDR histograms (values in nanoseconds). Workers record into their
//! own histogram; histograms are merged (threads, intervals, runs) and summarised once. A
//! summary carries its whole histogram in HdrHistogram's own encoding, so that a reader can
//! plot every bucket and merge repetitions exactly rather than average their percentiles.

use base64::Engine as _;
use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Highest latency a histogram holds: a minute. Larger values are clamped to it.
pub const MAX_LATENCY_NS: u64 = 60_000_000_000;

/// Points per halving of the distance to 100 % in a percentile curve: HdrHistogram's own
/// percentile distribution uses 5.
const TICKS_PER_HALF_DISTANCE: u32 = 5;

#[derive(Debug, thiserror::Error)]
pub enum HistogramError {
    #[error("histogram is not base64: {0}")]
    Base64(#[from] base64::DecodeError),
    #[error("histogram is not an HdrHistogram V2 encoding: {0:?}")]
    Decode(hdrhistogram::serialization::DeserializeError),
    #[error("histograms cannot be merged: {0:?}")]
    Merge(hdrhistogram::AdditionError),
}

/// A histogram with the bounds and precision (3 significant digits) used everywhere.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_NS, 3).expect("valid histogram bounds")
}

/// `h` in HdrHistogram's compressed V2 encoding, base64: the form of an interval log line,
/// which HdrHistogram's tools in every language decode.
pub fn encode(h: &Histogram<u64>) -> String {
    let mut bytes = Vec::new();
    V2DeflateSerializer::new()
        .serialize(h, &mut bytes)
        .expect("a histogram serialises into memory");
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The histogram `encode` wrote (or any HdrHistogram tool did).
pub fn decode(text: &str) -> Result<Histogram<u64>, HistogramError> {
    let bytes = base64::engine::general_purpose::STANDARD.decode(text.trim())?;
    Deserializer::new()
        .deserialize(&mut bytes.as_slice())
        .map_err(HistogramError::Decode)
}

/// Latency percentiles in nanoseconds. `p999` is P99.9, `p9999` is P99.99.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    /// The whole distribution ([`encode`]); absent in documents from before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub histogram: Option<String>,
}

impl LatencySummary {
    /// `None` for an empty histogram: no latency was measured, which is not zero latency.
    pub fn of(h: &Histogram<u64>) -> Option<LatencySummary> {
        if h.is_empty() {
            return None;
        }
        Some(LatencySummary {
            histogram: Some(encode(h)),
            ..LatencySummary::figures(h)
        })
    }

    /// P50, P90, P99, P99.9, P99.99 and the maximum: a latency table's tail columns.
    pub fn tail(&self) -> [u64; 6] {
        [
            self.p50, self.p90, self.p99, self.p999, self.p9999, self.max,
        ]
    }

    /// The figures of a non-empty histogram, without the histogram itself.
    fn figures(h: &Histogram<u64>) -> LatencySummary {
        LatencySummary {
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
            histogram: None,
        }
    }

    /// (fraction at or below, value) from every bucket of the histogram ([`percentile_curve`]),
    /// or the summary's own percentiles in a document that kept no histogram.
    pub fn curve(&self) -> Vec<(f64, u64)> {
        match self.distribution() {
            Some(Ok(h)) => percentile_curve(&h),
            _ => vec![
                (0.0, self.min),
                (0.5, self.p50),
                (0.9, self.p90),
                (0.99, self.p99),
                (0.999, self.p999),
                (0.9999, self.p9999),
                (1.0, self.max),
            ],
        }
    }

    /// The distribution this summary was made from, if it kept it.
    pub fn distribution(&self) -> Option<Result<Histogram<u64>, HistogramError>> {
        self.histogram.as_deref().map(decode)
    }
}

/// Adds `from` into `into` (same bounds by construction).
pub fn merge(into: &mut Histogram<u64>, from: &Histogram<u64>) {
    into.add(from).expect("histograms share bounds");
}

/// The exact union of the distributions of `summaries` (runs, intervals): `None` when
/// there are none, or when one of them kept no histogram (then no exact union exists).
pub fn merged<'a>(
    summaries: impl IntoIterator<Item = &'a LatencySummary>,
) -> Option<Result<Histogram<u64>, HistogramError>> {
    let mut total = new_histogram();
    let mut any = false;
    for s in summaries {
        let h = match s.distribution()? {
            Ok(h) => h,
            Err(e) => return Some(Err(e)),
        };
        if let Err(e) = total.add(&h) {
            return Some(Err(HistogramError::Merge(e)));
        }
        any = true;
    }
    any.then_some(Ok(total))
}

/// Every percentile level HdrHistogram's own percentile distribution prints, as
/// (fraction at or below, value): denser towards the tail, up to the maximum.
pub fn percentile_curve(h: &Histogram<u64>) -> Vec<(f64, u64)> {
    if h.is_empty() {
        return Vec::new();
    }
    h.iter_quantiles(TICKS_PER_HALF_DISTANCE)
        .map(|v| {
            (
                v.quantile_iterated_to(),
                h.highest_equivalent(v.value_iterated_to()),
            )
        })
        .collect()
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

    /// Two runs' distributions, as a run records them: different spreads and tails.
    fn two_runs() -> (Vec<u64>, Vec<u64>) {
        let a = (0..10_000u64).map(|i| 40_000 + i * 7 % 9_001).collect();
        let b = (0..7_000u64)
            .map(|i| 55_000 + i * 13 % 20_011 + if i % 997 == 0 { 3_000_000 } else { 0 })
            .collect();
        (a, b)
    }

    fn recorded(values: &[u64]) -> Histogram<u64> {
        let mut h = new_histogram();
        values.iter().for_each(|&v| h.record(v).unwrap());
        h
    }

    #[test]
    fn a_summary_keeps_its_histogram_through_json() {
        let (a, _) = two_runs();
        let s = LatencySummary::of(&recorded(&a)).unwrap();
        let back: LatencySummary =
            serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back, s);
        let h = back.distribution().unwrap().unwrap();
        assert_eq!(h, recorded(&a));
        assert!(decode("not base64!").is_err());
        assert!(decode("aGVsbG8=").is_err(), "base64 of a non-histogram");
    }

    #[test]
    fn merging_two_runs_equals_one_run_over_both_sample_sets() {
        let (a, b) = two_runs();
        let (sa, sb) = (
            LatencySummary::of(&recorded(&a)).unwrap(),
            LatencySummary::of(&recorded(&b)).unwrap(),
        );
        let merged = merged([&sa, &sb]).unwrap().unwrap();
        let both: Vec<u64> = a.iter().chain(&b).copied().collect();
        assert_eq!(
            LatencySummary::of(&merged),
            LatencySummary::of(&recorded(&both))
        );
        // The P99 of the union is not the median (nor the mean) of the runs' P99s.
        let union_p99 = merged.value_at_quantile(0.99);
        assert_ne!(union_p99, (sa.p99 + sb.p99) / 2);
        let old = LatencySummary {
            histogram: None,
            ..sa.clone()
        };
        assert!(
            merged_is_none(&[&old, &sb]),
            "no exact union without histograms"
        );
    }

    fn merged_is_none(s: &[&LatencySummary]) -> bool {
        merged(s.iter().copied()).is_none()
    }

    #[test]
    fn the_percentile_curve_is_dense_in_the_tail_and_ends_at_the_maximum() {
        let (a, _) = two_runs();
        let h = recorded(&a);
        let curve = percentile_curve(&h);
        assert!(curve.len() >= 50, "{} points", curve.len());
        assert!(curve
            .windows(2)
            .all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1));
        let tail = curve.iter().filter(|p| p.0 > 0.99).count();
        assert!(tail >= 10, "{tail} points above P99");
        assert_eq!(curve.last().unwrap(), &(1.0, h.highest_equivalent(h.max())));
    }
}
