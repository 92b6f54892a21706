//! A side driven as the control loop drives it, for the sides' tests on fake engines.

use std::time::{Duration, Instant};

use sonde_results::IntervalSample;

use crate::side::Side;

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
