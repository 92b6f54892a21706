//! The request/response side on fake engines, without root or a network: the client's
//! per-interval messages and latency from the histograms its workers hand over late (the
//! grace window), the window as the sum of its intervals, the workers' ends summed, a cut
//! interval, and the agent's answers counted at its own instants.

use std::io;
use std::net::{IpAddr, TcpStream};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use sonde_engine::rr_client::{ClientPlan, WorkerEnd};
use sonde_engine::rr_server::ServerPlan;
use sonde_engine::Placement;
use sonde_probe::hostwatch::HostProbe;
use sonde_results::latency::new_histogram;
use sonde_results::{RrSpec, SideResult, Timing};

use crate::kind::rr::{EchoEngine, Parts, RequestEngine, RrSide, SideEngine};
use crate::kind::Workers;
use crate::side::Side;
use crate::tests_drive::{drive, stopped_mid_interval, FakeWorkers};

/// Messages every fake completes per millisecond.
const RATE: u64 = 10;
/// Each fake round trip, in nanoseconds.
const RTT_NS: u64 = 40_000;
/// The fake workers hand an interval's histogram over this long after it ends (a real
/// worker does so at its first response after the boundary), within the side's grace.
const HANDOVER: Duration = Duration::from_millis(8);

fn spec() -> RrSpec {
    RrSpec {
        connections: 2,
        timing: Timing {
            duration_ms: 300,
            warmup_ms: 50,
            cooldown_ms: 0,
            interval_ms: 100,
        },
        ..RrSpec::default()
    }
}

/// Milliseconds from `a` to `b` (0 before `a`).
fn ms(a: Instant, b: Instant) -> u64 {
    b.saturating_duration_since(a).as_millis() as u64
}

/// Request workers that complete `RATE` messages a millisecond from `started` until
/// aborted, and file those inside the window by interval, handing each over late.
struct FakeRequests {
    started: Instant,
    window_start: Instant,
    window_end: Instant,
    interval: Duration,
    /// Milliseconds of the window handed over so far.
    filed: Mutex<u64>,
    stopped_at: Mutex<Option<Instant>>,
}

impl FakeRequests {
    fn new(spec: &RrSpec, started: Instant) -> FakeRequests {
        let t = &spec.timing;
        let window_start = started + Duration::from_millis(t.warmup_ms);
        FakeRequests {
            started,
            window_start,
            window_end: window_start + Duration::from_millis(t.duration_ms),
            interval: Duration::from_millis(t.interval_ms),
            filed: Mutex::new(0),
            stopped_at: Mutex::new(None),
        }
    }

    /// Now, or when the workers stopped: aborted, or at the window's end (no cool-down),
    /// as real workers stop sending by themselves.
    fn until(&self) -> Instant {
        let stopped = self.stopped_at.lock().unwrap().unwrap_or_else(Instant::now);
        stopped.min(self.window_end)
    }
}

impl Workers for FakeRequests {
    fn engine(&self) -> sonde_results::Engine {
        sonde_results::Engine::Kernel
    }
    fn all_done(&self) -> bool {
        self.stopped_at.lock().unwrap().is_some() || Instant::now() >= self.window_end
    }
    fn abort(&self) {
        self.stopped_at
            .lock()
            .unwrap()
            .get_or_insert_with(Instant::now);
    }
}

impl RequestEngine for FakeRequests {
    fn options(&self) -> Vec<String> {
        Vec::new()
    }
    fn start(&mut self, _plan: ClientPlan) -> io::Result<()> {
        Ok(())
    }
    fn counts(&self) -> (u64, u64) {
        let done = ms(self.started, self.until()) * RATE;
        (done + 2, done)
    }
    fn drain(&self, each: &mut dyn FnMut(u32, &Histogram<u64>)) {
        let lag = match self.all_done() {
            true => Duration::ZERO,
            false => HANDOVER,
        };
        let upto = self.until().checked_sub(lag).unwrap_or(self.started);
        let upto = ms(self.window_start, upto.min(self.window_end));
        let iv = self.interval.as_millis() as u64;
        let mut filed = self.filed.lock().unwrap();
        while *filed < upto {
            let k = *filed / iv;
            let to = ((k + 1) * iv).min(upto);
            let mut h = new_histogram();
            h.record_n(RTT_NS, (to - *filed) * RATE).unwrap();
            each(k as u32, &h);
            *filed = to;
        }
    }
    fn join(&mut self) -> Vec<WorkerEnd> {
        let end = |lost| WorkerEnd {
            unanswered: 1,
            lost,
            late: 2,
            syscalls: 500,
            ..WorkerEnd::default()
        };
        vec![end(3), end(4)]
    }
    fn counts_syscalls(&self) -> bool {
        true
    }
}

/// Echo workers that answer `RATE` a millisecond from `started` until aborted.
type FakeEcho = FakeWorkers;

impl EchoEngine for FakeEcho {
    fn port(&self) -> io::Result<u16> {
        Ok(0)
    }
    fn units(&self, conns: usize) -> usize {
        conns
    }
    fn start(
        &mut self,
        _conns: Vec<TcpStream>,
        _peer: IpAddr,
        _plan: ServerPlan,
    ) -> io::Result<Vec<String>> {
        Ok(Vec::new())
    }
    /// Counted to the microsecond (`FakeWorkers::done`).
    fn answered(&self) -> u64 {
        self.done()
    }
    fn rejected(&self) -> u64 {
        5
    }
    fn join(&mut self) -> Vec<String> {
        vec!["an echo worker's note".into()]
    }
    fn syscalls(&self) -> Option<u64> {
        Some(77)
    }
}

fn side(spec: &RrSpec, client: bool) -> Box<dyn Side> {
    let started = Instant::now();
    let engine = match client {
        true => SideEngine::Client(Box::new(FakeRequests::new(spec, started))),
        false => SideEngine::Server(Box::new(FakeEcho::new(started, RATE))),
    };
    Box::new(RrSide::new(
        spec,
        Parts {
            engine,
            started,
            probe: HostProbe::for_peer([127, 0, 0, 1].into()),
            placement: Placement::new(1, None, 2),
            notes: Vec::new(),
            socket_options: vec!["TCP_NODELAY".into()],
        },
    ))
}

fn rr(result: &SideResult) -> &sonde_results::RrResult {
    result.rr().expect("an rr section")
}

#[test]
fn a_client_side_files_late_histograms_by_interval_and_the_window_is_their_sum() {
    let spec = spec();
    let mut side = side(&spec, true);
    let intervals = drive(&mut side, None);
    let result = side.into_result(false);
    assert_eq!(intervals.len(), 3, "{intervals:?}");
    for (k, s) in intervals.iter().enumerate() {
        assert_eq!(s.index, k as u32);
        // The planned bounds, and every message of them although handed over late.
        assert!((s.end_s - s.start_s - 0.1).abs() < 1e-9, "{s:?}");
        assert_eq!(s.rr().unwrap().messages, 100 * RATE, "interval {k}: {s:?}");
        let l = s
            .rr()
            .unwrap()
            .latency_ns
            .as_ref()
            .expect("a latency summary");
        assert_eq!(l.count, 100 * RATE);
        assert!(l.p50.abs_diff(RTT_NS) <= RTT_NS / 100, "{l:?}");
        assert!(!s.partial);
    }
    let r = rr(&result);
    let summed: u64 = intervals.iter().map(|s| s.rr().unwrap().messages).sum();
    assert_eq!(r.messages, summed, "the window is the sum of its intervals");
    assert_eq!(r.latency_ns.as_ref().unwrap().count, summed);
    // Each worker's end, summed; the sent count from the engine's own.
    assert_eq!((r.unanswered, r.lost, r.late), (2, 7, 4));
    // Warm-up and window, and the two requests in flight at the end.
    assert_eq!(r.sent, 350 * RATE + 2);
    let calls = r.syscalls.expect("the kernel engine counts its calls");
    assert_eq!((calls.calls, calls.messages), (1000, r.sent));
    assert_eq!(r.socket_options, vec!["TCP_NODELAY".to_string()]);
    assert!(!result.partial);
    assert!((result.window_s - 0.3).abs() < 1e-9, "{}", result.window_s);
}

#[test]
fn a_client_side_cut_short_keeps_what_it_measured_as_partial() {
    let spec = spec();
    let mut side = side(&spec, true);
    // The controller fails once the first interval is in, the second open: it stops the
    // senders and asks for a partial result.
    let intervals = drive(&mut side, Some(1));
    assert_eq!(intervals.len(), 1, "{intervals:?}");
    side.finish_senders();
    let result = side.into_result(true);
    assert!(result.partial);
    let r = rr(&result);
    // The first interval and what the second had measured, none lost.
    assert!(r.messages > 100 * RATE, "{}", r.messages);
    assert_eq!(r.latency_ns.as_ref().unwrap().count, r.messages);
    assert!(
        result.window_s > 0.1 && result.window_s < 0.3,
        "{}",
        result.window_s
    );
}

#[test]
fn an_agent_side_stopped_mid_interval_sends_that_interval_marked_partial() {
    let spec = spec();
    let (intervals, result) = stopped_mid_interval(side(&spec, false));
    // The controller's window ends a little before the agent's: that skew is no cut.
    assert!(!result.partial);
    let summed: u64 = intervals.iter().map(|s| s.rr().unwrap().messages).sum();
    assert_eq!(rr(&result).messages, summed);
}

#[test]
fn an_agent_side_counts_answers_at_its_own_instants() {
    let spec = spec();
    let mut side = side(&spec, false);
    let intervals = drive(&mut side, None);
    let result = side.into_result(false);
    assert_eq!(intervals.len(), 3, "{intervals:?}");
    for s in &intervals {
        // Each bound is stamped right after its count is read (no /proc read between them
        // any more: that once took milliseconds on a loaded machine), so the count and the
        // bounds agree to the few microseconds between the two reads of the clock; 2 ms of
        // messages allows a preemption between them.
        let expected = ((s.end_s - s.start_s) * 1e6) as u64 * RATE / 1000;
        let got = s.rr().unwrap().messages;
        assert!(got.abs_diff(expected) <= 2 * RATE, "{s:?}");
        assert_eq!(
            s.rr().unwrap().latency_ns,
            None,
            "only the client measures round trips"
        );
    }
    let r = rr(&result);
    let summed: u64 = intervals.iter().map(|s| s.rr().unwrap().messages).sum();
    assert_eq!(r.messages, summed);
    assert_eq!(r.foreign, 5, "the echo's rejected datagrams");
    let calls = r.syscalls.expect("counted");
    assert_eq!(calls.calls, 77);
    assert!(result.notes.iter().any(|n| n == "an echo worker's note"));
}
