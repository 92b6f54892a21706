//! Pacing of a packet sender: a budget of packets per elapsed time, checked per batch,
//! with a timed sleep when ahead; never a sleep per packet.

use std::time::{Duration, Instant};

/// The most lateness a paced sender makes good by sending at once. On a shared 2-vCPU
/// machine wake-ups routinely run 1-3 ms late, and 1 ms made senders paced at 20 k
/// packets/s send 15-30 % short; 4 ms at that rate is an 80-packet burst, which a shaper
/// with a few kB of bucket and queue still takes.
const CATCH_UP: Duration = Duration::from_millis(4);

/// When each batch of one sending thread is due.
///
/// A wake-up late by up to `CATCH_UP` (or one batch, if longer) is made good at once: on a
/// busy host sleeps routinely overrun by that much, and dropping each overrun would send
/// short. After a longer stall the schedule restarts from now rather than bursting to
/// catch up: such a burst is not the offered rate, and it would overflow shapers that the
/// rate fits.
#[derive(Debug)]
pub struct Pacer {
    /// Time per packet of this thread; `None`: unpaced.
    per_packet: Option<Duration>,
    slack: Duration,
    next_due: Instant,
}

impl Pacer {
    /// A thread's share (`1 / threads`) of `rate_pps`, sent in batches of `batch`.
    pub fn new(rate_pps: Option<f64>, threads: usize, batch: usize, now: Instant) -> Pacer {
        let per_packet = rate_pps.map(|r| Duration::from_secs_f64(threads as f64 / r));
        Pacer {
            per_packet,
            slack: per_packet.map_or(CATCH_UP, |pp| (pp * batch as u32).max(CATCH_UP)),
            next_due: now,
        }
    }

    /// `None` when the next batch may go at `now`; else the time it is due.
    #[inline]
    pub fn early(&mut self, now: Instant) -> Option<Instant> {
        self.per_packet?;
        if now < self.next_due {
            return Some(self.next_due);
        }
        if now > self.next_due + self.slack {
            self.next_due = now;
        }
        None
    }

    /// Accounts `n` packets sent.
    #[inline]
    pub fn sent(&mut self, n: u64) {
        if let Some(pp) = self.per_packet {
            self.next_due += pp * n as u32;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unpaced_never_waits() {
        let t = Instant::now();
        let mut p = Pacer::new(None, 2, 32, t);
        p.sent(1_000_000);
        assert_eq!(p.early(t), None);
    }

    #[test]
    fn a_thread_sends_its_share_then_waits() {
        let t = Instant::now();
        // 1000 packets/s over 2 threads: 2 ms per packet of this thread.
        let mut p = Pacer::new(Some(1000.0), 2, 4, t);
        assert_eq!(p.early(t), None);
        p.sent(4);
        assert_eq!(p.early(t), Some(t + Duration::from_millis(8)));
        assert_eq!(p.early(t + Duration::from_millis(8)), None);
    }

    #[test]
    fn a_long_stall_restarts_the_schedule_instead_of_bursting() {
        let t = Instant::now();
        let mut p = Pacer::new(Some(1000.0), 1, 1, t);
        p.sent(1);
        // 100 ms late: far beyond the 4 ms slack.
        let late = t + Duration::from_millis(101);
        assert_eq!(p.early(late), None);
        p.sent(1);
        assert_eq!(p.early(late), Some(late + Duration::from_millis(1)));
    }
}
