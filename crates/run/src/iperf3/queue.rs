//! The iperf3 server's waiting room: the connections that came while it was busy, and
//! which of them gets the one test slot next. The slot goes to the address that had it
//! least recently (never first), the oldest of its connections first, so a client that
//! holds the slot to its deadline and reconnects, however often, gets at most every other
//! turn while another address waits: it cannot lock legitimate clients out. One address
//! keeps at most [`PER_ADDRESS`] connections waiting (a newcomer pushes out its own
//! oldest), all at most [`WAITING`] (then the oldest of the address with the most waiting
//! gives way), each at most [`WAIT_MAX`]. Pure: sources and turns in, decisions out.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// Connections one address may keep waiting.
pub const PER_ADDRESS: usize = 4;
/// Connections waiting in all.
pub const WAITING: usize = 64;
/// The longest a connection waits for the slot before it is closed.
pub const WAIT_MAX: Duration = Duration::from_secs(60);
/// Addresses whose last turn is remembered.
const REMEMBERED: usize = 1024;

/// Who had the slot when (a turn counter, not a clock).
#[derive(Debug, Default)]
pub struct Turns {
    last: HashMap<IpAddr, u64>,
    count: u64,
}

impl Turns {
    /// `ip` has the slot now.
    pub fn given(&mut self, ip: IpAddr) {
        self.count += 1;
        self.last.insert(canonical(ip), self.count);
        if self.last.len() > REMEMBERED {
            if let Some(oldest) = self.last.iter().min_by_key(|(_, t)| **t).map(|(a, _)| *a) {
                self.last.remove(&oldest);
            }
        }
    }

    /// Which of the waiting connections (their sources, oldest first) gets the slot.
    pub fn next(&self, waiting: &[IpAddr]) -> Option<usize> {
        let turn = |ip: &IpAddr| self.last.get(&canonical(*ip)).copied().unwrap_or(0);
        // min_by_key keeps the first of equals: the oldest of the address.
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
    if waiting.len() < WAITING {
        return None;
    }
    let most = waiting.iter().map(|w| of(canonical(*w))).max()?;
    waiting.iter().position(|w| of(canonical(*w)) == most)
}

/// Whether a connection that came `at` has waited too long by `now`.
pub fn expired(at: Instant, now: Instant) -> bool {
    now.duration_since(at) > WAIT_MAX
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

    fn ip(d: u8) -> IpAddr {
        IpAddr::from([198, 18, 0, d])
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
        let mapped: IpAddr = "::ffff:198.18.0.1".parse().unwrap();
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
        assert_eq!(evictee(&full, ip(4)), Some(WAITING - 2));
        let now = Instant::now();
        assert!(!expired(now, now + WAIT_MAX));
        assert!(expired(now, now + WAIT_MAX + Duration::from_millis(1)));
    }
}
