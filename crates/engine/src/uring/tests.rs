//! io_uring client and echo workers against each other and against the kernel engine's
//! (the same bytes on the wire), over loopback sockets.

use std::net::{IpAddr, UdpSocket};
use std::time::{Duration, Instant};

use super::rr_server::UringTarget;
use crate::rr_client::tests::{finish, plan, server_plan, tcp_pairs};
use crate::rr_client::{RrClient, RrSocket, Target};
use crate::rr_server::{RrServer, ServerTarget};
use crate::wait::Poll;

const LOCAL: &str = "127.0.0.1";

fn local() -> IpAddr {
    LOCAL.parse().unwrap()
}

/// Which engine runs each end.
#[derive(Debug, Clone, Copy)]
enum Ends {
    Both,
    ClientOnly,
    EchoOnly,
}

#[test]
fn tcp_windows_are_accounted_in_every_mode_and_against_the_kernel_engine() {
    let _spinning = crate::timing_lock();
    let cases = [
        (Ends::Both, Poll::Block),
        (Ends::Both, Poll::Busy),
        (Ends::Both, Poll::Hybrid(Duration::from_micros(50))),
        (Ends::ClientOnly, Poll::Block),
        (Ends::EchoOnly, Poll::Block),
    ];
    for (ends, poll) in cases {
        let (c, s) = tcp_pairs(3);
        let sp = server_plan(None, poll);
        let server = match ends {
            Ends::ClientOnly => RrServer::spawn(ServerTarget::Sockets(s), sp),
            _ => RrServer::spawn_uring(UringTarget::Sockets(s), sp),
        }
        .unwrap();
        let mut p = plan(4, None, false, 0.3);
        p.poll = poll;
        p.placement.threads = 2;
        let mut client = match ends {
            Ends::EchoOnly => RrClient::spawn(Target::Sockets(c), p),
            _ => RrClient::spawn_uring(c, p),
        }
        .unwrap();
        let (h, worker_ends) = finish(&mut client);
        let (sent, completed) = client.counts();
        assert!(completed > 100, "{ends:?} {poll:?}: {completed}");
        assert!(
            h.len() <= completed && completed - h.len() <= 4 * 3,
            "{ends:?} {poll:?}: {} of {completed}",
            h.len()
        );
        let unanswered: u64 = worker_ends.iter().map(|e| e.unanswered).sum();
        assert_eq!(sent, completed + unanswered, "{ends:?} {poll:?}");
        assert!(
            worker_ends.iter().all(|e| e.error.is_none()),
            "{worker_ends:?}"
        );
        assert!(server.answered() >= completed, "{ends:?} {poll:?}");
    }
}

#[test]
fn udp_is_matched_by_sequence_and_foreign_datagrams_are_not_answered() {
    let server_sock = UdpSocket::bind((LOCAL, 0)).unwrap();
    let at = server_sock.local_addr().unwrap();
    let server = RrServer::spawn_uring(
        UringTarget::Udp {
            socket: server_sock,
            allowed: local(),
        },
        server_plan(None, Poll::Block),
    )
    .unwrap();
    let client_sock = UdpSocket::bind((LOCAL, 0)).unwrap();
    client_sock.connect(at).unwrap();
    let mut p = plan(2, None, false, 0.3);
    p.placement.threads = 1;
    let mut client = RrClient::spawn_uring(vec![RrSocket::Udp(client_sock)], p).unwrap();
    let (h, ends) = finish(&mut client);
    assert!(h.len() > 100, "{}", h.len());
    assert_eq!(ends[0].lost, 0, "{ends:?}");
    assert!(ends[0].error.is_none(), "{ends:?}");
    // One io_uring_enter a request at most (sends post no completion, the wait takes the
    // answer), and at least one a round trip.
    let sent = client.counts().0;
    assert!(
        (sent / 2..=sent).contains(&ends[0].syscalls),
        "{} calls for {sent} requests",
        ends[0].syscalls
    );
    let answered = server.answered();
    assert!(answered >= h.len());

    // A full-size datagram without the cookie, and a one-byte probe: counted, unanswered.
    let rogue = UdpSocket::bind((LOCAL, 0)).unwrap();
    rogue.send_to(&[0u8; 100], at).unwrap();
    rogue.send_to(&[1u8], at).unwrap();
    let t = Instant::now();
    while server.rejected() < 2 && t.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(server.rejected(), 2);
    assert_eq!(server.answered(), answered);
    let mut server = server;
    server.abort();
    let errors = server.join();
    assert!(errors.is_empty(), "{errors:?}");
    assert!(server.syscalls() >= answered / 2, "{}", server.syscalls());
    rogue
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    assert!(
        rogue.recv(&mut [0u8; 512]).is_err(),
        "the echo answered a rogue"
    );
}

#[test]
fn paced_and_open_loop_keep_their_rates() {
    for open in [false, true] {
        let (c, s) = tcp_pairs(2);
        let _server =
            RrServer::spawn_uring(UringTarget::Sockets(s), server_plan(None, Poll::Block)).unwrap();
        // One request per 2 ms per connection, over 0.5 s: about 500 in all.
        let p = plan(4, Some(Duration::from_millis(2)), open, 0.5);
        let mut client = RrClient::spawn_uring(c, p).unwrap();
        let (h, ends) = finish(&mut client);
        assert!(
            (400..=520).contains(&h.len()),
            "open={open}: {} answers",
            h.len()
        );
        assert!(ends.iter().all(|e| e.error.is_none()), "{ends:?}");
    }
}

#[test]
fn an_abort_ends_a_worker_waiting_in_the_ring() {
    let (c, s) = tcp_pairs(2);
    // A server that never answers: the client waits in io_uring_enter.
    let mut p = plan(1, None, false, 30.0);
    p.placement.threads = 1;
    let mut client = RrClient::spawn_uring(c, p).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let t = Instant::now();
    client.abort();
    while !client.all_done() {
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "abort did not wake it"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    client.join();
    drop(s);
}

#[test]
fn sqpoll_sends_without_system_calls_and_busy_polling_receives_without_them() {
    let _spinning = crate::timing_lock();
    for poll in [Poll::Block, Poll::Busy] {
        // The kernel's polling thread takes the submissions only while it has a CPU: on two
        // CPUs, a test of this crate running beside it can take that CPU, the submission
        // ring fills and the worker enters the kernel itself. So a busy run may try thrice.
        let attempts = (1..=3).map(|_| sqpoll_run(poll));
        let mut seen = Vec::new();
        for (calls, sent) in attempts {
            eprintln!("sqpoll {poll:?}: {calls} system calls for {sent} requests");
            seen.push((calls, sent));
            let held = match poll {
                // Block: one io_uring_enter a wait, for many requests.
                Poll::Block => calls <= sent + 64,
                // Busy: the kernel's thread posts the completions; entering only to wake it.
                _ => calls * 10 < sent,
            };
            if held {
                break;
            }
            assert!(seen.len() < 3, "{poll:?}: (calls, requests) {seen:?}");
        }
    }
}

/// One SQPOLL run of 0.3 s on two connections: the workers' system calls and requests sent.
fn sqpoll_run(poll: Poll) -> (u64, u64) {
    let (c, s) = tcp_pairs(2);
    // The echo blocks: on two CPUs, four spinning threads (two workers, two polling
    // kernel threads) would measure the scheduler.
    let mut sp = server_plan(None, Poll::Block);
    sp.sqpoll = poll == Poll::Block;
    let server = RrServer::spawn_uring(UringTarget::Sockets(s), sp).unwrap();
    let mut p = plan(2, None, false, 0.3);
    (p.poll, p.sqpoll) = (poll, true);
    let mut client = RrClient::spawn_uring(c, p).unwrap();
    let (h, ends) = finish(&mut client);
    let (sent, completed) = client.counts();
    assert!(h.len() > 10, "{poll:?}: {} answers in the window", h.len());
    let unanswered: u64 = ends.iter().map(|e| e.unanswered).sum();
    assert_eq!(sent, completed + unanswered, "{poll:?}");
    assert!(ends.iter().all(|e| e.error.is_none()), "{ends:?}");
    assert!(server.answered() >= completed);
    (ends.iter().map(|e| e.syscalls).sum(), sent)
}
