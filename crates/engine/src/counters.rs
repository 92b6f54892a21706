//! The one counter type of the data plane: N monotonic u64s on their own cache line, one
//! writer (the worker that owns them), any number of readers (the sampler). The writer
//! uses a plain load and store, no locked read-modify-write. It stores first to last
//! (release) and a reader loads last to first (acquire), so a reader never sees a counter
//! ahead of one before it: bytes never ahead of the packets they came in, however long the
//! reader was held between its loads (a guard judging bytes per packet read torn totals
//! as 120 datagrams too long). On x86 both are plain moves.

use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug)]
#[repr(align(64))]
pub struct Counters<const N: usize>([AtomicU64; N]);

/// Bytes and calls that moved them, of one connection.
pub type ConnCounters = Counters<2>;

impl<const N: usize> Default for Counters<N> {
    fn default() -> Self {
        Counters(std::array::from_fn(|_| AtomicU64::new(0)))
    }
}

impl<const N: usize> Counters<N> {
    /// Called only by the owning worker.
    #[inline]
    pub fn add(&self, by: [u64; N]) {
        for (c, n) in self.0.iter().zip(by) {
            c.store(c.load(Ordering::Relaxed) + n, Ordering::Release);
        }
    }

    /// Called only by the owning worker: adds to counter `i` alone.
    #[inline]
    pub fn add_to(&self, i: usize, n: u64) {
        let c = &self.0[i];
        c.store(c.load(Ordering::Relaxed) + n, Ordering::Release);
    }

    /// Monotonic totals since the start, the last counter loaded first.
    pub fn read(&self) -> [u64; N] {
        let mut out = [0; N];
        for i in (0..N).rev() {
            out[i] = self.0[i].load(Ordering::Acquire);
        }
        out
    }

    /// Totals over several writers' counters.
    pub fn sum(all: &[Self]) -> [u64; N] {
        all.iter().map(Self::read).fold([0; N], |mut acc, r| {
            for (a, x) in acc.iter_mut().zip(r) {
                *a += x;
            }
            acc
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_sums_and_is_one_cache_line() {
        let c = ConnCounters::default();
        c.add([10, 1]);
        c.add([5, 1]);
        c.add_to(1, 3);
        assert_eq!(c.read(), [15, 5]);
        assert_eq!(std::mem::align_of::<ConnCounters>(), 64);
        assert_eq!(std::mem::size_of::<ConnCounters>(), 64);
        let all = [Counters::<1>::default(), Counters::<1>::default()];
        all[0].add([2]);
        all[1].add([u64::from(u32::MAX) + 1]);
        assert_eq!(Counters::sum(&all), [u64::from(u32::MAX) + 3]);
    }

    /// A reader racing the writer never sees bytes ahead of their packets (with the loads
    /// flipped back to first to last, the one run tried saw them).
    #[test]
    fn a_racing_reader_never_sees_a_later_counter_ahead() {
        let c = std::sync::Arc::new(ConnCounters::default());
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = {
            let (c, stop) = (c.clone(), stop.clone());
            std::thread::spawn(move || {
                for _ in 0..20_000_000u64 {
                    c.add([1, 100]);
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                }
            })
        };
        let ahead = (0..2_000_000)
            .filter(|_| {
                let [packets, bytes] = c.read();
                bytes > packets * 100
            })
            .count();
        stop.store(true, Ordering::Relaxed);
        writer.join().unwrap();
        assert_eq!(ahead, 0, "reads with bytes ahead of their packets");
    }
}
