//! The receiving side: one recvmmsg thread per SO_REUSEPORT socket, accounting every
//! packet per flow.

use std::io;
use std::net::UdpSocket;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use super::{
    account, account_iperf3, gather_received, iperf3, sum, Batch, Count, FlowRx, RxOutcome, Wire,
};
use crate::marks::filter::{Match, TosFilter};
use crate::marks::TosCounts;
use crate::nap::{self, Napper, Next};
use crate::pool::{Placement, Pool, Stop, WorkerError};
use crate::wait::Poll;

/// Largest iperf3 datagram read whole: a UDP payload's most.
pub const IPERF3_DATAGRAM_BYTES: usize = 65_535 - 8;

/// Room for one IP_TOS or IPV6_TCLASS control message (and a second, for a dual-stack
/// socket's IPv4 datagram).
const TOS_CONTROL_BYTES: usize = 64;

#[derive(Debug, Clone)]
pub struct RxPlan {
    /// CPUs of the receivers, one per socket.
    pub cpus: Option<Vec<usize>>,
    pub batch: usize,
    pub poll: Poll,
    pub flows: usize,
    pub cookie: u32,
    /// Count the test's datagrams by the TOS byte they arrived with: the marks
    /// (`--dscp`, `--ecn`). Off, nothing is read.
    pub read_tos: bool,
    /// How, when `read_tos`.
    pub tos_by: TosBy,
}

/// How a receiver counts its datagrams' TOS.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum TosBy {
    /// A socket filter counts them in the kernel ([`TosFilter`]), nothing per datagram
    /// in the receive calls; each datagram's control message where loading it is refused.
    #[default]
    Filter,
    /// Each datagram's `IP_RECVTOS` control message, read in recvmmsg's buffers.
    ControlMessage,
}

/// Receiving threads of either engine, one per socket, and the state `S` they share: the
/// kernel's sockets ([`PpsReceiver`]) or AF_XDP's (`xdp::pps::XdpReceiver`).
pub struct Receivers<S: Tallied> {
    pub(crate) shared: Arc<S>,
    pub(crate) pool: Pool<RxOutcome>,
}

pub(crate) use sealed::Tallied;

mod sealed {
    /// An engine's receivers' shared state, as [`super::Receivers`] reads it.
    pub trait Tallied: Send + Sync + 'static {
        fn tally(&self) -> &super::Tally;
        /// How many flows the receivers account.
        fn flows(&self) -> usize;
    }
}

/// What every engine's receivers count as they go, per thread, for a reader beside them.
pub struct Tally {
    pub(crate) counts: Vec<Count>,
    /// Datagrams that were not ours (another cookie or flow, not UDP): counted, not
    /// accounted.
    pub(crate) foreign: Vec<AtomicU64>,
}

impl Tally {
    pub(crate) fn new(threads: usize) -> Tally {
        Tally {
            counts: (0..threads).map(|_| Count::default()).collect(),
            foreign: (0..threads).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

impl<S: Tallied> Receivers<S> {
    /// Packets and UDP payload bytes received so far (monotonic).
    pub fn counts(&self) -> (u64, u64) {
        sum(&self.shared.tally().counts)
    }

    pub fn foreign(&self) -> u64 {
        let f = &self.shared.tally().foreign;
        f.iter().map(|f| f.load(Ordering::Relaxed)).sum()
    }

    /// Receivers end only when stopped (or on an error).
    pub fn all_done(&self) -> bool {
        self.pool.all_done()
    }

    /// Stops every receiver now.
    pub fn abort(&self) {
        self.pool.abort();
    }

    /// Per-flow accounting merged over the receivers, and the first error met.
    pub fn join(&mut self) -> (Vec<FlowRx>, Option<String>) {
        gather_received(self.pool.join(), self.shared.flows())
    }
}

pub struct RxShared {
    plan: RxPlan,
    wire: Wire,
    sockets: Vec<UdpSocket>,
    aborting: AtomicBool,
    tally: Tally,
    /// Datagrams by the TOS byte they arrived with, per receiver, when read from the
    /// control messages.
    tos: Vec<TosCounts>,
    /// iperf3's datagrams: each receiver's flow's running jitter (f64 bits, seconds), as of
    /// its last read, for a reader between intervals.
    jitter: Vec<AtomicU64>,
    /// The kernel's counts, when the filter counts them.
    filter: Option<TosFilter>,
    /// How the marks were counted, and why not in the kernel: the result's note.
    tos_note: Option<String>,
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

impl Tallied for RxShared {
    fn tally(&self) -> &Tally {
        &self.tally
    }
    fn flows(&self) -> usize {
        self.plan.flows
    }
}

/// The receiving side: one thread per socket (SO_REUSEPORT group).
pub type PpsReceiver = Receivers<RxShared>;

impl PpsReceiver {
    pub fn spawn(sockets: Vec<UdpSocket>, plan: RxPlan) -> io::Result<PpsReceiver> {
        PpsReceiver::spawn_wire(sockets, plan, Wire::Sonde)
    }

    /// Receivers of datagrams in `wire`'s form; with iperf3's, socket k is flow k.
    pub fn spawn_wire(
        sockets: Vec<UdpSocket>,
        plan: RxPlan,
        wire: Wire,
    ) -> io::Result<PpsReceiver> {
        PpsReceiver::spawn_counting(sockets, plan, wire, None)
    }

    /// Receivers counting the marks with `filter`, attached to `sockets` before the test's
    /// first datagram could arrive ([`attach_tos_filter`], or why it was refused); without
    /// one, attached now (when the plan reads the TOS through a filter).
    pub fn spawn_counting(
        sockets: Vec<UdpSocket>,
        plan: RxPlan,
        wire: Wire,
        filter: Option<Result<TosFilter, String>>,
    ) -> io::Result<PpsReceiver> {
        let placement = Placement::new(sockets.len(), plan.cpus.clone(), sockets.len());
        let (filter, tos_note) = match plan.read_tos {
            true => tos_reader(&sockets, &plan, wire, filter)?,
            false => (None, None),
        };
        let shared = Arc::new(RxShared {
            tally: Tally::new(placement.threads),
            tos: (0..placement.threads)
                .map(|_| TosCounts::default())
                .collect(),
            jitter: (0..placement.threads).map(|_| AtomicU64::new(0)).collect(),
            filter,
            tos_note,
            plan,
            wire,
            sockets,
            aborting: AtomicBool::new(false),
        });
        let pool = Pool::spawn("sonde-rx", &placement, &shared, recv_loop)?;
        Ok(Receivers { shared, pool })
    }

    /// A handle on the running counts, for a reader (a guard) beside the one driving
    /// these receivers.
    pub fn live_counts(&self) -> RxCounts {
        RxCounts(self.shared.clone())
    }

    /// iperf3's datagrams: each flow's running jitter (RFC 3550's estimate, seconds) as
    /// of its receiver's last read; `None` for sonde's datagrams, which carry no send time.
    pub fn jitter_s(&self) -> Option<Vec<f64>> {
        matches!(self.shared.wire, Wire::Iperf3 { .. }).then(|| {
            let j = self.shared.jitter.iter();
            j.map(|j| f64::from_bits(j.load(Ordering::Relaxed)))
                .collect()
        })
    }

    /// Datagrams received by the TOS byte they arrived with, over the whole test, and
    /// those the kernel gave none for; `None` unless the plan reads them.
    pub fn arrived_tos(&self) -> Option<(Vec<(u8, u64)>, u64)> {
        let s = &self.shared;
        s.plan.read_tos.then(|| match &s.filter {
            Some(f) => f.snapshot(),
            None => crate::marks::sum(&s.tos),
        })
    }

    /// The kernel id of the socket filter counting the marks, when one does.
    pub fn tos_filter_id(&self) -> Option<u32> {
        self.shared.filter.as_ref().and_then(|f| f.prog_id().ok())
    }

    /// How the marks were counted (in the kernel, or from each datagram's control
    /// message and why), when they are.
    pub fn tos_note(&self) -> Option<String> {
        self.shared.tos_note.clone()
    }
}

/// The running counts of a set of receivers, readable from any thread.
#[derive(Clone)]
pub struct RxCounts(Arc<RxShared>);

impl RxCounts {
    /// Packets and UDP payload bytes received so far (monotonic).
    pub fn counts(&self) -> (u64, u64) {
        sum(&self.0.tally.counts)
    }
}

/// Attaches the filter counting the marks of the datagrams with `cookie` and a flow
/// below `flows` to every one of `sockets`, or says why the kernel refused it. It counts
/// what arrives after it: attached before the sender is told the port and cookie, it
/// counts every datagram of the test.
pub fn attach_tos_filter(
    sockets: &[UdpSocket],
    cookie: u32,
    flows: usize,
) -> Result<TosFilter, String> {
    let fds: Vec<RawFd> = sockets.iter().map(|s| s.as_raw_fd()).collect();
    TosFilter::attach(&fds, cookie, flows as u32).map_err(|e| {
        let text = e.to_string();
        text.lines().next().unwrap_or_default().to_string()
    })
}

/// What a pps receiver's filter counts.
fn pps_match(plan: &RxPlan) -> Match {
    Match::Pps {
        cookie: plan.cookie,
        flows: plan.flows as u32,
    }
}

/// The filter on every socket (`filter`, or attached now), or (refused, or asked) each
/// datagram's control message asked for; and the note that says which.
fn tos_reader(
    sockets: &[UdpSocket],
    plan: &RxPlan,
    wire: Wire,
    filter: Option<Result<TosFilter, String>>,
) -> io::Result<(Option<TosFilter>, Option<String>)> {
    let why = match (plan.tos_by, wire) {
        (TosBy::Filter, Wire::Sonde) => {
            let filter = match filter {
                Some(Ok(f)) if f.matching() == pps_match(plan) => Ok(f),
                Some(Err(why)) => Err(why),
                _ => attach_tos_filter(sockets, plan.cookie, plan.flows),
            };
            match filter {
                Ok(f) => return Ok((Some(f), Some(FILTER_NOTE.to_string()))),
                Err(why) => format!("the kernel refused the socket filter ({why})"),
            }
        }
        (TosBy::Filter, Wire::Iperf3 { .. }) => "iperf3's datagrams carry no cookie".into(),
        (TosBy::ControlMessage, _) => "asked for".into(),
    };
    for s in sockets {
        crate::marks::enable_recv_tos(s.as_raw_fd())?;
    }
    let note = format!("marks read from each datagram's IP_RECVTOS control message: {why}");
    Ok((None, Some(note)))
}

/// The note of a receiver whose marks the kernel counts.
pub const FILTER_NOTE: &str =
    "marks counted in the kernel by a socket filter (eBPF), no control message per datagram: \
     as each datagram reaches the socket, so those its full queue then dropped count too";

fn recv_loop(shared: &RxShared, k: usize) -> RxOutcome {
    let p = &shared.plan;
    let fd: RawFd = shared.sockets[k].as_raw_fd();
    let batch = p.batch.max(1);
    // iperf3's blocks go up to 64 KiB (its -l); ours fit a packet.
    let len = match shared.wire {
        Wire::Iperf3 { .. } => IPERF3_DATAGRAM_BYTES,
        Wire::Sonde => 2048,
    };
    let mut vecs = Batch::new(batch, len, 0);
    // One control buffer per datagram when the TOS is read from them, its length reset
    // per read.
    let cmsg = p.read_tos && shared.filter.is_none();
    let mut control = vec![[0u64; TOS_CONTROL_BYTES / 8]; if cmsg { batch } else { 0 }];
    for (m, c) in vecs.msgs.iter_mut().zip(control.iter_mut()) {
        m.msg_hdr.msg_control = c.as_mut_ptr().cast();
    }
    let mut flows = vec![FlowRx::default(); p.flows];
    let count = &shared.tally.counts[k];
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
        for m in vecs.msgs.iter_mut().take(control.len()) {
            m.msg_hdr.msg_controllen = TOS_CONTROL_BYTES;
        }
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
                _ => {
                    return Err(WorkerError::Call {
                        call: "recvmmsg",
                        source: e,
                    })
                }
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
        // iperf3's datagrams: read as it reads them, one arrival time a read.
        let arrival_s = match shared.wire {
            Wire::Iperf3 { .. } => iperf3::now_s(),
            Wire::Sonde => 0.0,
        };
        for (m, b) in vecs.msgs.iter().zip(&vecs.bufs).take(r as usize) {
            let len = m.msg_len as usize;
            bytes += len as u64;
            let ours = match shared.wire {
                Wire::Sonde => account(&b[..len], &mut flows, p.cookie),
                Wire::Iperf3 { wide } => {
                    account_iperf3(&b[..len], flows.get_mut(k), wide, arrival_s)
                }
            };
            if !ours {
                foreign += 1;
            }
            // The test's own datagrams, as the filter counts them.
            if cmsg && ours {
                let mut tos = None;
                crate::kstamps::io::each_cmsg(&m.msg_hdr, |l, t, d| {
                    tos = tos.or(crate::marks::tos_of(l, t, d))
                });
                shared.tos[k].add(tos);
            }
        }
        count.add([r as u64, bytes]);
        if let (Wire::Iperf3 { .. }, Some(f)) = (shared.wire, flows.get(k)) {
            let j = f.iperf3.jitter_s.to_bits();
            shared.jitter[k].store(j, Ordering::Relaxed);
        }
        if foreign > 0 {
            shared.tally.foreign[k].fetch_add(foreign, Ordering::Relaxed);
        }
    }
    Ok(flows)
}
