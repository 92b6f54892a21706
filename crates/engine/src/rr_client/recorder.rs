//! A worker's latency recording: a histogram increment per response into the current
//! interval's histogram, which is swapped for a spare when its interval ends (see
//! [`handoff`](super::handoff): no lock, no system call, no allocation on this thread).

use std::time::Instant;

use hdrhistogram::Histogram;

use super::handoff::{fresh, Outbox};
use super::plan::WorkerEnd;
use super::workers::Core as Shared;
use crate::kstamps::{Book, StageHists};

/// Latency recording for one worker: the current interval's histogram and its bounds.
pub(crate) struct Recorder<'a> {
    shared: &'a Shared,
    outbox: Outbox,
    hist: Histogram<u64>,
    tag: Option<(u32, Instant)>,
    interval_ns: u128,
    /// Intervals filed together because the reporter took none of the last ones.
    merged: u64,
    /// With stages: the current interval's and their way out.
    stages: Option<(StageHists, Outbox<StageHists>)>,
    /// The last interval handed over.
    last_interval: Option<u32>,
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
            stages: shared.stage_handoff.as_ref().map(|h| {
                let out = h.take(k).expect("worker k's stage outbox, taken once");
                (StageHists::new(), out)
            }),
            last_interval: None,
        }
    }

    /// Whether an answer at `now` is inside the measured window.
    #[inline]
    pub(crate) fn counts(&self, now: Instant) -> bool {
        let p = &self.shared.plan;
        now >= p.window_start && now < p.window_end
    }

    /// Files the complete messages of `book` (`all`: at the end, every one) under the
    /// current interval.
    pub(crate) fn file_stages(&mut self, book: &mut Book, all: bool) {
        if let Some((h, _)) = &mut self.stages {
            book.file(h, all);
        }
    }

    /// Files the round trip from `start` to `now` under the interval `now` falls in; only
    /// responses inside the measured window count.
    #[inline]
    pub(crate) fn record(&mut self, start: Instant, now: Instant) {
        if !self.counts(now) {
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
        let tag = self.tag.take();
        // Stages are filed once a later answer completes them, after their interval (or
        // the window) may have ended: they go under the last interval.
        let last = tag.map(|(idx, _)| idx).or(self.last_interval);
        if let (Some((h, out)), Some(idx)) = (&mut self.stages, last) {
            if !h.is_empty() {
                out.hand_over(idx, h);
            }
        }
        let Some((idx, _)) = tag else {
            return;
        };
        self.last_interval = Some(idx);
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
