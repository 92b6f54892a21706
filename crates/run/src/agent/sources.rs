//! Handshake places: a connection holds one from accept until its `Setup` (at most
//! [`HANDSHAKE_WITHIN`]), counted by exact address, by network and overall, so that no
//! source can lock the others out; a few places kept for addresses that have proven the
//! key before; and places only a connection whose `Hello` carries a ticket (a proof of the
//! key at accept, `sonde_proto::ticket`) can take, so that no stranger, in a controller's
//! own network or at its own address, keeps a key holder out (issue 52).
//!
//! A place is taken in the accept loop and handed to the connection's thread, which gives
//! it back when the handshake ends (`Entered`'s drop), or marks its address as proven.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// From accept to the controller's `Setup`, whatever the peer does: a controller sends
/// `Hello` at once and `Auth` and `Setup` as soon as it reads the answers, two round
/// trips. A peer that dawdles (a late `Hello`, no `Auth`) gives its place back by then.
pub(super) const HANDSHAKE_WITHIN: Duration = Duration::from_secs(2);

/// How many handshake places each source may hold.
#[derive(Debug, Clone, Copy)]
pub(super) struct Caps {
    /// One address: a controller needs one per test, and a `sonde load` opens three
    /// together with one more checking on them.
    pub(super) per_address: usize,
    /// One /24 (IPv4) or /64 (IPv6): one host may hold many addresses of its network (an
    /// IPv6 host millions), rarely of many networks.
    pub(super) per_network: usize,
    /// Every source together.
    pub(super) total: usize,
    /// Beyond those, for addresses that proved the key in one of the last
    /// [`PROVEN_REMEMBERED`] handshakes (still `per_address` at most each).
    pub(super) reserved: usize,
    /// Beyond those, for connections whose `Hello` carried a good ticket, whatever their
    /// address: key holders only, so no cap per address.
    pub(super) ticketed: usize,
}

/// The agent's caps: a network takes a quarter of the ordinary places (two /24s held 32
/// of 32 before issue 52, and kept out every controller the agent did not remember), a
/// known controller finds a reserved place, and a key holder's ticket one of its own.
pub(super) const CAPS: Caps = Caps {
    per_address: 4,
    per_network: 8,
    total: 32,
    reserved: 8,
    ticketed: 16,
};

/// Distinct addresses remembered as having proven the key, most recent kept.
const PROVEN_REMEMBERED: usize = 64;

/// Why no place was given, for the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Full {
    Address,
    Network,
    Overall,
}

impl Full {
    pub(super) fn words(self) -> &'static str {
        match self {
            Full::Address => "this address's other connections in their handshake",
            Full::Network => "its network's other connections in their handshake",
            Full::Overall => "as many connections in their handshake as it takes",
        }
    }
}

#[derive(Debug, Default)]
struct State {
    by_address: HashMap<IpAddr, usize>,
    by_network: HashMap<IpAddr, usize>,
    ordinary: usize,
    reserved: usize,
    ticketed: usize,
    /// Addresses that proved the key, oldest first, each once.
    proven: VecDeque<IpAddr>,
}

/// The handshake places, shared by the accept loop and the connections' threads.
#[derive(Debug, Clone)]
pub(super) struct Sources {
    caps: Caps,
    state: Arc<Mutex<State>>,
}

/// Which kind of place a connection holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Ordinary,
    Reserved,
    Ticketed,
}

/// One connection's place; given back when dropped.
#[derive(Debug)]
pub(super) struct Entered {
    sources: Sources,
    ip: IpAddr,
    place: Place,
}

impl Sources {
    pub(super) fn new(caps: Caps) -> Sources {
        Sources {
            caps,
            state: Arc::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A place for a connection from `ip`: an ordinary one while its address, network and
    /// the agent have room, else a reserved one if `ip` has proven the key before.
    pub(super) fn enter(&self, ip: IpAddr) -> Result<Entered, Full> {
        let ip = canonical(ip);
        let caps = self.caps;
        let mut st = self.lock();
        if st.by_address.get(&ip).copied().unwrap_or(0) >= caps.per_address {
            return Err(Full::Address);
        }
        let network = st.by_network.get(&network_of(ip)).copied().unwrap_or(0);
        let ordinary = match (network < caps.per_network, st.ordinary < caps.total) {
            (true, true) => true,
            _ if st.proven.contains(&ip) && st.reserved < caps.reserved => false,
            (false, _) => return Err(Full::Network),
            (true, false) => return Err(Full::Overall),
        };
        *st.by_address.entry(ip).or_insert(0) += 1;
        if ordinary {
            *st.by_network.entry(network_of(ip)).or_insert(0) += 1;
            st.ordinary += 1;
        } else {
            st.reserved += 1;
        }
        Ok(Entered {
            sources: self.clone(),
            ip,
            place: if ordinary {
                Place::Ordinary
            } else {
                Place::Reserved
            },
        })
    }

    /// A place for a connection whose `Hello` carried a good ticket (checked by the
    /// caller): one of those kept for key holders, whoever holds the others.
    pub(super) fn enter_ticketed(&self, ip: IpAddr) -> Result<Entered, Full> {
        let mut st = self.lock();
        if st.ticketed >= self.caps.ticketed {
            return Err(Full::Overall);
        }
        st.ticketed += 1;
        Ok(Entered {
            sources: self.clone(),
            ip: canonical(ip),
            place: Place::Ticketed,
        })
    }

    /// Connections in their handshake now, ordinary and reserved.
    #[cfg(test)]
    fn held(&self) -> (usize, usize) {
        let st = self.lock();
        (st.ordinary, st.reserved)
    }
}

impl Entered {
    /// The handshake proved the key: `ip` may use a reserved place from now on. The place
    /// itself is given back.
    pub(super) fn proven(self) {
        let mut st = self.sources.lock();
        st.proven.retain(|p| *p != self.ip);
        if st.proven.len() >= PROVEN_REMEMBERED {
            st.proven.pop_front();
        }
        st.proven.push_back(self.ip);
        drop(st);
    }
}

impl Drop for Entered {
    fn drop(&mut self) {
        let mut st = self.sources.lock();
        match self.place {
            Place::Ticketed => st.ticketed -= 1,
            Place::Reserved => {
                decrement(&mut st.by_address, self.ip);
                st.reserved -= 1;
            }
            Place::Ordinary => {
                decrement(&mut st.by_address, self.ip);
                decrement(&mut st.by_network, network_of(self.ip));
                st.ordinary -= 1;
            }
        }
    }
}

fn decrement(map: &mut HashMap<IpAddr, usize>, key: IpAddr) {
    if let Some(n) = map.get_mut(&key) {
        *n -= 1;
        if *n == 0 {
            map.remove(&key);
        }
    }
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is.
pub(super) fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// The network a source counts against: its /24 (IPv4) or /64 (IPv6).
pub(super) fn network_of(ip: IpAddr) -> IpAddr {
    match canonical(ip) {
        IpAddr::V4(v4) => {
            let [a, b, c, _] = v4.octets();
            IpAddr::from([a, b, c, 0])
        }
        IpAddr::V6(v6) => IpAddr::V6(std::net::Ipv6Addr::from(
            u128::from(v6) & !((1u128 << 64) - 1),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(d: u8) -> IpAddr {
        [127, 0, 0, d].into()
    }

    /// `n` places for each of the addresses 127.0.0.`ds`, as many as were given.
    fn fill(s: &Sources, ds: std::ops::RangeInclusive<u8>, n: usize) -> Vec<Entered> {
        ds.flat_map(|d| (0..n).map(move |_| v4(d)))
            .filter_map(|ip| s.enter(ip).ok())
            .collect()
    }

    #[test]
    fn an_address_a_network_and_the_agent_have_their_caps_and_get_places_back() {
        let s = Sources::new(CAPS);
        let held: Vec<Entered> = (0..4).filter_map(|_| s.enter(v4(2)).ok()).collect();
        assert_eq!(held.len(), 4);
        assert_eq!(s.enter(v4(2)).unwrap_err(), Full::Address);
        // Its neighbours have the rest of the /24's places, no more: a quarter of all.
        let more = fill(&s, 3..=5, 4);
        assert_eq!(more.len(), 4);
        assert_eq!(s.enter(v4(6)).unwrap_err(), Full::Network);
        let v6 = |k: u128| IpAddr::V6((0x2001_0db8u128 << 96 | k).into());
        let v6_held: Vec<Entered> = (0..16).filter_map(|k| s.enter(v6(k)).ok()).collect();
        assert_eq!(v6_held.len(), 8);
        let other: IpAddr = "2001:db8::ffff:1".parse().unwrap();
        assert_eq!(s.enter(other).unwrap_err(), Full::Network, "its /64");
        // Two more networks take the other half.
        let third: Vec<Entered> = (0..8)
            .filter_map(|d| s.enter([127, 0, 7, d].into()).ok())
            .collect();
        let fourth: Vec<Entered> = (0..8)
            .filter_map(|d| s.enter([127, 0, 8, d].into()).ok())
            .collect();
        assert_eq!((third.len(), fourth.len()), (8, 8));
        assert_eq!(
            s.enter([127, 0, 9, 1].into()).unwrap_err(),
            Full::Overall,
            "32 held"
        );
        drop((third, fourth));
        drop(v6_held);
        assert!(s.enter(v6(1)).is_ok(), "places come back");
        drop((held, more));
        assert_eq!(s.held(), (0, 0));
    }

    #[test]
    fn an_address_that_proved_the_key_finds_a_reserved_place_when_its_network_is_full() {
        let s = Sources::new(CAPS);
        s.enter(v4(1)).unwrap().proven();
        let rogues = fill(&s, 10..=13, 4);
        assert_eq!(rogues.len(), 8);
        assert_eq!(s.enter(v4(20)).unwrap_err(), Full::Network, "a stranger");
        let mapped = IpAddr::V6(std::net::Ipv4Addr::new(127, 0, 0, 1).to_ipv6_mapped());
        let known: Vec<Entered> = (0..5).filter_map(|_| s.enter(mapped).ok()).collect();
        assert_eq!(known.len(), 4, "reserved, still per_address at most");
        assert_eq!(s.held(), (8, 4));
        drop(known);
        assert_eq!(s.held(), (8, 0));
    }

    #[test]
    fn a_ticket_finds_a_place_at_an_address_strangers_fill() {
        let s = Sources::new(CAPS);
        let rogues = fill(&s, 10..=10, 4);
        assert_eq!(s.enter(v4(10)).unwrap_err(), Full::Address);
        let keyed: Vec<Entered> = (0..20)
            .filter_map(|_| s.enter_ticketed(v4(10)).ok())
            .collect();
        assert_eq!(
            keyed.len(),
            CAPS.ticketed,
            "key holders' own places, no more"
        );
        drop(keyed);
        assert!(s.enter_ticketed(v4(10)).is_ok(), "given back");
        drop(rogues);
        assert_eq!(s.held(), (0, 0));
        assert_eq!(s.lock().ticketed, 0);
    }

    #[test]
    fn the_proven_addresses_remembered_are_bounded_and_the_most_recent() {
        let s = Sources::new(CAPS);
        for k in 0..(PROVEN_REMEMBERED as u32 + 10) {
            s.enter(IpAddr::from((0x7f01_0000 + k).to_be_bytes()))
                .unwrap()
                .proven();
        }
        let st = s.lock();
        assert_eq!(st.proven.len(), PROVEN_REMEMBERED);
        assert_eq!(
            st.proven[0],
            IpAddr::from((0x7f01_0000 + 10u32).to_be_bytes())
        );
        assert_eq!((st.ordinary, st.reserved), (0, 0));
    }
}
