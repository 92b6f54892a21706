//! Stages of real messages over loopback, on either engine at either end: every stage
//! filed, none out of order, and the stages add up to the round trips the client measured.

use super::tests::{finish, plan, server_plan, tcp_pairs};
use super::*;
use crate::kstamps::{StageHists, STAGES};
use crate::rr_server::{RrServer, ServerTarget};
use crate::uring::rr_server::UringTarget;
use crate::wait::Poll;
use std::net::UdpSocket;

/// Which engine runs each end: io_uring's client, io_uring's echo.
type Engines = (bool, bool);
const KERNEL: Engines = (false, false);
const URING: Engines = (true, true);

/// Runs a client of `window` over `client` against `server`, with stages on both ends,
/// each end on its engine; the round trips and the stages, both over the whole run.
fn run(
    (client, server): (Vec<RrSocket>, ServerTarget),
    window: usize,
    engines: Engines,
) -> (Histogram, StageHists) {
    run_sampled((client, server), window, engines, (1, 1))
}

/// [`run`] with one message in `every` stamped by the client, and one in `echo_every` by
/// the echo (a previous build's echo stamps every one).
fn run_sampled(
    (client, server): (Vec<RrSocket>, ServerTarget),
    window: usize,
    (uring_client, uring_echo): Engines,
    (every, echo_every): (u32, u32),
) -> (Histogram, StageHists) {
    let mut sp = server_plan(None, Poll::Block);
    sp.stages = true;
    sp.stage_every = echo_every;
    let _server = match (uring_echo, server) {
        (false, server) => RrServer::spawn(server, sp),
        (true, ServerTarget::Sockets(s)) => RrServer::spawn_uring(UringTarget::Sockets(s), sp),
        (true, ServerTarget::Udp { socket, allowed }) => {
            RrServer::spawn_uring(UringTarget::Udp { socket, allowed }, sp)
        }
        (true, ServerTarget::Accept { .. }) => unreachable!("open connections only"),
    }
    .unwrap();
    let mut p = plan(window, None, false, 0.4);
    p.stages = true;
    p.stage_every = every;
    let mut c = match uring_client {
        false => RrClient::spawn(Target::Sockets(client), p),
        true => RrClient::spawn_uring(client, p),
    }
    .unwrap();
    let (rtt, ends) = finish(&mut c);
    assert!(ends.iter().all(|e| e.error.is_none()), "{ends:?}");
    let mut stages = StageHists::new();
    c.drain_stages(&mut |_, s| stages.add(s));
    (rtt, stages)
}

type Histogram = hdrhistogram::Histogram<u64>;

fn check(what: &str, rtt: &Histogram, s: &StageHists) {
    let split = s.stages[0].len();
    assert!(rtt.len() > 200, "{what}: {} round trips", rtt.len());
    assert_eq!(s.disordered, 0, "{what}: a stage out of order");
    // The first few messages may come before the kernel's receive stamps are switched on.
    assert!(
        split + s.missing == rtt.len() && s.missing * 20 <= rtt.len(),
        "{what}: {split} split, {} missing of {}",
        s.missing,
        rtt.len()
    );
    assert!(s.stages.iter().all(|h| h.len() == split), "{what}");
    // Each message's stages sum to its round trip, so their means sum to the mean round
    // trip of the messages split (all but the few missing): within the histograms' 0.1 %
    // and the two clocks' readings a few ns apart.
    let sum: f64 = s.stages.iter().map(|h| h.mean()).sum();
    let rel = (sum - rtt.mean()).abs() / rtt.mean();
    assert!(
        rel < 0.03,
        "{what}: stages sum to {sum:.0} ns, round trips {:.0}",
        rtt.mean()
    );
    assert_eq!(s.stages.len(), STAGES);
}

/// Sampled: about one message in `every` of each connection split (a connection's
/// first, then each `every`-th: at most one more a connection than the share), none out
/// of order, few missing; each one's stages summed to its round trip on the real clock
/// exactly (`StageHists::file` asserts it for every message filed).
fn check_sampled(what: &str, rtt: &Histogram, s: &StageHists, every: u64, conns: u64) {
    let (split, booked) = (s.stages[0].len(), s.stages[0].len() + s.missing);
    let share = rtt.len() / every;
    assert!(rtt.len() > 200, "{what}: {} round trips", rtt.len());
    assert_eq!(s.disordered, 0, "{what}: a stage out of order");
    assert!(
        booked + 2 * conns >= share && booked <= share + 2 * conns,
        "{what}: {booked} booked ({split} split) of {} round trips, one in {every}",
        rtt.len()
    );
    assert!(s.missing * 10 <= booked, "{what}: {} missing", s.missing);
    assert!(s.stages.iter().all(|h| h.len() == split), "{what}");
    let sum: f64 = s.stages.iter().map(|h| h.mean()).sum();
    eprintln!(
        "{what}: stage sum mean {sum:.0}, rtt mean {:.0} p50 {} (sampled p50s {:?})",
        rtt.mean(),
        rtt.value_at_quantile(0.5),
        s.stages
            .iter()
            .map(|h| h.value_at_quantile(0.5))
            .collect::<Vec<_>>()
    );
}

fn tcp(conns: usize) -> (Vec<RrSocket>, ServerTarget) {
    let (c, s) = tcp_pairs(conns);
    (c, ServerTarget::Sockets(s))
}

/// `conns` UDP connections to one echo socket.
fn udp(conns: usize) -> (Vec<RrSocket>, ServerTarget) {
    let server = UdpSocket::bind("127.0.0.1:0").unwrap();
    let clients = (0..conns)
        .map(|_| {
            let client = UdpSocket::bind("127.0.0.1:0").unwrap();
            client.connect(server.local_addr().unwrap()).unwrap();
            RrSocket::Udp(client)
        })
        .collect();
    let target = ServerTarget::Udp {
        socket: server,
        allowed: "127.0.0.1".parse().unwrap(),
    };
    (clients, target)
}

/// TCP windows of 1 and 2x4, and UDP windows of 1 and 2x2 (two connections answered by
/// one echo socket, their sequence numbers alike), on `engines`.
fn split_everything(engines: Engines) {
    for (conns, window) in [(1, 1), (2, 4)] {
        let (rtt, stages) = run(tcp(conns), window, engines);
        check(&format!("{engines:?} tcp {conns}x{window}"), &rtt, &stages);
    }
    for (conns, window) in [(1, 1), (2, 2)] {
        let (rtt, stages) = run(udp(conns), window, engines);
        check(&format!("{engines:?} udp {conns}x{window}"), &rtt, &stages);
    }
}

#[test]
fn tcp_and_udp_messages_split_into_stages_that_sum_to_the_round_trip() {
    let _timed = crate::timing_lock();
    split_everything(KERNEL);
}

/// io_uring's receives bring their stamps in the buffer (RECVMSG's layout), its echo's
/// batched answers each carry their own figures; and its ends pair with the kernel
/// engine's (the same figures on the wire, the same client book).
#[test]
fn io_uring_messages_split_into_the_same_stages() {
    let _timed = crate::timing_lock();
    split_everything(URING);
    let (rtt, stages) = run(tcp(2), 4, (true, false));
    check("uring client, kernel echo: tcp 2x4", &rtt, &stages);
    let (rtt, stages) = run(udp(1), 1, (false, true));
    check("kernel client, uring echo: udp", &rtt, &stages);
}

/// One message in 8 stamped (sends asking one by one, UDP's keyed by sequence), on both
/// engines and across them: the echo stamps what the client sampled, so the sampled
/// messages are split and no more.
#[test]
fn one_message_in_n_is_split_on_either_engine() {
    let _timed = crate::timing_lock();
    const EVERY: u32 = 8;
    for engines in [KERNEL, URING, (true, false), (false, true)] {
        for (conns, window) in [(1, 1), (2, 4)] {
            let (rtt, stages) = run_sampled(tcp(conns), window, engines, (EVERY, EVERY));
            let what = format!("{engines:?} tcp {conns}x{window} 1/{EVERY}");
            check_sampled(&what, &rtt, &stages, EVERY.into(), conns as u64);
        }
        let (rtt, stages) = run_sampled(udp(2), 2, engines, (EVERY, EVERY));
        let what = format!("{engines:?} udp 2x2 1/{EVERY}");
        check_sampled(&what, &rtt, &stages, EVERY.into(), 2);
    }
}

/// A sampling client against an echo that stamps every answer (a previous build's agent,
/// which ignores the spec's sampling): the client's sampled messages are split all the
/// same, from the figures of the answers that carry them.
#[test]
fn a_sampling_client_splits_against_an_echo_that_stamps_everything() {
    let _timed = crate::timing_lock();
    const EVERY: u32 = 8;
    let (rtt, stages) = run_sampled(tcp(1), 1, KERNEL, (EVERY, 1));
    check_sampled("tcp against an all-stamping echo", &rtt, &stages, 8, 1);
    let (rtt, stages) = run_sampled(udp(1), 2, KERNEL, (EVERY, 1));
    check_sampled("udp against an all-stamping echo", &rtt, &stages, 8, 1);
}
