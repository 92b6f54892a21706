//! The reflector's keys, derived once and cached: this agent's own address key
//! (`sonde_proto::mesh::address_key`) to sign its answers, and the probe keys
//! (`sonde_proto::mesh::probe_key`) of a peer's probes to this agent, to check them; and
//! the address this agent's packets to a peer leave from, which the prober's machine is
//! given for its own probe keys. Each names this agent's address towards the peer. On an agent bound to one address that is the
//! address; bound to the unspecified one, it is the source the routing table picks for
//! that peer (a connected UDP socket's local address, no packet sent), which is what the
//! kernel gives the unconnected sockets' packets too, and is looked up again at each
//! reading of the list.

use foldhash::{HashMap, HashMapExt};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::rc::Rc;

use sonde_proto::mesh::{address_key, probe_key};
use sonde_proto::stamp::StampKey;

/// Addresses cached at most per map; beyond, the map starts again (only a checked
/// packet's sender enters it, so that is more peers than a mesh lists).
const MAX_CACHED: usize = 2 * super::peers::MAX_PEERS;

pub struct Keys {
    mesh: StampKey,
    bind: IpAddr,
    /// This agent's key per own address.
    mine: HashMap<IpAddr, StampKey>,
    /// Each sender's probe key towards this agent, once one of its probes checked.
    probes_in: HashMap<IpAddr, Rc<StampKey>>,
    /// The own address a packet to a remote address leaves from (unspecified bind only).
    toward: HashMap<IpAddr, IpAddr>,
    /// Sockets for the routing lookups (IPv4, IPv6), opened when first needed.
    route: [Option<UdpSocket>; 2],
}

impl Keys {
    /// The keys of the mesh key `mesh` for an agent whose sockets bind `bind`.
    pub fn new(mesh: StampKey, bind: IpAddr) -> Keys {
        Keys {
            mesh,
            bind,
            mine: HashMap::new(),
            probes_in: HashMap::new(),
            toward: HashMap::new(),
            route: [None, None],
        }
    }

    /// This agent's key for the packets it sends to `remote`.
    pub fn mine(&mut self, remote: IpAddr) -> &StampKey {
        let own = self.source_toward(remote);
        if !self.mine.contains_key(&own) {
            bounded(&mut self.mine);
        }
        let mesh = &self.mesh;
        self.mine
            .entry(own)
            .or_insert_with(|| address_key(mesh, own))
    }

    /// The key probes from `ip` to this agent must carry: to the address this agent
    /// answers `ip` from (cached once one of its probes checked, [`Keys::trust_probe`]).
    pub fn probe_from(&mut self, ip: IpAddr) -> Rc<StampKey> {
        if let Some(k) = self.probes_in.get(&ip) {
            return Rc::clone(k);
        }
        let own = self.source_toward(ip);
        Rc::new(probe_key(&self.mesh, ip, own))
    }

    /// Keeps `key` as `ip`'s probe key once a probe from `ip` checked under it.
    pub fn trust_probe(&mut self, ip: IpAddr, key: &Rc<StampKey>) {
        if !self.probes_in.contains_key(&ip) {
            bounded(&mut self.probes_in);
            self.probes_in.insert(ip, Rc::clone(key));
        }
    }

    /// Forgets the routing lookups, and the probe keys that name their source (the list
    /// is read again: routes may have changed).
    pub fn forget_routes(&mut self) {
        self.toward.clear();
        self.probes_in.clear();
    }

    /// The address a packet to `remote` leaves from.
    pub fn source_toward(&mut self, remote: IpAddr) -> IpAddr {
        if !self.bind.is_unspecified() {
            return self.bind;
        }
        if let Some(own) = self.toward.get(&remote) {
            return *own;
        }
        let own = self.lookup(remote).unwrap_or(self.bind);
        bounded(&mut self.toward);
        self.toward.insert(remote, own);
        own
    }

    /// The routing table's source address for `remote`: connecting a UDP socket sends
    /// nothing.
    fn lookup(&mut self, remote: IpAddr) -> Option<IpAddr> {
        let (slot, any): (usize, IpAddr) = match remote {
            IpAddr::V4(_) => (0, Ipv4Addr::UNSPECIFIED.into()),
            IpAddr::V6(_) => (1, Ipv6Addr::UNSPECIFIED.into()),
        };
        if self.route[slot].is_none() {
            self.route[slot] = UdpSocket::bind(SocketAddr::new(any, 0)).ok();
        }
        let s = self.route[slot].as_ref()?;
        // Any port: nothing is sent, only the route is looked up.
        s.connect(SocketAddr::new(remote, 9)).ok()?;
        Some(s.local_addr().ok()?.ip())
    }
}

fn bounded<V>(map: &mut HashMap<IpAddr, V>) {
    if map.len() >= MAX_CACHED {
        map.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mesh() -> StampKey {
        StampKey::new(b"0123456789abcdef0123").unwrap()
    }

    #[test]
    fn a_bound_agent_signs_with_its_address_and_an_unbound_one_with_its_route() {
        let bound: IpAddr = "198.18.2.1".parse().unwrap();
        let mut k = Keys::new(mesh(), bound);
        let tag = k.mine("198.18.2.2".parse().unwrap()).mac(&[b"x"]);
        assert!(address_key(&mesh(), bound).verify(&[b"x"], &tag));
        // Unbound: towards a loopback address the route's source is 127.0.0.1.
        let mut k = Keys::new(mesh(), Ipv4Addr::UNSPECIFIED.into());
        let tag = k.mine("127.0.0.9".parse().unwrap()).mac(&[b"x"]);
        let lo: IpAddr = Ipv4Addr::LOCALHOST.into();
        assert_eq!(k.source_toward("127.0.0.9".parse().unwrap()), lo);
        assert!(address_key(&mesh(), lo).verify(&[b"x"], &tag));
        assert!(!address_key(&mesh(), bound).verify(&[b"x"], &tag));
    }

    /// The caches a probe's source fills stay bounded, however many sources sign: what
    /// lets them hash with foldhash rather than SipHash (a flood of sources costs a
    /// clearing, never a long probe sequence in a large table).
    #[test]
    fn the_probe_key_cache_holds_at_most_max_cached_sources() {
        let mut k = Keys::new(mesh(), "198.18.2.1".parse().unwrap());
        for i in 0..(MAX_CACHED as u32 + 100) {
            let ip = IpAddr::from(std::net::Ipv4Addr::from(0xc612_0000 + i));
            let key = k.probe_from(ip);
            k.trust_probe(ip, &key);
            assert!(
                k.probes_in.len() <= MAX_CACHED,
                "{} at {i}",
                k.probes_in.len()
            );
        }
        assert!(!k.probes_in.is_empty());
    }

    /// A probe to a peer is signed under the key of both addresses (this agent's towards
    /// it, the peer's); what this agent checks from that peer is the peer's probe to it,
    /// not its own.
    #[test]
    fn probe_keys_name_this_agents_address_and_the_peers() {
        let (a, b): (IpAddr, IpAddr) =
            ("198.18.2.1".parse().unwrap(), "198.18.2.2".parse().unwrap());
        let mut at_a = Keys::new(mesh(), a);
        let mut at_b = Keys::new(mesh(), b);
        assert_eq!(at_a.source_toward(b), a, "bound: its address");
        let tag = probe_key(&mesh(), at_a.source_toward(b), b).mac(&[b"x"]);
        assert!(at_b.probe_from(a).verify(&[b"x"], &tag));
        assert!(!at_a.probe_from(b).verify(&[b"x"], &tag));
        assert!(!address_key(&mesh(), a).verify(&[b"x"], &tag));
    }
}
