//! The path to a peer as a frame-building engine needs it (AF_XDP, DPDK): the interface
//! the kernel routes through, its MAC, and the next hop's MAC from the neighbour table,
//! after making the kernel resolve it.

use super::host::root;
use std::io;
use std::net::{IpAddr, Ipv4Addr, UdpSocket};
use std::time::{Duration, Instant};

use sonde_probe::{host, neigh, route};

/// How long the sender waits for the kernel to resolve the next hop's MAC.
const RESOLVE_FOR: Duration = Duration::from_secs(1);

fn unsupported(reason: String) -> io::Error {
    io::Error::new(io::ErrorKind::Unsupported, reason)
}

/// The next hop's MAC on `iface`; asks the kernel to resolve it first if it has not.
fn next_hop_mac(iface: &str, hop: Ipv4Addr) -> io::Result<[u8; 6]> {
    let lookup = || -> io::Result<Option<[u8; 6]>> {
        let table = neigh::read_arp(root()).map_err(io::Error::other)?;
        Ok(neigh::mac_in(&table, iface, hop))
    };
    if let Some(mac) = lookup()? {
        return Ok(mac);
    }
    // Any datagram toward the hop makes the kernel resolve it (port 9: discard).
    let probe = UdpSocket::bind("0.0.0.0:0")?;
    let _ = probe.send_to(&[0], (hop, 9));
    let until = Instant::now() + RESOLVE_FOR;
    while Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
        if let Some(mac) = lookup()? {
            return Ok(mac);
        }
    }
    Err(unsupported(format!(
        "the neighbour {hop} on {iface} did not resolve within {} ms (no ARP reply)",
        RESOLVE_FOR.as_millis()
    )))
}

/// The interface carrying traffic to `peer` and the MACs of a frame to it.
pub fn path_to(local: Ipv4Addr, peer: Ipv4Addr) -> io::Result<(String, [u8; 6], [u8; 6])> {
    if host::local_addresses().contains(&IpAddr::V4(peer)) || peer.is_loopback() {
        return Err(unsupported(format!(
            "{peer} is this host's own address: frames need a real interface (no loopback)"
        )));
    }
    let routes = route::read_routes(root()).map_err(io::Error::other)?;
    let (iface, hop) = route::next_hop(&routes, peer)
        .ok_or_else(|| unsupported(format!("no IPv4 route to {peer} from {local}")))?;
    let src_mac = neigh::mac_of(root(), &iface).map_err(io::Error::other)?;
    Ok((iface.clone(), src_mac, next_hop_mac(&iface, hop)?))
}
