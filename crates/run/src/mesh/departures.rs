//! Where the prober reads its probes' transmit stamps: from an io_uring ring where the
//! kernel has `SOCKET_URING_OP_TX_TIMESTAMP` (Linux 6.17; `sonde_engine::uring::tx_stamps`),
//! each wake-up's stamps in one pass with no `recvmsg` each, else from the error queue as
//! before. The ICMP errors share that queue and stay there: with the ring it is read only
//! when a send or a read reported one (`IP_RECVERR` fails the next call on the socket
//! once), and once a second should a report have been missed.

use std::net::SocketAddr;
use std::os::fd::RawFd;

use sonde_engine::kstamps::{ErrQueue, TxStamp};
use sonde_engine::uring::tx_stamps::RingStamps;

use super::icmp;

/// How often the error queue is read at least while the ring takes the stamps.
const QUEUE_EVERY_NS: u64 = 1_000_000_000;

pub(super) struct StampReader {
    /// `None`: the stamps are read from the error queue (no ring, or the kernel refused).
    ring: Option<RingStamps>,
    queue: ErrQueue,
    /// A send or a read failed with an ICMP error: its message waits in the error queue.
    reported: bool,
    /// When the error queue was read last (the ledger's clock).
    queue_read_ns: u64,
}

impl StampReader {
    /// The reader for socket `fd`; with `stamping`, its sends ask for their stamps (the
    /// ring is tried; without it, the queue holds the ICMP errors alone).
    pub(super) fn new(fd: RawFd, stamping: bool) -> StampReader {
        let ring = match stamping.then(|| RingStamps::new(fd)) {
            Some(Ok(r)) => Some(r),
            Some(Err(e)) => {
                tracing::info!("mesh: {e}; the probes' stamps are read from the error queue");
                None
            }
            None => None,
        };
        StampReader {
            ring,
            queue: ErrQueue::default(),
            reported: false,
            queue_read_ns: 0,
        }
    }

    /// Whether the stamps come on the ring.
    #[cfg(test)]
    pub(super) fn on_ring(&self) -> bool {
        self.ring.is_some()
    }

    /// A send or a read on the socket failed with an ICMP error.
    pub(super) fn reported(&mut self) {
        self.reported = true;
    }

    /// Gives `stamp` each transmit stamp queued on `fd` now and `error` each ICMP error
    /// read (destination and kind), at `now_ns` on the ledger's clock.
    pub(super) fn read(
        &mut self,
        fd: RawFd,
        now_ns: u64,
        mut stamp: impl FnMut(TxStamp),
        error: impl FnMut(SocketAddr, icmp::Kind),
    ) {
        if let Some(ring) = &mut self.ring {
            if let Err(e) = ring.drain(&mut stamp) {
                // The stamps left queued are read below, and from now on.
                tracing::warn!("mesh: {e}; the probes' stamps are read from the error queue");
                self.ring = None;
            }
        }
        let due = now_ns >= self.queue_read_ns.saturating_add(QUEUE_EVERY_NS);
        if self.ring.is_none() || self.reported || due {
            icmp::drain(&mut self.queue, fd, stamp, error);
            (self.reported, self.queue_read_ns) = (false, now_ns);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonde_engine::kstamps::{datagram, sample};
    use std::net::UdpSocket;
    use std::os::fd::AsRawFd;

    /// On this kernel (6.18, as CI's) the stamps come on the ring, each once; a closed
    /// port's ICMP error, reported by the next read, is read from the queue then; without
    /// stamps asked no ring is made.
    #[test]
    fn stamps_come_on_the_ring_and_a_reported_icmp_error_from_the_queue() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.set_nonblocking(true).unwrap();
        let fd = tx.as_raw_fd();
        icmp::enable(fd, true).unwrap();
        datagram::enable_departure(fd).unwrap();
        assert!(!StampReader::new(fd, false).on_ring());
        let mut r = StampReader::new(fd, true);
        assert!(r.on_ring(), "this kernel has io_uring's transmit stamps");
        let keyed = sample::opt_id_per_send();
        let closed = UdpSocket::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let msgs = [(&b"a"[..], rx.local_addr().unwrap()), (&b"b"[..], closed)];
        assert_eq!(sample::send_batch(fd, &msgs, Some((keyed, 0))).unwrap(), 2);
        let (mut stamps, mut errors) = (0, Vec::new());
        // Within the second: the ring's stamps only, the error not yet read.
        r.read(fd, 1, |_| stamps += 1, |to, k| errors.push((to, k)));
        r.read(fd, 2, |_| stamps += 1, |to, k| errors.push((to, k)));
        assert_eq!((stamps, errors.len()), (2, 0));
        // The next read on the socket reports it.
        let e = tx.recv(&mut [0; 8]).unwrap_err();
        assert!(icmp::reported(&e), "{e}");
        r.reported();
        r.read(fd, 3, |_| stamps += 1, |to, k| errors.push((to, k)));
        assert_eq!(stamps, 2);
        assert_eq!(errors, [(closed, icmp::Kind::Port)]);
    }
}
