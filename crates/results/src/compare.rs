//! A/B comparison of repeated runs: per metric, the median of each side, the change in
//! percent, a 95 % bootstrap confidence interval of that change, and a verdict that knows
//! whether higher or lower is better. Deterministic: the resampling is seeded.

use serde::{Deserialize, Serialize};

use crate::document::Document;

const RESAMPLES: usize = 2000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Better,
    Worse,
    NoSignificantChange,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    pub metric: String,
    pub higher_is_better: bool,
    pub runs_a: usize,
    pub runs_b: usize,
    pub median_a: f64,
    pub median_b: f64,
    /// (median B − median A) / median A, percent.
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

pub fn compare(metric: &str, a: &[f64], b: &[f64], higher_is_better: bool) -> Option<Comparison> {
    if a.is_empty() || b.is_empty() {
        return None;
    }
    let (ma, mb) = (median(a), median(b));
    if ma == 0.0 {
        return None;
    }
    let change = |x: f64, y: f64| (y - x) / x * 100.0;
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut diffs: Vec<f64> = (0..RESAMPLES)
        .map(|_| {
            let ra: Vec<f64> = (0..a.len()).map(|_| a[rng.below(a.len())]).collect();
            let rb: Vec<f64> = (0..b.len()).map(|_| b[rng.below(b.len())]).collect();
            change(median(&ra), median(&rb))
        })
        .filter(|d| d.is_finite())
        .collect();
    diffs.sort_by(|x, y| x.total_cmp(y));
    let (lo, hi) = (percentile(&diffs, 0.025), percentile(&diffs, 0.975));
    let verdict = if lo > 0.0 || hi < 0.0 {
        let up = lo > 0.0;
        if up == higher_is_better {
            Verdict::Better
        } else {
            Verdict::Worse
        }
    } else {
        Verdict::NoSignificantChange
    };
    Some(Comparison {
        metric: metric.into(),
        higher_is_better,
        runs_a: a.len(),
        runs_b: b.len(),
        median_a: ma,
        median_b: mb,
        change_percent: change(ma, mb),
        ci95_low_percent: lo,
        ci95_high_percent: hi,
        verdict,
    })
}

/// The headline figures of a document: (name with unit, value, higher is better).
pub fn metrics(doc: &Document) -> Vec<(&'static str, f64, bool)> {
    let e = &doc.end;
    let mut out = Vec::new();
    if let Some(r) = e.stream_receiver() {
        out.push(("receiver_gbit_per_s", r.bits_per_second / 1e9, true));
    }
    if let Some(s) = e.stream_sender() {
        if let Some(c) = s.cycles_per_byte {
            out.push(("sender_cycles_per_byte", c, false));
        }
    }
    if let Some(r) = e.requests_per_second {
        out.push(("requests_per_second", r, true));
    }
    if let Some(l) = &e.latency_ns {
        out.push(("rtt_p50_us", l.p50 as f64 / 1e3, false));
        out.push(("rtt_p99_us", l.p99 as f64 / 1e3, false));
        out.push(("rtt_p999_us", l.p999 as f64 / 1e3, false));
    }
    if let Some(c) = e.client.as_ref().and_then(|c| c.cpu_us_per_message) {
        out.push(("client_cpu_us_per_message", c, false));
    }
    if let Some(l) = &e.load {
        out.extend(load_metrics(l));
    }
    if let Some(p) = &e.packets {
        if let Some(r) = &p.receiver {
            out.push(("received_packets_per_second", r.packets_per_second, true));
        }
        if let Some(l) = p.loss_percent {
            out.push(("loss_percent", l, false));
        }
    }
    out
}

/// A load test's added P50 per loaded phase and ping: lower is better.
fn load_metrics(l: &crate::document::load::LoadEnd) -> Vec<(&'static str, f64, bool)> {
    use crate::spec::{Phase, Transport};
    l.added_latency
        .iter()
        .filter_map(|a| {
            let name = match (a.phase, a.transport) {
                (Phase::Upload, Transport::Udp) => "upload_added_udp_p50_us",
                (Phase::Upload, Transport::Tcp) => "upload_added_tcp_p50_us",
                (Phase::Download, Transport::Udp) => "download_added_udp_p50_us",
                (Phase::Download, Transport::Tcp) => "download_added_tcp_p50_us",
                (Phase::Both, Transport::Udp) => "both_added_udp_p50_us",
                (Phase::Both, Transport::Tcp) => "both_added_tcp_p50_us",
                (Phase::Idle, _) => return None,
            };
            Some((name, a.p50_added_ns as f64 / 1e3, false))
        })
        .collect()
}

/// Compares every metric the two groups of runs share.
pub fn compare_runs(a: &[&Document], b: &[&Document]) -> Vec<Comparison> {
    let names: Vec<(&'static str, bool)> = a
        .first()
        .map(|d| metrics(d).into_iter().map(|(n, _, h)| (n, h)).collect())
        .unwrap_or_default();
    let values = |docs: &[&Document], name: &str| -> Vec<f64> {
        docs.iter()
            .filter_map(|d| metrics(d).into_iter().find(|m| m.0 == name).map(|m| m.1))
            .collect()
    };
    names
        .into_iter()
        .filter_map(|(n, higher)| compare(n, &values(a, n), &values(b, n), higher))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
    }

    #[test]
    fn a_clear_gain_is_better_or_worse_by_direction() {
        let a = [10.0, 10.0, 10.0, 10.0, 10.0];
        let b = [12.0, 12.0, 12.0, 12.0, 12.0];
        let up = compare("x", &a, &b, true).unwrap();
        assert_eq!(up.change_percent, 20.0);
        assert_eq!((up.ci95_low_percent, up.ci95_high_percent), (20.0, 20.0));
        assert_eq!(up.verdict, Verdict::Better);
        assert_eq!(compare("x", &a, &b, false).unwrap().verdict, Verdict::Worse);
    }

    #[test]
    fn identical_or_overlapping_samples_are_no_significant_change() {
        let a = [10.0, 11.0, 9.0, 10.5, 9.5];
        let same = compare("x", &a, &a, true).unwrap();
        assert_eq!(same.change_percent, 0.0);
        assert_eq!(same.verdict, Verdict::NoSignificantChange);
        let b = [10.2, 9.1, 11.1, 9.8, 10.4];
        let c = compare("x", &a, &b, true).unwrap();
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
        let c = compare("x", &a, &b, true).unwrap();
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
        assert_eq!(compare("x", &a, &b, true), Some(c));
        assert!(compare("x", &[], &b, true).is_none());
    }
}
