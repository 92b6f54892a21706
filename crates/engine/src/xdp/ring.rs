//! One of an AF_XDP socket's four rings, mapped from the kernel: a producer and a consumer
//! index and an array of descriptors. Each side caches the other's index and reads it
//! again (acquire) only when its cached view runs out; its own index is published with
//! release, after the descriptors it covers are written or read.

use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU32, Ordering};

/// A ring of `T` (`u64` frame addresses for fill and completion, `xdp_desc` for rx, tx).
pub struct Ring<T> {
    map: *mut libc::c_void,
    map_len: usize,
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    flags: *const AtomicU32,
    desc: *mut T,
    size: u32,
    /// Our own index, and our last view of the other side's.
    own: u32,
    other: u32,
}

// SAFETY: the mapping is owned by the ring and used by one thread at a time.
unsafe impl<T: Send> Send for Ring<T> {}

impl<T: Copy> Ring<T> {
    /// Maps the ring of `size` entries at page offset `pgoff` of socket `fd`.
    pub fn map(
        fd: RawFd,
        off: &libc::xdp_ring_offset,
        size: u32,
        pgoff: i64,
    ) -> io::Result<Ring<T>> {
        let map_len = off.desc as usize + size as usize * std::mem::size_of::<T>();
        // SAFETY: a fresh shared mapping of the socket's ring; checked below.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd,
                pgoff,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let at = |o: u64| map.cast::<u8>().wrapping_add(o as usize);
        Ok(Ring {
            map,
            map_len,
            producer: at(off.producer).cast(),
            consumer: at(off.consumer).cast(),
            flags: at(off.flags).cast(),
            desc: at(off.desc).cast(),
            size,
            own: 0,
            other: 0,
        })
    }

    fn slot(&self, index: u32) -> *mut T {
        self.desc.wrapping_add((index & (self.size - 1)) as usize)
    }

    /// The kernel asks to be woken (need_wakeup) to process this ring.
    pub fn needs_wakeup(&self) -> bool {
        // SAFETY: flags points into the live mapping.
        unsafe { (*self.flags).load(Ordering::Relaxed) & libc::XDP_RING_NEED_WAKEUP != 0 }
    }

    // Producer side (fill, tx).

    /// Free slots, up to `want`.
    pub fn free(&mut self, want: u32) -> u32 {
        let free = self.size - self.own.wrapping_sub(self.other);
        if free >= want {
            return want;
        }
        // SAFETY: consumer points into the live mapping.
        self.other = unsafe { (*self.consumer).load(Ordering::Acquire) };
        want.min(self.size - self.own.wrapping_sub(self.other))
    }

    /// Whether the kernel has yet to take some of what was submitted.
    pub fn pending(&mut self) -> bool {
        self.free(self.size) < self.size
    }

    /// Writes entry `i` past our index (within what `free` granted).
    pub fn write(&mut self, i: u32, v: T) {
        // SAFETY: the slot is ours until `submit` publishes it.
        unsafe { self.slot(self.own.wrapping_add(i)).write(v) }
    }

    /// Publishes `n` written entries to the kernel.
    pub fn submit(&mut self, n: u32) {
        self.own = self.own.wrapping_add(n);
        // SAFETY: producer points into the live mapping.
        unsafe { (*self.producer).store(self.own, Ordering::Release) }
    }

    // Consumer side (rx, completion).

    /// Entries ready, up to `want`.
    pub fn ready(&mut self, want: u32) -> u32 {
        let ready = self.other.wrapping_sub(self.own);
        if ready >= want {
            return want;
        }
        // SAFETY: producer points into the live mapping.
        self.other = unsafe { (*self.producer).load(Ordering::Acquire) };
        want.min(self.other.wrapping_sub(self.own))
    }

    /// Entry `i` past our index (within what `ready` granted).
    pub fn read(&self, i: u32) -> T {
        // SAFETY: the kernel published this slot and does not touch it until `release`.
        unsafe { self.slot(self.own.wrapping_add(i)).read() }
    }

    /// Gives `n` read entries back to the kernel.
    pub fn release(&mut self, n: u32) {
        self.own = self.own.wrapping_add(n);
        // SAFETY: consumer points into the live mapping.
        unsafe { (*self.consumer).store(self.own, Ordering::Release) }
    }
}

impl<T> Drop for Ring<T> {
    fn drop(&mut self) {
        // SAFETY: the mapping is ours and nothing refers to it after this.
        unsafe { libc::munmap(self.map, self.map_len) };
    }
}
