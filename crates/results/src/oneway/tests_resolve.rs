//! The one-way figures chosen from the three sources, as a document shows them.

use super::fit::Exchange;
use super::resolve::{claim, resolve, BoundFrom, Claim, ClockEnd};
use super::tally::OneWayTally;
use crate::clock::{ClockBound, ClockState};

const T0: i64 = 1_800_000_000_000_000_000;

/// Two 1 s intervals of exchanges every 1 ms: forward `f` + up to 30 µs, reverse `r` + up
/// to 30 µs, with the server's clock `offset` ahead.
fn run(f: i64, r: i64, offset: i64) -> (OneWayTally, [OneWayTally; 2]) {
    let mut total = OneWayTally::default();
    let mut each = [OneWayTally::default(), OneWayTally::default()];
    for i in 0..2_000i64 {
        let j = (i * 7_919) % 30_000;
        let e = Exchange {
            at_ns: T0 + i * 1_000_000,
            forward_raw_ns: f + j + offset,
            reverse_raw_ns: r + (30_000 - j) - offset,
        };
        total.record(e);
        each[(i / 1_000) as usize].record(e);
    }
    (total, each)
}

fn state(error_ns: Option<u64>) -> ClockState {
    ClockState {
        bound: ClockBound {
            synchronised: error_ns.is_some(),
            error_ns,
            from: "chrony".into(),
            how: String::new(),
        },
        ..ClockState::default()
    }
}

fn clock_at<'a>(boot: &'a str, clock: &'a ClockState) -> ClockEnd<'a> {
    ClockEnd {
        boot_id: Some(boot),
        clock: Some(clock),
    }
}

fn figures(t: &(OneWayTally, [OneWayTally; 2]), c: &Claim) -> (super::OneWay, Vec<super::OneWay>) {
    let raws = [t.1[0].raw(), t.1[1].raw()];
    let (end, each) = resolve(t.0.raw().as_ref(), &[raws[0].as_ref(), raws[1].as_ref()], c);
    (end.unwrap(), each.into_iter().map(Option::unwrap).collect())
}

#[test]
fn one_host_is_one_clock_and_shows_an_asymmetric_path_as_it_is() {
    let c = claim(clock_at("a", &state(None)), clock_at("a", &state(None)));
    assert_eq!((c.bound_ns, c.from), (Some(0.0), BoundFrom::OneClock));
    // A forward 1 ms slower than the reverse: the exchange alone could not say which.
    let (end, each) = figures(&run(1_020_000, 20_000, 0), &c);
    assert_eq!(end.bound_from, Some(BoundFrom::OneClock));
    assert_eq!(end.bound_ns, Some(0.0));
    let p50 = |s: &Option<crate::latency::LatencySummary>| s.as_ref().unwrap().p50 as f64;
    assert!(
        (p50(&end.forward_ns) - 1_035_000.0).abs() < 2_000.0,
        "{end:?}"
    );
    assert!((p50(&end.reverse_ns) - 35_000.0).abs() < 200.0, "{end:?}");
    // The exchange's own offset holds 0, within its (wide) bound.
    let fit = end.exchange.unwrap();
    assert!(fit.offset_ns.abs() <= fit.bound_ns, "{fit:?}");
    assert!(end.clocks_disagree.is_none());
    assert_eq!(each.len(), 2);
    assert!((p50(&each[1].forward_ns) - 1_035_000.0).abs() < 2_000.0);
    assert!(end.line().contains("one clock"), "{}", end.line());
}

#[test]
fn unsynchronised_clocks_take_the_exchanges_bound_and_its_offset() {
    let c = claim(
        clock_at("a", &state(None)),
        clock_at("b", &state(Some(1_000))),
    );
    assert_eq!(c.bound_ns, None);
    assert!(c.words.contains("not synchronised (client)"), "{}", c.words);
    let (end, _) = figures(&run(20_000, 20_000, -500_000_000), &c);
    assert_eq!(end.bound_from, Some(BoundFrom::Exchange));
    let b = end.bound_ns.unwrap();
    assert!((end.offset_ns.unwrap() + 5e8).abs() <= b, "{end:?}");
    assert!(b < 25_000.0, "{end:?}");
    let f = end.forward_ns.as_ref().unwrap().p50 as f64;
    assert!((f - 35_000.0).abs() <= b, "{f} ± {b}");
    let line = end.line();
    assert!(
        line.contains("bound from the exchange; clocks not synchronised"),
        "{line}"
    );
}

/// One host, but the agent's readings shifted (the test hook): the exchange contradicts
/// the one-clock claim, says so, and its own fit is used.
#[test]
fn a_claim_the_exchange_contradicts_is_reported_and_overruled() {
    let c = claim(clock_at("a", &state(None)), clock_at("a", &state(None)));
    let (end, _) = figures(&run(20_000, 20_000, 1_234_000), &c);
    assert_eq!(end.bound_from, Some(BoundFrom::Exchange));
    assert!(
        end.clocks_disagree.as_ref().unwrap().contains("1.234 ms"),
        "{end:?}"
    );
    assert!((end.offset_ns.unwrap() - 1_234_000.0).abs() <= end.bound_ns.unwrap());
}

#[test]
fn synchronised_clocks_tighter_than_the_exchange_are_used() {
    let c = claim(
        clock_at("a", &state(Some(2_000))),
        clock_at("b", &state(Some(3_000))),
    );
    assert_eq!((c.bound_ns, c.from), (Some(5_000.0), BoundFrom::Clocks));
    let (end, _) = figures(&run(40_000, 40_000, 1_000), &c);
    assert_eq!(end.bound_from, Some(BoundFrom::Clocks));
    assert_eq!((end.bound_ns, end.offset_ns), (Some(5_000.0), Some(0.0)));
    assert_eq!(end.clocks_bound_ns, Some(5_000.0));
    // Clocks bound looser than the exchange's: the exchange's.
    let loose = claim(
        clock_at("a", &state(Some(900_000))),
        clock_at("b", &state(Some(0))),
    );
    let (end, _) = figures(&run(40_000, 40_000, 1_000), &loose);
    assert_eq!(end.bound_from, Some(BoundFrom::Exchange));
}

/// Clocks that claim 5 µs while the raw forward is negative (-60 µs): taken at their word
/// the forward delay would be below zero. The exchange overrules them and says the clocks
/// disagree; no delay it gives is below zero by more than its bound.
#[test]
fn a_claim_that_would_make_a_delay_negative_is_overruled() {
    let c = Claim {
        bound_ns: Some(5_000.0),
        from: BoundFrom::Clocks,
        words: "clocks synchronised".into(),
    };
    let (end, _) = figures(&run(-60_000, 700_000, 0), &c);
    assert_eq!(end.bound_from, Some(BoundFrom::Exchange));
    assert!(end.clocks_disagree.is_some(), "{end:?}");
    // The offset moves delay between the directions, never the round trip outside.
    let sum = end.forward_ns.unwrap().p50 + end.reverse_ns.unwrap().p50;
    assert!((sum as f64 - 670_000.0).abs() < 2_000.0, "{sum}");
    assert!(end.bound_ns.unwrap() < 400_000.0);
}

#[test]
fn a_clock_step_mid_run_is_a_fault_and_no_delay() {
    let mut t = run(20_000, 20_000, 0);
    t.0.record(Exchange {
        at_ns: T0 + 500_000_000,
        forward_raw_ns: -3_000_000,
        reverse_raw_ns: 3_020_000,
    });
    let c = claim(ClockEnd::default(), ClockEnd::default());
    let (end, each) = resolve(t.0.raw().as_ref(), &[None], &c);
    let end = end.unwrap();
    assert!(end.clock_fault.unwrap().contains("no clock offset fits"));
    assert!(end.forward_ns.is_none() && each == [None]);
}
