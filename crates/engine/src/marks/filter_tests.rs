//! The filter in the kernel, on loopback sockets: a receiver's marks counted exactly by
//! it and by the control messages alike, a foreign sender's datagrams (another cookie, a
//! flow out of range, too short) in neither count and none of them dropped, and nothing
//! left loaded once the receiver is gone or an attach fails half-way.

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use super::*;
use crate::pps::{PpsReceiver, RxPlan, TosBy, FILTER_NOTE};
use crate::wait::Poll;

/// A cookie with its top bit set: compared as 32 bits, never sign-extended.
const COOKIE: u32 = 0xdead_beef;

fn datagram(cookie: u32, flow: u32, seq: u64) -> Vec<u8> {
    let mut b = vec![0u8; 22];
    crate::pps::write_header(&mut b, cookie, flow, seq);
    b
}

/// A socket bound like `bind`, sending with `tos`, `n` datagrams of `each(seq)` to `to`.
fn send(bind: &str, tos: u8, to: SocketAddr, n: u64, each: impl Fn(u64) -> Vec<u8>) {
    let s = UdpSocket::bind(bind).unwrap();
    crate::marks::set_tos(s.as_raw_fd(), tos).unwrap();
    for seq in 0..n {
        s.send_to(&each(seq), to).unwrap();
        if seq % 64 == 63 {
            // Well below what the receive buffer holds between two reads.
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

fn receiver(rx: UdpSocket, tos_by: TosBy) -> PpsReceiver {
    let plan = RxPlan {
        cpus: None,
        batch: 32,
        poll: Poll::Block,
        flows: 2,
        cookie: COOKIE,
        read_tos: true,
        tos_by,
    };
    PpsReceiver::spawn(vec![rx], plan).unwrap()
}

/// Waits until the receiver has read `n` datagrams (ours and foreign).
fn wait_for(r: &PpsReceiver, n: u64) {
    let until = Instant::now() + Duration::from_secs(5);
    while r.counts().0 < n && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(r.counts().0, n, "datagrams read");
}

/// The attack: beside the test's two marked flows, a foreign sender on the same host
/// sends CS7 datagrams to the receiver's port: another cookie, the test's cookie with a
/// flow out of range, and 5-byte datagrams (too short for a header: the filter must not
/// read past them, nor drop them). IPv4, IPv6, and IPv4 to a dual-stack socket; the
/// filter and the control messages give the same exact counts, without the foreign.
#[test]
fn the_filter_counts_the_tests_marks_exactly_and_no_foreign_senders() {
    for (bind, from, to_ip) in [
        ("127.0.0.1:0", "127.0.0.1:0", "127.0.0.1"),
        ("[::1]:0", "[::1]:0", "::1"),
        ("[::]:0", "127.0.0.1:0", "127.0.0.1"),
    ] {
        let mut got = Vec::new();
        for tos_by in [TosBy::Filter, TosBy::ControlMessage] {
            let rx = UdpSocket::bind(bind).unwrap();
            // Room for every datagram of the test however late the receiver reads.
            let room = 8 << 20;
            crate::int_option::set_level_int(
                rx.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUFFORCE,
                room,
            )
            .unwrap();
            let to = SocketAddr::new(to_ip.parse().unwrap(), rx.local_addr().unwrap().port());
            let mut r = receiver(rx, tos_by);
            let note = r.tos_note().unwrap();
            assert_eq!(note == FILTER_NOTE, tos_by == TosBy::Filter, "{note}");
            send(from, 0xb9, to, 300, |s| datagram(COOKIE, 0, s));
            send(from, 0x8b, to, 200, |s| datagram(COOKIE, 1, s));
            send(from, 0xe0, to, 100, |s| datagram(COOKIE ^ 1, 0, s));
            send(from, 0xe0, to, 50, |s| datagram(COOKIE, 2, s));
            send(from, 0xe0, to, 20, |_| vec![0xde, 0xad, 0xbe, 0xef, 0]);
            wait_for(&r, 670);
            assert_eq!(
                r.foreign(),
                170,
                "{bind} {tos_by:?}: foreign datagrams read"
            );
            let arrived = r.arrived_tos().unwrap();
            assert_eq!(
                arrived,
                (vec![(0x8b, 200), (0xb9, 300)], 0),
                "{bind} {tos_by:?}"
            );
            got.push(arrived);
            r.abort();
            let (flows, err) = r.join();
            assert!(err.is_none(), "{err:?}");
            assert_eq!((flows[0].received, flows[1].received), (300, 200));
        }
        assert_eq!(
            got[0], got[1],
            "{bind}: the filter's counts and the messages'"
        );
    }
}

/// Waits (the kernel frees a program after a grace period) until `id` is gone.
fn gone(id: u32) -> bool {
    let until = Instant::now() + Duration::from_secs(5);
    while prog_exists(id).unwrap() {
        if Instant::now() > until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

/// Every way out leaves no program loaded: a receiver stopped and dropped, and an attach
/// that fails on its second descriptor (not a socket) after the first took the filter.
#[test]
fn nothing_stays_loaded_after_a_receiver_or_a_failed_attach() {
    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut r = receiver(rx, TosBy::Filter);
    let id = r.tos_filter_id().expect("the filter loaded (run as root)");
    assert!(prog_exists(id).unwrap());
    assert!(loaded_filters().unwrap().contains(&id));
    r.abort();
    let _ = r.join();
    drop(r);
    assert!(gone(id), "program {id} still loaded after the receiver");

    let good = UdpSocket::bind("127.0.0.1:0").unwrap();
    let whole = TosFilter::attach(&[good.as_raw_fd()], 1, 1).unwrap();
    assert!(has_ebpf_filter(&good), "attached, the socket holds it");
    drop(whole);
    detach(good.as_raw_fd());
    assert!(!has_ebpf_filter(&good));
    let mut pipe = [0; 2];
    // SAFETY: a plain pipe(2) into a two-int array.
    assert_eq!(unsafe { libc::pipe(pipe.as_mut_ptr()) }, 0);
    let err = TosFilter::attach(&[good.as_raw_fd(), pipe[0]], 1, 1).err();
    // SAFETY: our own pipe's ends, closed once.
    unsafe {
        libc::close(pipe[0]);
        libc::close(pipe[1]);
    }
    assert!(err.is_some(), "a pipe took a socket filter");
    // The socket that took the filter first, still open, holds it no more: nothing keeps
    // the program loaded.
    assert!(
        !has_ebpf_filter(&good),
        "the failed attach left the filter on"
    );
}

/// Whether `s` holds an eBPF filter: SO_GET_FILTER reads 0 without one and refuses
/// (EACCES) to dump an eBPF program.
fn has_ebpf_filter(s: &UdpSocket) -> bool {
    let mut len: libc::socklen_t = 0;
    // SAFETY: a zero-length read of the socket's filter: nothing is written.
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_GET_FILTER,
            std::ptr::null_mut(),
            &mut len,
        )
    };
    match r {
        0 => false,
        _ => {
            let e = std::io::Error::last_os_error();
            assert_eq!(e.raw_os_error(), Some(libc::EACCES), "{e}");
            true
        }
    }
}

/// The program SECURITY.md describes (pps's: 34 instruction slots; a request's 35, an
/// answer's 30), every jump inside it, ending in its one exit after the accept.
#[test]
fn the_program_is_the_size_described_and_its_jumps_land_inside_it() {
    for (m, slots) in [
        (
            Match::Pps {
                cookie: COOKIE,
                flows: 2,
            },
            34,
        ),
        (
            Match::Request {
                cookie: u64::MAX,
                bytes: 64,
            },
            35,
        ),
        (Match::Length { bytes: 64 }, 30),
    ] {
        let p = program(m, 4, 3);
        assert_eq!(p.len(), slots, "{m:?}");
        for (pc, i) in p.iter().enumerate() {
            let is_jump = i.code & 0x07 == 0x05 || i.code & 0x07 == 0x06;
            if is_jump && i.code != JMP | CALL && i.code != JMP | EXIT {
                let to = pc as i64 + 1 + i64::from(i.off);
                assert!(
                    (0..p.len() as i64).contains(&to),
                    "{m:?}: jump at {pc} to {to}"
                );
            }
        }
        assert_eq!(p[p.len() - 1].code, JMP | EXIT);
        assert_eq!(
            (p[p.len() - 2].code, p[p.len() - 2].imm),
            (ALU64 | MOV | K, -1)
        );
    }
}

/// Reads every datagram `rx` holds (`n` of them, none dropped by the filter) and returns
/// the filter's counts.
fn read_all(rx: &UdpSocket, n: usize, f: &TosFilter) -> (Vec<(u8, u64)>, u64) {
    rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut buf = [0u8; 256];
    for k in 0..n {
        rx.recv(&mut buf)
            .unwrap_or_else(|e| panic!("datagram {k} of {n}: {e}"));
    }
    rx.set_nonblocking(true).unwrap();
    assert!(rx.recv(&mut buf).is_err(), "more than {n} datagrams");
    f.snapshot()
}

/// A request/response test's filters: on the echo's socket, the requests of the test's
/// length carrying its cookie (both words compared: a cookie wrong in either is foreign);
/// on a client's connected socket, the answers of the test's length. Shorter datagrams
/// (even empty ones) are neither read past nor dropped.
#[test]
fn request_and_answer_filters_count_only_the_tests_datagrams() {
    let cookie: u64 = 0x8123_4567_89ab_cdef;
    let request = |cookie: u64, len: usize| {
        let mut b = vec![0u8; len];
        if len >= 16 {
            crate::udp_match::stamp_cookie(&mut b, cookie);
        }
        b
    };
    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let to = rx.local_addr().unwrap();
    let m = Match::Request { cookie, bytes: 64 };
    let f = TosFilter::attach_matching(&[rx.as_raw_fd()], m).unwrap();
    assert_eq!(f.matching(), m);
    send("127.0.0.1:0", 0xb8, to, 30, |_| request(cookie, 64));
    send("127.0.0.1:0", 0xe0, to, 10, |_| request(cookie ^ 1, 64));
    send("127.0.0.1:0", 0xe0, to, 10, |_| {
        request(cookie ^ 1 << 40, 64)
    });
    send("127.0.0.1:0", 0xe0, to, 10, |_| request(cookie, 63));
    send("127.0.0.1:0", 0xe0, to, 5, |_| request(cookie, 3));
    assert_eq!(read_all(&rx, 65, &f), (vec![(0xb8, 30)], 0));

    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    rx.connect(tx.local_addr().unwrap()).unwrap();
    let f = TosFilter::attach_matching(&[rx.as_raw_fd()], Match::Length { bytes: 32 }).unwrap();
    crate::marks::set_tos(tx.as_raw_fd(), 0x29).unwrap();
    let to = rx.local_addr().unwrap();
    for (n, len) in [(20, 32), (7, 31), (3, 0)] {
        for _ in 0..n {
            tx.send_to(&vec![7u8; len], to).unwrap();
        }
    }
    assert_eq!(read_all(&rx, 30, &f), (vec![(0x29, 20)], 0));
}
