//! A load test's delay each way per phase (`--stages`): each loaded phase's directions
//! re-based on the idle phase's clock offset. A loaded phase's own exchange fit would take
//! the queue its load builds one way for half an offset (the exchange cannot tell a slow
//! direction from a clock ahead); the idle phase has no such queue.

use crate::document::Document;
use crate::latency::LatencySummary;
use crate::oneway::tally::Shifted;
use crate::oneway::{BoundFrom, OneWay};

/// A ping's directions in its phase.
pub(super) fn of(d: &Option<Document>) -> Option<Box<OneWay>> {
    d.as_ref()?.end.rr()?.oneway.clone()
}

/// `o`'s delays with `idle`'s offset (extrapolated by its drift) instead of its own.
pub(super) fn on_idle(idle: &OneWay, o: &mut OneWay) {
    let (Some(own), Some(at)) = (o.offset_ns, o.exchange.map(|e| e.at_ns)) else {
        return;
    };
    let offset = match (idle.bound_from, idle.exchange) {
        (Some(BoundFrom::Exchange), Some(fit)) => fit.at(at),
        (Some(_), _) => 0.0,
        (None, _) => return,
    };
    let by = own - offset;
    o.forward_ns = o.forward_ns.as_ref().and_then(|l| shifted(l, by));
    o.reverse_ns = o.reverse_ns.as_ref().and_then(|l| shifted(l, -by));
    o.offset_ns = Some(offset);
    o.bound_ns = idle.bound_ns;
    o.bound_from = idle.bound_from;
    o.note = Some(format!(
        "the idle phase's offset, not this phase's own fit ({:.1} us): load's queue one way would pass for an offset",
        own / 1e3
    ));
}

/// `l`'s distribution with `by` ns added to every value.
fn shifted(l: &LatencySummary, by: f64) -> Option<LatencySummary> {
    let hist = l.distribution()?.ok()?;
    LatencySummary::of(&Shifted { base: 0, hist }.less(-by).0)
}

/// A loaded phase's P50 each way over idle's: (forward, reverse), ns.
pub(super) fn added(idle: Option<&OneWay>, loaded: Option<&OneWay>) -> Option<(i64, i64)> {
    let p50 = |o: &OneWay| Some((o.forward_ns.as_ref()?.p50, o.reverse_ns.as_ref()?.p50));
    let ((fi, ri), (fl, rl)) = (p50(idle?)?, p50(loaded?)?);
    Some((fl as i64 - fi as i64, rl as i64 - ri as i64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::latency::new_histogram;
    use crate::oneway::Offset;

    fn at(p50: u64) -> Option<LatencySummary> {
        let mut h = new_histogram();
        h.record_n(p50, 10).unwrap();
        LatencySummary::of(&h)
    }

    fn fitted(offset_ns: f64, at_ns: i64, fwd: u64, rev: u64) -> OneWay {
        OneWay {
            forward_ns: at(fwd),
            reverse_ns: at(rev),
            bound_ns: Some(5_000.0),
            bound_from: Some(BoundFrom::Exchange),
            offset_ns: Some(offset_ns),
            exchange: Some(Offset {
                offset_ns,
                at_ns,
                drift_ppm: 0.01,
                bound_ns: 5_000.0,
                from_ns: at_ns - 1_000_000_000,
                to_ns: at_ns + 1_000_000_000,
            }),
            ..OneWay::default()
        }
    }

    /// An upload queue of 40 µs one way: the loaded phase's own fit put 20 µs of it in
    /// the offset and split the rest evenly. On idle's offset (drifted 0.01 ppm over the
    /// 10 s between them: +100 ns) all of it is on the way out.
    #[test]
    fn a_loaded_phase_is_read_on_the_idle_phases_offset() {
        let t0 = 1_800_000_000_000_000_000;
        let idle = fitted(1_000.0, t0, 30_000, 30_000);
        let mut loaded = fitted(21_100.0, t0 + 10_000_000_000, 50_000, 50_000);
        on_idle(&idle, &mut loaded);
        assert!((loaded.offset_ns.unwrap() - 1_100.0).abs() < 1e-3);
        let p50 = |l: &Option<LatencySummary>| l.as_ref().unwrap().p50 as i64;
        assert!((p50(&loaded.forward_ns) - 70_000).abs() < 50, "{loaded:?}");
        assert!((p50(&loaded.reverse_ns) - 30_000).abs() < 50, "{loaded:?}");
        assert!(loaded.note.as_ref().unwrap().contains("21.1 us"));
        let (f, r) = added(Some(&idle), Some(&loaded)).unwrap();
        assert!((f - 40_000).abs() < 50 && r.abs() < 50, "{f} {r}");
        // One clock in idle: offset 0 for the loaded phase too.
        let mut one = idle.clone();
        one.bound_from = Some(BoundFrom::OneClock);
        let mut l2 = fitted(21_100.0, t0, 50_000, 50_000);
        on_idle(&one, &mut l2);
        assert_eq!(l2.offset_ns, Some(0.0));
        assert_eq!(l2.bound_from, Some(BoundFrom::OneClock));
    }
}
