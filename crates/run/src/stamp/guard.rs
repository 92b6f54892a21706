//! Who a reflector answers, and how often: an allowlist of networks (nobody by default)
//! and a per-source budget of answers per second. When the table of sources is full, the
//! least recently heard eighth is forgotten at once, so that sources spoofed inside the
//! allowlist cannot lock a new sender out; a forgotten source that comes back has a
//! second's burst again, so churning buys at most that per eviction, and every answer is
//! still one datagram of the request's size for one request.

use foldhash::{HashMap, HashMapExt};
use std::net::IpAddr;
use std::str::FromStr;
use std::time::Instant;

/// Sources a limiter tracks at most; beyond, the least recently heard eighth is forgotten.
pub const MAX_SOURCES: usize = 4096;

/// One network, `ADDR/PREFIX` (a bare address is its host network).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    net: IpAddr,
    prefix: u8,
}

/// A `--stamp-targets` word that is no network.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CidrError {
    #[error("'{word}' is not ADDR/PREFIX: '{addr}' is not an address")]
    Address { word: String, addr: String },
    #[error("'{word}': the prefix must be 0 to {max}")]
    Prefix { word: String, max: u8 },
}

impl FromStr for Cidr {
    type Err = CidrError;

    fn from_str(s: &str) -> Result<Self, CidrError> {
        let (addr, prefix) = s.split_once('/').unwrap_or((s, ""));
        let net: IpAddr = addr.parse().map_err(|_| CidrError::Address {
            word: s.to_string(),
            addr: addr.to_string(),
        })?;
        let max = if net.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            "" => max,
            p => p
                .parse::<u8>()
                .ok()
                .filter(|&p| p <= max)
                .ok_or_else(|| CidrError::Prefix {
                    word: s.to_string(),
                    max,
                })?,
        };
        Ok(Cidr { net, prefix })
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.net, self.prefix)
    }
}

impl Cidr {
    /// Whether `ip` is in this network (IPv4-mapped IPv6 sources are read as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        match (self.net, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => same(
                u128::from(u32::from(n)) << 96,
                u128::from(u32::from(a)) << 96,
                self.prefix,
            ),
            (IpAddr::V6(n), IpAddr::V6(a)) => same(u128::from(n), u128::from(a), self.prefix),
            _ => false,
        }
    }
}

/// Whether the first `prefix` bits of `a` and `b` agree.
fn same(a: u128, b: u128, prefix: u8) -> bool {
    prefix == 0 || (a ^ b) >> (128 - u32::from(prefix)) == 0
}

/// Whether any of `allow` holds `ip`; an empty list holds nobody.
pub fn allowed(allow: &[Cidr], ip: IpAddr) -> bool {
    allow.iter().any(|c| c.contains(ip))
}

/// A token bucket per source: `per_s` answers a second, a second's worth in a burst.
pub struct Limiter {
    per_s: f64,
    /// Sources tracked at most.
    room: usize,
    sources: HashMap<IpAddr, (f64, Instant)>,
}

impl Limiter {
    pub fn new(per_s: u32) -> Self {
        Limiter::with_room(per_s, MAX_SOURCES)
    }

    /// Tracking up to `room` sources (a mesh's peers may number more than a STAMP
    /// reflector's senders).
    pub fn with_room(per_s: u32, room: usize) -> Self {
        Limiter {
            per_s: f64::from(per_s),
            room,
            sources: HashMap::new(),
        }
    }

    /// Whether `ip` may have one more answer at `now` (taking it if so).
    pub fn take(&mut self, ip: IpAddr, now: Instant) -> bool {
        // Full is rare: only then is the source looked up twice.
        if self.sources.len() >= self.room && !self.sources.contains_key(&ip) {
            self.forget_oldest();
        }
        let (tokens, last) = self.sources.entry(ip).or_insert((self.per_s, now));
        let refill = now.saturating_duration_since(*last).as_secs_f64() * self.per_s;
        *tokens = (*tokens + refill).min(self.per_s.max(1.0));
        *last = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// Forgets the least recently heard eighth of the sources (one pass, for the next
    /// eighth of new ones).
    fn forget_oldest(&mut self) {
        let n = (self.room / 8).max(1).min(self.sources.len());
        if n == 0 {
            return;
        }
        let mut by_age: Vec<(Instant, IpAddr)> = self
            .sources
            .iter()
            .map(|(ip, (_, last))| (*last, *ip))
            .collect();
        by_age.select_nth_unstable(n - 1);
        for (_, ip) in &by_age[..n] {
            self.sources.remove(ip);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn cidrs_hold_their_networks_only() {
        let c: Cidr = "198.18.0.0/15".parse().unwrap();
        assert!(c.contains("198.19.255.1".parse().unwrap()));
        assert!(!c.contains("198.20.0.1".parse().unwrap()));
        assert!(c.contains("::ffff:198.18.0.9".parse().unwrap()));
        let host: Cidr = "198.18.0.2".parse().unwrap();
        assert!(
            host.contains("198.18.0.2".parse().unwrap())
                && !host.contains("198.18.0.3".parse().unwrap())
        );
        assert!("0.0.0.0/0"
            .parse::<Cidr>()
            .unwrap()
            .contains("127.0.0.1".parse().unwrap()));
        assert_eq!(
            "198.18.0.0/33".parse::<Cidr>().unwrap_err().to_string(),
            "'198.18.0.0/33': the prefix must be 0 to 32"
        );
        assert!("nonsense/8".parse::<Cidr>().is_err());
        assert!(!allowed(&[], "198.18.0.2".parse().unwrap()));
    }

    #[test]
    fn a_source_gets_its_rate_and_no_more() {
        let mut l = Limiter::new(10);
        let t0 = Instant::now();
        let ip: IpAddr = "198.18.0.2".parse().unwrap();
        let burst = (0..100).filter(|_| l.take(ip, t0)).count();
        assert_eq!(burst, 10);
        let later = (0..100)
            .filter(|_| l.take(ip, t0 + Duration::from_millis(500)))
            .count();
        assert_eq!(later, 5);
        // Another source has its own budget.
        assert!(l.take("198.18.0.3".parse().unwrap(), t0));
    }

    /// L1: sources spoofed inside the allowlist, however many, lock no new sender out; a
    /// source heard recently keeps its budget (it is never the least recently heard), and
    /// the table stays within its room.
    #[test]
    fn a_full_table_forgets_its_least_recently_heard_and_answers_a_newcomer() {
        let mut l = Limiter::new(2);
        let t0 = Instant::now();
        let live: IpAddr = "198.19.255.1".parse().unwrap();
        let (mut live_answers, mut live_asks) = (0, 0);
        for i in 0..20_000u32 {
            let at = t0 + Duration::from_micros(u64::from(i));
            assert!(l.take(IpAddr::from(std::net::Ipv4Addr::from(0xc612_0000 + i)), at));
            assert!(l.sources.len() <= MAX_SOURCES);
            if i % 1000 == 0 {
                live_asks += 1;
                live_answers += usize::from(l.take(live, at));
            }
        }
        // Its burst of two, and no more: being kept is no fresh budget.
        assert_eq!((live_asks, live_answers), (20, 2));
        let newcomer: IpAddr = "198.19.255.255".parse().unwrap();
        assert!(l.take(newcomer, t0 + Duration::from_millis(30)));
    }
}
