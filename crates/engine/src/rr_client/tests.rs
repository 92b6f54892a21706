//! Client workers against real rr_server workers over loopback sockets.

use super::*;
use crate::rr_server::{RrServer, ServerPlan, ServerTarget};
use crate::wait::Poll;
use hdrhistogram::Histogram;
use std::net::TcpListener;
use std::time::{Duration, Instant};

pub(crate) fn plan(
    window: usize,
    pace: Option<Duration>,
    open_loop: bool,
    secs: f64,
) -> ClientPlan {
    let now = Instant::now();
    let end = now + Duration::from_secs_f64(secs);
    ClientPlan {
        placement: Placement::new(1, None, 1),
        request_bytes: 100,
        response_bytes: 300,
        cookie: 0x5eed,
        window,
        poll: Poll::Block,
        pace,
        open_loop,
        window_start: now,
        window_end: end,
        interval: Duration::from_millis(100),
        stop_sending_at: end,
        drain_until: end + Duration::from_millis(500),
        udp_loss_timeout: Duration::from_millis(200),
        sqpoll: false,
        stages: false,
        stage_every: 1,
        hardware_rx: false,
        read_tos: false,
    }
}

pub(crate) fn server_plan(stall: Option<(Instant, Duration)>, poll: Poll) -> ServerPlan {
    ServerPlan {
        stall,
        ..ServerPlan::echo(Placement::new(1, None, 1), 100, 300, 0x5eed, poll)
    }
}

pub(crate) fn tcp_pairs(n: usize) -> (Vec<RrSocket>, Vec<RrSocket>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut c = Vec::new();
    let mut s = Vec::new();
    for _ in 0..n {
        c.push(RrSocket::Tcp(
            TcpStream::connect(l.local_addr().unwrap()).unwrap(),
        ));
        s.push(RrSocket::Tcp(l.accept().unwrap().0));
    }
    (c, s)
}

pub(crate) fn finish(client: &mut RrClient) -> (Histogram<u64>, Vec<WorkerEnd>) {
    let t = Instant::now();
    while !client.all_done() {
        assert!(t.elapsed() < Duration::from_secs(5));
        std::thread::sleep(Duration::from_millis(5));
    }
    let ends = client.join();
    let mut h = Histogram::<u64>::new_with_bounds(1, crate::MAX_LATENCY_NS, 3).unwrap();
    client.drain(&mut |_, x| h.add(x).unwrap());
    (h, ends)
}

#[test]
fn closed_loop_window_keeps_every_message_accounted() {
    let _spinning = crate::timing_lock();
    for poll in [
        Poll::Block,
        Poll::Busy,
        Poll::Hybrid(Duration::from_micros(50)),
    ] {
        let (c, s) = tcp_pairs(3);
        let server = RrServer::spawn(ServerTarget::Sockets(s), server_plan(None, poll)).unwrap();
        let mut p = plan(4, None, false, 0.3);
        p.poll = poll;
        p.placement.threads = 2;
        let mut client = RrClient::spawn(Target::Sockets(c), p).unwrap();
        let (h, ends) = finish(&mut client);
        let (sent, completed) = client.counts();
        assert!(completed > 100, "{poll:?}: {completed}");
        // Responses to the last windowful arrive after the window closed: not recorded.
        assert!(
            h.len() <= completed && completed - h.len() <= 4 * 3,
            "{poll:?}: {} of {completed}",
            h.len()
        );
        let unanswered: u64 = ends.iter().map(|e| e.unanswered).sum();
        assert_eq!(sent, completed + unanswered, "{poll:?}");
        assert!(ends.iter().all(|e| e.error.is_none()), "{ends:?}");
        assert!(server.answered() >= completed);
    }
}

#[test]
fn open_loop_sees_a_server_stall_closed_loop_hides_it() {
    let stall = Duration::from_millis(100);
    let mut p99 = Vec::new();
    for open in [true, false] {
        let (c, s) = tcp_pairs(1);
        let at = Instant::now() + Duration::from_millis(300);
        let _server = RrServer::spawn(
            ServerTarget::Sockets(s),
            server_plan(Some((at, stall)), Poll::Block),
        )
        .unwrap();
        // 2000 requests/s on one connection, window 64.
        let pace = open.then_some(Duration::from_micros(500));
        let mut client = RrClient::spawn(Target::Sockets(c), plan(64, pace, open, 1.0)).unwrap();
        let (h, _) = finish(&mut client);
        assert!(
            h.max() >= 90_000_000,
            "open={open}: the stall itself, max {}",
            h.max()
        );
        p99.push(h.value_at_quantile(0.99));
    }
    assert!(
        p99[0] > 30_000_000,
        "open loop P99 {} ns should carry the stall",
        p99[0]
    );
    assert!(
        p99[1] < 10_000_000,
        "closed loop P99 {} ns records one slow message only",
        p99[1]
    );
}

#[test]
fn udp_ping_and_loss() {
    let server_sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    let client_sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    client_sock
        .connect(server_sock.local_addr().unwrap())
        .unwrap();
    let server = RrServer::spawn(
        ServerTarget::Udp {
            socket: server_sock,
            allowed: "127.0.0.1".parse().unwrap(),
        },
        server_plan(None, Poll::Block),
    )
    .unwrap();
    let mut client = RrClient::spawn(
        Target::Sockets(vec![RrSocket::Udp(client_sock)]),
        plan(1, None, false, 0.3),
    )
    .unwrap();
    let (h, ends) = finish(&mut client);
    assert!(h.len() > 100);
    assert_eq!(ends[0].lost, 0);
    // An abort ends the echo's blocking receive; its worker returns (std's recv_from
    // panicked on the empty address such a receive gives) and counted its calls.
    let mut server = server;
    server.abort();
    let errors = server.join();
    assert!(errors.is_empty(), "{errors:?}");
    assert!(server.syscalls() >= 2 * h.len(), "{}", server.syscalls());

    // Nobody answers: every request is lost after the timeout, none hangs.
    let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
    let c = UdpSocket::bind("127.0.0.1:0").unwrap();
    c.connect(silent.local_addr().unwrap()).unwrap();
    let mut client = RrClient::spawn(
        Target::Sockets(vec![RrSocket::Udp(c)]),
        plan(1, None, false, 0.5),
    )
    .unwrap();
    let (h, ends) = finish(&mut client);
    assert_eq!(h.len(), 0);
    assert!(ends[0].lost >= 2, "{ends:?}");
}

#[test]
fn connect_per_request() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let server = RrServer::spawn(
        ServerTarget::Accept {
            listener: l,
            allowed: "127.0.0.1".parse().unwrap(),
        },
        server_plan(None, Poll::Block),
    )
    .unwrap();
    let target = Target::ConnectPerRequest {
        addr,
        opts: SocketOptions::default(),
        connections: 1,
    };
    let mut client = RrClient::spawn(target, plan(1, None, false, 0.3)).unwrap();
    let (h, ends) = finish(&mut client);
    assert!(h.len() > 20, "{}", h.len());
    assert!(ends[0].error.is_none(), "{ends:?}");
    assert!(server.answered() >= h.len());
}

/// The stop rules every engine's request worker follows (`ClientPlan::goes_on`).
#[test]
fn a_request_worker_sends_until_its_end_then_drains_its_answers() {
    let p = plan(4, None, false, 1.0);
    let (sending, after) = (p.window_start, p.stop_sending_at);
    let never = || panic!("not asked while sending");
    assert_eq!(p.goes_on(sending, false, never, || false), Some(true));
    assert_eq!(p.goes_on(sending, true, || 3, || false), None, "aborted");
    assert_eq!(p.goes_on(sending, false, || 3, || true), None, "all dead");
    // After the last request: on while answers are out, within the drain time.
    assert_eq!(p.goes_on(after, false, || 3, || false), Some(false));
    assert_eq!(p.goes_on(after, false, || 0, || false), None, "all in");
    assert_eq!(
        p.goes_on(p.drain_until, false, || 3, || false),
        None,
        "drained"
    );
}
