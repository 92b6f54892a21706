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

pub mod iperf3;
mod recv;
mod send;

pub use iperf3::Iperf3Rx;
pub use recv::{
    attach_tos_filter, PpsReceiver, Receivers, RxCounts, RxPlan, TosBy, FILTER_NOTE,
    IPERF3_DATAGRAM_BYTES,
};
pub(crate) use recv::{Tallied, Tally};
pub use send::{Blocked, PpsSender, Sending, TxPlan, MAX_GSO_SEGMENTS};

use crate::counters::Counters;

/// Bytes of our header at the start of each UDP payload: cookie, flow, sequence.
pub const HEADER_BYTES: usize = 16;

/// What the workers write at the start of each datagram and read back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Wire {
    /// Ours: cookie, flow, sequence from 0; flows share sockets.
    #[default]
    Sonde,
    /// iperf3's: time, sequence from 1; each socket is one flow (one iperf3 stream).
    Iperf3 { wide: bool },
}

impl Wire {
    /// Bytes of the header (a payload must hold it).
    pub fn header_bytes(self) -> usize {
        match self {
            Wire::Sonde => HEADER_BYTES,
            Wire::Iperf3 { wide } => sonde_proto::iperf3::udp::header_bytes(wide),
        }
    }
}
/// Ethernet (14) + IPv4 (20) + UDP (8): what a packet's wire size adds to its payload,
/// counted as testpmd counts packet length (no preamble, no FCS).
pub const WIRE_OVERHEAD_BYTES: usize = 42;
pub const MAX_FLOWS: usize = 4096;
const DUP_WINDOW: u64 = 1024;

/// Packets and UDP payload bytes of one worker.
pub(crate) type Count = Counters<2>;

/// The header written at the start of every packet.
#[inline]
pub(crate) fn write_header(buf: &mut [u8], cookie: u32, flow: u32, seq: u64) {
    buf[0..4].copy_from_slice(&cookie.to_be_bytes());
    buf[4..8].copy_from_slice(&flow.to_be_bytes());
    buf[8..16].copy_from_slice(&seq.to_be_bytes());
}

/// Accounts one received UDP payload in its flow; false when it was not this test's
/// (too short, another cookie, a flow out of range).
#[inline]
pub(crate) fn account(payload: &[u8], flows: &mut [FlowRx], cookie: u32) -> bool {
    let Some(h) = payload.get(..HEADER_BYTES) else {
        return false;
    };
    let their_cookie = u32::from_be_bytes(h[0..4].try_into().expect("4 bytes"));
    let flow = u32::from_be_bytes(h[4..8].try_into().expect("4 bytes")) as usize;
    let seq = u64::from_be_bytes(h[8..16].try_into().expect("8 bytes"));
    match flows.get_mut(flow) {
        Some(f) if their_cookie == cookie => {
            f.on_packet(seq);
            true
        }
        _ => false,
    }
}

/// Accounts one iperf3 datagram read at `arrival_s` in `flow` (the socket's own):
/// iperf3's figures, and ours from its sequence numbers (counted from 1); false when it
/// is not one (too short, or numbered 0).
#[inline]
pub(crate) fn account_iperf3(
    payload: &[u8],
    flow: Option<&mut FlowRx>,
    wide: bool,
    arrival_s: f64,
) -> bool {
    match (iperf3::Header::read(payload, wide), flow) {
        (Some(h), Some(f)) if h.seq > 0 => {
            f.on_packet(h.seq - 1);
            f.iperf3
                .on_packet(h.seq, payload.len(), h.seconds(), arrival_s);
            true
        }
        _ => false,
    }
}

/// What a sender thread returns: packets sent per flow it owned, by flow index.
pub(crate) type TxOutcome = Result<Vec<(usize, u64)>, crate::pool::WorkerError>;

/// What a receiver thread returns: its accounting of every flow.
pub(crate) type RxOutcome = Result<Vec<FlowRx>, crate::pool::WorkerError>;

/// Packets sent per flow from the senders' outcomes (each a list of (flow, sent)), and
/// the first error a sender met.
pub(crate) fn gather_sent(
    outcomes: Vec<crate::pool::Outcome<TxOutcome>>,
    flows: usize,
) -> (Vec<u64>, Option<String>) {
    let mut per_flow = vec![0; flows];
    let mut error = None;
    for outcome in outcomes {
        match outcome.and_then(|r| r) {
            Ok(list) => list.into_iter().for_each(|(f, sent)| per_flow[f] = sent),
            Err(e) => error = error.or(Some(e.to_string())),
        }
    }
    (per_flow, error)
}

/// Per-flow accounting merged over the receivers' outcomes, and the first error met.
pub(crate) fn gather_received(
    outcomes: Vec<crate::pool::Outcome<RxOutcome>>,
    flows: usize,
) -> (Vec<FlowRx>, Option<String>) {
    let mut merged = vec![FlowRx::default(); flows];
    let mut error = None;
    for outcome in outcomes {
        match outcome.and_then(|r| r) {
            Ok(list) => merged.iter_mut().zip(&list).for_each(|(a, f)| a.merge(f)),
            Err(e) => error = error.or(Some(e.to_string())),
        }
    }
    (merged, error)
}

/// (packets, bytes) over all workers' counters.
pub(crate) fn sum(counts: &[Count]) -> (u64, u64) {
    let [packets, bytes] = Counters::sum(counts);
    (packets, bytes)
}

/// Per-flow receive accounting, sized and allocated before the first packet.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FlowRx {
    /// Distinct packets received.
    pub received: u64,
    /// One past the highest sequence number seen.
    pub highest: u64,
    pub reordered: u64,
    pub duplicated: u64,
    /// iperf3's own figures of the flow, when it carries iperf3's datagrams.
    pub iperf3: Iperf3Rx,
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
        self.iperf3.merge(&other.iperf3);
    }
}

/// The buffers of one batch and the mmsghdr/iovec arrays pointing at them, built once per
/// worker. The inner buffers never move, so the pointers stay valid while `Batch` lives.
pub(crate) struct Batch {
    pub(crate) bufs: Vec<Vec<u8>>,
    _iovs: Vec<libc::iovec>,
    pub(crate) msgs: Vec<libc::mmsghdr>,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::Placement;
    use crate::wait::Poll;
    use std::net::UdpSocket;
    use std::time::{Duration, Instant};

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
        for i in 0..4 {
            let s = UdpSocket::bind("127.0.0.1:0").unwrap();
            s.connect(addr).unwrap();
            // Two flows marked EF and ECT(1): each datagram counted by the TOS it came with.
            if i < 2 {
                crate::marks::set_tos(std::os::fd::AsRawFd::as_raw_fd(&s), 0xb9).unwrap();
            }
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
                read_tos: true,
                tos_by: TosBy::Filter,
            },
        )
        .unwrap();
        // 20k packets/s for 0.3 s: well below what loopback drops.
        let mut sender = PpsSender::spawn(
            flows,
            TxPlan {
                placement: Placement::new(2, None, 4),
                sending: Sending {
                    payload_bytes: 22,
                    batch: 16,
                    rate_pps: Some(20_000.0),
                    stop_at: Instant::now() + Duration::from_millis(300),
                    cookie: 7,
                },
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
        let marked = (0, sent[2] + sent[3]);
        let arrived = (vec![marked, (0xb9, sent[0] + sent[1])], 0);
        assert_eq!(receiver.arrived_tos(), Some(arrived));
    }
}
