//! Stages of real messages over loopback: every stage filed, none out of order, and the
//! stages add up to the round trips the client measured.

use super::tests::{finish, plan, server_plan, tcp_pairs};
use super::*;
use crate::rr_server::{RrServer, ServerTarget};
use crate::stamps::{StageHists, STAGES};
use crate::wait::Poll;
use std::net::UdpSocket;

/// Runs a client of `window` over `client` against `server`, with stages on both ends;
/// the round trips and the stages, both over the whole run.
fn run(client: Vec<RrSocket>, server: ServerTarget, window: usize) -> (Histogram, StageHists) {
    let mut sp = server_plan(None, Poll::Block);
    sp.stages = true;
    let _server = RrServer::spawn(server, sp).unwrap();
    let mut p = plan(window, None, false, 0.4);
    p.stages = true;
    let mut c = RrClient::spawn(Target::Sockets(client), p).unwrap();
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

#[test]
fn tcp_and_udp_messages_split_into_stages_that_sum_to_the_round_trip() {
    let _timed = crate::timing_lock();
    for (conns, window) in [(1, 1), (2, 4)] {
        let (c, s) = tcp_pairs(conns);
        let (rtt, stages) = run(c, ServerTarget::Sockets(s), window);
        check(&format!("tcp {conns}x{window}"), &rtt, &stages);
    }
    let server = UdpSocket::bind("127.0.0.1:0").unwrap();
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    client.connect(server.local_addr().unwrap()).unwrap();
    let target = ServerTarget::Udp {
        socket: server,
        allowed: "127.0.0.1".parse().unwrap(),
    };
    let (rtt, stages) = run(vec![RrSocket::Udp(client)], target, 1);
    check("udp", &rtt, &stages);
}
