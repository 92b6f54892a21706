//! io_uring stream workers against each other and against the kernel engine's (the same
//! bytes on the wire), over loopback: every byte sent is received, and a stop ends them.

use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use super::stream::UringStreamWorkers;
use crate::pool::Placement;
use crate::sockopt::set_pacing;
use crate::stream::{ConnEnd, StreamConn, StreamWorkers};

/// Each test connection's pace: 40 MB/s, a few 64 KiB sends a millisecond.
const PACED_BYTES_PER_S: u64 = 40_000_000;

/// Either engine's workers, as a side drives them.
enum Workers {
    Kernel(StreamWorkers),
    Uring(UringStreamWorkers),
}

impl Workers {
    fn spawn(uring: bool, conns: Vec<StreamConn>, threads: usize, zc: bool) -> Workers {
        let (plan, bytes) = (Placement::new(threads, None, usize::MAX), 64 * 1024);
        if uring {
            Workers::Uring(UringStreamWorkers::spawn(conns, plan, bytes, zc).unwrap())
        } else {
            Workers::Kernel(StreamWorkers::spawn(conns, plan, bytes).unwrap())
        }
    }

    fn bytes(&self, i: usize) -> u64 {
        match self {
            Workers::Kernel(w) => w.conns().counters(i).0,
            Workers::Uring(w) => w.conns().counters(i).0,
        }
    }

    fn finish(&self) {
        match self {
            Workers::Kernel(w) => w.finish(),
            Workers::Uring(w) => w.finish(),
        }
    }

    fn wait_done(&self) {
        let t = Instant::now();
        while !match self {
            Workers::Kernel(w) => w.all_done(),
            Workers::Uring(w) => w.all_done(),
        } {
            assert!(t.elapsed() < Duration::from_secs(5), "workers did not end");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn join(&mut self) -> Vec<ConnEnd> {
        match self {
            Workers::Kernel(w) => w.join(),
            Workers::Uring(w) => w.join(),
        }
    }
}

/// Loopback pairs, the senders paced (so that these tests leave the CPUs to the timing
/// tests running beside them, and the sends wait for the socket in the ring).
fn pairs(n: usize) -> (Vec<StreamConn>, Vec<StreamConn>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let (mut tx, mut rx) = (Vec::new(), Vec::new());
    for _ in 0..n {
        let stream = TcpStream::connect(addr).unwrap();
        set_pacing(stream.as_raw_fd(), PACED_BYTES_PER_S).unwrap();
        tx.push(StreamConn { stream, send: true });
        let stream = l.accept().unwrap().0;
        rx.push(StreamConn {
            stream,
            send: false,
        });
    }
    (tx, rx)
}

/// Sender and receiver engines (uring?), connections per worker, zero-copy sends.
fn reconcile(send_uring: bool, recv_uring: bool, per_worker: usize, zc: bool) {
    let case = format!("uring sends {send_uring}, receives {recv_uring}, x{per_worker}, zc {zc}");
    let n = 2 * per_worker;
    let (tx, rx) = pairs(n);
    let mut senders = Workers::spawn(send_uring, tx, 2, zc);
    let mut receivers = Workers::spawn(recv_uring, rx, 2, false);
    std::thread::sleep(Duration::from_millis(150));
    senders.finish();
    senders.wait_done();
    receivers.wait_done();
    let sent: Vec<u64> = (0..n).map(|i| senders.bytes(i)).collect();
    let got: Vec<u64> = (0..n).map(|i| receivers.bytes(i)).collect();
    assert!(sent.iter().all(|&b| b > 0), "{case}: {sent:?}");
    assert_eq!(sent, got, "{case}");
    assert!(
        senders.join().iter().all(|e| *e == ConnEnd::Clean),
        "{case}"
    );
    assert!(
        receivers.join().iter().all(|e| *e == ConnEnd::Clean),
        "{case}"
    );
    if let Workers::Uring(w) = &senders {
        let usage = w.zerocopy_usage();
        assert_eq!(usage.is_some(), zc, "{case}");
        // Loopback: the receiver is local, so every notification says "copied".
        assert!(
            usage.is_none_or(|(notes, _)| notes > 0),
            "{case}: {usage:?}"
        );
    }
}

#[test]
fn every_byte_sent_is_received_after_finish() {
    for per_worker in [1, 4] {
        for zc in [false, true] {
            reconcile(true, true, per_worker, zc);
        }
    }
}

#[test]
fn uring_and_kernel_engines_reconcile_with_each_other() {
    for per_worker in [1, 4] {
        reconcile(true, false, per_worker, false);
        reconcile(true, false, per_worker, true);
        reconcile(false, true, per_worker, false);
    }
}

#[test]
fn an_abort_wakes_workers_waiting_in_the_ring() {
    // Receivers with a silent peer, and senders whose peer never reads (sockets full):
    // both wait in io_uring_enter with nothing to complete.
    for send in [false, true] {
        let (tx, rx) = pairs(3);
        let (mine, _peer) = if send { (tx, rx) } else { (rx, tx) };
        let mut w = Workers::spawn(true, mine, 1, false);
        std::thread::sleep(Duration::from_millis(200));
        let t = Instant::now();
        if let Workers::Uring(u) = &w {
            u.abort();
        }
        w.wait_done();
        // Woken, not left to wait for a peer that never comes (a loaded machine may take
        // a while to run them: 5 s, not 1).
        assert!(t.elapsed() < Duration::from_secs(5), "send {send}");
        assert!(
            w.join().iter().all(|e| *e == ConnEnd::Aborted),
            "send {send}"
        );
    }
}

#[test]
fn a_peer_reset_fails_the_connection() {
    let (tx, rx) = pairs(1);
    let mut w = Workers::spawn(true, tx, 1, false);
    std::thread::sleep(Duration::from_millis(50));
    drop(rx); // unread data queued: the kernel answers with RST
    w.wait_done();
    assert!(matches!(w.join()[0], ConnEnd::Failed(_)));
}
