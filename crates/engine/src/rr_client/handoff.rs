//! How a measuring worker hands its interval histograms to the thread that reports them,
//! without a lock, a system call or an allocation on the measuring thread: each worker owns
//! two wait-free single-producer rings (`rtrb`, made for real-time threads), one carrying
//! full histograms out, one bringing back emptied ones. The reporting thread empties them
//! (zeroing every page, so the worker never takes a page fault on them) and returns them.
//!
//! Three histograms a worker: the one it records into, one the reporter may be reading, one
//! spare. Only when the reporter falls two intervals behind does the worker allocate a new
//! one (counted, and said in the result), so that no interval is ever merged into another.

use std::sync::Mutex;

use hdrhistogram::Histogram;
use rtrb::{Consumer, Producer, RingBuffer};

/// Histograms made for each worker before it starts, besides the one it records into.
const SPARES: usize = 2;
/// Full histograms a worker may hand over before the reporter takes any: beyond this the
/// worker keeps filing into its current one (the interval's bounds are then merged).
const QUEUED: usize = 64;

/// An interval's index and what was filed in it (the histogram of the responses that
/// completed in it, or their stages).
pub type Filed<T> = (u32, T);

/// What a worker files an interval in: made before the worker starts, emptied by the
/// reporter, never allocated on the measuring thread unless the reporter falls behind.
pub(crate) trait Filing: Send + Sized + 'static {
    fn blank() -> Self;
    /// A new one like this (the fallback allocation).
    fn like(&self) -> Self;
    fn clear(&mut self);
}

impl Filing for Histogram<u64> {
    fn blank() -> Self {
        fresh()
    }
    fn like(&self) -> Self {
        Histogram::new_from(self)
    }
    fn clear(&mut self) {
        self.reset()
    }
}

/// A new histogram for round-trip nanoseconds, its pages written once so that recording
/// into it never faults.
pub(crate) fn fresh() -> Histogram<u64> {
    let mut h = Histogram::new_with_bounds(1, crate::MAX_LATENCY_NS, 3).expect("valid bounds");
    h.reset();
    h
}

/// The worker's ends of its rings.
pub(crate) struct Outbox<T = Histogram<u64>> {
    full: Producer<Filed<T>>,
    spare: Consumer<T>,
    /// Histograms allocated because no spare had come back in time.
    pub allocated: u64,
}

impl<T: Filing> Outbox<T> {
    /// Hands `hist` over as interval `idx`, putting in its place the histogram to record
    /// into next: a spare when one came back. False: the reporter took none of the last
    /// QUEUED, so the worker keeps filing into `hist`.
    pub fn hand_over(&mut self, idx: u32, hist: &mut T) -> bool {
        if self.full.is_full() {
            return false;
        }
        let next = self.spare.pop().unwrap_or_else(|_| {
            self.allocated += 1;
            hist.like()
        });
        let full = std::mem::replace(hist, next);
        self.full.push((idx, full)).expect("room checked above");
        true
    }
}

/// The reporter's ends of one worker's rings.
struct Inbox<T> {
    full: Consumer<Filed<T>>,
    spare: Producer<T>,
}

/// Every worker's handoff: each worker takes its end once, when it starts; the reporter
/// drains them all.
pub(crate) struct Handoff<T = Histogram<u64>> {
    workers: Vec<Mutex<Option<Outbox<T>>>>,
    reporter: Mutex<Vec<Inbox<T>>>,
}

impl<T: Filing> Handoff<T> {
    /// Rings and preallocated histograms for `threads` workers.
    pub fn new(threads: usize) -> Handoff<T> {
        let (mut workers, mut reporter) = (Vec::new(), Vec::new());
        for _ in 0..threads {
            let (full_tx, full_rx) = RingBuffer::new(QUEUED);
            let (mut spare_tx, spare_rx) = RingBuffer::new(SPARES + 1);
            for _ in 0..SPARES {
                spare_tx.push(T::blank()).expect("room for the spares");
            }
            workers.push(Mutex::new(Some(Outbox {
                full: full_tx,
                spare: spare_rx,
                allocated: 0,
            })));
            reporter.push(Inbox {
                full: full_rx,
                spare: spare_tx,
            });
        }
        Handoff {
            workers,
            reporter: Mutex::new(reporter),
        }
    }

    /// Worker `k`'s end, once (the lock is taken before the worker's loop, never in it).
    pub fn take(&self, k: usize) -> Option<Outbox<T>> {
        self.workers
            .get(k)?
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// Gives every histogram handed over since the last call to `each`, then empties it
    /// and sends it back to its worker as a spare.
    pub fn drain(&self, mut each: impl FnMut(u32, &T)) {
        let mut reporter = self.reporter.lock().unwrap_or_else(|e| e.into_inner());
        for end in reporter.iter_mut() {
            while let Ok((idx, mut h)) = end.full.pop() {
                each(idx, &h);
                h.clear();
                // A worker that allocated has more histograms than spare slots: drop it.
                let _ = end.spare.push(h);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One histogram of `n` records of `ns` each.
    fn filled(n: u64, ns: u64) -> Histogram<u64> {
        let mut h = fresh();
        h.record_n(ns, n).unwrap();
        h
    }

    #[test]
    fn a_histogram_is_the_size_the_memory_budget_counts() {
        // sonde_run's budget::HISTOGRAM_BYTES counts three of 216 KiB a worker.
        assert_eq!(fresh().distinct_values() * 8, 216 << 10);
        assert_eq!(SPARES + 1, 3);
    }

    #[test]
    fn intervals_stay_apart_and_spares_come_back() {
        let handoff: Handoff = Handoff::new(1);
        let mut out = handoff.take(0).expect("the worker's end");
        assert!(handoff.take(0).is_none(), "an end is taken once");
        let mut hist = filled(5, 1_000);
        // Three intervals before the reporter drains: two spares, then one allocation.
        for idx in 0..3 {
            assert!(out.hand_over(idx, &mut hist));
            assert!(
                hist.is_empty(),
                "the worker records into an empty histogram"
            );
            hist.record_n(2_000 + idx as u64, 7).unwrap();
        }
        assert_eq!(out.allocated, 1);
        let mut got = Vec::new();
        handoff.drain(|idx, h| got.push((idx, h.len(), h.max())));
        assert_eq!(got.len(), 3);
        assert_eq!((got[0].0, got[0].1), (0, 5));
        assert_eq!((got[1].0, got[1].1), (1, 7));
        assert_eq!((got[2].0, got[2].1), (2, 7));
        // Emptied histograms went back: the next two hand-overs allocate nothing.
        for idx in 3..5 {
            assert!(out.hand_over(idx, &mut hist));
        }
        assert_eq!(out.allocated, 1);
    }

    #[test]
    fn a_reporter_that_never_drains_makes_the_worker_keep_its_histogram() {
        let handoff: Handoff = Handoff::new(2);
        let mut out = handoff.take(1).expect("worker 1's end");
        let mut hist = filled(1, 1_000);
        for idx in 0..QUEUED as u32 {
            assert!(out.hand_over(idx, &mut hist));
            hist.record(1_000).unwrap();
        }
        assert!(!out.hand_over(QUEUED as u32, &mut hist), "the ring is full");
        assert_eq!(hist.len(), 1, "kept, not lost");
        let mut n = 0;
        handoff.drain(|_, _| n += 1);
        assert_eq!(n, QUEUED);
        assert!(out.hand_over(0, &mut hist), "room again once drained");
    }
}
