//! Each direction's delay to a peer with the bound that holds on it, per window, from the
//! four STAMP timestamps (sent, reflected in, reflected out, back) on both hosts' real-time
//! clocks. The clocks' offset is the lead's `oneway::fit` of the window's exchanges (each
//! bounds it, no delay being negative) or, when tighter, zero within the clocks' own
//! claimed errors (the two Error Estimate fields); a direction below zero by more than its
//! bound is a clock fault, never a delay. A window keeps at most [`MAX_EXCHANGES`]
//! exchanges (then every other one), so memory stays bounded at any rate.

use crate::oneway::{Exchange, Limits};

/// Exchanges kept per window at most (16 bytes each).
pub const MAX_EXCHANGES: usize = 512;

/// One probe's four timestamps (Unix ns) and both ends' claimed clock errors.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stamps {
    pub sent_ns: i64,
    pub reflected_in_ns: i64,
    pub reflected_out_ns: i64,
    pub back_ns: i64,
    /// This host's clock error bound when it sent; `None`: not synchronised.
    pub own_bound_ns: Option<u64>,
    /// The reflector's, from its Error Estimate.
    pub peer_bound_ns: Option<u64>,
}

/// A window's one-way figures, in seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OneWayFigures {
    pub exchanges: usize,
    pub forward_p50_s: f64,
    pub reverse_p50_s: f64,
    /// Both delays are true within ± this.
    pub bound_s: f64,
    /// The bound is the clocks' claim (else the exchanges' fit).
    pub from_clocks: bool,
}

/// What a window's exchanges say.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Verdict {
    Delays(OneWayFigures),
    /// No offset fits, or a direction falls below zero beyond its bound.
    ClockFault,
}

#[derive(Debug, Default)]
pub struct OneWayWindow {
    exchanges: Vec<Exchange>,
    /// Keep one in `stride` once full.
    stride: usize,
    seen: usize,
    /// The loosest claim seen in the window (both ends'), `None` once either end was
    /// unsynchronised.
    claim_ns: Option<Option<u64>>,
}

impl OneWayWindow {
    pub fn record(&mut self, s: Stamps) {
        let claim = match (s.own_bound_ns, s.peer_bound_ns) {
            (Some(a), Some(b)) => Some(a.saturating_add(b)),
            _ => None,
        };
        self.claim_ns = Some(match self.claim_ns {
            None => claim,
            Some(prev) => prev.zip(claim).map(|(p, c)| p.max(c)),
        });
        self.seen += 1;
        if !self.seen.is_multiple_of(self.stride.max(1)) {
            return;
        }
        if self.exchanges.len() >= MAX_EXCHANGES {
            let mut i: usize = 0;
            self.exchanges.retain(|_| {
                i += 1;
                i.is_multiple_of(2)
            });
            self.stride = self.stride.max(1) * 2;
        }
        self.exchanges.push(Exchange {
            at_ns: s.sent_ns,
            forward_raw_ns: s.reflected_in_ns - s.sent_ns,
            reverse_raw_ns: s.back_ns - s.reflected_out_ns,
        });
    }

    /// The window's figures (none without exchanges, or with one exchange and no claim),
    /// and a fresh window.
    pub fn close(&mut self) -> Option<Verdict> {
        let w = std::mem::take(self);
        w.verdict()
    }

    fn verdict(&self) -> Option<Verdict> {
        let mut limits = Limits::default();
        for e in &self.exchanges {
            limits.add(*e);
        }
        let claim = self.claim_ns.flatten().map(|c| c as f64);
        let (offset, bound, from_clocks) = match (limits.fit()?, claim) {
            (Err(_), _) => return Some(Verdict::ClockFault),
            (Ok(fit), Some(c)) if c <= fit.bound_ns => (0.0, c, true),
            (Ok(fit), _) if self.exchanges.len() < 2 => (fit.offset_ns, fit.bound_ns, false),
            (Ok(fit), _) => {
                let (from, to) = (fit.from_ns, fit.to_ns);
                let drift = fit.drift_ppm.abs() * 1e-6 * (to - from) as f64 / 2.0;
                (fit.at(from + (to - from) / 2), fit.bound_ns + drift, false)
            }
        };
        let mut fwd: Vec<f64> = self
            .exchanges
            .iter()
            .map(|e| e.forward_raw_ns as f64 - offset)
            .collect();
        let mut rev: Vec<f64> = self
            .exchanges
            .iter()
            .map(|e| e.reverse_raw_ns as f64 + offset)
            .collect();
        fwd.sort_by(f64::total_cmp);
        rev.sort_by(f64::total_cmp);
        if fwd[0].min(rev[0]) < -bound - 1.0 {
            return Some(Verdict::ClockFault);
        }
        Some(Verdict::Delays(OneWayFigures {
            exchanges: self.exchanges.len(),
            forward_p50_s: fwd[fwd.len() / 2] / 1e9,
            reverse_p50_s: rev[rev.len() / 2] / 1e9,
            bound_s: bound / 1e9,
            from_clocks,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: i64 = 1_000;

    /// A probe at `t` whose forward path takes `f`, reverse `r`, the reflector's clock
    /// `offset` ahead of ours.
    fn stamps(t: i64, f: i64, r: i64, offset: i64, bounds: (Option<u64>, Option<u64>)) -> Stamps {
        Stamps {
            sent_ns: t,
            reflected_in_ns: t + f + offset,
            reflected_out_ns: t + f + offset + 5 * US,
            back_ns: t + f + 5 * US + r,
            own_bound_ns: bounds.0,
            peer_bound_ns: bounds.1,
        }
    }

    #[test]
    fn each_direction_is_found_within_its_bound_from_the_fit_or_the_clocks() {
        // Asymmetric path (30 µs there, 10 µs back, a few µs of jitter) and a reflector
        // clock 2 ms ahead; unsynchronised clocks: the exchanges' fit sets the offset.
        let mut w = OneWayWindow::default();
        for i in 0..200 {
            let jitter = (i % 7) * US;
            w.record(stamps(
                i * 10_000 * US,
                30 * US + jitter,
                10 * US + jitter,
                2_000 * US,
                (None, None),
            ));
        }
        let Some(Verdict::Delays(f)) = w.close() else {
            panic!("no delays")
        };
        assert!(!f.from_clocks);
        // The exchange alone cannot split a round trip better than its half: the bound
        // covers the truth.
        for (got, truth) in [(f.forward_p50_s, 33e-6), (f.reverse_p50_s, 13e-6)] {
            assert!(
                (got - truth).abs() <= f.bound_s + 1e-9,
                "{got} vs {truth} ± {}",
                f.bound_s
            );
        }
        // Synchronised clocks claiming ± 1 µs each (and truly in step): the claim is
        // tighter, the delays exact.
        for i in 0..50 {
            w.record(stamps(
                i * 10_000 * US,
                30 * US,
                10 * US,
                0,
                (Some(1_000), Some(1_000)),
            ));
        }
        let Some(Verdict::Delays(f)) = w.close() else {
            panic!("no delays")
        };
        assert!(f.from_clocks);
        assert!((f.bound_s - 2e-6).abs() < 1e-12);
        assert!(
            (f.forward_p50_s - 30e-6).abs() < 1e-9 && (f.reverse_p50_s - 10e-6).abs() < 1e-9,
            "{f:?}"
        );
        assert_eq!(w.close(), None, "a fresh window");
    }

    #[test]
    fn clocks_claiming_sync_but_apart_are_a_fault_and_memory_stays_bounded() {
        let mut w = OneWayWindow::default();
        // Claim ± 1 µs each, but the reflector is 1 ms behind: forward below zero.
        for i in 0..20 {
            w.record(stamps(
                i * 1_000_000,
                30 * US,
                10 * US,
                -1_000 * US,
                (Some(1_000), Some(1_000)),
            ));
        }
        // The claim is tighter than the fit, so it is believed, and contradicted: a fault.
        assert_eq!(w.close(), Some(Verdict::ClockFault));
        for i in 0..10_000 {
            w.record(stamps(i * 1_000_000, 30 * US, 10 * US, 0, (None, None)));
        }
        assert!(w.exchanges.len() <= MAX_EXCHANGES);
        assert!(matches!(w.close(), Some(Verdict::Delays(_))));
    }
}
