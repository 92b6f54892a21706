//! Per-connection counters: one writer (the worker that owns the connection), any number
//! of readers (the sampler). A cache line each, so two workers never share one.

use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Default)]
#[repr(align(64))]
pub struct ConnCounters {
    bytes: AtomicU64,
    calls: AtomicU64,
}

impl ConnCounters {
    /// Called only by the owning worker: a plain load and store, no locked read-modify-write.
    #[inline]
    pub fn add(&self, bytes: u64) {
        self.bytes.store(
            self.bytes.load(Ordering::Relaxed) + bytes,
            Ordering::Relaxed,
        );
        self.calls
            .store(self.calls.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }

    /// Monotonic totals (bytes, calls that moved data) since the connection started.
    pub fn read(&self) -> (u64, u64) {
        (
            self.bytes.load(Ordering::Relaxed),
            self.calls.load(Ordering::Relaxed),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_is_one_cache_line() {
        let c = ConnCounters::default();
        c.add(10);
        c.add(5);
        assert_eq!(c.read(), (15, 2));
        assert_eq!(std::mem::align_of::<ConnCounters>(), 64);
    }
}
