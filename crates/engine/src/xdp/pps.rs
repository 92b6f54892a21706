//! Packet-rate workers on AF_XDP sockets: the kernel engine's pps job without the socket
//! layer. A sender thread per socket copies each frame from its flow's template (built once:
//! headers and checksums are not recomputed) and writes the sequence header into it; a receiver thread per socket finds each frame's UDP
//! payload and accounts it per flow exactly as the kernel engine's receivers do. Marked
//! (`--dscp`, `--ecn`), the templates carry the TOS byte and a receiver counts each of the
//! test's frames by the TOS it arrived with, read from the IP header it holds anyway.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::frame::{
    fix_udp_checksum, payload_offset, set_tos, tos_of, udp_frame, udp_payload, Endpoints,
};
use super::Xsk;
use crate::marks::TosCounts;
use crate::nap::{self, Napper, Next};
use crate::pace::Pacer;
use crate::pool::{Placement, Pool, Stop, WorkerError};
use crate::pps::{
    account, gather_sent, sum, write_header, Count, FlowRx, Receivers, RxOutcome, RxPlan, Sending,
    Tallied, Tally, TxOutcome, HEADER_BYTES,
};
use crate::wait;

/// How long a sender, once stopped, kicks the kernel to send the frames it queued.
const FLUSH: Duration = Duration::from_millis(200);
/// Longest a blocked receiver sleeps before it reads the stop flag again.
const WAIT_AT_MOST: Duration = Duration::from_millis(20);

#[derive(Debug, Clone)]
pub struct XdpTxPlan {
    /// CPUs of the senders, one per socket.
    pub cpus: Option<Vec<usize>>,
    pub sending: Sending,
    /// Each flow's addresses; flows are dealt to the sockets round robin.
    pub flows: Vec<Endpoints>,
    /// The TOS byte every frame carries (`--dscp`, `--ecn`); `None`: 0, unmarked.
    pub tos: Option<u8>,
}

struct TxShared {
    plan: XdpTxPlan,
    placement: Placement,
    xsks: Vec<Mutex<Xsk>>,
    aborting: AtomicBool,
    counts: Vec<Count>,
}

/// Stop contract: senders read the flag once per batch and sleep at most until their
/// next batch.
impl Stop for TxShared {
    fn abort(&self) {
        self.aborting.store(true, Ordering::Relaxed);
    }
}

/// Senders, one thread per AF_XDP socket.
pub struct XdpSender {
    shared: Arc<TxShared>,
    pool: Pool<TxOutcome>,
}

impl XdpSender {
    pub fn spawn(xsks: Vec<Xsk>, plan: XdpTxPlan) -> std::io::Result<XdpSender> {
        let placement = Placement::new(xsks.len(), plan.cpus.clone(), xsks.len());
        let shared = Arc::new(TxShared {
            counts: (0..placement.threads).map(|_| Count::default()).collect(),
            xsks: xsks.into_iter().map(Mutex::new).collect(),
            placement: placement.clone(),
            plan,
            aborting: AtomicBool::new(false),
        });
        let pool = Pool::spawn("sonde-xtx", &placement, &shared, send_loop)?;
        Ok(XdpSender { shared, pool })
    }

    /// Packets and UDP payload bytes queued to the kernel so far (monotonic).
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
        gather_sent(self.pool.join(), self.shared.plan.flows.len())
    }
}

fn send_loop(shared: &TxShared, k: usize) -> TxOutcome {
    let (plan, p) = (&shared.plan, &shared.plan.sending);
    let owned = shared.placement.owned(k, plan.flows.len());
    let mut xsk = super::socket_of(&shared.xsks, k)?;
    wait::tight_timer_slack();
    let payload = p.payload_bytes.max(HEADER_BYTES);
    let build = |f: usize| {
        let mut t = udp_frame(&plan.flows[f], payload);
        if let Some(tos) = plan.tos {
            set_tos(&mut t, tos);
        }
        t
    };
    let templates: Vec<Vec<u8>> = owned.iter().map(|&f| build(f)).collect();
    let ipv6 = plan.flows.first().is_some_and(|f| f.dst.is_ipv6());
    let at = plan.flows.first().map_or(0, |f| payload_offset(&f.dst));
    let batch = p.batch.max(1) as u32;
    let mut seqs = vec![0u64; owned.len()];
    let count = &shared.counts[k];
    let mut pacer = Pacer::new(
        p.rate_pps,
        shared.placement.threads,
        batch as usize,
        Instant::now(),
    );
    let mut turn = 0usize;
    while !owned.is_empty() && !shared.aborting.load(Ordering::Relaxed) {
        let now = Instant::now();
        if now >= p.stop_at {
            break;
        }
        if let Some(due) = pacer.early(now) {
            std::thread::sleep(due.min(p.stop_at) - now);
            continue;
        }
        let pos = turn % owned.len();
        turn += 1;
        let (template, flow, first) = (&templates[pos], owned[pos] as u32, seqs[pos]);
        let mut seq = first;
        let n = xsk.send(batch, |f| {
            let f = &mut f[..template.len()];
            f.copy_from_slice(template);
            write_header(&mut f[at..], p.cookie, flow, seq);
            if ipv6 {
                fix_udp_checksum(f);
            }
            seq += 1;
            template.len()
        }) as u64;
        seqs[pos] += n;
        count.add([n, n * payload as u64]);
        pacer.sent(n);
    }
    if !xsk.flush(Instant::now() + FLUSH) {
        return Err(WorkerError::Unflushed {
            sender: k,
            after: FLUSH,
        });
    }
    Ok(owned.into_iter().zip(seqs).collect())
}

pub struct RxShared {
    plan: RxPlan,
    xsks: Vec<Mutex<Xsk>>,
    aborting: AtomicBool,
    tally: Tally,
    /// The test's frames by the TOS they arrived with, per receiver, when the plan reads
    /// them (`read_tos`).
    tos: Vec<TosCounts>,
    /// Frames the sockets' rings dropped, added by each worker as it ends.
    drops: AtomicU64,
    /// Receivers that spin also drive the kernel's busy polling.
    busy_polling: bool,
}

/// Stop contract: a receiver reads the flag after every read, and a blocked one waits
/// at most `WAIT_AT_MOST`.
impl Stop for RxShared {
    fn abort(&self) {
        self.aborting.store(true, Ordering::Relaxed);
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

/// Receivers, one thread per AF_XDP socket.
pub type XdpReceiver = Receivers<RxShared>;

impl XdpReceiver {
    /// `busy_polling`: the sockets have SO_BUSY_POLL set, and spinning readers enter the
    /// kernel to run it.
    pub fn spawn(xsks: Vec<Xsk>, plan: RxPlan, busy_polling: bool) -> std::io::Result<XdpReceiver> {
        let placement = Placement::new(xsks.len(), plan.cpus.clone(), xsks.len());
        let shared = Arc::new(RxShared {
            tally: Tally::new(placement.threads),
            tos: (0..placement.threads)
                .map(|_| TosCounts::default())
                .collect(),
            xsks: xsks.into_iter().map(Mutex::new).collect(),
            plan,
            aborting: AtomicBool::new(false),
            drops: AtomicU64::new(0),
            busy_polling,
        });
        let pool = Pool::spawn("sonde-xrx", &placement, &shared, recv_loop)?;
        Ok(Receivers { shared, pool })
    }

    /// The test's frames by the TOS byte they arrived with, over the whole test, and
    /// those without one; `None` unless the plan reads them.
    pub fn arrived_tos(&self) -> Option<(Vec<(u8, u64)>, u64)> {
        let s = &self.shared;
        s.plan.read_tos.then(|| crate::marks::sum(&s.tos))
    }

    /// Frames the sockets dropped (rx ring full or otherwise), once joined.
    pub fn drops(&self) -> u64 {
        self.shared.drops.load(Ordering::Relaxed)
    }
}

fn recv_loop(shared: &RxShared, k: usize) -> RxOutcome {
    let p = &shared.plan;
    let mut xsk = super::socket_of(&shared.xsks, k)?;
    let batch = p.batch.max(1);
    let mut flows = vec![FlowRx::default(); p.flows];
    let count = &shared.tally.counts[k];
    let mut last_message = Instant::now();
    let mut napper = Napper::new(last_message);
    while !shared.aborting.load(Ordering::Relaxed) {
        let now = Instant::now();
        let spin = p.poll.spins(now, last_message);
        match if spin { Next::Read } else { napper.next() } {
            Next::Read => {}
            Next::Nap => std::thread::sleep(nap::NAP),
            Next::Wait => {
                wait::wait_readable(xsk.fd(), now, Some(now + WAIT_AT_MOST))
                    .map_err(|source| WorkerError::Poll { socket: k, source })?;
            }
        }
        let (mut bytes, mut foreign) = (0u64, 0u64);
        let marks = &shared.tos[k];
        let n = xsk.recv(batch as u32, |frame| match udp_payload(frame) {
            Some(payload) => {
                bytes += payload.len() as u64;
                let ours = account(payload, &mut flows, p.cookie);
                foreign += u64::from(!ours);
                // The test's own frames, as the kernel engine counts its datagrams.
                if ours && p.read_tos {
                    marks.add(tos_of(frame));
                }
            }
            None => foreign += 1,
        }) as usize;
        let after = Instant::now();
        napper.after_read(n, batch, after);
        if n == 0 {
            if spin && shared.busy_polling {
                xsk.poke();
            }
            continue;
        }
        last_message = after;
        count.add([n as u64, bytes]);
        if foreign > 0 {
            shared.tally.foreign[k].fetch_add(foreign, Ordering::Relaxed);
        }
    }
    if let Ok(st) = xsk.stats() {
        let dropped = st.rx_dropped + st.rx_ring_full;
        shared.drops.fetch_add(dropped, Ordering::Relaxed);
    }
    Ok(flows)
}
