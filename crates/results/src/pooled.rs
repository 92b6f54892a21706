//! Several runs' latency histograms pooled bucket by bucket, so that a quantile of any
//! weighted union of them (all runs once: the merged histogram; a bootstrap resample: some
//! runs twice, some not at all) is one walk over the buckets, not a merge of histograms.

use hdrhistogram::Histogram;

pub struct Pooled {
    /// Every bucket any run recorded into, as its highest equivalent value, ascending.
    values: Vec<u64>,
    /// Per bucket, each run's count.
    counts: Vec<Vec<u64>>,
    runs: usize,
}

impl Pooled {
    /// `runs` share bounds and precision (every sonde histogram does).
    pub fn of(runs: &[Histogram<u64>]) -> Pooled {
        let mut cells: Vec<(u64, usize, u64)> = Vec::new();
        for (r, h) in runs.iter().enumerate() {
            for v in h.iter_recorded() {
                let value = h.highest_equivalent(v.value_iterated_to());
                cells.push((value, r, v.count_at_value()));
            }
        }
        cells.sort_unstable();
        let mut values: Vec<u64> = Vec::new();
        let mut counts: Vec<Vec<u64>> = Vec::new();
        for (value, r, count) in cells {
            if values.last() != Some(&value) {
                values.push(value);
                counts.push(vec![0; runs.len()]);
            }
            counts.last_mut().expect("pushed above")[r] += count;
        }
        Pooled {
            values,
            counts,
            runs: runs.len(),
        }
    }

    pub fn runs(&self) -> usize {
        self.runs
    }

    /// The quantile `q` of the union in which run r counts `weights[r]` times, ranked as
    /// HdrHistogram ranks (the first bucket whose cumulative count reaches ⌈q·total⌉, at
    /// least 1). `None` when the union is empty.
    pub fn quantile(&self, weights: &[u64], q: f64) -> Option<u64> {
        let weigh = |c: &Vec<u64>| c.iter().zip(weights).map(|(c, w)| c * w).sum::<u64>();
        let total: u64 = self.counts.iter().map(weigh).sum();
        if total == 0 {
            return None;
        }
        let rank = ((q.min(1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (value, c) in self.values.iter().zip(&self.counts) {
            seen += weigh(c);
            if seen >= rank {
                return Some(*value);
            }
        }
        self.values.last().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::latency::new_histogram;

    #[test]
    fn every_quantile_of_the_pool_is_the_merged_histograms() {
        let mut runs = vec![new_histogram(), new_histogram(), new_histogram()];
        for i in 0..20_000u64 {
            let r = (i % 3) as usize;
            runs[r]
                .record(30_000 + i * (r as u64 + 1) * 17 % 50_021)
                .unwrap();
        }
        runs[2].record(9_000_000).unwrap();
        let mut merged = new_histogram();
        runs.iter().for_each(|h| merged.add(h).unwrap());
        let pool = Pooled::of(&runs);
        for q in [0.001, 0.25, 0.5, 0.9, 0.99, 0.999, 0.9999, 1.0] {
            assert_eq!(
                pool.quantile(&[1, 1, 1], q),
                Some(merged.value_at_quantile(q)),
                "q {q}"
            );
        }
        let mut twice_first = runs[0].clone();
        twice_first.add(&runs[0]).unwrap();
        twice_first.add(&runs[1]).unwrap();
        assert_eq!(
            pool.quantile(&[2, 1, 0], 0.99),
            Some(twice_first.value_at_quantile(0.99))
        );
        assert_eq!(pool.quantile(&[0, 0, 0], 0.5), None);
    }
}
