//! Small-packet UDP workers (the dpdk-testpmd txonly/rxonly job with kernel sockets).
//!
//! Senders own some flows, each a UDP socket bound to its own source port (so RSS and
//! SO_REUSEPORT spread them), and send batches with `sendmmsg` from preallocated packet
//! buffers; only the header of each packet is rewritten per batch. Pacing is a budget of
//! packets per elapsed time checked per batch, with a timed sleep when ahead: never a
//! sleep per packet. Receivers own one SO_REUSEPORT socket each, read batches with
//! `recvmmsg`, and account every packet in per-flow state allocated up front: received,
//! reordered (a sequence number below the highest seen) and duplicated (a sliding window of
//! the last 1024 sequence numbers). Loss is what the sender sent and the receiver never
//! got, counted once both are done.

use std::io;
use std::net::UdpSocket;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::counters::Counters;
use crate::nap::{self, Napper, Next};
use crate::pool::{Placement, Pool, Stop};
use crate::wait::{self, Poll};

/// Bytes of our header at the start of each UDP payload: cookie, flow, sequence.
pub const HEADER_BYTES: usize = 16;
/// Ethernet (14) + IPv4 (20) + UDP (8): what a packet's wire size adds to its payload,
/// counted as testpmd counts packet length (no preamble, no FCS).
pub const WIRE_OVERHEAD_BYTES: usize = 42;
pub const MAX_FLOWS: usize = 4096;
const DUP_WINDOW: u64 = 1024;

/// Packets and UDP payload bytes of one worker.
type Count = Counters<2>;

/// (packets, bytes) over all workers' counters.
fn sum(counts: &[Count]) -> (u64, u64) {
    let [packets, bytes] = Counters::sum(counts);
    (packets, bytes)
}

/// Per-flow receive accounting, sized and allocated before the first packet.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FlowRx {
    /// Distinct packets received.
    pub received: u64,
    /// One past the highest sequence number seen.
    pub highest: u64,
    pub reordered: u64,
    pub duplicated: u64,
    window: [u64; (DUP_WINDOW / 64) as usize],
}

impl FlowRx {
    /// Accounts one packet with sequence number `seq`.
    #[inline]
    pub fn on_packet(&mut self, seq: u64) {
        if seq >= self.highest {
            // Slide the window forward, clearing the bits of sequence numbers skipped over.
            let advance = seq + 1 - self.highest;
            if advance >= DUP_WINDOW {
                self.window = [0; (DUP_WINDOW / 64) as usize];
            } else {
                for s in self.highest..=seq {
                    self.clear(s);
                }
            }
            self.highest = seq + 1;
        } else {
            if self.highest - seq > DUP_WINDOW {
                // Too old to tell a duplicate from a late packet: count it as reordered.
                self.reordered += 1;
                self.received += 1;
                return;
            }
            if self.is_set(seq) {
                self.duplicated += 1;
                return;
            }
            self.reordered += 1;
        }
        self.set(seq);
        self.received += 1;
    }

    #[inline]
    fn bit(seq: u64) -> (usize, u64) {
        let i = seq % DUP_WINDOW;
        ((i / 64) as usize, 1u64 << (i % 64))
    }

    #[inline]
    fn is_set(&self, seq: u64) -> bool {
        let (w, m) = Self::bit(seq);
        self.window[w] & m != 0
    }

    #[inline]
    fn set(&mut self, seq: u64) {
        let (w, m) = Self::bit(seq);
        self.window[w] |= m;
    }

    #[inline]
    fn clear(&mut self, seq: u64) {
        let (w, m) = Self::bit(seq);
        self.window[w] &= !m;
    }

    pub fn merge(&mut self, other: &FlowRx) {
        self.received += other.received;
        self.highest = self.highest.max(other.highest);
        self.reordered += other.reordered;
        self.duplicated += other.duplicated;
    }
}

#[derive(Debug, Clone)]
pub struct TxPlan {
    pub placement: Placement,
    /// UDP payload bytes per packet (at least HEADER_BYTES).
    pub payload_bytes: usize,
    pub batch: usize,
    /// Packets per second over all threads; `None`: as fast as possible.
    pub rate_pps: Option<f64>,
    pub stop_at: Instant,
    pub cookie: u32,
    /// UDP GSO (UDP_SEGMENT): one send per batch, split into packets by the kernel late
    /// in the output path, as a NIC with segmentation offload would.
    pub gso: bool,
}

/// Most segments one UDP GSO send may carry (UDP_MAX_SEGMENTS of older kernels).
pub const MAX_GSO_SEGMENTS: usize = 64;

struct TxShared {
    plan: TxPlan,
    flows: Vec<UdpSocket>,
    aborting: AtomicBool,
    counts: Vec<Count>,
}

/// Stop contract: senders read the flag once per batch, and never block for long (a
/// paced sender sleeps at most until its next batch).
impl Stop for TxShared {
    fn abort(&self) {
        self.aborting.store(true, Ordering::Relaxed);
    }
}

/// What a sender thread returns: packets sent per flow it owned, by flow index.
type TxOutcome = Result<Vec<(usize, u64)>, String>;

/// The sending side: one thread per `threads`, flows dealt round robin.
pub struct PpsSender {
    shared: Arc<TxShared>,
    pool: Pool<TxOutcome>,
}

impl PpsSender {
    /// `flows`: UDP sockets connected to the receiver, one per flow, each its own port.
    pub fn spawn(flows: Vec<UdpSocket>, plan: TxPlan) -> io::Result<PpsSender> {
        if plan.gso {
            let seg = plan.payload_bytes.max(HEADER_BYTES) as libc::c_int;
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
            plan: TxPlan {
                placement: placement.clone(),
                ..plan
            },
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

    pub fn all_done(&self) -> bool {
        self.pool.all_done()
    }

    pub fn abort(&self) {
        self.pool.abort();
    }

    /// Packets sent per flow, and the first error a worker met.
    pub fn join(&mut self) -> (Vec<u64>, Option<String>) {
        let mut per_flow = vec![0; self.shared.flows.len()];
        let mut error = None;
        for outcome in self.pool.join() {
            match outcome.and_then(|r| r) {
                Ok(list) => list.into_iter().for_each(|(f, sent)| per_flow[f] = sent),
                Err(e) => error = error.or(Some(e)),
            }
        }
        (per_flow, error)
    }
}

/// The buffers of one batch and the mmsghdr/iovec arrays pointing at them, built once per
/// worker. The inner buffers never move, so the pointers stay valid while `Batch` lives.
struct Batch {
    bufs: Vec<Vec<u8>>,
    _iovs: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
}

impl Batch {
    fn new(n: usize, len: usize, fill: u8) -> Batch {
        let mut bufs: Vec<Vec<u8>> = (0..n).map(|_| vec![fill; len]).collect();
        let mut iovs: Vec<libc::iovec> = bufs
            .iter_mut()
            .map(|b| libc::iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: b.len(),
            })
            .collect();
        // SAFETY: mmsghdr is plain data; zeroed is a valid empty header.
        let mut msgs: Vec<libc::mmsghdr> = (0..n).map(|_| unsafe { std::mem::zeroed() }).collect();
        for (m, iov) in msgs.iter_mut().zip(iovs.iter_mut()) {
            m.msg_hdr.msg_iov = iov;
            m.msg_hdr.msg_iovlen = 1;
        }
        Batch {
            bufs,
            _iovs: iovs,
            msgs,
        }
    }
}

/// The header written at the start of every packet.
#[inline]
fn write_header(buf: &mut [u8], cookie: u32, flow: u32, seq: u64) {
    buf[0..4].copy_from_slice(&cookie.to_be_bytes());
    buf[4..8].copy_from_slice(&flow.to_be_bytes());
    buf[8..16].copy_from_slice(&seq.to_be_bytes());
}

/// The most lateness a paced sender makes good by sending at once.
const CATCH_UP: Duration = Duration::from_millis(1);

fn send_loop(shared: &TxShared, k: usize, owned: &[usize]) -> TxOutcome {
    let p = &shared.plan;
    let threads = p.placement.threads;
    wait::tight_timer_slack();
    let batch = p.batch.max(1);
    // One buffer per packet slot of a batch, and the iovecs and headers pointing at them.
    let mut vecs = Batch::new(batch, p.payload_bytes.max(HEADER_BYTES), 0x5a);
    let seg = p.payload_bytes.max(HEADER_BYTES);
    // GSO: one contiguous buffer of up to 64 segments, each starting with its header.
    let mut gso_buf = if p.gso {
        vec![0x5a; seg * batch.min(MAX_GSO_SEGMENTS)]
    } else {
        Vec::new()
    };
    let mut seqs: Vec<u64> = vec![0; owned.len()];
    let count = &shared.counts[k];
    // Pacing: the time each packet is due, advanced per batch sent. A wake-up late by up
    // to CATCH_UP (or one batch, if longer) is made good at once: on a busy host sleeps
    // routinely overrun by that much, and dropping each overrun would send short. After a
    // longer stall the schedule restarts from now rather than bursting to catch up: such
    // a burst is not the offered rate, and it would overflow shapers that the rate fits.
    let per_packet = p
        .rate_pps
        .map(|r| Duration::from_secs_f64(threads as f64 / r));
    let slack = per_packet.map(|pp| (pp * batch as u32).max(CATCH_UP));
    let mut next_due = Instant::now();
    let mut turn = 0usize;
    while !owned.is_empty() && !shared.aborting.load(Ordering::Relaxed) {
        let now = Instant::now();
        if now >= p.stop_at {
            break;
        }
        let n = batch;
        if let Some(slack) = slack {
            if now < next_due {
                std::thread::sleep(next_due.min(p.stop_at) - now);
                continue;
            }
            if now > next_due + slack {
                next_due = now;
            }
        }
        let pos = turn % owned.len();
        turn += 1;
        let flow = owned[pos];
        let fd = shared.flows[flow].as_raw_fd();
        let r = if p.gso {
            let n = n.min(MAX_GSO_SEGMENTS);
            for (i, b) in gso_buf.chunks_mut(seg).take(n).enumerate() {
                write_header(b, p.cookie, flow as u32, seqs[pos] + i as u64);
            }
            // SAFETY: gso_buf is live for the length passed.
            let bytes = unsafe { libc::send(fd, gso_buf.as_ptr().cast(), n * seg, 0) };
            if bytes < 0 {
                -1
            } else {
                (bytes as usize / seg) as libc::c_int
            }
        } else {
            for (i, b) in vecs.bufs.iter_mut().take(n).enumerate() {
                write_header(b, p.cookie, flow as u32, seqs[pos] + i as u64);
            }
            // SAFETY: msgs[..n] point at live iovecs and buffers owned by this thread.
            unsafe { libc::sendmmsg(fd, vecs.msgs.as_mut_ptr(), n as libc::c_uint, 0) }
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock => continue,
                // A full device queue: nothing was sent; the next batch tries again.
                _ if e.raw_os_error() == Some(libc::ENOBUFS) => continue,
                _ => return Err(format!("sendmmsg: {e}")),
            }
        }
        let r = r as u64;
        seqs[pos] += r;
        count.add([r, r * p.payload_bytes as u64]);
        if let Some(pp) = per_packet {
            next_due += pp * r as u32;
        }
    }
    Ok(owned.iter().zip(seqs).map(|(&f, s)| (f, s)).collect())
}

#[derive(Debug, Clone)]
pub struct RxPlan {
    /// CPUs of the receivers, one per socket.
    pub cpus: Option<Vec<usize>>,
    pub batch: usize,
    pub poll: Poll,
    pub flows: usize,
    pub cookie: u32,
}

struct RxShared {
    plan: RxPlan,
    sockets: Vec<UdpSocket>,
    aborting: AtomicBool,
    counts: Vec<Count>,
    /// Packets that were not ours (wrong cookie or flow): counted, not accounted.
    foreign: Vec<AtomicU64>,
}

/// Stop contract: shutting the sockets down wakes a receiver blocked in recvmmsg or
/// poll; a napping or spinning one reads the flag before its next read.
impl Stop for RxShared {
    fn abort(&self) {
        self.aborting.store(true, Ordering::SeqCst);
        for s in &self.sockets {
            // SAFETY: shutting down sockets we own.
            unsafe { libc::shutdown(s.as_raw_fd(), libc::SHUT_RDWR) };
        }
    }
}

/// The receiving side: one thread per socket (SO_REUSEPORT group).
pub struct PpsReceiver {
    shared: Arc<RxShared>,
    pool: Pool<Result<Vec<FlowRx>, String>>,
}

impl PpsReceiver {
    pub fn spawn(sockets: Vec<UdpSocket>, plan: RxPlan) -> io::Result<PpsReceiver> {
        let placement = Placement::new(sockets.len(), plan.cpus.clone(), sockets.len());
        let shared = Arc::new(RxShared {
            counts: (0..placement.threads).map(|_| Count::default()).collect(),
            foreign: (0..placement.threads).map(|_| AtomicU64::new(0)).collect(),
            plan,
            sockets,
            aborting: AtomicBool::new(false),
        });
        let pool = Pool::spawn("sonde-rx", &placement, &shared, recv_loop)?;
        Ok(PpsReceiver { shared, pool })
    }

    /// Packets and UDP payload bytes received so far (monotonic).
    pub fn counts(&self) -> (u64, u64) {
        sum(&self.shared.counts)
    }

    pub fn foreign(&self) -> u64 {
        self.shared
            .foreign
            .iter()
            .map(|f| f.load(Ordering::Relaxed))
            .sum()
    }

    /// Stops every receiver now.
    pub fn abort(&self) {
        self.pool.abort();
    }

    /// Per-flow accounting merged over the receivers, and the first error met.
    pub fn join(&mut self) -> (Vec<FlowRx>, Option<String>) {
        let mut flows = vec![FlowRx::default(); self.shared.plan.flows];
        let mut error = None;
        for outcome in self.pool.join() {
            match outcome.and_then(|r| r) {
                Ok(list) => flows.iter_mut().zip(&list).for_each(|(a, f)| a.merge(f)),
                Err(e) => error = error.or(Some(e)),
            }
        }
        (flows, error)
    }
}

fn recv_loop(shared: &RxShared, k: usize) -> Result<Vec<FlowRx>, String> {
    let p = &shared.plan;
    let fd: RawFd = shared.sockets[k].as_raw_fd();
    let batch = p.batch.max(1);
    let mut vecs = Batch::new(batch, 2048, 0);
    let mut flows = vec![FlowRx::default(); p.flows];
    let count = &shared.counts[k];
    let mut last_message = Instant::now();
    let mut napper = Napper::new(last_message);
    while !shared.aborting.load(Ordering::Relaxed) {
        let spin = p.poll.spins(Instant::now(), last_message);
        let next = if spin { Next::Read } else { napper.next() };
        if next == Next::Nap {
            std::thread::sleep(nap::NAP);
        }
        let flags = if next == Next::Wait {
            libc::MSG_WAITFORONE
        } else {
            libc::MSG_DONTWAIT
        };
        // SAFETY: msgs point at live iovecs and buffers owned by this thread.
        let r = unsafe {
            libc::recvmmsg(
                fd,
                vecs.msgs.as_mut_ptr(),
                batch as libc::c_uint,
                flags,
                std::ptr::null_mut(),
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::WouldBlock => {
                    napper.after_read(0, batch, Instant::now());
                    continue;
                }
                io::ErrorKind::Interrupted => continue,
                _ if shared.aborting.load(Ordering::Relaxed) => break,
                _ => return Err(format!("recvmmsg: {e}")),
            }
        }
        napper.after_read(r as usize, batch, Instant::now());
        if r == 0 {
            // A shut-down socket reads as empty: we are being stopped.
            if shared.aborting.load(Ordering::Relaxed) {
                break;
            }
            continue;
        }
        last_message = Instant::now();
        let mut bytes = 0u64;
        let mut foreign = 0u64;
        for (m, b) in vecs.msgs.iter().zip(&vecs.bufs).take(r as usize) {
            let len = m.msg_len as usize;
            bytes += len as u64;
            if len < HEADER_BYTES {
                foreign += 1;
                continue;
            }
            let cookie = u32::from_be_bytes(b[0..4].try_into().expect("4 bytes"));
            let flow = u32::from_be_bytes(b[4..8].try_into().expect("4 bytes")) as usize;
            let seq = u64::from_be_bytes(b[8..16].try_into().expect("8 bytes"));
            match flows.get_mut(flow) {
                Some(f) if cookie == p.cookie => f.on_packet(seq),
                _ => foreign += 1,
            }
        }
        count.add([r as u64, bytes]);
        if foreign > 0 {
            shared.foreign[k].fetch_add(foreign, Ordering::Relaxed);
        }
    }
    Ok(flows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(seqs: &[u64]) -> FlowRx {
        let mut f = FlowRx::default();
        for &s in seqs {
            f.on_packet(s);
        }
        f
    }

    #[test]
    fn in_order_has_nothing_to_report() {
        let f = feed(&(0..10_000).collect::<Vec<_>>());
        assert_eq!(
            (f.received, f.highest, f.reordered, f.duplicated),
            (10_000, 10_000, 0, 0)
        );
    }

    #[test]
    fn loss_reorder_and_duplicates() {
        // 0..10 with 3 and 7 lost, 5 arriving after 6, 8 twice.
        let f = feed(&[0, 1, 2, 4, 6, 5, 8, 8, 9]);
        assert_eq!(f.received, 8);
        assert_eq!(f.highest, 10);
        assert_eq!(f.reordered, 1);
        assert_eq!(f.duplicated, 1);
        // Lost, given the sender's count of 10: 10 - 8.
        assert_eq!(10 - f.received, 2);
    }

    #[test]
    fn the_window_slides_and_old_bits_do_not_linger() {
        let mut f = FlowRx::default();
        f.on_packet(5);
        // Far ahead: 5's bit (same slot as 5 + 1024 * k) must not read as a duplicate.
        f.on_packet(5 + 3 * DUP_WINDOW);
        f.on_packet(5 + 4 * DUP_WINDOW);
        assert_eq!(f.duplicated, 0);
        f.on_packet(5 + 4 * DUP_WINDOW);
        assert_eq!(f.duplicated, 1);
        // Older than the window: counted as late, not as a duplicate.
        f.on_packet(7);
        assert_eq!((f.reordered, f.received), (1, 4));
    }

    #[test]
    fn counters_are_64_bit_and_do_not_wrap() {
        let mut f = FlowRx::default();
        let big = u32::MAX as u64 + 10;
        f.on_packet(big);
        f.on_packet(big + 1);
        assert_eq!(f.highest, big + 2);
        assert_eq!(f.received, 2);
        assert_eq!(f.reordered, 0);
    }

    #[test]
    fn loopback_send_and_receive_account_every_packet() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = rx.local_addr().unwrap();
        let mut flows = Vec::new();
        for _ in 0..4 {
            let s = UdpSocket::bind("127.0.0.1:0").unwrap();
            s.connect(addr).unwrap();
            flows.push(s);
        }
        let mut receiver = PpsReceiver::spawn(
            vec![rx],
            RxPlan {
                cpus: None,
                batch: 32,
                poll: Poll::Block,
                flows: 4,
                cookie: 7,
            },
        )
        .unwrap();
        // 20k packets/s for 0.3 s: well below what loopback drops.
        let mut sender = PpsSender::spawn(
            flows,
            TxPlan {
                placement: Placement::new(2, None, 4),
                payload_bytes: 22,
                batch: 16,
                rate_pps: Some(20_000.0),
                stop_at: Instant::now() + Duration::from_millis(300),
                cookie: 7,
                gso: false,
            },
        )
        .unwrap();
        while !sender.all_done() {
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(100));
        let (sent, err) = sender.join();
        assert!(err.is_none(), "{err:?}");
        receiver.abort();
        let (flows, err) = receiver.join();
        assert!(err.is_none(), "{err:?}");
        let total: u64 = sent.iter().sum();
        assert!(
            (5_000..=7_000).contains(&total),
            "paced to ~6000 packets, sent {total}"
        );
        for (f, s) in flows.iter().zip(&sent) {
            assert_eq!(f.received, *s);
            assert_eq!((f.reordered, f.duplicated), (0, 0));
        }
    }
}
