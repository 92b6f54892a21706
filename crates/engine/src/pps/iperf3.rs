//! iperf3's UDP datagrams in the packet-rate workers, so that they can send to an `iperf3
//! -s` or an `iperf3 -c -R` and receive from either: every datagram starts with its send
//! time (seconds and microseconds of CLOCK_MONOTONIC, as iperf3's `iperf_time_now`) and a
//! sequence number counted from 1, of 32 bits or 64 (`--udp-counters-64bit`), big-endian.
//! A receiver counts lost, out-of-order and jitter exactly as iperf3's `iperf_udp_recv`
//! does ([`Iperf3Rx`]), so an iperf3 peer reads our figures as its own.

/// CLOCK_MONOTONIC as iperf3 stamps it: (seconds, microseconds).
#[inline]
pub(crate) fn stamp_now() -> (u32, u32) {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes one live timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u32, (ts.tv_nsec / 1000) as u32)
}

/// A stamp in seconds.
#[inline]
pub(crate) fn seconds((sec, usec): (u32, u32)) -> f64 {
    f64::from(sec) + f64::from(usec) / 1e6
}

/// Writes iperf3's header: `stamp`, then `seq` (32 bits unless `wide`).
#[inline]
pub(crate) fn write_header(buf: &mut [u8], (sec, usec): (u32, u32), seq: u64, wide: bool) {
    buf[0..4].copy_from_slice(&sec.to_be_bytes());
    buf[4..8].copy_from_slice(&usec.to_be_bytes());
    match wide {
        true => buf[8..16].copy_from_slice(&seq.to_be_bytes()),
        false => buf[8..12].copy_from_slice(&(seq as u32).to_be_bytes()),
    }
}

/// iperf3's header of a datagram: its stamp and sequence number; `None` when too short.
#[inline]
pub(crate) fn read_header(buf: &[u8], wide: bool) -> Option<((u32, u32), u64)> {
    let b = buf.get(..if wide { 16 } else { 12 })?;
    let word = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    let seq = match wide {
        true => (u64::from(word(8)) << 32) | u64::from(word(12)),
        false => u64::from(word(8)),
    };
    Some(((word(0), word(4)), seq))
}

/// One stream's receive figures as iperf3 computes them: `packets` is the highest
/// sequence number seen, `lost` the gaps below it less the late arrivals that filled
/// them, `jitter_s` RFC 1889's running mean of transit-time differences (1/16 gain).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Iperf3Rx {
    pub packets: u64,
    pub lost: u64,
    pub out_of_order: u64,
    pub jitter_s: f64,
    /// Datagrams and payload bytes taken (a first one starts the jitter).
    pub datagrams: u64,
    pub bytes: u64,
    prev_transit_s: f64,
}

impl Iperf3Rx {
    /// Accounts one datagram of `len` bytes numbered `seq`, sent at `sent_s` and read at
    /// `arrival_s` (seconds of the two ends' clocks: only their differences count).
    pub fn on_packet(&mut self, seq: u64, len: usize, sent_s: f64, arrival_s: f64) {
        let first = self.datagrams == 0;
        self.datagrams += 1;
        self.bytes += len as u64;
        if seq > self.packets {
            self.lost += seq - 1 - self.packets;
            self.packets = seq;
        } else {
            self.out_of_order += 1;
            self.lost = self.lost.saturating_sub(1);
        }
        let transit = (arrival_s - sent_s).abs();
        if first {
            self.prev_transit_s = transit;
        }
        let d = (transit - self.prev_transit_s).abs();
        self.prev_transit_s = transit;
        self.jitter_s += (d - self.jitter_s) / 16.0;
    }

    /// Both counts of one stream read by two receivers (one only ever reads it).
    pub fn merge(&mut self, other: &Iperf3Rx) {
        if other.datagrams > self.datagrams {
            *self = *other;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip_in_both_widths() {
        let mut b = [0u8; 16];
        write_header(&mut b, (7, 999_999), (1 << 40) + 3, true);
        assert_eq!(read_header(&b, true), Some(((7, 999_999), (1 << 40) + 3)));
        write_header(&mut b, (7, 5), (1 << 40) + 3, false);
        // 32 bits: the counter wraps as iperf3's does.
        assert_eq!(read_header(&b, false), Some(((7, 5), 3)));
        assert_eq!(&b[8..12], &[0, 0, 0, 3]);
        assert_eq!(read_header(&b[..11], false), None);
    }

    #[test]
    fn loss_and_reordering_counted_as_iperf3_counts_them() {
        let mut r = Iperf3Rx::default();
        // 1..=10 with 4 and 8 lost, 6 after 7: iperf3 counts 6's gap as a loss, then
        // takes it back when 6 comes.
        for seq in [1, 2, 3, 5, 7, 6, 9, 10] {
            r.on_packet(seq, 100, 0.0, 0.0);
        }
        assert_eq!((r.packets, r.lost, r.out_of_order), (10, 2, 1));
        assert_eq!((r.datagrams, r.bytes), (8, 800));
        // A duplicate reads as out of order and, as in iperf3, takes one loss back.
        r.on_packet(9, 100, 0.0, 0.0);
        assert_eq!((r.lost, r.out_of_order), (1, 2));
    }

    #[test]
    fn jitter_is_rfc1889s_running_mean_from_the_second_packet() {
        let mut r = Iperf3Rx::default();
        // Transit 10 ms, then 12 ms, then 10 ms: d = 0, 2 ms, 2 ms.
        r.on_packet(1, 1, 100.0, 100.010);
        assert_eq!(r.jitter_s, 0.0);
        r.on_packet(2, 1, 100.1, 100.112);
        let j1 = 0.002 / 16.0;
        assert!((r.jitter_s - j1).abs() < 1e-12);
        r.on_packet(3, 1, 100.2, 100.210);
        let j2 = j1 + (0.002 - j1) / 16.0;
        assert!((r.jitter_s - j2).abs() < 1e-12, "{}", r.jitter_s);
    }

    #[test]
    fn workers_speak_iperf3_over_loopback_a_socket_a_stream() {
        use crate::pool::Placement;
        use crate::pps::{PpsReceiver, PpsSender, RxPlan, TxPlan, Wire};
        use crate::wait::Poll;
        use std::net::UdpSocket;
        use std::time::{Duration, Instant};
        // Two connected pairs: iperf3's streams, each its own socket at both ends.
        let (mut tx, mut rx) = (Vec::new(), Vec::new());
        for _ in 0..2 {
            let a = UdpSocket::bind("127.0.0.1:0").unwrap();
            let b = UdpSocket::bind("127.0.0.1:0").unwrap();
            a.connect(b.local_addr().unwrap()).unwrap();
            b.connect(a.local_addr().unwrap()).unwrap();
            tx.push(a);
            rx.push(b);
        }
        let wire = Wire::Iperf3 { wide: false };
        let plan = RxPlan {
            cpus: None,
            batch: 8,
            poll: Poll::Block,
            flows: 2,
            cookie: 0,
            read_tos: false,
            tos_by: Default::default(),
        };
        let mut receiver = PpsReceiver::spawn_wire(rx, plan, wire).unwrap();
        let mut sender = PpsSender::spawn_wire(
            tx,
            TxPlan {
                placement: Placement::new(1, None, 2),
                payload_bytes: 100,
                batch: 4,
                rate_pps: Some(10_000.0),
                stop_at: Instant::now() + Duration::from_millis(200),
                cookie: 0,
                gso: false,
            },
            wire,
        )
        .unwrap();
        while !sender.all_done() {
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(50));
        let (sent, err) = sender.join();
        assert!(err.is_none(), "{err:?}");
        receiver.abort();
        let (flows, err) = receiver.join();
        assert!(err.is_none(), "{err:?}");
        for (f, s) in flows.iter().zip(&sent) {
            assert!(*s > 100, "{sent:?}");
            // iperf3's counts: the highest number is the count sent, nothing lost.
            assert_eq!((f.iperf3.packets, f.iperf3.lost), (*s, 0));
            assert_eq!((f.iperf3.datagrams, f.iperf3.bytes), (*s, s * 100));
            assert_eq!(f.received, *s);
            assert!(f.iperf3.jitter_s < 0.01, "{}", f.iperf3.jitter_s);
        }
    }
}
