//! Each direction's delays as measured, on the hosts' raw clocks, summed over a worker's
//! interval, an interval or a run; and the form they cross the control protocol in.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use super::fit::{Exchange, Limits};
use crate::latency::{decode, encode, new_histogram, HistogramError};

/// A new base sits this far below the value that needed it, so that a slightly smaller
/// one later does not move it again.
const SLACK_NS: i64 = 10_000;

/// One direction's raw delays (which the clocks' offset can make negative) kept as
/// `raw - base` in a histogram, which holds no negative value.
#[derive(Debug, Clone)]
pub struct Shifted {
    pub base: i64,
    pub hist: Histogram<u64>,
}

impl Default for Shifted {
    fn default() -> Shifted {
        Shifted {
            base: 0,
            hist: new_histogram(),
        }
    }
}

impl Shifted {
    pub fn record(&mut self, raw: i64) {
        if self.hist.is_empty() {
            self.base = raw - SLACK_NS;
        } else if raw < self.base {
            self.rebase(raw - SLACK_NS);
        }
        self.hist
            .saturating_record(((raw - self.base) as u64).max(1));
    }

    /// Moves the base down to `base`, every value up by as much.
    fn rebase(&mut self, base: i64) {
        if base >= self.base {
            return;
        }
        self.hist = shifted(&self.hist, self.base - base);
        self.base = base;
    }

    pub fn add(&mut self, other: &Shifted) {
        if other.hist.is_empty() {
            return;
        }
        if self.hist.is_empty() {
            *self = other.clone();
            return;
        }
        let base = self.base.min(other.base);
        self.rebase(base);
        let theirs = shifted(&other.hist, other.base - base);
        self.hist.add(&theirs).expect("histograms share bounds");
    }

    /// The delays less `offset`: a histogram of `raw - offset`, values below 1 ns held
    /// at 1, and how many were below 0.
    pub fn less(&self, offset: f64) -> (Histogram<u64>, u64) {
        let by = self.base as f64 - offset;
        let mut h = new_histogram();
        let mut below = 0;
        for v in self.hist.iter_recorded() {
            let at = self.hist.median_equivalent(v.value_iterated_to()) as f64 + by;
            if at < 0.0 {
                below += v.count_at_value();
            }
            h.saturating_record_n((at.round() as u64).max(1), v.count_at_value());
        }
        (h, below)
    }

    /// The smallest delay less `offset`.
    pub fn min_less(&self, offset: f64) -> f64 {
        self.hist.min() as f64 + self.base as f64 - offset
    }
}

/// `h` with every value raised by `by` ns (each bucket's middle: repeated shifts do not
/// creep up).
fn shifted(h: &Histogram<u64>, by: i64) -> Histogram<u64> {
    let mut out = new_histogram();
    for v in h.iter_recorded() {
        let at = (h.median_equivalent(v.value_iterated_to()) as i64 + by).max(1) as u64;
        out.saturating_record_n(at, v.count_at_value());
    }
    out
}

/// Both directions' raw delays and the offset's bounds of a set of exchanges.
#[derive(Debug, Clone, Default)]
pub struct OneWayTally {
    pub forward: Shifted,
    pub reverse: Shifted,
    pub limits: Limits,
    /// Exchanges a worker could not keep (beyond its interval's budget): counted only.
    pub unkept: u64,
}

impl OneWayTally {
    pub fn record(&mut self, e: Exchange) {
        self.forward.record(e.forward_raw_ns);
        self.reverse.record(e.reverse_raw_ns);
        self.limits.add(e);
    }

    pub fn add(&mut self, other: &OneWayTally) {
        self.forward.add(&other.forward);
        self.reverse.add(&other.reverse);
        self.limits.merge(&other.limits);
        self.unkept += other.unkept;
    }

    pub fn exchanges(&self) -> u64 {
        self.forward.hist.len()
    }

    pub fn is_empty(&self) -> bool {
        self.forward.hist.is_empty()
    }

    pub fn raw(&self) -> Option<OneWayRaw> {
        (!self.is_empty()).then(|| OneWayRaw {
            exchanges: self.exchanges(),
            forward_base_ns: self.forward.base,
            forward: encode(&self.forward.hist),
            reverse_base_ns: self.reverse.base,
            reverse: encode(&self.reverse.hist),
            limits: self.limits.clone(),
            unkept: self.unkept,
        })
    }
}

/// A tally as a side's sample or result carries it to the document: the client's raw
/// readings, corrected only once the whole run's offset is known.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OneWayRaw {
    pub exchanges: u64,
    pub forward_base_ns: i64,
    pub forward: String,
    pub reverse_base_ns: i64,
    pub reverse: String,
    pub limits: Limits,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unkept: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl OneWayRaw {
    pub fn tally(&self) -> Result<OneWayTally, HistogramError> {
        Ok(OneWayTally {
            forward: Shifted {
                base: self.forward_base_ns,
                hist: decode(&self.forward)?,
            },
            reverse: Shifted {
                base: self.reverse_base_ns,
                hist: decode(&self.reverse)?,
            },
            limits: self.limits.clone(),
            unkept: self.unkept,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ex(at_ns: i64, f: i64, r: i64) -> Exchange {
        Exchange {
            at_ns,
            forward_raw_ns: f,
            reverse_raw_ns: r,
        }
    }

    /// Raw delays half a second either side of zero (a clock 0.5 s off) are kept, and
    /// come back as the delays once the offset is taken off, across rebasing and merging.
    #[test]
    fn raw_delays_of_either_sign_come_back_less_the_offset() {
        let off = -500_000_000i64;
        let mut a = OneWayTally::default();
        let mut b = OneWayTally::default();
        for i in 0..1_000i64 {
            let (f, r) = (20_000 + i * 10, 30_000 + i * 10);
            let t = if i % 2 == 0 { &mut a } else { &mut b };
            // Largest first, so the base moves down as smaller ones come.
            t.record(ex(i, f + 9_990 - 20 * i + off, r - off));
        }
        a.add(&b);
        let back = a.raw().unwrap().tally().unwrap();
        let (fwd, below) = back.forward.less(off as f64);
        assert_eq!(below, 0);
        assert_eq!(fwd.len(), 1_000);
        assert!((fwd.min() as i64 - 20_000).abs() <= 40, "{}", fwd.min());
        assert!((fwd.max() as i64 - 29_990).abs() <= 40, "{}", fwd.max());
        let (rev, _) = back.reverse.less(-(off as f64));
        assert!((rev.value_at_quantile(0.5) as i64 - 35_000).abs() <= 40);
        assert!((back.forward.min_less(off as f64) - 20_000.0).abs() <= 40.0);
    }

    #[test]
    fn delays_below_zero_after_the_offset_are_counted() {
        let mut t = OneWayTally::default();
        t.record(ex(0, 5_000, 5_000));
        t.record(ex(1, 50_000, 5_000));
        let (h, below) = t.forward.less(10_000.0);
        assert_eq!((below, h.len()), (1, 2));
    }
}
