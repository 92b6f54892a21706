//! One side of a running test, whatever its kind: the controller's and the agent's control
//! loops drive it the same way (wake at `next_deadline`, call `on_time`, stop when drained).

use std::time::Instant;

use sonde_results::{IntervalSample, SideResult};

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
    /// A descriptor that becomes readable when the side has news (a side run by another
    /// agent: its control connection); the control loop wakes on it too.
    fn wake_fd(&self) -> Option<std::os::fd::RawFd> {
        None
    }
    /// Why this side is gone, if it is (another agent's side, lost).
    fn fault(&self) -> Option<String> {
        None
    }
    /// Stops every worker and turns what was measured into this side's result.
    fn into_result(self: Box<Self>, partial: bool) -> SideResult;
}
