//! The sending side: threads owning flows, sendmmsg (or UDP GSO) batches from buffers
//! built once, paced by a per-batch budget. Sends never block: a flow whose socket buffer
//! is full (the queue ahead of it, a shaper's or a NIC ring's, holds its packets) waits
//! in poll until it has room, and that wait is counted as the sender's blocked time, the
//! evidence that the queue ahead, not this sender's CPU, set its rate.

use std::io;
use std::net::UdpSocket;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{gather_sent, iperf3, sum, write_header, Batch, Count, TxOutcome, Wire, HEADER_BYTES};
use crate::counters::Counters;
use crate::pace::Pacer;
use crate::pool::{Placement, Pool, Stop, WorkerError};
use crate::wait::{self};

/// What every engine's senders are told: the packets, their pace and when to stop.
#[derive(Debug, Clone)]
pub struct Sending {
    /// UDP payload bytes per packet (at least HEADER_BYTES).
    pub payload_bytes: usize,
    pub batch: usize,
    /// Packets per second over all threads; `None`: as fast as possible.
    pub rate_pps: Option<f64>,
    pub stop_at: Instant,
    pub cookie: u32,
}

#[derive(Debug, Clone)]
pub struct TxPlan {
    pub placement: Placement,
    pub sending: Sending,
    /// UDP GSO (UDP_SEGMENT): one send per batch, split into packets by the kernel late
    /// in the output path, as a NIC with segmentation offload would.
    pub gso: bool,
}

/// Most segments one UDP GSO send may carry (UDP_MAX_SEGMENTS of older kernels).
pub const MAX_GSO_SEGMENTS: usize = 64;

/// Longest one wait for room lasts before the sender looks at its stop flag again.
const ROOM_WAIT: Duration = Duration::from_millis(10);

/// How long a sender whose device queue refused a batch (ENOBUFS: nothing to poll for)
/// sleeps before trying again: about what a 10 Gbit/s NIC takes to drain 64 packets.
const ENOBUFS_WAIT: Duration = Duration::from_micros(50);

/// A sender's sends held back by the queue ahead, over all its threads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Blocked {
    /// Sends that found the socket's buffer full (EAGAIN) and then waited for room.
    pub would_block: u64,
    /// Sends the device's queue refused (ENOBUFS), each followed by a short sleep.
    pub no_buffers: u64,
    /// Time spent waiting for room, summed over the threads, nanoseconds.
    pub waited_ns: u64,
}

impl Blocked {
    /// `self - earlier`, field by field: the sends blocked between two readings.
    pub fn since(&self, earlier: &Blocked) -> Blocked {
        Blocked {
            would_block: self.would_block.saturating_sub(earlier.would_block),
            no_buffers: self.no_buffers.saturating_sub(earlier.no_buffers),
            waited_ns: self.waited_ns.saturating_sub(earlier.waited_ns),
        }
    }
}

/// Per thread: would-block returns, ENOBUFS returns, nanoseconds waited for room.
type BlockedCount = Counters<3>;

struct TxShared {
    plan: TxPlan,
    wire: Wire,
    flows: Vec<UdpSocket>,
    aborting: AtomicBool,
    counts: Vec<Count>,
    blocked: Vec<BlockedCount>,
}

/// Stop contract: senders read the flag once per batch, and never block for long (a
/// paced sender sleeps at most until its next batch, a blocked one waits for room at most
/// [`ROOM_WAIT`]).
impl Stop for TxShared {
    fn abort(&self) {
        self.aborting.store(true, Ordering::Relaxed);
    }
}

/// The sending side: one thread per `threads`, flows dealt round robin.
pub struct PpsSender {
    shared: Arc<TxShared>,
    pool: Pool<TxOutcome>,
}

impl PpsSender {
    /// `flows`: UDP sockets connected to the receiver, one per flow, each its own port.
    pub fn spawn(flows: Vec<UdpSocket>, plan: TxPlan) -> io::Result<PpsSender> {
        PpsSender::spawn_wire(flows, plan, Wire::Sonde)
    }

    /// Senders of datagrams in `wire`'s form (iperf3's: no GSO, payloads that hold its
    /// header).
    pub fn spawn_wire(flows: Vec<UdpSocket>, plan: TxPlan, wire: Wire) -> io::Result<PpsSender> {
        if wire != Wire::Sonde && (plan.gso || plan.sending.payload_bytes < wire.header_bytes()) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "iperf3's datagrams take no GSO and at least {} bytes of payload",
                    wire.header_bytes()
                ),
            ));
        }
        if plan.gso {
            let seg = plan.sending.payload_bytes.max(HEADER_BYTES) as libc::c_int;
            for f in &flows {
                // SAFETY: passes a pointer to a live int and its size.
                let r = unsafe {
                    libc::setsockopt(
                        f.as_raw_fd(),
                        libc::SOL_UDP,
                        libc::UDP_SEGMENT,
                        (&seg as *const libc::c_int).cast(),
                        std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                    )
                };
                if r != 0 {
                    let e = io::Error::last_os_error();
                    return Err(io::Error::new(
                        e.kind(),
                        format!("UDP GSO (UDP_SEGMENT) not available: {e}"),
                    ));
                }
            }
        }
        let n = flows.len();
        let placement = Placement::new(plan.placement.threads, plan.placement.cpus.clone(), n);
        let shared = Arc::new(TxShared {
            counts: (0..placement.threads).map(|_| Count::default()).collect(),
            blocked: (0..placement.threads)
                .map(|_| BlockedCount::default())
                .collect(),
            plan: TxPlan {
                placement: placement.clone(),
                ..plan
            },
            wire,
            flows,
            aborting: AtomicBool::new(false),
        });
        let pool = Pool::spawn("sonde-tx", &placement, &shared, move |s, k| {
            send_loop(s, k, &s.plan.placement.owned(k, n))
        })?;
        Ok(PpsSender { shared, pool })
    }

    /// Packets and UDP payload bytes sent so far (monotonic).
    pub fn counts(&self) -> (u64, u64) {
        sum(&self.shared.counts)
    }

    /// The sends held back by the queue ahead so far (monotonic).
    pub fn blocked(&self) -> Blocked {
        let [would_block, no_buffers, waited_ns] = Counters::sum(&self.shared.blocked);
        Blocked {
            would_block,
            no_buffers,
            waited_ns,
        }
    }

    pub fn all_done(&self) -> bool {
        self.pool.all_done()
    }

    pub fn abort(&self) {
        self.pool.abort();
    }

    /// Packets sent per flow, and the first error a worker met.
    pub fn join(&mut self) -> (Vec<u64>, Option<String>) {
        gather_sent(self.pool.join(), self.shared.flows.len())
    }
}

fn send_loop(shared: &TxShared, k: usize, owned: &[usize]) -> TxOutcome {
    let (plan, p) = (&shared.plan, &shared.plan.sending);
    let threads = plan.placement.threads;
    wait::tight_timer_slack();
    let batch = p.batch.max(1);
    // One buffer per packet slot of a batch, and the iovecs and headers pointing at them.
    let mut vecs = Batch::new(batch, p.payload_bytes.max(HEADER_BYTES), 0x5a);
    let seg = p.payload_bytes.max(HEADER_BYTES);
    // GSO: one contiguous buffer of up to 64 segments, each starting with its header.
    let mut gso_buf = if plan.gso {
        vec![0x5a; seg * batch.min(MAX_GSO_SEGMENTS)]
    } else {
        Vec::new()
    };
    let mut seqs: Vec<u64> = vec![0; owned.len()];
    let count = &shared.counts[k];
    let blocked = &shared.blocked[k];
    let mut pacer = Pacer::new(p.rate_pps, threads, batch, Instant::now());
    let mut turn = 0usize;
    while !owned.is_empty() && !shared.aborting.load(Ordering::Relaxed) {
        let now = Instant::now();
        if now >= p.stop_at {
            break;
        }
        let n = batch;
        if let Some(due) = pacer.early(now) {
            std::thread::sleep(due.min(p.stop_at) - now);
            continue;
        }
        let pos = turn % owned.len();
        turn += 1;
        let flow = owned[pos];
        let fd = shared.flows[flow].as_raw_fd();
        let r = if plan.gso {
            send_gso(fd, &mut gso_buf, seg, n, (p.cookie, flow as u32, seqs[pos]))
        } else {
            let stamp = (p.cookie, flow as u32, seqs[pos]);
            send_batch(fd, &mut vecs, n, stamp, shared.wire)
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::Interrupted => continue,
                // The socket's buffer is full: the queue ahead holds its packets. Wait
                // for room rather than spin on the send.
                io::ErrorKind::WouldBlock => {
                    let waited = wait_for_room(fd, p.stop_at);
                    blocked.add([1, 0, waited.as_nanos() as u64]);
                }
                // A full device queue: nothing was sent, and no event says when it has
                // room again; a short sleep, then the next batch tries.
                _ if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    let waited = sleep_for(ENOBUFS_WAIT, p.stop_at);
                    blocked.add([0, 1, waited.as_nanos() as u64]);
                }
                _ => {
                    return Err(WorkerError::Call {
                        call: "sendmmsg",
                        source: e,
                    })
                }
            }
            continue;
        }
        let r = r as u64;
        seqs[pos] += r;
        count.add([r, r * p.payload_bytes as u64]);
        pacer.sent(r);
        let whole = if plan.gso { n.min(MAX_GSO_SEGMENTS) } else { n };
        if (r as usize) < whole {
            // Cut short: the socket's buffer filled mid-batch. Trying again at once would
            // send the packet or two the queue ahead let go meanwhile, a call each, and
            // spin at its rate (a 50 Mbit/s tbf frees a 64-byte packet every 10 us); the
            // socket reads writable again once half its buffer is free.
            let waited = wait_for_room(fd, p.stop_at);
            blocked.add([1, 0, waited.as_nanos() as u64]);
        }
    }
    Ok(owned.iter().zip(seqs).map(|(&f, s)| (f, s)).collect())
}

/// Waits until `fd`'s socket has room (POLLOUT), at most [`ROOM_WAIT`] and not past
/// `stop_at`; how long it waited.
fn wait_for_room(fd: RawFd, stop_at: Instant) -> Duration {
    let now = Instant::now();
    let until = (now + ROOM_WAIT).min(stop_at);
    // An error here (none is expected of a live socket) shows again on the next send.
    let _ = wait::wait_for(fd, libc::POLLOUT, now, Some(until));
    now.elapsed()
}

/// Sleeps for `d`, not past `stop_at`; how long it slept.
fn sleep_for(d: Duration, stop_at: Instant) -> Duration {
    let start = Instant::now();
    std::thread::sleep((start + d).min(stop_at).saturating_duration_since(start));
    start.elapsed()
}

/// One sendmmsg of `n` packets from `vecs`, headers stamped from `(cookie, flow, seq)`
/// in `wire`'s form (iperf3's: the time now and the sequence from 1).
#[inline]
fn send_batch(
    fd: RawFd,
    vecs: &mut Batch,
    n: usize,
    (cookie, flow, seq): (u32, u32, u64),
    wire: Wire,
) -> libc::c_int {
    let now = match wire {
        Wire::Iperf3 { .. } => iperf3::stamp_now(),
        Wire::Sonde => (0, 0),
    };
    for (i, b) in vecs.bufs.iter_mut().take(n).enumerate() {
        match wire {
            Wire::Sonde => write_header(b, cookie, flow, seq + i as u64),
            Wire::Iperf3 { wide } => {
                let (sec, usec) = now;
                let seq = seq + i as u64 + 1;
                // Never short: the sender refuses payloads that cannot hold it.
                iperf3::Header { sec, usec, seq }.write(b, wide);
            }
        }
    }
    // SAFETY: msgs[..n] point at live iovecs and buffers owned by this thread.
    unsafe {
        libc::sendmmsg(
            fd,
            vecs.msgs.as_mut_ptr(),
            n as libc::c_uint,
            libc::MSG_DONTWAIT,
        )
    }
}

/// One UDP GSO send of up to 64 `seg`-byte segments from `buf`; packets sent, or -1.
#[inline]
fn send_gso(
    fd: RawFd,
    buf: &mut [u8],
    seg: usize,
    n: usize,
    (cookie, flow, seq): (u32, u32, u64),
) -> libc::c_int {
    let n = n.min(MAX_GSO_SEGMENTS);
    for (i, b) in buf.chunks_mut(seg).take(n).enumerate() {
        write_header(b, cookie, flow, seq + i as u64);
    }
    // SAFETY: buf is live for the length passed.
    let bytes = unsafe { libc::send(fd, buf.as_ptr().cast(), n * seg, libc::MSG_DONTWAIT) };
    if bytes < 0 {
        -1
    } else {
        (bytes as usize / seg) as libc::c_int
    }
}
