//! The packet-rate side on fake engines, without root or a network: each side's packets
//! per interval at its own instants, the window as the sum of its intervals, the
//! receivers' per-flow accounting and the engine's own drop count, a cut interval.

use std::io;
use std::time::Instant;

use sonde_engine::pps::FlowRx;
use sonde_engine::Placement;
use sonde_probe::hostwatch::HostProbe;
use sonde_results::{IntervalSample, PpsSpec, SideResult, Timing};

use crate::kind::pps::{Drops, PpsSide, RxEngine, TxEngine};
use crate::side::Side;
use crate::tests_drive::{drive, stopped_mid_interval, FakeWorkers};

/// Packets every fake moves per millisecond.
const RATE: u64 = 50;

fn spec() -> PpsSpec {
    PpsSpec {
        flows: 2,
        timing: Timing {
            duration_ms: 300,
            warmup_ms: 50,
            cooldown_ms: 0,
            interval_ms: 100,
        },
        ..PpsSpec::default()
    }
}

/// The flows, sent or received at `RATE` a millisecond.
type FakeFlow = FakeWorkers;

impl TxEngine for FakeFlow {
    fn start(&mut self, _placement: Placement, _cookie: u32) -> io::Result<()> {
        Ok(())
    }
    fn counts(&self) -> (u64, u64) {
        (self.done(), self.done() * 22)
    }
    fn join(&mut self) -> (Vec<u64>, Option<String>) {
        let n = self.done();
        (vec![n - n / 2, n / 2], None)
    }
}

impl RxEngine for FakeFlow {
    fn notes(&self) -> Vec<String> {
        Vec::new()
    }
    fn start(&mut self, _cookie: u32) -> io::Result<()> {
        Ok(())
    }
    fn counts(&self) -> (u64, u64) {
        (self.done(), self.done() * 22)
    }
    fn foreign(&self) -> u64 {
        3
    }
    fn drops(&self) -> Drops {
        Drops::Counted(9)
    }
    fn join(&mut self) -> (Vec<FlowRx>, Option<String>) {
        let flow = |received, reordered| {
            let mut f = FlowRx::default();
            (f.received, f.reordered, f.duplicated) = (received, reordered, 1);
            f
        };
        let n = self.done();
        (
            vec![flow(n - n / 2, 2), flow(n / 2, 5)],
            Some("a receiver's error".into()),
        )
    }
}

fn side(spec: &PpsSpec, sender: bool) -> Box<dyn Side> {
    let probe = HostProbe::for_peer([127, 0, 0, 1].into());
    let placement = Placement::new(1, None, 2);
    Box::new(match sender {
        true => PpsSide::client(
            spec,
            Box::new(FakeWorkers::new(Instant::now(), RATE)),
            placement,
            probe,
        ),
        false => PpsSide::server(
            spec,
            Box::new(FakeWorkers::new(Instant::now(), RATE)),
            1,
            placement,
            probe,
            Vec::new(),
        ),
    })
}

fn pps(result: &SideResult) -> &sonde_results::PpsResult {
    result.pps().expect("a pps section")
}

/// Each interval's packets are the fake's rate over its measured length, and the window
/// is exactly the sum of its intervals.
fn assert_intervals(intervals: &[IntervalSample], result: &SideResult) {
    assert_eq!(intervals.len(), 3, "{intervals:?}");
    for (k, s) in intervals.iter().enumerate() {
        assert_eq!(s.index, k as u32);
        // The count and each bound are read a few microseconds apart (the bound before
        // the /proc read, see Meter::edge); 2 ms of packets allow a preemption between.
        let expected = ((s.end_s - s.start_s) * 1e6) as u64 * RATE / 1000;
        let got = s.pps().unwrap().packets;
        assert!(got.abs_diff(expected) <= 2 * RATE, "{s:?}");
        assert!(!s.partial);
    }
    let summed: u64 = intervals.iter().map(|s| s.pps().unwrap().packets).sum();
    assert_eq!(
        pps(result).packets,
        summed,
        "the window is the sum of its intervals"
    );
    assert!(!result.partial);
}

#[test]
fn a_sending_side_counts_packets_per_interval_and_per_flow() {
    let spec = spec();
    let mut side = side(&spec, true);
    let intervals = drive(&mut side, None);
    side.finish_senders();
    let result = side.into_result(false);
    assert_intervals(&intervals, &result);
    let p = pps(&result);
    // Per flow: everything sent, warm-up included.
    assert_eq!(p.per_flow.len(), 2);
    assert!(p.per_flow.iter().sum::<u64>() >= p.packets + 50 * RATE);
    assert_eq!((p.reordered, p.duplicated, p.foreign), (0, 0, 0));
    assert_eq!(p.socket_drops, None, "a sender counts no drops");
}

#[test]
fn a_receiving_side_keeps_its_flows_drops_and_errors() {
    let spec = spec();
    let mut side = side(&spec, false);
    let intervals = drive(&mut side, None);
    side.finish_senders();
    let result = side.into_result(false);
    assert_intervals(&intervals, &result);
    let p = pps(&result);
    assert_eq!((p.reordered, p.duplicated, p.foreign), (7, 2, 3));
    assert_eq!(p.socket_drops, Some(9), "the engine's own count");
    assert_eq!(p.size_bytes, spec.size_bytes);
    assert!(result.notes.iter().any(|n| n == "a receiver's error"));
}

#[test]
fn a_receiving_side_stopped_mid_interval_sends_it_marked_partial() {
    let spec = spec();
    let (intervals, result) = stopped_mid_interval(side(&spec, false));
    assert!(!result.partial, "the controller's skew is no cut");
    let summed: u64 = intervals.iter().map(|s| s.pps().unwrap().packets).sum();
    assert_eq!(pps(&result).packets, summed);
}

#[test]
fn a_sending_side_cut_short_is_partial_and_keeps_its_window() {
    let spec = spec();
    let mut side = side(&spec, true);
    let intervals = drive(&mut side, Some(1));
    side.finish_senders();
    let result = side.into_result(true);
    assert!(result.partial);
    let p = pps(&result);
    assert!(p.packets >= intervals[0].pps().unwrap().packets, "{p:?}");
    let w = result.window_s;
    // The window holds its first interval, which starts where the window opened: at least
    // as long as it, measured (not planned: beside other work the window opens late, and
    // then its first interval's end, counted from the planned start, is later than the
    // window is long).
    let first = intervals[0].end_s - intervals[0].start_s;
    assert!(w + 1e-9 >= first && w < 0.3, "{w} against {first}");
}
