//! The iperf3 server's waiting room: the connections that came while it was busy, and
//! which of them gets the one test slot next. The slot goes to the network (a /24 of
//! IPv4, a /64 of IPv6) that had it least recently (never first), the oldest of its
//! connections first, so a client that holds the slot to its deadline and reconnects,
//! however often and from however many addresses of its network, gets at most every
//! other turn while another network waits: it cannot lock legitimate clients out. One
//! address keeps at most [`PER_ADDRESS`] connections waiting and one network at most
//! [`PER_NETWORK`] (a newcomer pushes out its own address's, then its network's oldest),
//! all at most [`WAITING`] (then the oldest of the network with the most waiting gives
//! way), each at most [`WAIT_MAX`]. Pure: sources and turns in, decisions out.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// Connections one address may keep waiting.
pub const PER_ADDRESS: usize = 4;
/// Connections one network (/24, /64) may keep waiting.
pub const PER_NETWORK: usize = 16;
/// Connections waiting in all.
pub const WAITING: usize = 64;
/// The longest a connection waits for the slot before it is closed.
pub const WAIT_MAX: Duration = Duration::from_secs(60);
/// Addresses whose last turn is remembered.
const REMEMBERED: usize = 1024;

/// Who (which network) had the slot when (a turn counter, not a clock).
#[derive(Debug, Default)]
pub struct Turns {
    last: HashMap<IpAddr, u64>,
    count: u64,
}

impl Turns {
    /// `ip` has the slot now.
    pub fn given(&mut self, ip: IpAddr) {
        self.count += 1;
        self.last.insert(network(ip), self.count);
        if self.last.len() > REMEMBERED {
            if let Some(oldest) = self.last.iter().min_by_key(|(_, t)| **t).map(|(a, _)| *a) {
                self.last.remove(&oldest);
            }
        }
    }

    /// Which of the waiting connections (their sources, oldest first) gets the slot.
    pub fn next(&self, waiting: &[IpAddr]) -> Option<usize> {
        let turn = |ip: &IpAddr| self.last.get(&network(*ip)).copied().unwrap_or(0);
        // min_by_key keeps the first of equals: the oldest of the network.
        (0..waiting.len()).min_by_key(|i| turn(&waiting[*i]))
    }
}

/// Which waiting connection (sources, oldest first) a newcomer from `ip` pushes out.
pub fn evictee(waiting: &[IpAddr], ip: IpAddr) -> Option<usize> {
    let ip = canonical(ip);
    let of = |a: IpAddr| waiting.iter().filter(|w| canonical(**w) == a).count();
    if of(ip) >= PER_ADDRESS {
        return waiting.iter().position(|w| canonical(*w) == ip);
    }
    let net = network(ip);
    let of_net = |n: IpAddr| waiting.iter().filter(|w| network(**w) == n).count();
    if of_net(net) >= PER_NETWORK {
        return waiting.iter().position(|w| network(*w) == net);
    }
    if waiting.len() < WAITING {
        return None;
    }
    let most = waiting.iter().map(|w| of_net(network(*w))).max()?;
    waiting.iter().position(|w| of_net(network(*w)) == most)
}

/// Whether a connection that came `at` has waited too long by `now`.
pub fn expired(at: Instant, now: Instant) -> bool {
    now.duration_since(at) > WAIT_MAX
}

/// The network `ip` is taken to be one client of: its /24 (IPv4, v4-mapped too) or /64.
fn network(ip: IpAddr) -> IpAddr {
    match canonical(ip) {
        IpAddr::V4(v4) => {
            let [a, b, c, _] = v4.octets();
            IpAddr::from([a, b, c, 0])
        }
        IpAddr::V6(v6) => std::net::Ipv6Addr::from(u128::from(v6) & !((1u128 << 64) - 1)).into(),
    }
}

fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Address `d` of network `d`: each its own /24.
    fn ip(d: u8) -> IpAddr {
        IpAddr::from([198, 18, d, 1])
    }

    #[test]
    fn many_addresses_of_one_network_share_its_turns_and_its_room() {
        let mut turns = Turns::default();
        let of = |host: u8| IpAddr::from([198, 18, 7, host]);
        // 40 addresses of 198.18.7.0/24 queued before a client of 198.19.0.0/24.
        let mut waiting: Vec<IpAddr> = (1..=40).map(of).collect();
        waiting.push(IpAddr::from([198, 19, 0, 5]));
        turns.given(waiting.remove(turns.next(&waiting).unwrap()));
        // Its network had a turn: the other network is next, not its 39 other addresses.
        assert_eq!(
            waiting[turns.next(&waiting).unwrap()],
            IpAddr::from([198, 19, 0, 5])
        );
        // And it keeps at most PER_NETWORK waiting: its newcomer pushes out its own oldest.
        let full: Vec<IpAddr> = (1..=PER_NETWORK as u8).map(of).collect();
        assert_eq!(evictee(&full, of(200)), Some(0));
        assert_eq!(evictee(&full, IpAddr::from([198, 19, 0, 5])), None);
        let v6 = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(
            network(v6("2001:db8::1:2")),
            network(v6("2001:db8::ffff:1"))
        );
        assert_ne!(network(v6("2001:db8::1")), network(v6("2001:db8:0:1::1")));
    }

    #[test]
    fn a_reconnecting_address_gets_every_other_turn_at_most() {
        let mut turns = Turns::default();
        // The attacker (1) has four waiting ahead of the client (2), who came last.
        let mut waiting = vec![ip(1), ip(1), ip(1), ip(1), ip(2)];
        let first = turns.next(&waiting).unwrap();
        assert_eq!(first, 0, "nobody had a turn yet: the oldest");
        turns.given(waiting.remove(first));
        waiting.push(ip(1)); // it reconnects at once
        assert_eq!(waiting[turns.next(&waiting).unwrap()], ip(2));
        assert_eq!(turns.next(&[]), None);
        // v4-mapped v6 is the same address: its turn is 1's.
        let mapped: IpAddr = "::ffff:198.18.1.1".parse().unwrap();
        turns.given(mapped);
        assert_eq!(turns.next(&[ip(1), ip(3)]), Some(1));
    }

    #[test]
    fn an_address_pushes_out_only_its_own_oldest_and_the_biggest_gives_way() {
        let w = [ip(1), ip(2), ip(1), ip(1), ip(1)];
        assert_eq!(evictee(&w, ip(1)), Some(0));
        assert_eq!(evictee(&w, ip(2)), None);
        let mut full: Vec<IpAddr> = (0..WAITING as u8 - 2).map(|d| ip(d + 10)).collect();
        full.extend([ip(3), ip(3)]);
        // (each of those its own network, but ip(3)'s two make it the biggest)
        assert_eq!(evictee(&full, ip(4)), Some(WAITING - 2));
        let now = Instant::now();
        assert!(!expired(now, now + WAIT_MAX));
        assert!(expired(now, now + WAIT_MAX + Duration::from_millis(1)));
    }
}
