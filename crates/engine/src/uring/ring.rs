//! A worker's ring: its setup, its registered sockets and provided buffers, and the two
//! ways a worker waits on it (block in `io_uring_enter` until a completion or a deadline;
//! or poll it, entering the kernel only when there is work to submit or deferred work to
//! run).

use std::io;
use std::os::fd::RawFd;
use std::time::Instant;

use io_uring::{cqueue, squeue, types, IoUring};

use super::bufs::BufRing;

/// The buffer group every worker's receives select from (one ring of buffers each).
pub(crate) const GROUP: u16 = 0;

/// The flags every ring is built with: one thread submits and reaps, and completions are
/// posted when it enters the kernel to reap them (no interrupting task work); the
/// `TASKRUN` flag in the submission ring says when some are waiting, so that a polling
/// worker enters only then.
pub(crate) fn builder() -> io_uring::Builder {
    let mut b = IoUring::builder();
    b.setup_single_issuer()
        .setup_defer_taskrun()
        .setup_taskrun_flag()
        .setup_submit_all();
    b
}

/// How long a submission-polling thread spins without work before it sleeps (and the
/// next submission wakes it with a system call).
const SQPOLL_IDLE_MS: u32 = 1_000;

/// `--sqpoll`: a kernel thread takes the submissions from the ring and runs them, posting
/// their completions itself (`DEFER_TASKRUN` cannot be had with it: no thread of ours
/// runs the deferred work).
fn sqpoll_builder() -> io_uring::Builder {
    let mut b = IoUring::builder();
    b.setup_single_issuer()
        .setup_sqpoll(SQPOLL_IDLE_MS)
        .setup_submit_all();
    b
}

/// A worker's ring, its sockets (fixed file `i` is the worker's connection `i`) and its
/// receive buffers. The ring is dropped first: it holds the buffers until it is gone.
pub(crate) struct Uring {
    ring: IoUring,
    pub bufs: BufRing,
    /// Completions taken from the ring, for the worker to go through.
    pub cqes: Vec<cqueue::Entry>,
}

impl Uring {
    /// A ring for `fds`, with `buffers` receive buffers of `buffer_bytes` each.
    pub fn new(fds: &[RawFd], buffers: u16, buffer_bytes: usize) -> io::Result<Uring> {
        Uring::with_depth(fds, 2, buffers, buffer_bytes)
    }

    /// As [`Uring::new`], with a submission-polling kernel thread when `sqpoll`.
    pub fn polled(
        fds: &[RawFd],
        buffers: u16,
        buffer_bytes: usize,
        sqpoll: bool,
    ) -> io::Result<Uring> {
        if !sqpoll {
            return Uring::new(fds, buffers, buffer_bytes);
        }
        Uring::build(sqpoll_builder(), fds, 2, buffers, buffer_bytes)
    }

    /// As [`Uring::new`], for `per_fd` operations in flight per socket (the completion
    /// ring holds two passes of them, so that it does not overflow between reaps).
    pub fn with_depth(
        fds: &[RawFd],
        per_fd: u32,
        buffers: u16,
        buffer_bytes: usize,
    ) -> io::Result<Uring> {
        Uring::build(builder(), fds, per_fd, buffers, buffer_bytes)
    }

    fn build(
        mut builder: io_uring::Builder,
        fds: &[RawFd],
        per_fd: u32,
        buffers: u16,
        buffer_bytes: usize,
    ) -> io::Result<Uring> {
        let n = fds.len() as u32;
        let sq = (n * per_fd).clamp(64, 4096).next_power_of_two();
        let cq = (sq * 2).max(u32::from(buffers) * 2);
        let ring = builder.setup_cqsize(cq).build(sq)?;
        ring.submitter().register_files(fds)?;
        let bufs = BufRing::register(&ring, GROUP, buffers, buffer_bytes)?;
        Ok(Uring {
            ring,
            bufs,
            cqes: Vec::with_capacity(cq as usize),
        })
    }

    /// Registers `buf` as fixed buffer 0, for sends that name it (`buf_index`): the
    /// kernel pins its pages once instead of at every send.
    ///
    /// # Safety
    /// `buf` must stay allocated until the ring is dropped.
    pub unsafe fn register_buffer(&self, buf: &[u8]) -> io::Result<()> {
        let iov = libc::iovec {
            iov_base: buf.as_ptr() as *mut libc::c_void,
            iov_len: buf.len(),
        };
        // SAFETY: the caller keeps `buf` alive as long as the ring.
        unsafe { self.ring.submitter().register_buffers(&[iov]) }
    }

    /// Queues `e`, submitting what is queued first when the submission ring is full.
    pub fn push(&mut self, e: &squeue::Entry) -> io::Result<()> {
        // SAFETY: every entry's buffers live in the worker (or its ring of buffers) until
        // its completion is reaped; the worker drops the ring before them.
        unsafe {
            if self.ring.submission().push(e).is_ok() {
                return Ok(());
            }
            crate::syscalls::one();
            self.ring.submit()?;
            self.ring
                .submission()
                .push(e)
                .map_err(|_| io::Error::other("the submission ring stayed full"))
        }
    }

    /// Submits what is queued and sleeps until `want` completions arrived or `deadline`
    /// passes (`None`: no deadline); then takes the completions. A worker that queued
    /// `n` sends wants `n + 1`: the sends mostly complete as they are submitted, and
    /// waking for them alone would cost a second `io_uring_enter` per message.
    pub fn wait(&mut self, now: Instant, deadline: Option<Instant>, want: usize) -> io::Result<()> {
        crate::syscalls::one();
        let r = match deadline {
            None => self.ring.submit_and_wait(want),
            Some(d) => {
                let left = d.saturating_duration_since(now);
                let ts = types::Timespec::new()
                    .sec(left.as_secs())
                    .nsec(left.subsec_nanos());
                let args = types::SubmitArgs::new().timespec(&ts);
                self.ring.submitter().submit_with_args(want, &args)
            }
        };
        match r {
            Ok(_) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME | libc::EINTR)) => {}
            Err(e) => return Err(e),
        }
        self.take();
        Ok(())
    }

    /// One pass of polling: enters the kernel only to submit or to run completions it
    /// deferred, then takes the completions.
    pub fn poll(&mut self) -> io::Result<()> {
        let sqpoll = self.ring.params().is_setup_sqpoll();
        let sq = self.ring.submission();
        let pending = if sqpoll {
            // The kernel's thread takes the submissions: enter only to wake it.
            !sq.is_empty() && sq.need_wakeup()
        } else {
            !sq.is_empty() || sq.taskrun()
        };
        drop(sq);
        if pending {
            crate::syscalls::one();
            let args = types::SubmitArgs::new();
            match self.ring.submitter().submit_with_args(0, &args) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) => return Err(e),
            }
        }
        self.take();
        Ok(())
    }

    fn take(&mut self) {
        self.cqes.clear();
        self.cqes.extend(self.ring.completion());
    }
}
