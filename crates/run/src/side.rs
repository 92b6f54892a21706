//! One side of a running test, whatever its type: the controller's and the agent's control
//! loops drive it the same way (wake at `next_deadline`, call `on_time`, stop when drained).

use std::time::Instant;

use sonde_results::{IntervalSample, SideResult};

use crate::rr_side::RrSide;
use crate::stream_side::StreamSide;

/// Most worker threads chosen without `--threads`; beyond it workers multiplex with epoll.
const MAX_DEFAULT_THREADS: usize = 128;

/// What the workers do, which decides how many there should be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Work {
    /// Bulk transfer: each connection keeps its worker busy.
    Stream,
    /// Request/response: each connection wakes its worker once per message.
    RequestResponse,
}

/// Worker threads for `units` connections (or flows): as asked, else the fastest default
/// for this host, never more than there are connections (see BENCHMARKS.md):
/// - stream: one blocking thread per connection up to a cap; with 8 connections on a
///   2-core VM that is 6-10 % faster than one epoll thread per core, as iperf2's is;
/// - request/response: one thread per two usable CPUs, each multiplexing its connections
///   with epoll, leaving the other half to the kernel's network processing (and, in a lab
///   or over loopback, to the other end). With 32 connections on one 2-vCPU host (both
///   ends), medians of 5 alternating runs: 32 threads a side 107 k requests/s (P99
///   0.58-0.88 ms), 2 a side 162 k/s (P99 4.2 ms: four spinning threads on two CPUs wait
///   for a scheduler slice), 1 a side 158 k/s (P99 0.34-0.39 ms). A thread per
///   connection sleeps and wakes per message; a multiplexing worker answers many per
///   wake-up.
pub fn worker_threads(work: Work, asked: Option<u32>, units: usize) -> usize {
    let default = match work {
        Work::Stream => units.clamp(1, MAX_DEFAULT_THREADS),
        Work::RequestResponse => units.clamp(1, (usable_cpus() / 2).max(1)),
    };
    asked.map_or(default, |t| t as usize).min(units.max(1))
}

/// Most sending threads `sonde pps` starts without `--tx-threads`.
const MAX_DEFAULT_TX_THREADS: u32 = 32;

/// pps's sending threads and flows, each as asked, else the fastest default for this host:
/// a sending thread per usable CPU (at most one per flow asked for), and a flow per sending
/// thread or receiving thread, whichever are more. On veth the receive path runs on the
/// sender's CPU, so the packet rate scales with the senders' CPUs, not with sendmmsg
/// batching: on a 2-vCPU host, 2 threads and 2 flows received 1.5-1.6x the packets of 1
/// and 1, and 1.8-1.9x the best kernel-socket peer; 2.0x once the receiver napped
/// (bench/pps_compare.py, BENCHMARKS.md).
/// With GSO one thread sends more than the receiver takes: a second one only takes CPU
/// from it (1.44 M against 0.64 M packets/s received), so GSO defaults to one.
pub fn pps_threads(tx: Option<u32>, rx: u32, flows: Option<u32>, gso: bool) -> (u32, u32) {
    let cpus = if gso {
        1
    } else {
        (usable_cpus() as u32).clamp(1, MAX_DEFAULT_TX_THREADS)
    };
    let tx = tx.unwrap_or_else(|| flows.map_or(cpus, |f| f.clamp(1, cpus)));
    (tx, flows.unwrap_or(tx.max(rx)))
}

/// CPUs this process may run on (its affinity mask and cgroup quota).
pub fn usable_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
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
        assert_eq!(worker_threads(Work::Stream, None, 8), 8);
        assert_eq!(worker_threads(Work::Stream, None, 500), 128);
        assert_eq!(worker_threads(Work::Stream, Some(3), 2), 2);
        assert_eq!(worker_threads(Work::Stream, Some(3), 0), 1);
        let cpus = usable_cpus();
        assert_eq!(
            worker_threads(Work::RequestResponse, None, 500),
            (cpus / 2).max(1)
        );
        assert_eq!(worker_threads(Work::RequestResponse, None, 1), 1);
        assert_eq!(worker_threads(Work::RequestResponse, Some(32), 32), 32);
        assert_eq!(worker_cpus(Some(&vec![4, 6]), 3), Some(vec![4, 6, 4]));
        assert_eq!(worker_cpus(None, 3), None);
    }

    #[test]
    fn pps_sends_from_every_cpu_with_a_flow_each() {
        let cpus = usable_cpus().min(32) as u32;
        assert_eq!(pps_threads(None, 1, None, false), (cpus, cpus));
        assert_eq!(pps_threads(None, cpus + 3, None, false), (cpus, cpus + 3));
        assert_eq!(pps_threads(None, 1, Some(1), false), (1, 1));
        assert_eq!(pps_threads(None, 1, Some(1000), false), (cpus, 1000));
        assert_eq!(pps_threads(None, 1, Some(1000), true), (1, 1000));
        assert_eq!(pps_threads(None, 2, None, true), (1, 2));
        assert_eq!(pps_threads(Some(3), 1, None, true), (3, 3));
        // What was asked is kept, even when it cannot work: the spec's check names it.
        assert_eq!(pps_threads(Some(4), 1, Some(2), false), (4, 2));
    }
}
