//! Where a mesh agent's peers come from (`--mesh SOURCE`): a file of peers, one a line
//! (`ADDR[:PORT] [open] [KEY=VALUE]...`: its reflector's address, `open` for an agent-less
//! STAMP reflector answering unauthenticated probes, such as a router, and its labels), or
//! `dns:NAME` (every A/AAAA answer for NAME: the agents' headless Service on Kubernetes,
//! no API credentials needed). Both are read again every refresh; this host's own
//! addresses, and any address no probe may go to, are left out.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::path::PathBuf;

use sonde_probe::host::{broadcast_of, local_subnets, Subnet};

/// Peers one agent probes at most: its state (about 1 kB a peer probed every 10 s, up to
/// 10 kB with the minute's full histogram past 256 answers a minute) and its `/metrics`
/// (about 26 lines a peer) stay bounded whatever a name answers (BENCHMARKS.md: 17 MB at
/// 10,000 silent peers, about 110 MB at most).
pub const MAX_PEERS: usize = 10_000;

pub use sonde_proto::mesh::Peer;

/// Why `--mesh SOURCE` gives no list; names the flag and the file or name.
#[derive(Debug, thiserror::Error)]
pub enum PeersError {
    #[error("--mesh dns: needs a name (dns:sonde-agents.sonde.svc)")]
    NoName,
    #[error("--mesh needs a file or dns:NAME")]
    Empty,
    #[error("--mesh {}: {source}", .path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("--mesh {}: {source}", .path.display())]
    File { path: PathBuf, source: LineError },
    #[error("--mesh dns:{name}: {source}")]
    Dns {
        name: String,
        source: std::io::Error,
    },
}

/// A line of a peers file that is no peer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {fault}")]
pub struct LineError {
    pub line: usize,
    pub fault: LineFault,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LineFault {
    #[error("'{0}' is not an address (ADDR or ADDR:PORT, [v6]:PORT)")]
    NotAddress(String),
    #[error("{addr} is {why}: a probe goes only to a unicast address")]
    NotUnicast { addr: SocketAddr, why: String },
    #[error("'{0}' is neither open nor KEY=VALUE")]
    NotWord(String),
    #[error("label '{key}': {source}")]
    Label {
        key: String,
        source: sonde_proto::labels::LabelError,
    },
}

/// `--mesh SOURCE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    File(PathBuf),
    /// A name and the port its agents' reflectors listen on.
    Dns(String, u16),
}

impl Source {
    /// `dns:NAME` or a file's path; `port` is the peers' reflector port where not given.
    pub fn parse(s: &str, port: u16) -> Result<Source, PeersError> {
        match s.strip_prefix("dns:") {
            Some("") => Err(PeersError::NoName),
            Some(name) => Ok(Source::Dns(name.to_string(), port)),
            None if s.is_empty() => Err(PeersError::Empty),
            None => Ok(Source::File(PathBuf::from(s))),
        }
    }

    /// The peers now. An error names the file and line, or the name.
    pub fn read(&self, port: u16) -> Result<Vec<Peer>, PeersError> {
        // A subnet's broadcast address reaches every host of its link.
        let subnets = local_subnets();
        let peers = match self {
            Source::File(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| PeersError::Read {
                    path: path.clone(),
                    source,
                })?;
                parse_file(&text, port, &subnets).map_err(|source| PeersError::File {
                    path: path.clone(),
                    source,
                })?
            }
            Source::Dns(name, port) => resolve(name, *port)?,
        };
        let mut seen = std::collections::HashSet::new();
        // Read once a list (a bind per peer cost 3 system calls each per refresh).
        let local: std::collections::HashSet<IpAddr> = sonde_probe::host::local_addresses()
            .into_iter()
            .map(|ip| ip.to_canonical())
            .collect();
        let mut kept: Vec<Peer> = peers
            .into_iter()
            .filter(|p| {
                refused(p.addr.ip()).is_none()
                    && !local.contains(&p.addr.ip().to_canonical())
                    && broadcast_of(p.addr.ip(), &subnets).is_none()
            })
            .filter(|p| seen.insert(p.addr))
            .collect();
        if kept.len() > MAX_PEERS {
            // The lowest addresses, so that a name answering in a rotating order keeps
            // the same peers (and series) from one refresh to the next.
            let all = kept.len();
            kept.sort_by_key(|p| p.addr);
            kept.truncate(MAX_PEERS);
            tracing::warn!("mesh: {all} peers listed, probing the first {MAX_PEERS} by address");
        }
        Ok(kept)
    }
}

/// A file's peers; an error names the line. `subnets` are this host's: a line naming one's
/// broadcast address is refused.
pub fn parse_file(text: &str, port: u16, subnets: &[Subnet]) -> Result<Vec<Peer>, LineError> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let at = |fault: LineFault| LineError { line: n + 1, fault };
        let mut words = line.split_whitespace();
        let addr = words.next().expect("a non-empty line has a word");
        let addr = parse_addr(addr, port).map_err(at)?;
        let broadcast = broadcast_of(addr.ip(), subnets)
            .map(|s| format!("the broadcast address of {} ({})", s.network(), s.iface));
        if let Some(why) = refused(addr.ip()).map(str::to_string).or(broadcast) {
            return Err(at(LineFault::NotUnicast { addr, why }));
        }
        let mut peer = Peer {
            addr,
            open: false,
            labels: BTreeMap::new(),
        };
        for w in words {
            if w == "open" {
                peer.open = true;
                continue;
            }
            let (k, v) = w
                .split_once('=')
                .ok_or_else(|| at(LineFault::NotWord(w.to_string())))?;
            sonde_proto::labels::check(k, v).map_err(|source| {
                at(LineFault::Label {
                    key: k.to_string(),
                    source,
                })
            })?;
            peer.labels.insert(k.to_string(), v.to_string());
        }
        out.push(peer);
    }
    Ok(out)
}

fn parse_addr(s: &str, port: u16) -> Result<SocketAddr, LineFault> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    s.parse::<IpAddr>()
        .map(|ip| SocketAddr::new(ip, port))
        .map_err(|_| LineFault::NotAddress(s.to_string()))
}

/// Every A/AAAA answer for `name`, through the system's resolver.
fn resolve(name: &str, port: u16) -> Result<Vec<Peer>, PeersError> {
    let addrs = (name, port)
        .to_socket_addrs()
        .map_err(|source| PeersError::Dns {
            name: name.to_string(),
            source,
        })?;
    Ok(addrs
        .map(|addr| Peer {
            addr,
            open: false,
            labels: BTreeMap::new(),
        })
        .collect())
}

/// Why no probe may go to `ip`, if none may.
pub fn refused(ip: IpAddr) -> Option<&'static str> {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    match ip {
        ip if ip.is_loopback() => Some("a loopback address"),
        ip if ip.is_unspecified() => Some("the unspecified address"),
        ip if ip.is_multicast() => Some("a multicast address"),
        IpAddr::V4(v4) if v4.is_broadcast() => Some("the broadcast address"),
        // Link-local: no agent's reflector, and where cloud metadata services answer.
        IpAddr::V4(v4) if v4.is_link_local() => Some("a link-local address"),
        IpAddr::V6(v6) if v6.is_unicast_link_local() => Some("a link-local address"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_gives_addresses_ports_open_reflectors_and_labels() {
        let text = "# peers\n198.18.2.2 zone=a rack=r1\n\n198.18.2.3:9000 open # a router\n[2001:db8::1]:862\n2001:db8::2\n";
        let p = parse_file(text, 862, &[]).unwrap();
        assert_eq!(p.len(), 4);
        assert_eq!(p[0].addr, "198.18.2.2:862".parse().unwrap());
        assert_eq!(p[0].labels["rack"], "r1");
        assert!(!p[0].open && p[1].open);
        assert_eq!(p[1].addr.port(), 9000);
        assert_eq!(p[3].addr, "[2001:db8::2]:862".parse().unwrap());
    }

    #[test]
    fn a_bad_line_is_named_and_no_probe_goes_to_loopback_or_broadcast() {
        for (text, want) in [
            (
                "198.18.2.2\nnot-an-address\n",
                "line 2: 'not-an-address' is not an address",
            ),
            ("127.0.0.1\n", "line 1: 127.0.0.1:862 is a loopback address"),
            ("255.255.255.255\n", "is the broadcast address"),
            ("224.0.0.1\n", "is a multicast address"),
            ("169.254.169.254\n", "is a link-local address"),
            ("[fe80::1]:862\n", "is a link-local address"),
            (
                "198.18.2.2 zone\n",
                "line 1: 'zone' is neither open nor KEY=VALUE",
            ),
            ("198.18.2.2 __x=1\n", "line 1: label '__x'"),
        ] {
            let e = parse_file(text, 862, &[]).unwrap_err().to_string();
            assert!(e.contains(want), "{text:?}: {e}");
        }
        // A subnet's directed broadcast (issue 52 L7: it was kept as a peer).
        let link = [Subnet {
            iface: "eth0".into(),
            addr: "198.18.2.1".parse().unwrap(),
            prefix: 24,
        }];
        let e = parse_file("198.18.2.2\n198.18.2.255\n", 862, &link).unwrap_err();
        assert_eq!(e.line, 2);
        assert_eq!(
            e.to_string(),
            "line 2: 198.18.2.255:862 is the broadcast address of 198.18.2.0/24 (eth0): a probe goes only to a unicast address"
        );
        assert_eq!(parse_file("198.18.3.255\n", 862, &link).unwrap().len(), 1);
        assert_eq!(
            Source::parse("dns:agents.svc", 862).unwrap(),
            Source::Dns("agents.svc".into(), 862)
        );
        assert!(matches!(
            Source::parse("dns:", 862),
            Err(PeersError::NoName)
        ));
        let e = Source::File("/nonexistent/peers".into())
            .read(862)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("--mesh /nonexistent/peers: "), "{e}");
    }

    /// A list longer than [`MAX_PEERS`] (the red team's DNS answer of thousands) keeps the
    /// lowest addresses, whatever its order, each once.
    #[test]
    fn a_list_beyond_the_cap_keeps_the_lowest_addresses_once() {
        let mut text = String::new();
        for i in (0..MAX_PEERS as u32 + 5).rev() {
            let a =
                std::net::Ipv4Addr::from(u32::from(std::net::Ipv4Addr::new(198, 18, 0, 0)) + 1 + i);
            text.push_str(&format!("{a}\n"));
        }
        text.push_str("198.18.0.1\n");
        let path = std::env::temp_dir().join(format!("sonde-peers-cap-{}", std::process::id()));
        std::fs::write(&path, text).unwrap();
        let peers = Source::File(path.clone()).read(862).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(peers.len(), MAX_PEERS);
        assert_eq!(peers[0].addr, "198.18.0.1:862".parse().unwrap());
        let last = std::net::Ipv4Addr::from(
            u32::from(std::net::Ipv4Addr::new(198, 18, 0, 0)) + MAX_PEERS as u32,
        );
        assert_eq!(peers[MAX_PEERS - 1].addr, SocketAddr::new(last.into(), 862));
    }

    #[test]
    fn a_name_resolves_to_its_addresses_and_this_hosts_own_are_left_out() {
        // localhost resolves (from /etc/hosts) to loopback only: all of it left out.
        let peers = Source::Dns("localhost".into(), 862).read(862).unwrap();
        assert!(peers.is_empty(), "{peers:?}");
        let e = Source::Dns("no-such-name.invalid".into(), 862)
            .read(862)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("--mesh dns:no-such-name.invalid: "), "{e}");
    }
}
