//! A worker's latency recording: the current interval's HDR histogram, handed to the
//! outbox when its interval ends (a lock once per interval, never per message).

use std::time::Instant;

use hdrhistogram::Histogram;

use super::plan::WorkerEnd;
use super::workers::Core as Shared;

/// Latency recording for one worker: the current interval's histogram and its bounds.
pub(crate) struct Recorder<'a> {
    shared: &'a Shared,
    hist: Histogram<u64>,
    tag: Option<(u32, Instant)>,
    interval_ns: u128,
}

impl<'a> Recorder<'a> {
    pub(crate) fn new(shared: &'a Shared) -> Recorder<'a> {
        Recorder {
            shared,
            hist: Histogram::new_with_bounds(1, crate::MAX_LATENCY_NS, 3).expect("valid bounds"),
            tag: None,
            interval_ns: shared.plan.interval.as_nanos().max(1),
        }
    }

    #[inline]
    pub(crate) fn record(&mut self, start: Instant, now: Instant) {
        let p = &self.shared.plan;
        if now < p.window_start || now >= p.window_end {
            return;
        }
        if self.tag.is_none_or(|(_, end)| now >= end) {
            self.flush();
            let idx = ((now - p.window_start).as_nanos() / self.interval_ns) as u32;
            let end = (p.window_start + p.interval * (idx + 1)).min(p.window_end);
            self.tag = Some((idx, end));
        }
        let ns = now
            .saturating_duration_since(start)
            .as_nanos()
            .min(u64::MAX as u128) as u64;
        self.hist.saturating_record(ns.max(1));
    }

    /// Hands over the histogram once its interval is over (called before waits too).
    pub(crate) fn flush_if_due(&mut self, now: Instant) {
        if self.tag.is_some_and(|(_, end)| now >= end) {
            self.flush();
        }
    }

    pub(crate) fn flush(&mut self) {
        if let Some((idx, _)) = self.tag.take() {
            if !self.hist.is_empty() {
                // One allocation per interval, never per message.
                let fresh = Histogram::new_from(&self.hist);
                let full = std::mem::replace(&mut self.hist, fresh);
                self.shared
                    .outbox
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((idx, full));
            }
        }
    }

    /// The end of the current interval, for wait timeouts.
    pub(crate) fn due(&self) -> Option<Instant> {
        self.tag.map(|(_, end)| end)
    }
}

/// Runs a worker's `body` with its recorder: a tight timer slack, and its last histogram
/// handed over at the end.
pub(crate) fn recording(
    shared: &Shared,
    body: impl FnOnce(&mut Recorder<'_>) -> WorkerEnd,
) -> WorkerEnd {
    crate::wait::tight_timer_slack();
    let mut rec = Recorder::new(shared);
    let end = body(&mut rec);
    rec.flush();
    end
}
