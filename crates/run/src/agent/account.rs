//! What the live tests hold together: worker threads and memory (the spec's estimate),
//! booked when a test is admitted and released when it ends, whatever path it took.

use std::sync::Mutex;

use super::limits::{over_memory, over_threads};

/// Threads and bytes booked by the live tests.
#[derive(Debug, Default)]
pub(super) struct Account {
    booked: Mutex<(usize, u64)>,
}

/// One test's share of the account; released when dropped.
#[derive(Debug)]
pub(super) struct Booking<'a> {
    account: &'a Account,
    threads: usize,
    bytes: u64,
}

impl Account {
    /// Books `threads` and `bytes` if they fit beside the live tests' under the maxima,
    /// else says which flag refuses them.
    pub(super) fn book(
        &self,
        threads: usize,
        bytes: u64,
        max_threads: usize,
        max_bytes: u64,
    ) -> Result<Booking<'_>, String> {
        let mut booked = self.booked.lock().unwrap_or_else(|e| e.into_inner());
        let (live_threads, live_bytes) = *booked;
        if let Some(why) = over_threads(threads, live_threads, max_threads)
            .or_else(|| over_memory(bytes, live_bytes, max_bytes))
        {
            return Err(why);
        }
        *booked = (live_threads + threads, live_bytes + bytes);
        Ok(Booking {
            account: self,
            threads,
            bytes,
        })
    }

    /// Threads and bytes booked now.
    #[cfg(test)]
    pub(super) fn booked(&self) -> (usize, u64) {
        *self.booked.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Booking<'_> {
    fn drop(&mut self) {
        let mut booked = self
            .account
            .booked
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        booked.0 = booked.0.saturating_sub(self.threads);
        booked.1 = booked.1.saturating_sub(self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bookings_add_up_and_are_released() {
        let a = Account::default();
        let one = a.book(100, 1 << 20, 256, 4 << 20).unwrap();
        let two = a.book(100, 1 << 20, 256, 4 << 20).unwrap();
        let e = a.book(100, 0, 256, 4 << 20).unwrap_err();
        assert!(e.contains("--max-threads"), "{e}");
        let e = a.book(1, 3 << 20, 256, 4 << 20).unwrap_err();
        assert!(e.contains("--max-memory"), "{e}");
        drop(one);
        assert_eq!(a.booked(), (100, 1 << 20));
        drop(two);
        assert_eq!(a.booked(), (0, 0));
        assert!(a.book(usize::MAX, u64::MAX, 256, 1).is_err());
    }
}
