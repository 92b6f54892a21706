//! The measurement schedule of a side: warm-up, then intervals that tile the window. Each
//! call to `poll` yields at most one event, so a side snapshots its counters exactly once
//! per edge, whenever its control loop wakes.

use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tick {
    /// Warm-up is over: take the window's opening snapshot.
    Open,
    /// Interval `k` is over; `last` when it was the window's final one.
    Interval { k: u32, last: bool },
}

pub struct Schedule {
    pub window_start: Instant,
    pub window_end: Instant,
    interval: Duration,
    /// How long after an interval's end it is reported (lets workers hand over data).
    grace: Duration,
    intervals: u32,
    opened: bool,
    next: u32,
}

impl Schedule {
    /// The schedule of a test with `timing` whose clock started at `started`.
    pub fn of(started: Instant, timing: &sonde_results::Timing, grace: Duration) -> Schedule {
        let ms = Duration::from_millis;
        Schedule::new(
            started,
            ms(timing.warmup_ms),
            ms(timing.duration_ms),
            ms(timing.interval_ms),
            grace,
        )
    }

    pub fn new(
        started: Instant,
        warmup: Duration,
        duration: Duration,
        interval: Duration,
        grace: Duration,
    ) -> Schedule {
        let window_start = started + warmup;
        Schedule {
            window_start,
            window_end: window_start + duration,
            interval,
            grace,
            intervals: (duration.as_nanos().div_ceil(interval.as_nanos().max(1))) as u32,
            opened: false,
            next: 0,
        }
    }

    fn interval_end(&self, k: u32) -> Instant {
        (self.window_start + self.interval * (k + 1)).min(self.window_end)
    }

    /// Start and end of interval `k`, seconds from the window's start.
    pub fn bounds_s(&self, k: u32) -> (f64, f64) {
        (
            (self.interval * k).as_secs_f64(),
            (self.interval_end(k) - self.window_start).as_secs_f64(),
        )
    }

    /// Seconds from the window's start to `t` (0 before it): a measured interval edge.
    pub fn offset_s(&self, t: Instant) -> f64 {
        t.saturating_duration_since(self.window_start).as_secs_f64()
    }

    pub fn next_deadline(&self) -> Option<Instant> {
        if !self.opened {
            Some(self.window_start)
        } else if self.next < self.intervals {
            Some(self.interval_end(self.next) + self.grace)
        } else {
            None
        }
    }

    pub fn poll(&mut self, now: Instant) -> Option<Tick> {
        if !self.opened {
            if now < self.window_start {
                return None;
            }
            self.opened = true;
            return Some(Tick::Open);
        }
        let k = self.next;
        if k < self.intervals && now >= self.interval_end(k) + self.grace {
            self.next += 1;
            return Some(Tick::Interval {
                k,
                last: self.next == self.intervals,
            });
        }
        None
    }

    /// The peer ended the test while interval k was still open: it is closed now and the
    /// schedule is over. `None` when no interval is open.
    pub fn cut(&mut self) -> Option<u32> {
        if !self.opened || self.next >= self.intervals {
            return None;
        }
        let k = self.next;
        self.next = self.intervals;
        Some(k)
    }

    pub fn is_over(&self) -> bool {
        self.opened && self.next == self.intervals
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warmup_then_intervals_then_done() {
        let t = Instant::now();
        let ms = Duration::from_millis;
        let mut s = Schedule::new(t, ms(100), ms(250), ms(100), ms(10));
        assert_eq!(s.poll(t), None);
        assert_eq!(s.next_deadline(), Some(t + ms(100)));
        assert_eq!(s.poll(t + ms(100)), Some(Tick::Open));
        assert_eq!(s.poll(t + ms(205)), None);
        assert_eq!(
            s.poll(t + ms(210)),
            Some(Tick::Interval { k: 0, last: false })
        );
        assert_eq!(
            s.poll(t + ms(315)),
            Some(Tick::Interval { k: 1, last: false })
        );
        // The last interval is cut at the window's end (100 + 250 ms), reported 10 ms later.
        assert_eq!(s.bounds_s(2), (0.2, 0.25));
        assert_eq!(s.poll(t + ms(355)), None);
        assert_eq!(
            s.poll(t + ms(360)),
            Some(Tick::Interval { k: 2, last: true })
        );
        assert!(s.is_over());
        assert_eq!(s.next_deadline(), None);
    }
}
