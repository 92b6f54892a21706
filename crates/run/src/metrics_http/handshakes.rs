//! Which TLS handshakes the one metrics thread takes on. A ClientHello costs its sender a
//! few bytes and the thread its key exchange and signature (0.76 ms in the red team's
//! release build), so an unfinished-handshake flood could take the thread from every
//! scrape. Each connection is judged at its accept, before any crypto, by its source
//! address: a source gets [`SOURCE_RATE`] handshakes a second and [`SOURCE_PENDING`] in
//! handshake at once, its network (/24, /64) [`NETWORK_RATE`] and [`NETWORK_PENDING`],
//! all sources [`TOTAL_RATE`] and [`TOTAL_PENDING`]. A busy network's budget does not
//! keep out its quiet members: a source not heard for [`QUIET_GAP`] (a Prometheus
//! scraping every second or slower) goes in through a lane of its own, [`QUIET_RATE`],
//! that the busy sources, heard every few milliseconds, never qualify for. So the thread
//! spends at most ([`TOTAL_RATE`] + [`QUIET_RATE`]) handshakes a second, and a few
//! flooding addresses are refused (their newest first) while a scraper is served.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// Handshakes a second from one address, and its burst.
pub const SOURCE_RATE: f64 = 4.0;
const SOURCE_BURST: f64 = 8.0;
/// From one network (a /24 of IPv4, a /64 of IPv6), and its burst.
pub const NETWORK_RATE: f64 = 32.0;
const NETWORK_BURST: f64 = 64.0;
/// From everyone, outside the quiet lane.
pub const TOTAL_RATE: f64 = 128.0;
/// Through the quiet lane, from everyone.
pub const QUIET_RATE: f64 = 16.0;
/// A source whose last connection is at least this old (or never seen) is quiet.
pub const QUIET_GAP: Duration = Duration::from_millis(500);
/// Connections in handshake at once from one address, one network, everyone (outside
/// the quiet lane, whose own are at most its rate times the 2 s request deadline): with
/// the quiet lane's, under the server's 128 places, so that unfinished handshakes never
/// push a scrape out of its place.
pub const SOURCE_PENDING: usize = 4;
pub const NETWORK_PENDING: usize = 16;
pub const TOTAL_PENDING: usize = 64;
/// Sources and networks remembered; beyond it the least recently heard is forgotten
/// (and comes back as new: quiet, with a full budget).
const REMEMBERED: usize = 4096;

/// How a handshake was let in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lane {
    /// Within its source's, network's and everyone's budget.
    Budget,
    /// A quiet source, through the quiet lane.
    Quiet,
}

/// The connections in handshake now, by source, network and lane: what the server
/// counts from its connections before it admits more.
#[derive(Default)]
pub struct Pending {
    sources: HashMap<IpAddr, usize>,
    networks: HashMap<IpAddr, usize>,
    budget: usize,
}

impl Pending {
    pub fn add(&mut self, source: IpAddr, lane: Lane) {
        let source = source.to_canonical();
        *self.sources.entry(source).or_default() += 1;
        if lane == Lane::Budget {
            *self.networks.entry(network(source)).or_default() += 1;
            self.budget += 1;
        }
    }
}

/// Tokens refilled at a rate up to a burst.
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn full(burst: f64, now: Instant) -> Bucket {
        Bucket {
            tokens: burst,
            at: now,
        }
    }

    fn refill(&mut self, rate: f64, burst: f64, now: Instant) -> bool {
        let dt = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + dt * rate).min(burst);
        self.at = now;
        self.tokens >= 1.0
    }
}

struct Source {
    bucket: Bucket,
    heard: Instant,
}

/// The budgets, fed the source of each new TLS connection and the time.
pub struct Handshakes {
    sources: HashMap<IpAddr, Source>,
    networks: HashMap<IpAddr, Bucket>,
    total: Bucket,
    quiet: Bucket,
}

/// The network an address is judged with: its /24, or its /64.
fn network(a: IpAddr) -> IpAddr {
    match a {
        IpAddr::V4(v4) => IpAddr::V4((u32::from(v4) & 0xffff_ff00).into()),
        IpAddr::V6(v6) => IpAddr::V6((u128::from(v6) & !((1u128 << 64) - 1)).into()),
    }
}

/// Forgets the least recently heard entry of a full table.
fn make_room<V>(table: &mut HashMap<IpAddr, V>, heard: impl Fn(&V) -> Instant) {
    if table.len() >= REMEMBERED {
        if let Some(k) = table.iter().min_by_key(|(_, v)| heard(v)).map(|(k, _)| *k) {
            table.remove(&k);
        }
    }
}

impl Handshakes {
    pub fn new(now: Instant) -> Handshakes {
        Handshakes {
            sources: HashMap::new(),
            networks: HashMap::new(),
            total: Bucket::full(TOTAL_RATE, now),
            quiet: Bucket::full(QUIET_RATE, now),
        }
    }

    /// Whether a new connection from `source` may start its handshake now, and how; each
    /// connection, admitted or not, counts as heard from its source.
    pub fn admit(&mut self, source: IpAddr, now: Instant, pending: &Pending) -> Option<Lane> {
        let source = source.to_canonical();
        let net = network(source);
        let known = self.sources.get(&source).map(|s| s.heard);
        let quiet = known.is_none_or(|h| now.saturating_duration_since(h) >= QUIET_GAP);
        if known.is_none() {
            make_room(&mut self.sources, |s| s.heard);
        }
        let s = self.sources.entry(source).or_insert(Source {
            bucket: Bucket::full(SOURCE_BURST, now),
            heard: now,
        });
        s.heard = now;
        let own = s.bucket.refill(SOURCE_RATE, SOURCE_BURST, now)
            && pending.sources.get(&source).copied().unwrap_or(0) < SOURCE_PENDING;
        if !own {
            return None;
        }
        if !self.networks.contains_key(&net) {
            make_room(&mut self.networks, |b| b.at);
        }
        let n = self
            .networks
            .entry(net)
            .or_insert_with(|| Bucket::full(NETWORK_BURST, now));
        let within = n.refill(NETWORK_RATE, NETWORK_BURST, now)
            && pending.networks.get(&net).copied().unwrap_or(0) < NETWORK_PENDING
            && self.total.refill(TOTAL_RATE, TOTAL_RATE, now)
            && pending.budget < TOTAL_PENDING;
        let lane = if within {
            n.tokens -= 1.0;
            self.total.tokens -= 1.0;
            Lane::Budget
        } else if quiet && self.quiet.refill(QUIET_RATE, QUIET_RATE, now) {
            self.quiet.tokens -= 1.0;
            Lane::Quiet
        } else {
            return None;
        };
        if let Some(s) = self.sources.get_mut(&source) {
            s.bucket.tokens -= 1.0;
        }
        Some(lane)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(start: Instant, ms: u64) -> Instant {
        start + Duration::from_millis(ms)
    }

    /// Admits `source` at `now` and counts it in handshake (as an unfinished one stays).
    fn try_one(h: &mut Handshakes, p: &mut Pending, source: &str, now: Instant) -> Option<Lane> {
        let a: IpAddr = source.parse().unwrap();
        let lane = h.admit(a, now, p);
        if let Some(l) = lane {
            p.add(a, l);
        }
        lane
    }

    #[test]
    fn a_flooding_address_gets_its_rate_and_a_quiet_one_of_its_network_still_gets_in() {
        let start = Instant::now();
        let mut h = Handshakes::new(start);
        let mut admitted = 0;
        // Four addresses of one /24 at 250 handshakes a second each for 4 s; nothing ever
        // finishes, so the pending caps are reached too: counted afresh every 100 ms, as
        // the deadline closes the unfinished ones.
        let mut scrapes = 0;
        let mut p = Pending::default();
        for ms in 0..4000u64 {
            if ms % 100 == 0 {
                p = Pending::default();
            }
            let now = at(start, ms);
            for k in 2..=5 {
                admitted +=
                    usize::from(try_one(&mut h, &mut p, &format!("198.18.7.{k}"), now).is_some());
            }
            if ms % 1000 == 500 {
                // The scraper, of the same /24, once a second.
                assert!(
                    try_one(&mut h, &mut p, "198.18.7.1", now).is_some(),
                    "at {ms} ms"
                );
                scrapes += 1;
            }
        }
        assert_eq!(scrapes, 4);
        // 4 sources at 4/s over 4 s plus their bursts of 8, bounded by the pending cap.
        assert!(admitted <= 4 * (4 * 4 + 8), "{admitted}");
    }

    #[test]
    fn a_sources_pending_handshakes_are_capped_and_the_newest_refused() {
        let start = Instant::now();
        let mut h = Handshakes::new(start);
        let mut p = Pending::default();
        let lanes: Vec<_> = (0..6)
            .map(|k| try_one(&mut h, &mut p, "198.18.7.9", at(start, k)))
            .collect();
        assert_eq!(lanes.iter().filter(|l| l.is_some()).count(), SOURCE_PENDING);
        assert!(
            lanes[SOURCE_PENDING..].iter().all(Option::is_none),
            "{lanes:?}"
        );
        // Once they finish, it gets in again within its rate.
        let none = Pending::default();
        assert!(h
            .admit("198.18.7.9".parse().unwrap(), at(start, 600), &none)
            .is_some());
    }

    #[test]
    fn many_networks_share_the_total_and_the_quiet_lane_is_bounded() {
        let start = Instant::now();
        let mut h = Handshakes::new(start);
        let mut admitted = 0;
        // 1,000 new addresses in 1,000 networks within one millisecond, nothing pending.
        let none = Pending::default();
        for k in 0..1000u32 {
            let a = IpAddr::V4((0xc612_0000 | (k << 8) | 1).into());
            admitted += usize::from(h.admit(a, at(start, 1), &none).is_some());
        }
        assert_eq!(admitted, (TOTAL_RATE + QUIET_RATE) as usize);
    }

    #[test]
    fn ipv4_mapped_addresses_and_ipv6_networks_are_judged_as_such() {
        assert_eq!(
            network(
                "::ffff:198.18.7.9"
                    .parse::<IpAddr>()
                    .unwrap()
                    .to_canonical()
            ),
            "198.18.7.0".parse::<IpAddr>().unwrap()
        );
        assert_eq!(
            network("2001:db8:1:2:3::9".parse().unwrap()),
            "2001:db8:1:2::".parse::<IpAddr>().unwrap()
        );
    }
}
