//! An AF_XDP socket with its own UMEM, bound to one queue of one interface: a fill ring's
//! worth of frames feed the receive path, the rest are the send path's free list. Zero-copy
//! where the driver offers it, copy mode otherwise; need_wakeup always, so that an idle
//! ring costs no syscalls.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::ring::Ring;

/// Sizes of a socket's UMEM and rings (powers of two; `frames` more than `ring`).
#[derive(Debug, Clone, Copy)]
pub struct XskConfig {
    pub frame_bytes: u32,
    pub frames: u32,
    pub ring: u32,
}

impl Default for XskConfig {
    fn default() -> Self {
        XskConfig {
            frame_bytes: 2048,
            frames: 8192,
            ring: 2048,
        }
    }
}

/// Anonymous memory the kernel reads and writes frames in.
struct Umem {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the region is owned by one socket, used by one thread at a time.
unsafe impl Send for Umem {}

impl Drop for Umem {
    fn drop(&mut self) {
        // SAFETY: the mapping is ours; the socket that used it is closed first.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// The kernel's drop counters of one socket (`XDP_STATISTICS`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct XskStats {
    /// Dropped for reasons other than a full ring.
    pub rx_dropped: u64,
    /// Dropped because the rx ring was full.
    pub rx_ring_full: u64,
    /// Times the fill ring was empty when a packet came.
    pub fill_ring_empty: u64,
}

pub struct Xsk {
    // Rings before the socket and the UMEM: unmapped first on drop.
    fill: Ring<u64>,
    comp: Ring<u64>,
    rx: Ring<libc::xdp_desc>,
    tx: Ring<libc::xdp_desc>,
    fd: OwnedFd,
    umem: Umem,
    frame_bytes: u32,
    /// Send frames not in flight, of `send_frames`.
    free: Vec<u64>,
    send_frames: usize,
    pub zero_copy: bool,
}

fn check(r: libc::c_int) -> io::Result<()> {
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn set<T>(fd: RawFd, opt: libc::c_int, v: &T) -> io::Result<()> {
    // SAFETY: v is live for its size.
    check(unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_XDP,
            opt,
            (v as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    })
}

fn umem(cfg: &XskConfig) -> io::Result<Umem> {
    let len = cfg.frames as usize * cfg.frame_bytes as usize;
    // SAFETY: a fresh anonymous mapping; checked below.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
            -1,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(Umem {
        ptr: ptr.cast(),
        len,
    })
}

fn offsets(fd: RawFd) -> io::Result<libc::xdp_mmap_offsets> {
    // SAFETY: plain old data; the kernel fills it.
    let mut off: libc::xdp_mmap_offsets = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of_val(&off) as libc::socklen_t;
    // SAFETY: off is live for len bytes.
    check(unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_XDP,
            libc::XDP_MMAP_OFFSETS,
            (&mut off as *mut libc::xdp_mmap_offsets).cast(),
            &mut len,
        )
    })?;
    Ok(off)
}

/// How long a queue another socket just left may stay busy: the kernel releases a closed
/// socket's hold on its queue in deferred work, so a socket opened right after (back-to-back
/// tests) can see EBUSY for a moment.
const QUEUE_RELEASE: std::time::Duration = std::time::Duration::from_secs(1);

/// Binds to the queue, waiting out a previous socket's deferred release.
fn bind(fd: RawFd, ifindex: u32, queue: u32, flags: u16) -> io::Result<()> {
    let until = std::time::Instant::now() + QUEUE_RELEASE;
    loop {
        match bind_once(fd, ifindex, queue, flags) {
            Err(e)
                if e.raw_os_error() == Some(libc::EBUSY) && std::time::Instant::now() < until =>
            {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            r => return r,
        }
    }
}

fn bind_once(fd: RawFd, ifindex: u32, queue: u32, flags: u16) -> io::Result<()> {
    // SAFETY: plain old data.
    let mut sa: libc::sockaddr_xdp = unsafe { std::mem::zeroed() };
    sa.sxdp_family = libc::AF_XDP as u16;
    sa.sxdp_flags = flags;
    sa.sxdp_ifindex = ifindex;
    sa.sxdp_queue_id = queue;
    // SAFETY: sa is live for its size.
    check(unsafe {
        libc::bind(
            fd,
            (&sa as *const libc::sockaddr_xdp).cast(),
            std::mem::size_of_val(&sa) as libc::socklen_t,
        )
    })
}

impl Xsk {
    /// A socket on `queue` of `ifindex`; `zero_copy` `None`: zero-copy where the driver
    /// has it, else copy.
    pub fn open(
        ifindex: u32,
        queue: u32,
        cfg: XskConfig,
        zero_copy: Option<bool>,
    ) -> io::Result<Xsk> {
        // SAFETY: a plain socket(2) call; the descriptor is owned at once.
        let raw = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        check(raw)?;
        // SAFETY: socket(2) has just returned this descriptor.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let umem = umem(&cfg)?;
        let reg = libc::xdp_umem_reg {
            addr: umem.ptr as u64,
            len: umem.len as u64,
            chunk_size: cfg.frame_bytes,
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        };
        let s = fd.as_raw_fd();
        set(s, libc::XDP_UMEM_REG, &reg)?;
        for opt in [
            libc::XDP_UMEM_FILL_RING,
            libc::XDP_UMEM_COMPLETION_RING,
            libc::XDP_RX_RING,
            libc::XDP_TX_RING,
        ] {
            set(s, opt, &cfg.ring)?;
        }
        let off = offsets(s)?;
        let fill = Ring::map(s, &off.fr, cfg.ring, libc::XDP_UMEM_PGOFF_FILL_RING as i64)?;
        let comp = Ring::map(
            s,
            &off.cr,
            cfg.ring,
            libc::XDP_UMEM_PGOFF_COMPLETION_RING as i64,
        )?;
        let rx = Ring::map(s, &off.rx, cfg.ring, libc::XDP_PGOFF_RX_RING)?;
        let tx = Ring::map(s, &off.tx, cfg.ring, libc::XDP_PGOFF_TX_RING)?;
        let wake = libc::XDP_USE_NEED_WAKEUP;
        let zero_copy = match zero_copy {
            Some(true) => bind(s, ifindex, queue, wake | libc::XDP_ZEROCOPY).map(|_| true)?,
            Some(false) => bind(s, ifindex, queue, wake | libc::XDP_COPY).map(|_| false)?,
            None => match bind(s, ifindex, queue, wake | libc::XDP_ZEROCOPY) {
                Ok(()) => true,
                Err(_) => bind(s, ifindex, queue, wake | libc::XDP_COPY).map(|_| false)?,
            },
        };
        // Exactly a fill ring's worth of receive frames: every frame taken from the rx ring
        // then has a fill slot to go back to.
        let rx_frames = cfg.ring;
        let mut xsk = Xsk {
            fill,
            comp,
            rx,
            tx,
            fd,
            umem,
            frame_bytes: cfg.frame_bytes,
            free: (rx_frames..cfg.frames)
                .map(|i| i as u64 * cfg.frame_bytes as u64)
                .collect(),
            send_frames: (cfg.frames - rx_frames) as usize,
            zero_copy,
        };
        xsk.refill(
            (0..rx_frames)
                .map(|i| i as u64 * cfg.frame_bytes as u64)
                .collect(),
        );
        Ok(xsk)
    }

    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Hands receive frames to the kernel (as many as the fill ring takes).
    fn refill(&mut self, addrs: Vec<u64>) {
        let n = self.fill.free(addrs.len() as u32);
        for (i, a) in addrs.iter().take(n as usize).enumerate() {
            self.fill.write(i as u32, *a);
        }
        self.fill.submit(n);
    }

    fn frame(&mut self, addr: u64, len: usize) -> &mut [u8] {
        let len = len.min(self.frame_bytes as usize);
        // SAFETY: addr is a frame of our UMEM that the kernel has handed back to us.
        unsafe { std::slice::from_raw_parts_mut(self.umem.ptr.add(addr as usize), len) }
    }

    /// Takes up to `max` received frames, passes each to `each`, and gives the frames
    /// back to the fill ring; returns how many were taken.
    pub fn recv(&mut self, max: u32, mut each: impl FnMut(&[u8])) -> u32 {
        // The fill ring holds every receive frame (see `open`): it has room for all taken.
        let n = self.fill.free(self.rx.ready(max));
        for i in 0..n {
            let d = self.rx.read(i);
            each(self.frame(d.addr, d.len as usize));
            self.fill.write(i, d.addr);
        }
        self.rx.release(n);
        self.fill.submit(n);
        if n > 0 && self.fill.needs_wakeup() {
            self.wake_rx();
        }
        n
    }

    /// Fills up to `max` send frames with `write` (which returns each frame's length) and
    /// queues them; returns how many were queued.
    pub fn send(&mut self, max: u32, mut write: impl FnMut(&mut [u8]) -> usize) -> u32 {
        self.reclaim();
        let n = self.tx.free(max.min(self.free.len() as u32));
        let frame_bytes = self.frame_bytes as usize;
        for i in 0..n {
            let addr = self.free.pop().expect("counted above");
            let len = write(self.frame(addr, frame_bytes));
            self.tx.write(
                i,
                libc::xdp_desc {
                    addr,
                    len: len as u32,
                    options: 0,
                },
            );
        }
        self.tx.submit(n);
        self.kick_tx();
        n
    }

    /// Answers received frames without the kernel's reply path: takes up to `max` of them
    /// (no more than there are send frames and send slots for, so that none waits), has
    /// `reply` write each one's answer into a send frame (its length, or `None`: no
    /// answer), queues the answers and gives the received frames back to the fill ring.
    /// Returns how many were taken and how many answered.
    pub fn answer(
        &mut self,
        max: u32,
        mut reply: impl FnMut(&[u8], &mut [u8]) -> Option<usize>,
    ) -> (u32, u32) {
        self.reclaim();
        let room = self.tx.free(max.min(self.free.len() as u32));
        let n = self.fill.free(self.rx.ready(room));
        let mut queued = 0;
        for i in 0..n {
            let d = self.rx.read(i);
            let addr = *self.free.last().expect("room counted above");
            let base = self.umem.ptr;
            // SAFETY: two distinct frames of our UMEM: one the kernel has handed back
            // received, one free for sending.
            let (req, out) = unsafe {
                (
                    std::slice::from_raw_parts(base.add(d.addr as usize), d.len as usize),
                    std::slice::from_raw_parts_mut(
                        base.add(addr as usize),
                        self.frame_bytes as usize,
                    ),
                )
            };
            if let Some(len) = reply(req, out) {
                self.free.pop();
                let desc = libc::xdp_desc {
                    addr,
                    len: len as u32,
                    options: 0,
                };
                self.tx.write(queued, desc);
                queued += 1;
            }
            self.fill.write(i, d.addr);
        }
        self.rx.release(n);
        self.fill.submit(n);
        if n > 0 && self.fill.needs_wakeup() {
            self.wake_rx();
        }
        self.tx.submit(queued);
        self.kick_tx();
        (n, queued)
    }

    /// Copy mode sends only inside the syscall, a batch per call, so while the tx ring
    /// holds frames every call kicks; zero-copy drivers ask for it with need_wakeup.
    fn kick_tx(&mut self) {
        if self.tx.pending() && (!self.zero_copy || self.tx.needs_wakeup()) {
            self.wake_tx();
        }
    }

    /// Send frames and tx slots free now: how many `send` would queue.
    pub fn room(&mut self) -> u32 {
        self.reclaim();
        self.tx.free(self.free.len() as u32)
    }

    /// Kicks the kernel until every queued frame has been sent, or `deadline`; true when
    /// none is left in flight.
    pub fn flush(&mut self, deadline: std::time::Instant) -> bool {
        loop {
            self.reclaim();
            if self.free.len() == self.send_frames {
                return true;
            }
            if std::time::Instant::now() >= deadline {
                return false;
            }
            self.wake_tx();
        }
    }

    /// Asks the kernel to busy-poll this socket's queue when it is read (SO_BUSY_POLL for
    /// `usecs`, SO_PREFER_BUSY_POLL, at most `budget` packets per poll): the reader then
    /// runs the driver's receive processing itself instead of waiting for its interrupt.
    pub fn busy_poll(&self, usecs: u32, budget: u32) -> io::Result<()> {
        for (opt, v) in [
            (libc::SO_PREFER_BUSY_POLL, 1),
            (libc::SO_BUSY_POLL, usecs as libc::c_int),
            (libc::SO_BUSY_POLL_BUDGET, budget as libc::c_int),
        ] {
            // SAFETY: v is a live int for its size.
            check(unsafe {
                libc::setsockopt(
                    self.fd(),
                    libc::SOL_SOCKET,
                    opt,
                    (&v as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                )
            })?;
        }
        Ok(())
    }

    /// Enters the kernel once without waiting: with busy polling on, that runs the queue's
    /// receive processing.
    pub fn poke(&self) {
        self.wake_rx();
    }

    /// Frames the kernel has sent go back to the free list.
    fn reclaim(&mut self) {
        let n = self.comp.ready(u32::MAX);
        for i in 0..n {
            self.free.push(self.comp.read(i));
        }
        self.comp.release(n);
    }

    /// Kicks the kernel to send what the tx ring holds.
    fn wake_tx(&self) {
        // SAFETY: a zero-length send on our own socket only wakes the kernel.
        unsafe { libc::send(self.fd(), std::ptr::null(), 0, libc::MSG_DONTWAIT) };
    }

    /// Kicks the kernel to use the fill ring again.
    fn wake_rx(&self) {
        // SAFETY: a zero-length recv on our own socket only wakes the kernel.
        unsafe { libc::recv(self.fd(), std::ptr::null_mut(), 0, libc::MSG_DONTWAIT) };
    }

    /// The kernel's drop counters of this socket.
    pub fn stats(&self) -> io::Result<XskStats> {
        // SAFETY: plain old data; the kernel fills it.
        let mut st: libc::xdp_statistics = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of_val(&st) as libc::socklen_t;
        // SAFETY: st is live for len bytes.
        check(unsafe {
            libc::getsockopt(
                self.fd(),
                libc::SOL_XDP,
                libc::XDP_STATISTICS,
                (&mut st as *mut libc::xdp_statistics).cast(),
                &mut len,
            )
        })?;
        Ok(XskStats {
            rx_dropped: st.rx_dropped,
            rx_ring_full: st.rx_ring_full,
            fill_ring_empty: st.rx_fill_ring_empty_descs,
        })
    }
}
