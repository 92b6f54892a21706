//! A/B comparison of repeated runs: per metric, the median of each side, the change in
//! percent, a 95 % bootstrap confidence interval of that change, and a verdict that knows
//! whether higher or lower is better. Deterministic: the resampling is seeded.

use serde::{Deserialize, Serialize};

use crate::document::Document;
use crate::pooled::Pooled;

mod limits;
pub(crate) mod metric;

pub use limits::{limit_shift, GroupLimit, LimitShift};
pub use metric::Metric;

const RESAMPLES: usize = 2000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Better,
    Worse,
    NoSignificantChange,
}

/// How a group of runs is reduced to one figure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Aggregate {
    /// The median of the runs' figures.
    MedianOfRuns,
    /// The percentile of the runs' merged latency histogram: every sample of every run
    /// counted once, the figure one long run would have given.
    MergedHistogram,
}

impl Aggregate {
    pub fn describe(self) -> &'static str {
        match self {
            Aggregate::MedianOfRuns => "median of runs",
            Aggregate::MergedHistogram => "merged histogram",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// The figure's machine name, with its unit (`rtt_p99_us`).
    pub metric: String,
    /// The figure as a reader names it (`RTT P99`), and its unit (`µs`).
    pub title: String,
    pub unit: String,
    pub higher_is_better: bool,
    pub runs_a: usize,
    pub runs_b: usize,
    /// How each group's figure was made from its runs.
    pub aggregate: Aggregate,
    pub value_a: f64,
    pub value_b: f64,
    /// (B − A) / A, percent.
    pub change_percent: f64,
    pub ci95_low_percent: f64,
    pub ci95_high_percent: f64,
    pub verdict: Verdict,
}

pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let n = s.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// xorshift64*: enough randomness for resampling, and the same answer every time.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) as usize % n
    }
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i]
}

/// A group's figure from its runs, where run r counts `weights[r]` times (1 each for the
/// figure itself; a bootstrap resample's multiplicities for its interval).
trait Statistic {
    fn runs(&self) -> usize;
    fn of(&self, weights: &[u64]) -> Option<f64>;
}

/// The median of per-run figures.
struct Median<'a>(&'a [f64]);

impl Statistic for Median<'_> {
    fn runs(&self) -> usize {
        self.0.len()
    }
    fn of(&self, weights: &[u64]) -> Option<f64> {
        let v: Vec<f64> = self
            .0
            .iter()
            .zip(weights)
            .flat_map(|(&x, &w)| std::iter::repeat_n(x, w as usize))
            .collect();
        (!v.is_empty()).then(|| median(&v))
    }
}

/// A quantile of the runs' pooled round-trip histograms, in µs.
struct MergedQuantile<'a> {
    pool: &'a Pooled,
    q: f64,
}

impl Statistic for MergedQuantile<'_> {
    fn runs(&self) -> usize {
        self.pool.runs()
    }
    fn of(&self, weights: &[u64]) -> Option<f64> {
        self.pool.quantile(weights, self.q).map(|v| v as f64 / 1e3)
    }
}

/// Multiplicities of a resample with replacement of `n` runs.
fn resample(rng: &mut Rng, n: usize) -> Vec<u64> {
    let mut w = vec![0; n];
    for _ in 0..n {
        w[rng.below(n)] += 1;
    }
    w
}

/// B against A on a statistic: the change and its 95 % bootstrap interval (runs resampled
/// with replacement in each group), and the verdict.
fn compare_by(
    m: &Metric,
    aggregate: Aggregate,
    a: &dyn Statistic,
    b: &dyn Statistic,
) -> Option<Comparison> {
    let (na, nb) = (a.runs(), b.runs());
    if na == 0 || nb == 0 {
        return None;
    }
    let (va, vb) = (a.of(&vec![1; na])?, b.of(&vec![1; nb])?);
    if va == 0.0 {
        return None;
    }
    let change = |x: f64, y: f64| (y - x) / x * 100.0;
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut diffs: Vec<f64> = (0..RESAMPLES)
        .filter_map(|_| {
            let (wa, wb) = (resample(&mut rng, na), resample(&mut rng, nb));
            Some(change(a.of(&wa)?, b.of(&wb)?))
        })
        .filter(|d| d.is_finite())
        .collect();
    diffs.sort_by(|x, y| x.total_cmp(y));
    let (lo, hi) = (percentile(&diffs, 0.025), percentile(&diffs, 0.975));
    let verdict = if lo > 0.0 || hi < 0.0 {
        if (lo > 0.0) == m.higher_is_better {
            Verdict::Better
        } else {
            Verdict::Worse
        }
    } else {
        Verdict::NoSignificantChange
    };
    Some(Comparison {
        metric: m.key.into(),
        title: m.title.clone(),
        unit: m.unit.into(),
        higher_is_better: m.higher_is_better,
        runs_a: na,
        runs_b: nb,
        aggregate,
        value_a: va,
        value_b: vb,
        change_percent: change(va, vb),
        ci95_low_percent: lo,
        ci95_high_percent: hi,
        verdict,
    })
}

/// Medians of per-run figures `a` and `b` of metric `m`, compared.
pub fn compare(m: &Metric, a: &[f64], b: &[f64]) -> Option<Comparison> {
    compare_by(m, Aggregate::MedianOfRuns, &Median(a), &Median(b))
}

/// The headline figures of a document, in the order a reader looks for them: its kind's
/// (`document::Row::metrics`).
pub fn metrics(doc: &Document) -> Vec<Metric> {
    (crate::document::row(doc.test).metrics)(&doc.end.section)
}

/// The runs' round-trip histograms pooled, when every run kept one.
fn pooled(docs: &[&Document]) -> Option<Pooled> {
    let hists: Option<Vec<_>> = docs
        .iter()
        .map(|d| d.end.rr()?.latency_ns.as_ref()?.distribution()?.ok())
        .collect();
    Some(Pooled::of(&hists?))
}

/// Compares every metric the two groups of runs share. Percentiles of round trips compare
/// the groups' merged histograms when every run kept its histogram, medians otherwise.
pub fn compare_runs(a: &[&Document], b: &[&Document]) -> Vec<Comparison> {
    let Some(first) = a.first() else {
        return Vec::new();
    };
    let pools = pooled(a).zip(pooled(b));
    let values = |docs: &[&Document], key: &str| -> Vec<f64> {
        docs.iter()
            .filter_map(|d| {
                metrics(d)
                    .into_iter()
                    .find(|m| m.key == key)
                    .map(|m| m.value)
            })
            .collect()
    };
    metrics(first)
        .into_iter()
        .filter_map(|m| match (m.quantile, &pools) {
            (Some(q), Some((pa, pb))) => {
                let (sa, sb) = (
                    MergedQuantile { pool: pa, q },
                    MergedQuantile { pool: pb, q },
                );
                compare_by(&m, Aggregate::MergedHistogram, &sa, &sb)
            }
            _ => compare(&m, &values(a, m.key), &values(b, m.key)),
        })
        .collect()
}

/// Whether any figure is significantly worse by more than `limit_percent`, whichever way
/// is better for it (`sonde compare --fail-if-worse`).
pub fn regressed(cmp: &[Comparison], limit_percent: f64) -> bool {
    cmp.iter().any(|c| {
        let loss = if c.higher_is_better {
            -c.change_percent
        } else {
            c.change_percent
        };
        c.verdict == Verdict::Worse && loss > limit_percent
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn up() -> Metric {
        Metric::new("x", "X", "", 0.0)
    }

    fn down() -> Metric {
        up().lower_is_better()
    }

    #[test]
    fn a_regression_is_a_worse_verdict_beyond_the_limit() {
        let (a, b) = ([100.0, 101.0, 99.0, 100.0], [80.0, 81.0, 79.0, 80.0]);
        let drop = compare(&up(), &a, &b).unwrap();
        assert_eq!(drop.verdict, Verdict::Worse);
        assert!(regressed(std::slice::from_ref(&drop), 10.0));
        assert!(!regressed(std::slice::from_ref(&drop), 25.0));
        let gain = compare(&down(), &a, &b).unwrap();
        assert!(
            !regressed(&[gain], 0.0),
            "lower is better: a fall is a gain"
        );
    }

    #[test]
    fn medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
    }

    #[test]
    fn a_clear_gain_is_better_or_worse_by_direction() {
        let a = [10.0, 10.0, 10.0, 10.0, 10.0];
        let b = [12.0, 12.0, 12.0, 12.0, 12.0];
        let up = compare(&up(), &a, &b).unwrap();
        assert_eq!(up.change_percent, 20.0);
        assert_eq!((up.ci95_low_percent, up.ci95_high_percent), (20.0, 20.0));
        assert_eq!(up.verdict, Verdict::Better);
        assert_eq!(compare(&down(), &a, &b).unwrap().verdict, Verdict::Worse);
    }

    #[test]
    fn identical_or_overlapping_samples_are_no_significant_change() {
        let a = [10.0, 11.0, 9.0, 10.5, 9.5];
        let same = compare(&up(), &a, &a).unwrap();
        assert_eq!(same.change_percent, 0.0);
        assert_eq!(same.verdict, Verdict::NoSignificantChange);
        let b = [10.2, 9.1, 11.1, 9.8, 10.4];
        let c = compare(&up(), &a, &b).unwrap();
        assert!(
            c.ci95_low_percent < 0.0 && c.ci95_high_percent > 0.0,
            "{c:?}"
        );
        assert_eq!(c.verdict, Verdict::NoSignificantChange);
    }

    #[test]
    fn the_interval_brackets_the_change_and_is_reproducible() {
        let a = [100.0, 102.0, 98.0, 101.0, 99.0, 100.5, 99.5];
        let b = [128.0, 131.0, 126.0, 129.0, 127.0, 130.0, 128.5];
        let c = compare(&up(), &a, &b).unwrap();
        assert!(
            (c.change_percent - 28.5).abs() < 0.01,
            "{}",
            c.change_percent
        );
        assert!(
            c.ci95_low_percent > 24.0 && c.ci95_high_percent < 33.0,
            "{c:?}"
        );
        assert!(c.ci95_low_percent <= c.change_percent && c.change_percent <= c.ci95_high_percent);
        assert_eq!(compare(&up(), &a, &b), Some(c));
        assert!(compare(&up(), &[], &b).is_none());
    }

    #[test]
    fn percentiles_of_repetitions_come_from_their_merged_histogram() {
        use crate::latency::new_histogram;
        // Five runs of one configuration; one of them has a slow tail.
        let runs = |base: u64, slow: usize| -> Vec<hdrhistogram::Histogram<u64>> {
            (0..5)
                .map(|r| {
                    let mut h = new_histogram();
                    for i in 0..2_000u64 {
                        let tail = r == slow && i % 10 == 0;
                        h.record(base + i % 97 * 100 + if tail { 900_000 } else { 0 })
                            .unwrap();
                    }
                    h
                })
                .collect()
        };
        let (ra, rb) = (runs(50_000, 2), runs(40_000, 9));
        let (pa, pb) = (Pooled::of(&ra), Pooled::of(&rb));
        let m = Metric {
            quantile: Some(0.99),
            ..down()
        };
        let (sa, sb) = (
            MergedQuantile { pool: &pa, q: 0.99 },
            MergedQuantile { pool: &pb, q: 0.99 },
        );
        let c = compare_by(&m, Aggregate::MergedHistogram, &sa, &sb).unwrap();
        let mut merged = new_histogram();
        ra.iter().for_each(|h| merged.add(h).unwrap());
        assert_eq!(c.value_a, merged.value_at_quantile(0.99) as f64 / 1e3);
        let p99s: Vec<f64> = ra
            .iter()
            .map(|h| h.value_at_quantile(0.99) as f64 / 1e3)
            .collect();
        assert!(
            c.value_a > 2.0 * median(&p99s),
            "the slow run's tail is 2 % of all samples: it sets the merged P99 ({}) where the median of P99s ({}) hides it",
            c.value_a,
            median(&p99s)
        );
        assert_eq!(c.verdict, Verdict::Better);
        assert!(c.ci95_low_percent <= c.change_percent && c.change_percent <= c.ci95_high_percent);
    }
}
