//! How a packet receiver that does not spin waits for its next batch.
//!
//! A receiver asleep in its socket must be woken by the sender for every packet that finds
//! it asleep, and on veth (or any path where the receive path runs on the sending CPU) the
//! sender pays for that wake-up. While packets arrive fast, the receiver instead naps a
//! fixed time after draining its socket and then reads without waiting: it is never waited
//! on, and each read takes a fuller batch. When a nap brings in few packets, the rate is
//! too low for napping to pay (the timer wake-ups would cost more than the sender's), so it
//! goes back to waiting in the socket and tries again only after a back-off.

use std::time::{Duration, Instant};

/// How long the receiver naps after draining its socket.
pub const NAP: Duration = Duration::from_micros(100);
/// Fewest packets a nap must bring in for napping to go on (a rate of 80 k packets/s).
const WORTH_IT: usize = 8;
/// How long after a nap that was not worth it the receiver waits in the socket.
const BACK_OFF: Duration = Duration::from_millis(10);

/// What the receiver does before its next read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Wait in the socket for the first packet.
    Wait,
    /// Read again at once: the last batch was full.
    Read,
    /// Sleep for `NAP`, then read without waiting.
    Nap,
}

#[derive(Debug)]
pub struct Napper {
    next: Next,
    napping_from: Instant,
}

impl Napper {
    pub fn new(now: Instant) -> Napper {
        Napper {
            next: Next::Wait,
            napping_from: now,
        }
    }

    pub fn next(&self) -> Next {
        self.next
    }

    /// After a read of `got` packets into a batch of `batch` slots (0: nothing there).
    pub fn after_read(&mut self, got: usize, batch: usize, now: Instant) {
        let napped = self.next == Next::Nap;
        if napped && got < WORTH_IT.min(batch) {
            self.napping_from = now + BACK_OFF;
        }
        self.next = if got >= batch {
            Next::Read
        } else if got > 0 && now >= self.napping_from {
            Next::Nap
        } else {
            Next::Wait
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn naps_while_batches_come_fast_and_waits_when_they_do_not() {
        let t = Instant::now();
        let mut n = Napper::new(t);
        assert_eq!(n.next(), Next::Wait);
        // Woken with a few packets: try a nap.
        n.after_read(3, 32, t);
        assert_eq!(n.next(), Next::Nap);
        // The nap brought 20: keep napping; a full batch: read again at once.
        n.after_read(20, 32, t);
        assert_eq!(n.next(), Next::Nap);
        n.after_read(32, 32, t);
        assert_eq!(n.next(), Next::Read);
        n.after_read(12, 32, t);
        assert_eq!(n.next(), Next::Nap);
        // A nap that brought 2: wait in the socket, and do not nap again for a while.
        n.after_read(2, 32, t);
        assert_eq!(n.next(), Next::Wait);
        n.after_read(1, 32, t + Duration::from_millis(1));
        assert_eq!(n.next(), Next::Wait);
        n.after_read(1, 32, t + BACK_OFF + Duration::from_millis(1));
        assert_eq!(n.next(), Next::Nap);
        // Nothing after a nap: the sender paused.
        n.after_read(0, 32, t + BACK_OFF + Duration::from_millis(2));
        assert_eq!(n.next(), Next::Wait);
    }

    #[test]
    fn small_batches_nap_only_on_full_ones() {
        let t = Instant::now();
        let mut n = Napper::new(t);
        n.after_read(1, 4, t);
        assert_eq!(n.next(), Next::Nap);
        // With 4 slots, a full batch after a nap is worth it; a partial one is not.
        n.after_read(4, 4, t);
        assert_eq!(n.next(), Next::Read);
        n.after_read(3, 4, t);
        assert_eq!(n.next(), Next::Nap);
        n.after_read(3, 4, t);
        assert_eq!(n.next(), Next::Wait);
    }
}
