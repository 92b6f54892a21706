//! A side driven as the control loop drives it, and fake workers, for the sides' tests on
//! fake engines.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use sonde_results::{IntervalSample, SideResult};

use crate::kind::Workers;
use crate::side::Side;

/// Workers that complete `rate` units (packets, answers) a millisecond from `started`
/// until aborted: the pps tests' flows and the rr tests' echo.
pub(crate) struct FakeWorkers {
    started: Instant,
    rate: u64,
    stopped_at: Mutex<Option<Instant>>,
}

impl FakeWorkers {
    pub(crate) fn new(started: Instant, rate: u64) -> FakeWorkers {
        FakeWorkers {
            started,
            rate,
            stopped_at: Mutex::new(None),
        }
    }

    /// Units done by now (or the abort), counted to the microsecond: counted by the
    /// millisecond, each interval bound's truncation took up to a millisecond's units off
    /// the tolerance.
    pub(crate) fn done(&self) -> u64 {
        let until = self.stopped_at.lock().unwrap().unwrap_or_else(Instant::now);
        until.saturating_duration_since(self.started).as_micros() as u64 * self.rate / 1000
    }
}

impl Workers for FakeWorkers {
    fn engine(&self) -> sonde_results::Engine {
        sonde_results::Engine::Kernel
    }
    fn all_done(&self) -> bool {
        self.stopped_at.lock().unwrap().is_some()
    }
    fn abort(&self) {
        self.stopped_at
            .lock()
            .unwrap()
            .get_or_insert_with(Instant::now);
    }
}

/// Drives `side` as a control loop does until it drains, or until it closed `stop_after`
/// intervals (the next one is then open); the intervals it closed.
pub(crate) fn drive(side: &mut Box<dyn Side>, stop_after: Option<usize>) -> Vec<IntervalSample> {
    let mut intervals = Vec::new();
    let until = Instant::now() + Duration::from_secs(5);
    while !(side.is_draining() && side.all_done()) && Instant::now() < until {
        let now = Instant::now();
        // Everything due by now first, however late this loop woke.
        for _ in 0..8 {
            intervals.extend(side.on_time(now));
            if side.next_deadline().is_none_or(|d| d > now) {
                break;
            }
        }
        if stop_after.is_some_and(|n| intervals.len() >= n) {
            break;
        }
        let next = side
            .next_deadline()
            .unwrap_or(now + Duration::from_millis(5));
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
        if side.is_draining() && !side.all_done() {
            side.finish_senders();
        }
    }
    intervals
}

/// A side stopped one interval in, as the agent's loop stops it at `Stop`: the open
/// interval closed and sent, marked partial and short. Its intervals and its result.
pub(crate) fn stopped_mid_interval(mut side: Box<dyn Side>) -> (Vec<IntervalSample>, SideResult) {
    let mut intervals = drive(&mut side, Some(1));
    assert_eq!(intervals.len(), 1, "{intervals:?}");
    intervals.extend(side.cut_interval());
    side.finish_senders();
    let result = side.into_result(false);
    let cut = intervals.last().unwrap();
    assert_eq!((cut.index, cut.partial), (1, true), "{cut:?}");
    assert!(cut.end_s - cut.start_s < 0.1, "{cut:?}");
    (intervals, result)
}
