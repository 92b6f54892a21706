//! Stream workers on io_uring, with the kernel engine's surface and accounting
//! ([`crate::stream`]: bytes and calls per connection; `finish` half-closes the senders,
//! receivers read to the peer's FIN; `abort` stops everything now). A worker's
//! connections share one ring, and one `io_uring_enter` a pass submits every send and
//! reaps every completion of all of them.
//!
//! A sender keeps [`SENDS`] sends of the whole buffer in flight per connection, all from
//! one buffer filled once: the content is constant, so the order they complete in does
//! not matter, and each completion is one call. With `zerocopy` the sends are
//! `IORING_OP_SEND_ZC` from that buffer registered with the ring (its pages pinned once):
//! the socket references the pages instead of copying them, and a notification says when
//! it let go of them (the peer acknowledged them, or the kernel copied after all, as it
//! does for a local receiver). A receiver's receive is multishot into the ring's provided
//! buffers, each as large as one `recv()` of the kernel engine: one completion a call.

use std::io;
use std::net::Shutdown;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use io_uring::{cqueue, opcode, squeue, types};

use super::ring::{Uring, GROUP};
use super::{op_of, user_data, Op};
use crate::counters::Counters;
use crate::poller::EventFd;
use crate::pool::{Placement, Pool, Stop};
use crate::stream::{ConnEnd, Conns, StreamConn};

/// Sends in flight per connection: with two, the socket is refilled while the worker
/// reaps the other's completion; more only queue in io_uring behind a full socket.
pub const SENDS: u32 = 2;
/// Zero-copy sends per connection whose notification has not come. The buffer is never
/// written, so this only bounds what the socket holds pinned and the completions owed;
/// it is above what a socket's send buffer holds of 128 KiB sends (4 MiB by default).
pub const ZC_SENDS: u32 = 40;
/// Receive buffers of one worker's ring, in bytes at most.
pub const RECEIVE_BYTES: usize = 64 << 20;
/// Receive buffers a receiving connection brings to its worker's ring, each of the
/// test's buffer size: what the agent's memory budget counts for it.
pub const RECEIVE_BUFFERS_PER_CONN: usize = 4;
/// Largest receive buffer: more than a socket usually has ready in one completion.
const MAX_RECEIVE_BUFFER: usize = 1 << 20;
/// How long a stopping worker waits for its sends' completions and notifications,
/// which a shut-down socket or an acknowledging peer gives at once.
const DRAIN: Duration = Duration::from_millis(500);
/// User data of the poll on the wake-up eventfd (no connection's).
const WAKE: u64 = u64::MAX;
/// `IORING_SEND_ZC_REPORT_USAGE`: the notification says whether the kernel copied.
const SEND_ZC_REPORT_USAGE: u16 = 8;
/// `IORING_NOTIF_USAGE_ZC_COPIED`, in a notification's result.
const NOTIF_USAGE_ZC_COPIED: i32 = i32::MIN;

struct Shared {
    slots: Conns,
    /// Signalled by `finish` and `abort`; never read, so every worker's poll sees it.
    wake: EventFd,
    finishing: AtomicBool,
    aborting: AtomicBool,
    buffer_bytes: usize,
    zerocopy: bool,
    /// Per worker: zero-copy notifications, and how many of them said "copied".
    zc: Vec<Counters<2>>,
}

impl Shared {
    /// `bytes` more moved on connection `index`, in one call.
    fn count(&self, index: usize, bytes: i32) {
        self.slots.slot(index).counters.add([bytes as u64, 1]);
    }
}

/// Stop contract: the flag is read at every pass; the eventfd's poll and the sockets
/// shut down under the worker's sends and receives wake it in `io_uring_enter`.
impl Stop for Shared {
    fn abort(&self) {
        self.aborting.store(true, Ordering::SeqCst);
        for s in self.slots.iter() {
            let _ = s.stream.shutdown(Shutdown::Both);
        }
        self.wake.signal();
    }
}

/// Stream workers on io_uring; the same calls as [`crate::StreamWorkers`].
pub struct UringStreamWorkers {
    shared: Arc<Shared>,
    placement: Placement,
    pool: Pool<Vec<(usize, ConnEnd)>>,
}

impl UringStreamWorkers {
    /// Starts the workers at once; connections are dealt round robin. `zerocopy`: sends
    /// are `send_zc` (receivers do nothing different: the kernel copies into their
    /// buffers as always).
    pub fn spawn(
        conns: Vec<StreamConn>,
        placement: Placement,
        buffer_bytes: usize,
        zerocopy: bool,
    ) -> io::Result<UringStreamWorkers> {
        super::available().map_err(io::Error::other)?;
        let n = conns.len();
        let placement = Placement::new(placement.threads, placement.cpus, n);
        for c in &conns {
            // io_uring waits for the socket itself (it arms a poll when a call would block).
            c.stream.set_nonblocking(false)?;
        }
        let shared = Arc::new(Shared {
            slots: Conns::new(conns),
            wake: EventFd::new()?,
            finishing: AtomicBool::new(false),
            aborting: AtomicBool::new(false),
            buffer_bytes: buffer_bytes.max(1),
            zerocopy,
            zc: (0..placement.threads)
                .map(|_| Counters::default())
                .collect(),
        });
        let deal = placement.clone();
        let pool = Pool::spawn("sonde-stream", &placement, &shared, move |s, k| {
            run_worker(s, k, &deal.owned(k, n))
        })?;
        Ok(UringStreamWorkers {
            shared,
            placement,
            pool,
        })
    }

    /// The connections and their counters.
    pub fn conns(&self) -> &Conns {
        &self.shared.slots
    }

    /// With `zerocopy`: the notifications so far, and how many said the kernel copied
    /// the bytes after all (a local receiver, a device without scatter-gather).
    pub fn zerocopy_usage(&self) -> Option<(u64, u64)> {
        let [notes, copied] = Counters::sum(&self.shared.zc);
        self.shared.zerocopy.then_some((notes, copied))
    }

    /// Senders half-close once their sends in flight complete, and stop; receivers read
    /// on until the peer's FIN.
    pub fn finish(&self) {
        self.shared.finishing.store(true, Ordering::SeqCst);
        self.shared.wake.signal();
    }

    /// Every worker stops now.
    pub fn abort(&self) {
        self.pool.abort();
    }

    /// True once every worker has ended.
    pub fn all_done(&self) -> bool {
        self.pool.all_done()
    }

    /// Waits for the workers; how each connection ended, by index. Counters and sockets
    /// stay readable afterwards.
    pub fn join(&mut self) -> Vec<ConnEnd> {
        crate::stream::conn_ends(self.pool.join(), &self.placement, self.shared.slots.len())
    }
}

/// One connection of a worker; fixed file `pos` of its ring is its socket.
struct Conn {
    /// Its test-wide index.
    index: usize,
    send: bool,
    /// Sends whose result has not come.
    sends: u32,
    /// Sends whose buffer the kernel may still read (result or notification to come).
    held: u32,
    /// A multishot receive is armed.
    armed: bool,
    end: Option<ConnEnd>,
}

struct Worker<'a> {
    shared: &'a Shared,
    zc: &'a Counters<2>,
    /// Dropped before `buf`: the ring may reference it until then.
    ring: Uring,
    /// What every send sends, filled once.
    buf: Vec<u8>,
    /// `buf` is the ring's fixed buffer 0.
    registered: bool,
    conns: Vec<Conn>,
    /// The poll on the wake-up eventfd is armed (once: the eventfd stays readable).
    wake_polled: bool,
}

fn run_worker(shared: &Shared, k: usize, owned: &[usize]) -> Vec<(usize, ConnEnd)> {
    let end = |e: ConnEnd| owned.iter().map(|&i| (i, e.clone())).collect();
    let mut w = match Worker::new(shared, k, owned) {
        Ok(w) => w,
        Err(e) => return end(ConnEnd::Failed(format!("io_uring setup: {e}"))),
    };
    if let Err(e) = w.run() {
        let failed = ConnEnd::Failed(format!("io_uring: {e}"));
        for c in w.conns.iter_mut().filter(|c| c.end.is_none()) {
            c.end = Some(failed.clone());
        }
    }
    w.drain();
    let ends = w.conns.iter_mut().map(|c| {
        let e = c.end.take().unwrap_or(ConnEnd::Aborted);
        (c.index, e)
    });
    ends.collect()
}

/// Bytes of receive buffers a receiving connection brings to its worker's ring, at most:
/// [`RECEIVE_BUFFERS_PER_CONN`] buffers of at least 4 KiB (a 1-byte `--buffer` still
/// takes a page each), the ring's count rounded up to a power of two (up to twice as
/// many). What the agent's memory budget counts; `receive_buffers` never takes more.
pub fn receive_bytes_per_connection(buffer_bytes: usize) -> usize {
    2 * RECEIVE_BUFFERS_PER_CONN * buffer_bytes.clamp(4096, MAX_RECEIVE_BUFFER)
}

/// Receive buffers for `receivers` connections: each as large as one kernel-engine
/// `recv()` (`buffer_bytes`, within 4 KiB..=1 MiB), four per connection, within
/// [`RECEIVE_BYTES`]; a token ring when the worker only sends.
fn receive_buffers(receivers: usize, buffer_bytes: usize) -> (u16, usize) {
    if receivers == 0 {
        return (1, 64);
    }
    let size = buffer_bytes.clamp(4096, MAX_RECEIVE_BUFFER);
    let want = (receivers * RECEIVE_BUFFERS_PER_CONN).next_power_of_two();
    let fit = RECEIVE_BYTES / size;
    let fit = 1 << (usize::BITS - 1 - fit.leading_zeros());
    (want.min(fit).clamp(4, 32768) as u16, size)
}

impl<'a> Worker<'a> {
    fn new(shared: &'a Shared, k: usize, owned: &[usize]) -> io::Result<Worker<'a>> {
        let fds: Vec<RawFd> = owned
            .iter()
            .map(|&i| shared.slots.slot(i).stream.as_raw_fd())
            .collect();
        let receivers = owned
            .iter()
            .filter(|&&i| !shared.slots.slot(i).send)
            .count();
        let (count, size) = receive_buffers(receivers, shared.buffer_bytes);
        let per_fd = 1 + if shared.zerocopy { ZC_SENDS } else { SENDS };
        let ring = Uring::with_depth(&fds, per_fd, count, size)?;
        // The kernel engine's pattern: not all zeros, and every page touched now.
        let buf: Vec<u8> = (0..shared.buffer_bytes).map(|i| (i % 251) as u8).collect();
        // SAFETY: `buf` is a field of the worker declared after `ring`, so it is dropped
        // after the ring; its heap allocation does not move with the worker.
        let registered = shared.zerocopy && unsafe { ring.register_buffer(&buf) }.is_ok();
        let conns = owned
            .iter()
            .map(|&i| Conn {
                index: i,
                send: shared.slots.slot(i).send,
                sends: 0,
                held: 0,
                armed: false,
                end: None,
            })
            .collect();
        Ok(Worker {
            shared,
            zc: &shared.zc[k],
            ring,
            buf,
            registered,
            conns,
            wake_polled: false,
        })
    }

    /// Passes until every connection ended or an abort; an error is the ring's.
    fn run(&mut self) -> io::Result<()> {
        loop {
            if self.shared.aborting.load(Ordering::Acquire) {
                return Ok(());
            }
            self.queue()?;
            if self.conns.iter().all(|c| c.end.is_some()) {
                return Ok(());
            }
            self.ring.wait(Instant::now(), None, 1)?;
            self.complete();
        }
    }

    /// Arms the wake-up poll and ended receives, tops each sender up to its sends in
    /// flight, and half-closes the senders that finished.
    fn queue(&mut self) -> io::Result<()> {
        if !self.wake_polled {
            let fd = types::Fd(self.shared.wake.raw());
            let poll = opcode::PollAdd::new(fd, libc::POLLIN as u32).build();
            self.ring.push(&poll.user_data(WAKE))?;
            self.wake_polled = true;
        }
        let finishing = self.shared.finishing.load(Ordering::Acquire);
        let cap = if self.shared.zerocopy {
            ZC_SENDS
        } else {
            SENDS
        };
        for pos in 0..self.conns.len() {
            let c = &mut self.conns[pos];
            if c.end.is_some() {
                continue;
            }
            if !c.send {
                if !c.armed {
                    let recv = opcode::RecvMulti::new(types::Fixed(pos as u32), GROUP).build();
                    self.ring.push(&recv.user_data(user_data(Op::Recv, pos)))?;
                    c.armed = true;
                }
                continue;
            }
            if finishing {
                if c.sends == 0 {
                    let _ = self
                        .shared
                        .slots
                        .slot(c.index)
                        .stream
                        .shutdown(Shutdown::Write);
                    c.end = Some(ConnEnd::Clean);
                }
                continue;
            }
            while c.sends < SENDS && c.held < cap {
                c.sends += 1;
                c.held += 1;
                let send = send_entry(&self.buf, pos, self.shared.zerocopy, self.registered);
                self.ring.push(&send.user_data(user_data(Op::Send, pos)))?;
            }
        }
        Ok(())
    }

    fn complete(&mut self) {
        let mut cqes = std::mem::take(&mut self.ring.cqes);
        for cqe in &cqes {
            match op_of(cqe.user_data()) {
                (Some(Op::Recv), pos) => self.received(pos, cqe),
                (Some(Op::Send), pos) => self.sent(pos, cqe),
                // The wake-up only ends the wait: the flags are read next pass.
                (Some(Op::Wake) | None, _) => {}
            }
        }
        self.ring.bufs.publish();
        cqes.clear();
        self.ring.cqes = cqes;
    }

    fn received(&mut self, pos: usize, cqe: &cqueue::Entry) {
        let (res, flags) = (cqe.result(), cqe.flags());
        let c = &mut self.conns[pos];
        if !cqueue::more(flags) {
            c.armed = false;
        }
        if res > 0 {
            self.shared.count(c.index, res);
            if let Some(bid) = cqueue::buffer_select(flags) {
                self.ring.bufs.recycle(bid);
            }
            return;
        }
        // No buffer free: re-armed next pass.
        if res == -libc::ENOBUFS || c.end.is_some() {
            return;
        }
        c.end = Some(if self.shared.aborting.load(Ordering::Acquire) {
            ConnEnd::Aborted
        } else if res == 0 {
            ConnEnd::Clean
        } else {
            ConnEnd::Failed(format!("recv: {}", io::Error::from_raw_os_error(-res)))
        });
    }

    fn sent(&mut self, pos: usize, cqe: &cqueue::Entry) {
        let (res, flags) = (cqe.result(), cqe.flags());
        let c = &mut self.conns[pos];
        if cqueue::notif(flags) {
            c.held -= 1;
            let copied = res & NOTIF_USAGE_ZC_COPIED != 0;
            self.zc.add([1, u64::from(copied)]);
            return;
        }
        c.sends -= 1;
        if !cqueue::more(flags) {
            c.held -= 1;
        }
        if res > 0 {
            self.shared.count(c.index, res);
        }
        // MSG_WAITALL: a short send is one the peer or a shutdown cut.
        let whole = res >= 0 && res as usize == self.buf.len();
        if whole || c.end.is_some() || self.shared.aborting.load(Ordering::Acquire) {
            return;
        }
        c.end = Some(ConnEnd::Failed(if res < 0 {
            format!("send: {}", io::Error::from_raw_os_error(-res))
        } else {
            format!("send: {res} of {} bytes sent", self.buf.len())
        }));
    }

    /// Waits, a bounded time, for the results and notifications of sends in flight, so
    /// that their bytes are counted and the kernel is done with the buffer.
    fn drain(&mut self) {
        let until = Instant::now() + DRAIN;
        loop {
            let now = Instant::now();
            if now >= until || self.conns.iter().all(|c| c.held == 0) {
                return;
            }
            if self.ring.wait(now, Some(until), 1).is_err() {
                return;
            }
            self.complete();
        }
    }
}

/// A send of the whole of `buf` on fixed file `pos`: a copy, or zero-copy (from the
/// registered buffer when it is one), with each notification saying whether it copied.
fn send_entry(buf: &[u8], pos: usize, zerocopy: bool, registered: bool) -> squeue::Entry {
    let fd = types::Fixed(pos as u32);
    let (ptr, len) = (buf.as_ptr(), buf.len() as u32);
    let flags = libc::MSG_NOSIGNAL | libc::MSG_WAITALL;
    if !zerocopy {
        return opcode::Send::new(fd, ptr, len).flags(flags).build();
    }
    opcode::SendZc::new(fd, ptr, len)
        .flags(flags)
        .zc_flags(SEND_ZC_REPORT_USAGE)
        .buf_index(registered.then_some(0))
        .build()
}

#[cfg(test)]
mod budget_tests {
    use super::{receive_buffers, receive_bytes_per_connection};

    #[test]
    fn a_rings_receive_buffers_stay_within_what_its_connections_bring() {
        for buffer in [1, 100, 4096, 5000, 128 << 10, 1 << 20, 64 << 20] {
            for receivers in (1..=2100).step_by(7) {
                let (count, size) = receive_buffers(receivers, buffer);
                assert!(
                    usize::from(count) * size <= receivers * receive_bytes_per_connection(buffer),
                    "{receivers} receivers of {buffer}-byte buffers: {count} x {size}"
                );
            }
        }
    }
}
