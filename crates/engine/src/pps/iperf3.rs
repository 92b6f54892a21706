//! iperf3's UDP datagrams in the packet-rate workers, so that they can send to an `iperf3
//! -s` or an `iperf3 -c -R` and receive from either: every datagram starts with its send
//! time (seconds and microseconds of CLOCK_MONOTONIC, as iperf3's `iperf_time_now`) and a
//! sequence number counted from 1, of 32 bits or 64 (`--udp-counters-64bit`), big-endian.
//! The header and iperf3's receive accounting are `sonde_proto::iperf3::udp`'s (one copy,
//! sans-IO); here is only the clock they are stamped with.

pub use sonde_proto::iperf3::udp::{Header, Iperf3Rx};

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

/// CLOCK_MONOTONIC now, in seconds as iperf3's stamps read.
#[inline]
pub(crate) fn now_s() -> f64 {
    let (sec, usec) = stamp_now();
    Header { sec, usec, seq: 0 }.seconds()
}

#[cfg(test)]
mod tests {
    #[test]
    fn workers_speak_iperf3_over_loopback_a_socket_a_stream() {
        use crate::pool::Placement;
        use crate::pps::{PpsReceiver, PpsSender, RxPlan, Sending, TxPlan, Wire};
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
                sending: Sending {
                    payload_bytes: 100,
                    batch: 4,
                    rate_pps: Some(10_000.0),
                    stop_at: Instant::now() + Duration::from_millis(200),
                    cookie: 0,
                },
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
