//! Which interface carries traffic to a peer: longest-prefix match over the IPv4 main
//! routing table in /proc/net/route, or `lo` when the peer is one of this host's own
//! addresses (those routes live in the local table, which that file does not show).

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;

use crate::{parse_err, read, FormatError, ProbeError};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub iface: String,
    pub destination: Ipv4Addr,
    pub mask: Ipv4Addr,
    pub gateway: Ipv4Addr,
    pub metric: u32,
}

pub fn read_routes(root: &Path) -> Result<Vec<Route>, ProbeError> {
    let text = read(root, "proc/net/route")?;
    parse(&text).map_err(|r| parse_err(root, "proc/net/route", r))
}

/// Addresses in the file are hexadecimal in host (little-endian on x86) byte order.
fn hex_addr(s: &str) -> Result<Ipv4Addr, FormatError> {
    let v =
        u32::from_str_radix(s, 16).map_err(|e| FormatError::field(format!("address {s}"), e))?;
    Ok(Ipv4Addr::from(v.to_ne_bytes()))
}

pub fn parse(text: &str) -> Result<Vec<Route>, FormatError> {
    let mut out = Vec::new();
    for line in text.lines().skip(1).filter(|l| !l.trim().is_empty()) {
        let f: Vec<&str> = line.split_ascii_whitespace().collect();
        if f.len() < 8 {
            return Err(FormatError::Line {
                what: "short line",
                line: line.to_string(),
            });
        }
        out.push(Route {
            iface: f[0].to_string(),
            destination: hex_addr(f[1])?,
            gateway: hex_addr(f[2])?,
            metric: f[6]
                .parse()
                .map_err(|e| FormatError::field(format!("metric {}", f[6]), e))?,
            mask: hex_addr(f[7])?,
        });
    }
    Ok(out)
}

/// The route the main table would pick for `peer`: longest prefix, then lowest metric.
pub fn lookup(routes: &[Route], peer: Ipv4Addr) -> Option<&Route> {
    let p = u32::from(peer);
    routes
        .iter()
        .filter(|r| p & u32::from(r.mask) == u32::from(r.destination) & u32::from(r.mask))
        .max_by_key(|r| (u32::from(r.mask).count_ones(), std::cmp::Reverse(r.metric)))
}

/// The interface and next hop (the gateway, or the peer itself when on-link) for `peer`.
pub fn next_hop(routes: &[Route], peer: Ipv4Addr) -> Option<(String, Ipv4Addr)> {
    let r = lookup(routes, peer)?;
    let hop = if r.gateway.is_unspecified() {
        peer
    } else {
        r.gateway
    };
    Some((r.iface.clone(), hop))
}

/// Interface carrying traffic to `peer`. `local` lists this host's own addresses.
pub fn interface_to(
    root: &Path,
    peer: IpAddr,
    local: &[IpAddr],
) -> Result<Option<String>, ProbeError> {
    if peer.is_loopback() || local.contains(&peer) {
        return Ok(Some("lo".to_string()));
    }
    match peer {
        IpAddr::V4(v4) => Ok(lookup(&read_routes(root)?, v4).map(|r| r.iface.clone())),
        IpAddr::V6(_) => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture;

    #[test]
    fn captured_vm_routes() {
        let root = fixture("vm-2cpu-virtio");
        let routes = read_routes(&root).unwrap();
        assert_eq!(routes.len(), 2);
        assert_eq!(routes[0].gateway, Ipv4Addr::new(192, 0, 2, 1));
        assert_eq!(routes[1].destination, Ipv4Addr::new(192, 0, 2, 0));
        assert_eq!(routes[1].mask, Ipv4Addr::new(255, 255, 255, 0));
        let on_link = interface_to(&root, "192.0.2.9".parse().unwrap(), &[]).unwrap();
        assert_eq!(on_link.as_deref(), Some("eth0"));
        let default = lookup(&routes, Ipv4Addr::new(198, 51, 100, 1)).unwrap();
        assert_eq!(default.mask, Ipv4Addr::UNSPECIFIED);
        let gw = Ipv4Addr::new(192, 0, 2, 1);
        let far = next_hop(&routes, Ipv4Addr::new(198, 51, 100, 1));
        assert_eq!(far, Some(("eth0".into(), gw)));
        let near = next_hop(&routes, Ipv4Addr::new(192, 0, 2, 9));
        assert_eq!(near, Some(("eth0".into(), Ipv4Addr::new(192, 0, 2, 9))));
    }

    #[test]
    fn longest_prefix_wins_and_local_is_lo() {
        let text = "Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\tMask\n\
            eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\n\
            veth-a\t000012C6\t00000000\t0001\t0\t0\t0\t00FFFFFF\n\
            veth-b\t000012C6\t00000000\t0001\t0\t0\t0\t0000FFFF\n";
        let routes = parse(text).unwrap();
        assert_eq!(
            lookup(&routes, Ipv4Addr::new(198, 18, 0, 2)).unwrap().iface,
            "veth-a"
        );
        assert_eq!(
            lookup(&routes, Ipv4Addr::new(198, 18, 7, 2)).unwrap().iface,
            "veth-b"
        );
        let me: IpAddr = "198.18.0.1".parse().unwrap();
        let root = Path::new("/nonexistent");
        assert_eq!(
            interface_to(root, me, &[me]).unwrap().as_deref(),
            Some("lo")
        );
        assert!(parse("h\nshort line\n").is_err());
    }
}
