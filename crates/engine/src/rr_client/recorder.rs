//! A worker's latency recording: a histogram increment per response into the current
//! interval's histogram, which is swapped for a spare when its interval ends (see
//! [`handoff`](super::handoff): no lock, no system call, no allocation on this thread).

use std::time::Instant;

use hdrhistogram::Histogram;

use super::handoff::{fresh, Outbox};
use super::plan::WorkerEnd;
use super::workers::Core as Shared;

/// Latency recording for one worker: the current interval's histogram and its bounds.
pub(crate) struct Recorder<'a> {
    shared: &'a Shared,
    outbox: Outbox,
    hist: Histogram<u64>,
    tag: Option<(u32, Instant)>,
    interval_ns: u128,
    /// Intervals filed together because the reporter took none of the last ones.
    merged: u64,
}

impl<'a> Recorder<'a> {
    pub(crate) fn new(shared: &'a Shared, k: usize) -> Recorder<'a> {
        Recorder {
            shared,
            // The core holds an outbox for each of its workers, each taken once.
            outbox: shared
                .handoff
                .take(k)
                .expect("worker k's outbox, taken once"),
            hist: fresh(),
            tag: None,
            interval_ns: shared.plan.interval.as_nanos().max(1),
            merged: 0,
        }
    }

    /// Files the round trip from `start` to `now` under the interval `now` falls in; only
    /// responses inside the measured window count.
    #[inline]
    pub(crate) fn record(&mut self, start: Instant, now: Instant) {
        let p = &self.shared.plan;
        if now < p.window_start || now >= p.window_end {
            return;
        }
        if self.tag.is_none_or(|(_, end)| now >= end) {
            self.next_interval(now);
        }
        let ns = now
            .saturating_duration_since(start)
            .as_nanos()
            .min(u64::MAX as u128) as u64;
        self.hist.saturating_record(ns.max(1));
    }

    #[cold]
    fn next_interval(&mut self, now: Instant) {
        let p = &self.shared.plan;
        self.flush();
        let idx = ((now - p.window_start).as_nanos() / self.interval_ns) as u32;
        let end = (p.window_start + p.interval * (idx + 1)).min(p.window_end);
        self.tag = Some((idx, end));
    }

    /// Hands over the histogram once its interval is over (called before waits too).
    pub(crate) fn flush_if_due(&mut self, now: Instant) {
        if self.tag.is_some_and(|(_, end)| now >= end) {
            self.flush();
        }
    }

    /// Hands the current histogram over under its interval and records into a spare.
    pub(crate) fn flush(&mut self) {
        let Some((idx, _)) = self.tag.take() else {
            return;
        };
        if self.hist.is_empty() {
            return;
        }
        if !self.outbox.hand_over(idx, &mut self.hist) {
            self.merged += 1;
        }
    }

    /// The end of the current interval, for wait timeouts.
    pub(crate) fn due(&self) -> Option<Instant> {
        self.tag.map(|(_, end)| end)
    }

    /// What the recording itself cost the worker, for its end: histograms allocated on
    /// the measuring thread and intervals merged, both because the reporter fell behind.
    fn account(&self, end: &mut WorkerEnd) {
        end.histograms_allocated = self.outbox.allocated;
        end.intervals_merged = self.merged;
    }
}

/// Runs worker `k`'s `body` with its recorder: a tight timer slack, and its last
/// histogram handed over at the end.
pub(crate) fn recording(
    shared: &Shared,
    k: usize,
    body: impl FnOnce(&mut Recorder<'_>) -> WorkerEnd,
) -> WorkerEnd {
    crate::wait::tight_timer_slack();
    let mut rec = Recorder::new(shared, k);
    let mut end = body(&mut rec);
    rec.flush();
    rec.account(&mut end);
    end
}
