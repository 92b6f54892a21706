//! One connection's or flow's requests in flight, whatever carries them (a kernel socket,
//! an AF_XDP frame): which are due, which are sent, when each started, which are answered
//! and which are given up on. The clock rules of closed, paced and open loop live here
//! once.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::plan::{ClientPlan, WorkerEnd, BACKLOG_CAP};
use crate::udp_match::{Reply, SeqMatch};

pub(crate) struct Flight {
    /// Start time of every request created and not yet answered, oldest first.
    ring: VecDeque<Instant>,
    /// How many of `ring` have been (at least partly) sent.
    pub started: usize,
    pub next_due: Instant,
    /// UDP: the sequence number of each request in flight.
    pub seq: SeqMatch,
}

impl Flight {
    /// Flow `i` of the `n` a worker owns, from `start`: closed loop, a full window due at
    /// once; paced, the worker's flows spread over the pacing period.
    pub fn new(p: &ClientPlan, start: Instant, i: usize, n: usize) -> Flight {
        let cap = if p.open_loop { p.window * 4 } else { p.window };
        let mut ring = VecDeque::with_capacity(cap);
        if p.pace.is_none() {
            ring.extend(std::iter::repeat_n(start, p.window));
        }
        Flight {
            ring,
            started: 0,
            next_due: start
                + p.pace
                    .map_or(Duration::ZERO, |iv| iv * i as u32 / n.max(1) as u32),
            seq: SeqMatch::default(),
        }
    }

    /// What a read of `data` answers: the first request's position in flight and how many.
    /// TCP's answers arrive in order: every whole response `rx_acc` (the bytes read and
    /// not yet one) now holds. A UDP reply names its request: one, if still in flight.
    pub fn answers(
        &mut self,
        p: &ClientPlan,
        udp: bool,
        rx_acc: &mut usize,
        data: &[u8],
    ) -> (usize, usize) {
        if udp {
            return match self.seq.reply(data) {
                Reply::Matched(pos) => (pos, 1),
                _ => (0, 0),
            };
        }
        *rx_acc += data.len();
        let whole = *rx_acc / p.response_bytes;
        *rx_acc %= p.response_bytes;
        (0, whole)
    }

    /// Paced runs: the requests that became due (open loop: all of them, on schedule;
    /// paced closed loop: the next one, once the last is answered). Returns how many open
    /// loop could not keep (its backlog is full).
    pub fn make_due(&mut self, p: &ClientPlan, now: Instant) -> u64 {
        let Some(iv) = p.pace else { return 0 };
        let mut dropped = 0;
        if p.open_loop {
            while self.next_due <= now {
                if self.ring.len() < BACKLOG_CAP {
                    self.ring.push_back(self.next_due);
                } else {
                    dropped += 1;
                }
                self.next_due += iv;
            }
        } else if self.ring.is_empty() && self.next_due <= now {
            self.ring.push_back(now);
            self.next_due = (self.next_due + iv).max(now);
        }
        dropped
    }

    /// Whether the window lets one more request start.
    pub fn may_start(&self, window: usize) -> bool {
        self.started < self.ring.len() && self.started < window
    }

    /// The next due request starts (its first byte goes out), timed from `at` when given
    /// (closed loop: now; open loop keeps its scheduled time); UDP gives it a sequence.
    pub fn start(&mut self, udp: bool, at: Option<Instant>) {
        if let Some(t) = at {
            self.ring[self.started] = t;
        }
        self.started += 1;
        if udp {
            self.seq.start();
        }
    }

    /// The request at `pos` (oldest first) was answered at `t`: frees its slot, and closed
    /// loop makes the next request due. Returns when it started.
    pub fn answered(&mut self, p: &ClientPlan, pos: usize, t: Instant) -> Option<Instant> {
        let s = self.ring.remove(pos)?;
        self.started = self.started.saturating_sub(1);
        if p.pace.is_none() && t < p.stop_sending_at {
            self.ring.push_back(t);
        }
        Some(s)
    }

    /// When the oldest request in flight is given up on (UDP).
    pub fn loss_due(&self, p: &ClientPlan) -> Option<Instant> {
        (self.started > 0)
            .then(|| self.ring.front().map(|&s| s + p.udp_loss_timeout))
            .flatten()
    }

    /// UDP requests whose answer is overdue at `now` are lost; their slots are freed.
    /// Returns how many.
    pub fn expire(&mut self, p: &ClientPlan, now: Instant) -> u64 {
        let mut lost = 0;
        while self.loss_due(p).is_some_and(|due| now >= due) {
            self.ring.pop_front();
            self.seq.expire_oldest();
            self.started -= 1;
            lost += 1;
            if p.pace.is_none() && now < p.stop_sending_at {
                self.ring.push_back(now);
            }
        }
        lost
    }

    /// Adds this flow's end state to `end`, once its worker stopped.
    pub fn account(&self, p: &ClientPlan, end: &mut WorkerEnd) {
        end.late += self.seq.late;
        end.duplicated += self.seq.duplicate;
        end.foreign += self.seq.foreign;
        end.unanswered += self.started as u64;
        end.not_sent += (self.ring.len() - self.started) as u64 * p.open_loop as u64;
    }
}

/// The start of a socket worker's pass (the kernel's or io_uring's) over its connections
/// `conns`, `part` giving each one's requests in flight and whether it died: whether the
/// worker goes on at `now` and still sends ([`ClientPlan::goes_on`]); sending, every live
/// connection's due requests made, those open loop could not keep counted in `end`.
pub fn begin_pass<C>(
    p: &ClientPlan,
    (now, aborting): (Instant, bool),
    conns: &mut [C],
    part: fn(&mut C) -> (&mut Flight, bool),
    end: &mut WorkerEnd,
) -> Option<bool> {
    let (mut outstanding, mut all_dead) = (0, true);
    for c in conns.iter_mut() {
        let (flight, dead) = part(c);
        outstanding += flight.started;
        all_dead &= dead;
    }
    let sending = p.goes_on(now, aborting, || outstanding, || all_dead)?;
    if sending {
        for (flight, _) in conns.iter_mut().map(part).filter(|(_, dead)| !dead) {
            end.not_sent += flight.make_due(p, now);
        }
    }
    Some(sending)
}

/// When a worker must wake even without an answer: the interval's end (`interval_due`),
/// the end of sending or of draining, the next paced request (`paced`: the flows'
/// `next_due`), the oldest request's loss (`loss`).
pub fn deadline(
    p: &ClientPlan,
    interval_due: Option<Instant>,
    paced: impl Iterator<Item = Instant>,
    loss: impl Iterator<Item = Instant>,
    sending: bool,
) -> Option<Instant> {
    let next_paced = p.pace.filter(|_| sending).and_then(|_| paced.min());
    [
        interval_due,
        sending.then_some(p.stop_sending_at),
        (!sending).then_some(p.drain_until),
        next_paced,
        loss.min(),
    ]
    .into_iter()
    .flatten()
    .min()
}
