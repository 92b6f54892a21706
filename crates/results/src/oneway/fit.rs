//! The offset between two hosts' clocks from the exchanges themselves, NTP's idea over a
//! whole run: neither direction's delay can be negative, so each exchange bounds the
//! offset from both sides (`-reverse_raw <= offset <= forward_raw`). A line (offset and
//! drift) is fitted with the widest margin inside every bound, and the error stated is how
//! far any line that fits them all could lie from it, at either end of the run. One
//! exchange alone gives NTP's answer: the midpoint, within half its round trip outside
//! the hosts.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Exchanges are kept as the tightest bound on each side per bucket of this many ns: a
/// run's bounds stay a few thousand whatever its rate. Within a bucket a drift of
/// [`MAX_DRIFT`] moves the offset by 10 µs at most.
pub const BUCKET_NS: i64 = 10_000_000;
/// The steepest drift searched: 1,000 ppm, twice the kernel's own frequency limit.
pub const MAX_DRIFT: f64 = 1e-3;
/// The searches for a drift stop within this of it (10^-6 ppm: 3.6 ns over an hour), some
/// 55 steps instead of a fixed hundred: a mesh agent fits every peer's window each minute.
const DRIFT_RESOLUTION: f64 = 1e-12;

/// One exchange on the hosts' raw real-time clocks: when it left (the local host's
/// clock), the remote's arrival stamp less the local send stamp, and the local arrival
/// stamp less the remote's send stamp. With the remote's clock ahead by `offset`, the
/// true forward delay is `forward_raw - offset` and the reverse `reverse_raw + offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exchange {
    pub at_ns: i64,
    pub forward_raw_ns: i64,
    pub reverse_raw_ns: i64,
}

/// The tightest bound on each side in one bucket: `[time, bound]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bucket {
    /// The offset is at most this (the bucket's fastest forward).
    pub upper: [i64; 2],
    /// The offset is at least this (minus the bucket's fastest reverse).
    pub lower: [i64; 2],
}

/// The bounds of a run's (or an interval's) exchanges, bucket by bucket.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Limits {
    /// JSON writes the keys as strings; read back through the control protocol's tagged
    /// messages (serde's buffered content) an integer key would not parse, so the keys are
    /// written and read as strings here, the same JSON as before.
    #[serde(with = "string_keys")]
    pub buckets: BTreeMap<i64, Bucket>,
}

mod string_keys {
    use std::collections::BTreeMap;

    use serde::de::Error;
    use serde::{Deserialize, Deserializer, Serializer};

    use super::Bucket;

    pub fn serialize<S: Serializer>(m: &BTreeMap<i64, Bucket>, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(m.iter().map(|(k, v)| (k.to_string(), v)))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<i64, Bucket>, D::Error> {
        BTreeMap::<String, Bucket>::deserialize(d)?
            .into_iter()
            .map(|(k, v)| Ok((k.parse().map_err(D::Error::custom)?, v)))
            .collect()
    }
}

/// The fitted offset (the remote's clock less the local one) and its error bound.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Offset {
    /// The offset at `at_ns`, the middle of the exchanges' span.
    pub offset_ns: f64,
    pub at_ns: i64,
    /// How fast the offset grew over the run.
    pub drift_ppm: f64,
    /// No offset line that fits every exchange lies further from this one anywhere in
    /// the span.
    pub bound_ns: f64,
    pub from_ns: i64,
    pub to_ns: i64,
}

impl Offset {
    /// The offset at `t_ns`.
    pub fn at(&self, t_ns: i64) -> f64 {
        self.offset_ns + self.drift_ppm * 1e-6 * (t_ns - self.at_ns) as f64
    }
}

/// No line fits every exchange: a clock stepped during the run, or drifted faster than
/// [`MAX_DRIFT`]; `short_ns` is how far the tightest bounds cross.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct NoFit {
    pub short_ns: f64,
}

impl Limits {
    pub fn add(&mut self, e: Exchange) {
        self.tighten(
            e.at_ns.div_euclid(BUCKET_NS),
            Bucket {
                upper: [e.at_ns, e.forward_raw_ns],
                lower: [e.at_ns, -e.reverse_raw_ns],
            },
        );
    }

    /// Adds another interval's (or worker's) bounds.
    pub fn merge(&mut self, other: &Limits) {
        for (k, o) in &other.buckets {
            self.tighten(*k, *o);
        }
    }

    /// Bucket `k` keeps the tighter bound on each side of its own and `o`'s.
    fn tighten(&mut self, k: i64, o: Bucket) {
        self.buckets
            .entry(k)
            .and_modify(|b| {
                if o.upper[1] < b.upper[1] {
                    b.upper = o.upper;
                }
                if o.lower[1] > b.lower[1] {
                    b.lower = o.lower;
                }
            })
            .or_insert(o);
    }

    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }

    /// The first and last exchange's times.
    pub fn span(&self) -> Option<(i64, i64)> {
        let times = self.buckets.values().flat_map(|b| [b.upper[0], b.lower[0]]);
        let from = times.clone().min()?;
        Some((from, times.max()?))
    }

    /// The offset line with the widest margin inside every bound; `None` without exchanges.
    pub fn fit(&self) -> Option<Result<Offset, NoFit>> {
        let (from, to) = self.span()?;
        let mid = from + (to - from) / 2;
        let rel = |p: [i64; 2]| ((p[0] - mid) as f64, p[1] as f64);
        let lines = Lines {
            upper: self.buckets.values().map(|b| rel(b.upper)).collect(),
            lower: self.buckets.values().map(|b| rel(b.lower)).collect(),
        };
        let drift = argmax(|b| lines.margin(b), -MAX_DRIFT, MAX_DRIFT);
        let margin = lines.margin(drift);
        if margin < 0.0 {
            return Some(Err(NoFit { short_ns: -margin }));
        }
        let offset = (lines.lowest_upper(drift, 0.0) + lines.highest_lower(drift, 0.0)) / 2.0;
        let drifts = lines.feasible(drift);
        let ends = [(from - mid) as f64, (to - mid) as f64];
        let bound = ends
            .iter()
            .map(|&t| lines.spread(drifts, t, offset + drift * t))
            .fold(margin / 2.0, f64::max);
        Some(Ok(Offset {
            offset_ns: offset,
            at_ns: mid,
            drift_ppm: drift * 1e6,
            bound_ns: bound,
            from_ns: from,
            to_ns: to,
        }))
    }
}

/// The bounds as lines of time relative to the span's middle: `(t, bound)`.
struct Lines {
    upper: Vec<(f64, f64)>,
    lower: Vec<(f64, f64)>,
}

impl Lines {
    /// The tightest upper bound on the offset at `t` for a line of slope `drift`.
    fn lowest_upper(&self, drift: f64, t: f64) -> f64 {
        self.upper
            .iter()
            .map(|&(ti, u)| u + drift * (t - ti))
            .fold(f64::INFINITY, f64::min)
    }

    fn highest_lower(&self, drift: f64, t: f64) -> f64 {
        self.lower
            .iter()
            .map(|&(ti, l)| l + drift * (t - ti))
            .fold(f64::NEG_INFINITY, f64::max)
    }

    /// Room between the bounds for a line of slope `drift` (concave in it).
    fn margin(&self, drift: f64) -> f64 {
        self.lowest_upper(drift, 0.0) - self.highest_lower(drift, 0.0)
    }

    /// The slopes for which some line fits every bound, around `best` (which fits).
    fn feasible(&self, best: f64) -> (f64, f64) {
        let edge = |outer: f64| {
            if self.margin(outer) >= 0.0 {
                return outer;
            }
            let (mut ok, mut bad) = (best, outer);
            while (ok - bad).abs() > DRIFT_RESOLUTION {
                let m = (ok + bad) / 2.0;
                if self.margin(m) >= 0.0 {
                    ok = m
                } else {
                    bad = m
                }
            }
            ok
        };
        (edge(-MAX_DRIFT), edge(MAX_DRIFT))
    }

    /// How far the offset at `t` of any fitting line can lie from `estimate`.
    fn spread(&self, (lo, hi): (f64, f64), t: f64, estimate: f64) -> f64 {
        let top = argmax(|d| self.lowest_upper(d, t), lo, hi);
        let bottom = argmax(|d| -self.highest_lower(d, t), lo, hi);
        let top = self.lowest_upper(top, t);
        let bottom = self.highest_lower(bottom, t);
        (top - estimate).max(estimate - bottom).max(0.0)
    }
}

/// The argument in `[lo, hi]` where a concave `f` is largest (ternary search).
fn argmax(f: impl Fn(f64) -> f64, mut lo: f64, mut hi: f64) -> f64 {
    while hi - lo > DRIFT_RESOLUTION {
        let a = lo + (hi - lo) / 3.0;
        let b = hi - (hi - lo) / 3.0;
        if f(a) < f(b) {
            lo = a
        } else {
            hi = b
        }
    }
    (lo + hi) / 2.0
}

#[cfg(test)]
mod tests {
    #[test]
    fn limits_read_back_inside_a_tagged_message_as_they_were_written() {
        #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
        #[serde(tag = "type")]
        enum Message {
            Sample { limits: super::Limits },
        }
        let mut limits = super::Limits::default();
        let b = super::Bucket {
            upper: [5, -7],
            lower: [-3, 2],
        };
        limits.buckets.insert(179_587_148_386, b);
        limits.buckets.insert(-4, b);
        let m = Message::Sample { limits };
        let text = serde_json::to_string(&m).unwrap();
        assert!(text.contains(r#""179587148386":"#), "{text}");
        assert_eq!(serde_json::from_str::<Message>(&text).unwrap(), m);
    }

    use super::*;

    /// Exchanges every 1 ms for `secs`, with the remote's clock at `offset(t)` and delays
    /// from a fixed pseudo-random sequence: forward `base_f` plus up to 40 µs, reverse
    /// `base_r` plus up to 40 µs.
    fn run(secs: i64, base_f: i64, base_r: i64, offset: impl Fn(i64) -> i64) -> Limits {
        let mut l = Limits::default();
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let t0 = 1_800_000_000_000_000_000;
        for i in 0..secs * 1_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let (jf, jr) = ((x % 40_000) as i64, ((x >> 20) % 40_000) as i64);
            let at = t0 + i * 1_000_000;
            let th = offset(i * 1_000_000);
            l.add(Exchange {
                at_ns: at,
                forward_raw_ns: base_f + jf + th,
                reverse_raw_ns: base_r + jr - th,
            });
        }
        l
    }

    fn assert_recovers(l: &Limits, truth: impl Fn(i64) -> f64) -> Offset {
        let o = l.fit().unwrap().unwrap();
        for t in [o.from_ns, o.at_ns, o.to_ns] {
            let err = (o.at(t) - truth(t - o.from_ns)).abs();
            assert!(err <= o.bound_ns + 1.0, "{err} ns off, bound {o:?}");
        }
        o
    }

    #[test]
    fn one_clock_is_found_at_zero_within_half_the_fastest_round_trip() {
        let o = assert_recovers(&run(2, 20_000, 20_000, |_| 0), |_| 0.0);
        // The fastest forward and reverse are each near 20 µs: the bound near 20 µs.
        assert!(o.bound_ns < 25_000.0 && o.bound_ns >= 19_000.0, "{o:?}");
    }

    #[test]
    fn a_constant_offset_either_way_is_recovered() {
        assert_recovers(&run(2, 20_000, 20_000, |_| 1_234_000), |_| 1_234_000.0);
        let o = assert_recovers(&run(2, 20_000, 20_000, |_| -500_000_000), |_| -5e8);
        assert!(o.drift_ppm.abs() < 1.0, "{o:?}");
    }

    #[test]
    fn a_drifting_clock_is_followed_to_both_ends() {
        // 30 ppm over 10 s: 300 µs, far more than the delays.
        let o = assert_recovers(
            &run(10, 20_000, 20_000, |t| 77_000 + t * 30 / 1_000_000),
            |t| 77_000.0 + t as f64 * 30e-6,
        );
        assert!((o.drift_ppm - 30.0).abs() < 2.0, "{o:?}");
        assert!(o.bound_ns < 40_000.0, "{o:?}");
    }

    /// The exchange cannot tell a slow direction from an offset: a forward 1 ms slower
    /// than the reverse puts the estimate 0.5 ms off, and the bound still holds it.
    #[test]
    fn an_asymmetric_path_widens_the_bound_to_hold_the_truth() {
        let o = assert_recovers(&run(2, 1_020_000, 20_000, |_| 0), |_| 0.0);
        assert!((o.offset_ns - 500_000.0).abs() < 10_000.0, "{o:?}");
    }

    #[test]
    fn a_step_mid_run_fits_no_line() {
        let l = run(2, 20_000, 20_000, |t| {
            if t < 1_000_000_000 {
                0
            } else {
                2_000_000
            }
        });
        let e = l.fit().unwrap().unwrap_err();
        assert!(e.short_ns > 1_000_000.0, "{e:?}");
    }

    #[test]
    fn buckets_merge_to_the_tightest_of_both() {
        let a = run(1, 20_000, 20_000, |_| 0);
        let mut halves = [Limits::default(), Limits::default()];
        for (k, b) in &a.buckets {
            let mut worse = *b;
            worse.upper[1] += 5_000;
            halves[0].buckets.insert(*k, *b);
            halves[1].buckets.insert(*k, worse);
        }
        let mut m = halves[1].clone();
        m.merge(&halves[0]);
        assert_eq!(m, a);
        assert!(Limits::default().fit().is_none());
    }
}
