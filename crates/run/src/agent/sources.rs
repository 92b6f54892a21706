//! Connections in their handshake, counted by source address, so that one host's idle
//! connections cannot take every handshake place and lock the other controllers out.
//!
//! The count is taken in the accept loop and handed to the connection's thread, which
//! gives it back when the handshake ends (`Pending`'s drop).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// Connections in their handshake by source address.
#[derive(Debug, Default, Clone)]
pub(super) struct Sources(Arc<Mutex<HashMap<IpAddr, usize>>>);

/// One connection's place among its source's; given back when dropped.
#[derive(Debug)]
pub(super) struct Entered {
    sources: Sources,
    ip: IpAddr,
}

impl Sources {
    /// A place for a connection from `ip`'s network, unless it already has `max` in their
    /// handshake.
    pub(super) fn enter(&self, ip: IpAddr, max: usize) -> Option<Entered> {
        let ip = network_of(ip);
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let n = map.entry(ip).or_insert(0);
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(Entered {
            sources: self.clone(),
            ip,
        })
    }

    /// Connections from `ip` in their handshake now.
    #[cfg(test)]
    fn count(&self, ip: IpAddr) -> usize {
        let map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        map.get(&ip).copied().unwrap_or(0)
    }
}

/// The network a source counts against: its /24 (IPv4) or /64 (IPv6), since one host
/// commonly holds many addresses of its network (and an IPv6 host millions) but rarely of
/// many networks.
fn network_of(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, c, _] = v4.octets();
            IpAddr::from([a, b, c, 0])
        }
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => network_of(IpAddr::V4(v4)),
            None => IpAddr::V6(std::net::Ipv6Addr::from(
                u128::from(v6) & !((1u128 << 64) - 1),
            )),
        },
    }
}

impl Drop for Entered {
    fn drop(&mut self) {
        let mut map = self.sources.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = map.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_has_at_most_max_places_and_gets_them_back() {
        let s = Sources::default();
        let a: IpAddr = [127, 0, 0, 2].into();
        let b: IpAddr = [127, 0, 1, 1].into();
        let held: Vec<Entered> = (0..4).filter_map(|_| s.enter(a, 4)).collect();
        assert_eq!(held.len(), 4);
        assert!(s.enter(a, 4).is_none(), "a fifth from one source");
        let neighbour: IpAddr = [127, 0, 0, 3].into();
        assert!(s.enter(neighbour, 4).is_none(), "a fifth from its /24");
        let v6: IpAddr = "2001:db8::1".parse().unwrap();
        let v6_held: Vec<Entered> = (0..4).filter_map(|_| s.enter(v6, 4)).collect();
        let v6_other: IpAddr = "2001:db8::ffff:1".parse().unwrap();
        assert!(s.enter(v6_other, 4).is_none(), "a fifth from its /64");
        drop(v6_held);
        assert!(s.enter(b, 4).is_some(), "another network still enters");
        drop(held);
        assert_eq!(s.count(network_of(a)), 0);
    }
}
