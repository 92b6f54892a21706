//! Whether this agent may send a client part's traffic where a controller says: never to an
//! address that is not one host's unicast address, never to a well-known port, and only
//! with the serving agent's grant, made with the key for the address this host sends from.
//! Checked before a single data packet leaves (the data connections open after it).

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::{SystemTime, UNIX_EPOCH};

use sonde_proto::{Grant, GrantError, Key};

/// Ports below this are services' (DNS, NTP, SSH...), never a serving agent's data port.
pub const FIRST_DATA_PORT: u16 = 1024;

/// Why a target is no place to send a test's traffic, if it is not.
pub fn refused_target(target: SocketAddr) -> Option<String> {
    let ip = match target.ip() {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    let what = match ip {
        ip if ip.is_loopback() => Some("a loopback address (this host's own services)"),
        ip if ip.is_unspecified() => Some("the unspecified address (this host's own services)"),
        ip if ip.is_multicast() => Some("a multicast address"),
        IpAddr::V4(v4) if v4.is_broadcast() => Some("the broadcast address"),
        _ => None,
    };
    if let Some(what) = what {
        return Some(format!(
            "{target} is {what}: a client part sends only to another agent's unicast address"
        ));
    }
    if target.port() < FIRST_DATA_PORT {
        return Some(format!(
            "{target} is a well-known port (below {FIRST_DATA_PORT}): no agent serves data there"
        ));
    }
    None
}

/// Why a client part sends nothing to the server a controller named.
#[derive(Debug, thiserror::Error)]
pub enum PartRefused {
    /// No place for a test's traffic (`refused_target`).
    #[error("{0}")]
    Target(String),
    #[error("{0} is an address of this host (its own services): a client part sends only to another agent's host")]
    Local(SocketAddr),
    #[error("this agent has no --key-file, so it cannot check the serving agent's grant: it runs client parts only with a key")]
    NoKey,
    #[error(transparent)]
    NoGrant(GrantError),
    #[error("no route from this host to {server}: {source}")]
    NoRoute {
        server: SocketAddr,
        source: std::io::Error,
    },
    #[error("refused to send to {server}: {source}")]
    Grant {
        server: SocketAddr,
        source: GrantError,
    },
    /// The grant held but the server did not prove it serves the test (`target::prove`).
    #[error(transparent)]
    NotProven(#[from] super::target::NotProven),
}

/// Checks the client part aimed at `server` with `cookie`: the target, then the grant;
/// the key and the address this host sends from if they hold.
pub fn check<'k>(
    key: Option<&'k Key>,
    server: SocketAddr,
    cookie: u64,
    grant: Option<&Grant>,
) -> Result<(&'k Key, IpAddr), PartRefused> {
    if let Some(why) = refused_target(server) {
        return Err(PartRefused::Target(why));
    }
    if is_local(server.ip()) {
        return Err(PartRefused::Local(server));
    }
    let Some(key) = key else {
        return Err(PartRefused::NoKey);
    };
    let grant = grant.ok_or(PartRefused::NoGrant(GrantError::Missing))?;
    let source = source_toward(server).map_err(|source| PartRefused::NoRoute { server, source })?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    grant
        .check(key, source, server, cookie, now)
        .map_err(|source| PartRefused::Grant { server, source })?;
    Ok((key, source))
}

/// Whether `ip` is one of this host's addresses: only those can be bound.
fn is_local(ip: IpAddr) -> bool {
    UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok()
}

/// The address this host sends from toward `to` (a connected UDP socket sends nothing).
fn source_toward(to: SocketAddr) -> std::io::Result<IpAddr> {
    let any: SocketAddr = match to {
        SocketAddr::V4(_) => "0.0.0.0:0".parse().expect("an address"),
        SocketAddr::V6(_) => "[::]:0".parse().expect("an address"),
    };
    let s = UdpSocket::bind(any)?;
    s.connect(to)?;
    Ok(s.local_addr()?.ip())
}

/// The grant this serving agent hands the controller for `client` at `server`.
pub fn grant(key: &Key, client: IpAddr, server: SocketAddr, cookie: u64) -> Grant {
    /// Long enough for the controller to set up the client agent and for its data
    /// connections to arrive; a grant names one test's cookie anyway.
    const VALID_S: u64 = 60;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    Grant::new(key, client, server, cookie, now + VALID_S)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_unicast_targets_on_data_ports() {
        for bad in [
            "127.0.0.1:5000",
            "127.9.9.9:5000",
            "0.0.0.0:5000",
            "[::1]:5000",
            "[::]:5000",
            "[::ffff:127.0.0.1]:5000",
            "224.0.0.1:5000",
            "[ff02::1]:5000",
            "255.255.255.255:5000",
            "198.18.0.2:53",
            "198.18.0.2:0",
        ] {
            assert!(refused_target(bad.parse().unwrap()).is_some(), "{bad}");
        }
        assert_eq!(refused_target("198.18.0.2:40000".parse().unwrap()), None);
    }

    #[test]
    fn no_key_no_grant_or_a_grant_for_elsewhere_is_refused() {
        let key = Key::from_file_bytes(b"the fleet's key of some length").unwrap();
        let b: SocketAddr = "198.18.0.2:40000".parse().unwrap();
        let e = check(None, b, 1, None).unwrap_err();
        assert!(matches!(e, PartRefused::NoKey), "{e}");
        assert!(e.to_string().contains("--key-file"), "{e}");
        let e = check(Some(&key), b, 1, None).unwrap_err();
        assert!(e.to_string().contains("grant"), "{e}");
        // A grant B made for another server or cookie.
        let g = grant(&key, "198.18.0.1".parse().unwrap(), b, 2);
        assert!(check(Some(&key), b, 1, Some(&g)).is_err());
        let victim: SocketAddr = "198.18.0.3:40000".parse().unwrap();
        assert!(check(Some(&key), victim, 2, Some(&g)).is_err());
    }
}
