//! One side of a running test, whatever its type: the controller's and the agent's control
//! loops drive it the same way (wake at `next_deadline`, call `on_time`, stop when drained).

use std::time::Instant;

use sonde_results::{IntervalSample, SideResult};

use crate::rr_side::RrSide;
use crate::stream_side::StreamSide;

/// Most worker threads chosen without `--threads`; beyond it workers multiplex with epoll.
const MAX_DEFAULT_THREADS: usize = 128;

/// Worker threads for `units` connections (or flows): as asked, else one blocking thread
/// per connection up to a cap, never more than there are connections. Measured on a
/// 2-core VM over veth with 8 connections, a thread per connection is 6-10 % faster than
/// one epoll thread per physical core (see BENCHMARKS.md), as iperf2's is.
pub fn worker_threads(asked: Option<u32>, units: usize) -> usize {
    asked
        .map_or_else(|| units.clamp(1, MAX_DEFAULT_THREADS), |t| t as usize)
        .min(units.max(1))
}

/// The CPU of each of `threads` workers: `cpus` dealt round robin; `None`: not pinned.
pub fn worker_cpus(cpus: Option<&Vec<usize>>, threads: usize) -> Option<Vec<usize>> {
    cpus.map(|c| (0..threads).map(|k| c[k % c.len()]).collect())
}

pub trait Side {
    /// When `on_time` next has something to do; `None`: nothing scheduled.
    fn next_deadline(&self) -> Option<Instant>;
    /// Advances the schedule; returns the interval that just closed, if any.
    fn on_time(&mut self, now: Instant) -> Option<IntervalSample>;
    /// The local schedule has run out (senders stopped).
    fn is_draining(&self) -> bool;
    /// Every worker has ended.
    fn all_done(&self) -> bool;
    fn planned_end(&self) -> Instant;
    /// Stop sending now (the peer asked, or the test is cut short).
    fn finish_senders(&mut self);
    /// The peer ended the test: the interval still open, closed now, if any.
    fn cut_interval(&mut self) -> Option<IntervalSample> {
        None
    }
    /// Stops every worker and turns what was measured into this side's result.
    fn into_result(self: Box<Self>, partial: bool) -> SideResult;
}

impl Side for StreamSide {
    fn next_deadline(&self) -> Option<Instant> {
        StreamSide::next_deadline(self)
    }
    fn on_time(&mut self, now: Instant) -> Option<IntervalSample> {
        StreamSide::on_time(self, now)
    }
    fn is_draining(&self) -> bool {
        StreamSide::is_draining(self)
    }
    fn all_done(&self) -> bool {
        StreamSide::all_done(self)
    }
    fn planned_end(&self) -> Instant {
        StreamSide::planned_end(self)
    }
    fn finish_senders(&mut self) {
        StreamSide::finish_senders(self)
    }
    fn into_result(self: Box<Self>, partial: bool) -> SideResult {
        StreamSide::into_result(*self, partial)
    }
}

impl Side for RrSide {
    fn next_deadline(&self) -> Option<Instant> {
        RrSide::next_deadline(self)
    }
    fn on_time(&mut self, now: Instant) -> Option<IntervalSample> {
        RrSide::on_time(self, now)
    }
    fn is_draining(&self) -> bool {
        RrSide::is_draining(self)
    }
    fn all_done(&self) -> bool {
        RrSide::all_done(self)
    }
    fn planned_end(&self) -> Instant {
        RrSide::planned_end(self)
    }
    fn finish_senders(&mut self) {
        RrSide::finish_senders(self)
    }
    fn cut_interval(&mut self) -> Option<IntervalSample> {
        RrSide::cut_interval(self)
    }
    fn into_result(self: Box<Self>, partial: bool) -> SideResult {
        RrSide::into_result(*self, partial)
    }
}

impl Side for crate::pps_side::PpsSide {
    fn next_deadline(&self) -> Option<Instant> {
        Self::next_deadline(self)
    }
    fn on_time(&mut self, now: Instant) -> Option<IntervalSample> {
        Self::on_time(self, now)
    }
    fn is_draining(&self) -> bool {
        Self::is_draining(self)
    }
    fn all_done(&self) -> bool {
        Self::all_done(self)
    }
    fn planned_end(&self) -> Instant {
        Self::planned_end(self)
    }
    fn finish_senders(&mut self) {
        Self::finish_senders(self)
    }
    fn cut_interval(&mut self) -> Option<IntervalSample> {
        Self::cut_interval(self)
    }
    fn into_result(self: Box<Self>, partial: bool) -> SideResult {
        Self::into_result(*self, partial)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_counts_and_cpus() {
        assert_eq!(worker_threads(None, 8), 8);
        assert_eq!(worker_threads(None, 500), 128);
        assert_eq!(worker_threads(Some(3), 2), 2);
        assert_eq!(worker_threads(Some(3), 0), 1);
        assert_eq!(worker_cpus(Some(&vec![4, 6]), 3), Some(vec![4, 6, 4]));
        assert_eq!(worker_cpus(None, 3), None);
    }
}
