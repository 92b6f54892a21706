//! The prober machine the tests drive: 10 probes a second per peer to a listed set, with
//! or without follow-ups.

use sonde_results::mesh::Judging;

use std::net::{IpAddr, SocketAddr};

use super::*;
use crate::stamp::StampKey;

pub(super) const MS: u64 = 1_000_000;
/// This agent's address, the probes' source.
pub(super) const A: &str = "198.18.3.1";

pub(super) fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

pub(super) fn at(s: &str) -> SocketAddr {
    SocketAddr::new(ip(s), 862)
}

/// 10 probes a second per peer, lost after 100 ms, settled either way 500 ms after; with
/// follow-ups (`prober_with` says).
pub(super) fn prober(key: Option<StampKey>, peers: &[(&str, bool)]) -> Prober {
    prober_with(key, peers, true)
}

pub(super) fn prober_with(
    key: Option<StampKey>,
    peers: &[(&str, bool)],
    follow_up: bool,
) -> Prober {
    let mut p = Prober::new(ProberConfig {
        rate_per_s: 10.0,
        budget_per_s: 100.0,
        judging: Judging {
            timeout_ns: 100 * MS,
            resolve_after_ns: 500 * MS,
            max_flights: 64,
            window_ns: 10_000 * MS,
        },
        key,
        ssid: 7,
        boot_id: Some([1; 16]),
        tos: None,
        seed: 42,
        follow_up,
    });
    let list = peers
        .iter()
        .map(|(addr, open)| Listed {
            peer: Peer {
                addr: at(addr),
                open: *open,
                labels: Default::default(),
            },
            from: ip(A),
        })
        .collect();
    p.set_list(0, list);
    p
}
