//! What a request client's workers are told (its plan) and say when they end: the same
//! for every carrier of the requests, kernel sockets or AF_XDP frames.

use std::time::{Duration, Instant};

use crate::pool::Placement;
use crate::wait::Poll;

/// Open loop: requests waiting for a free slot beyond this are counted as not sent.
pub const BACKLOG_CAP: usize = 1 << 16;

#[derive(Debug, Clone)]
pub struct ClientPlan {
    pub placement: Placement,
    pub request_bytes: usize,
    pub response_bytes: usize,
    /// The test's cookie, which every UDP request carries after its sequence number.
    pub cookie: u64,
    pub window: usize,
    pub poll: Poll,
    /// Time between requests on one connection; `None`: closed loop.
    pub pace: Option<Duration>,
    pub open_loop: bool,
    /// Only responses arriving in [window_start, window_end) are recorded.
    pub window_start: Instant,
    pub window_end: Instant,
    pub interval: Duration,
    /// No request is started after this.
    pub stop_sending_at: Instant,
    /// Requests still unanswered now are counted as such.
    pub drain_until: Instant,
    pub udp_loss_timeout: Duration,
    /// io_uring: a kernel thread polls the ring's submissions.
    pub sqpoll: bool,
    /// Kernel timestamps of each message, split into stages ([`crate::kstamps`]).
    pub stages: bool,
    /// With stages: one message in this many is stamped (1: every one).
    pub stage_every: u32,
    /// With stages: the NIC's receive stamps too (`kstamps::Sampling::with_hardware_rx`).
    pub hardware_rx: bool,
    /// UDP: count each answer by the TOS it arrived with (`--dscp`/`--ecn`).
    pub read_tos: bool,
}

impl ClientPlan {
    /// Whether a request worker goes on at `now` and, if so, whether it still sends: every
    /// engine's worker stops when aborted, after its last request once every answer is in
    /// or the drain time is over, and when all its connections are dead. `outstanding` and
    /// `all_dead` are asked only when needed.
    pub fn goes_on(
        &self,
        now: Instant,
        aborting: bool,
        outstanding: impl FnOnce() -> usize,
        all_dead: impl FnOnce() -> bool,
    ) -> Option<bool> {
        if aborting {
            return None;
        }
        let sending = now < self.stop_sending_at;
        if !sending && (outstanding() == 0 || now >= self.drain_until) {
            return None;
        }
        (!all_dead()).then_some(sending)
    }
}

/// How a worker ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkerEnd {
    pub unanswered: u64,
    pub not_sent: u64,
    pub lost: u64,
    /// UDP replies that came after their request was counted lost.
    pub late: u64,
    /// UDP replies to requests already answered.
    pub duplicated: u64,
    /// UDP datagrams that answer no request sent.
    pub foreign: u64,
    /// Interval histograms allocated on the measuring thread, and intervals filed
    /// together, because the reporting thread fell behind (0 and 0 when it keeps up).
    pub histograms_allocated: u64,
    pub intervals_merged: u64,
    /// System calls the worker made (`crate::syscalls`).
    pub syscalls: u64,
    /// Kernel stamps the worker read, by kind (`crate::kstamps::kinds`).
    pub stamps: crate::kstamps::StampKinds,
    pub error: Option<String>,
}
