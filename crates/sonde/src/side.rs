//! One side of a running test, whatever its type: the controller's and the agent's control
//! loops drive it the same way (wake at `next_deadline`, call `on_time`, stop when drained).

use std::time::Instant;

use sonde_results::{IntervalSample, SideResult};

use crate::rr_side::RrSide;
use crate::stream_side::StreamSide;

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
    fn into_result(self: Box<Self>, partial: bool) -> SideResult {
        Self::into_result(*self, partial)
    }
}
