//! A ring of provided buffers (`IORING_REGISTER_PBUF_RING`): the kernel picks a free buffer
//! for each multishot receive completion, and the worker hands it back once it has read
//! it. The ring's entries live in a page-aligned mapping the kernel reads; the buffers are
//! one allocation, prefaulted.

use std::io;
use std::sync::atomic::{AtomicU16, Ordering};

use io_uring::types::BufRingEntry;
use io_uring::IoUring;

/// The entries the kernel reads, in their own mapping (it must be page-aligned).
struct Mapping {
    ptr: *mut BufRingEntry,
    bytes: usize,
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping the region mapped in `BufRing::register`, once.
        unsafe { libc::munmap(self.ptr.cast(), self.bytes) };
    }
}

/// How many buffers of `size` bytes a ring gets: `want` rounded up to a power of two, but
/// never more than `budget` bytes in all (nor fewer than 16 buffers, 1 MiB at most).
pub(crate) fn count_within(want: usize, size: usize, budget: usize) -> u16 {
    let fit = (budget / size.max(1)).max(16);
    let fit = 1usize << (usize::BITS - 1 - fit.leading_zeros());
    want.next_power_of_two().clamp(16, fit.min(32768)) as u16
}

pub(crate) struct BufRing {
    entries: Mapping,
    data: Vec<u8>,
    size: usize,
    mask: u16,
    /// Our copy of the tail: the next entry to fill.
    tail: u16,
}

// SAFETY: the mapping is owned by one worker and only touched by it and the kernel.
unsafe impl Send for BufRing {}

impl BufRing {
    /// Registers `count` buffers (a power of two) of `size` bytes as group `group` of
    /// `ring`, all of them free.
    pub fn register(ring: &IoUring, group: u16, count: u16, size: usize) -> io::Result<BufRing> {
        if !count.is_power_of_two() {
            return Err(io::Error::other("a buffer ring's size is a power of two"));
        }
        let bytes = usize::from(count) * std::mem::size_of::<BufRingEntry>();
        // SAFETY: an anonymous private mapping; checked below.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let entries = Mapping {
            ptr: ptr.cast(),
            bytes,
        };
        let mut bufs = BufRing {
            entries,
            data: vec![0u8; usize::from(count) * size],
            size,
            mask: count - 1,
            tail: 0,
        };
        // SAFETY: the mapping lives as long as `bufs`, which the worker drops after the
        // ring (see `Uring`), and holds `count` entries.
        unsafe {
            ring.submitter().register_buf_ring_with_flags(
                bufs.entries.ptr as u64,
                count,
                group,
                0,
            )?
        };
        for bid in 0..count {
            bufs.recycle(bid);
        }
        bufs.publish();
        Ok(bufs)
    }

    /// The first `len` bytes the kernel wrote into buffer `bid`.
    pub fn get(&self, bid: u16, len: usize) -> &[u8] {
        let at = usize::from(bid) * self.size;
        &self.data[at..at + len.min(self.size)]
    }

    /// Hands buffer `bid` back to the kernel (visible at the next [`BufRing::publish`]).
    pub fn recycle(&mut self, bid: u16) {
        let at = usize::from(bid) * self.size;
        let addr = self.data[at..].as_mut_ptr() as u64;
        // SAFETY: the index is masked into the mapping's `count` entries; the kernel reads
        // an entry only once the tail has passed it.
        let e = unsafe { &mut *self.entries.ptr.add(usize::from(self.tail & self.mask)) };
        e.set_addr(addr);
        e.set_len(self.size as u32);
        e.set_bid(bid);
        self.tail = self.tail.wrapping_add(1);
    }

    /// Makes the buffers handed back visible to the kernel.
    pub fn publish(&self) {
        // SAFETY: the ring's tail is the u16 at byte 14 of its first entry (the kernel's
        // `io_uring_buf_ring`), which the entries' setters never touch.
        let tail = unsafe { &*(self.entries.ptr.cast::<u8>().add(14) as *const AtomicU16) };
        tail.store(self.tail, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::count_within;

    #[test]
    fn rings_stay_within_their_bytes() {
        // 4,000 connections of 64 KiB buffers: 64 of them, 4 MiB, not 8,192.
        assert_eq!(count_within(8000, 64 << 10, 4 << 20), 64);
        assert_eq!(count_within(3, 4096, 4 << 20), 16);
        assert_eq!(count_within(100, 4096, 4 << 20), 128);
        for (want, size) in [(1, 1), (50_000, 4096), (7, 65_792), (256, 65_792)] {
            let n = count_within(want, size, 4 << 20);
            assert!(n.is_power_of_two(), "{n}");
            assert!(
                usize::from(n) * size <= (4 << 20).max(16 * size),
                "{want} {size}: {n}"
            );
        }
    }
}
