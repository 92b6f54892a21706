//! What a sender that builds whole Ethernet frames needs to know about its path: the next
//! hop's MAC from the kernel's neighbour table (/proc/net/arp, IPv4) and the interface's own
//! MAC (/sys/class/net).

use std::net::Ipv4Addr;
use std::path::Path;

use crate::{parse_err, read, FormatError, ProbeError};

/// One entry of the IPv4 neighbour table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Neighbour {
    pub ip: Ipv4Addr,
    pub mac: [u8; 6],
    pub iface: String,
    /// Resolved (ATF_COM): the MAC is usable.
    pub complete: bool,
}

/// `aa:bb:cc:dd:ee:ff` as bytes.
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut parts = s.trim().split(':');
    for b in &mut mac {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

pub fn read_arp(root: &Path) -> Result<Vec<Neighbour>, ProbeError> {
    let text = read(root, "proc/net/arp")?;
    parse_arp(&text).map_err(|r| parse_err(root, "proc/net/arp", r))
}

/// Columns: IP address, HW type, Flags, HW address, Mask, Device.
pub fn parse_arp(text: &str) -> Result<Vec<Neighbour>, FormatError> {
    let mut out = Vec::new();
    for line in text.lines().skip(1).filter(|l| !l.trim().is_empty()) {
        let f: Vec<&str> = line.split_ascii_whitespace().collect();
        let [ip, _, flags, mac, _, iface] = f[..] else {
            return Err(FormatError::Line {
                what: "not six columns",
                line: line.to_string(),
            });
        };
        let flags = u32::from_str_radix(flags.trim_start_matches("0x"), 16)
            .map_err(|e| FormatError::field(format!("flags {flags}"), e))?;
        out.push(Neighbour {
            ip: ip
                .parse()
                .map_err(|e| FormatError::field(format!("address {ip}"), e))?,
            mac: parse_mac(mac)
                .ok_or_else(|| FormatError::missing(format!("hardware address {mac}")))?,
            iface: iface.to_string(),
            complete: flags & 0x2 != 0,
        });
    }
    Ok(out)
}

/// The resolved MAC of `ip` on `iface`, if the table has one.
pub fn mac_in(table: &[Neighbour], iface: &str, ip: Ipv4Addr) -> Option<[u8; 6]> {
    let n = table.iter().find(|n| n.ip == ip && n.iface == iface);
    n.filter(|n| n.complete).map(|n| n.mac)
}

/// The interface's own MAC.
pub fn mac_of(root: &Path, iface: &str) -> Result<[u8; 6], ProbeError> {
    let rel = format!("sys/class/net/{iface}/address");
    let text = read(root, &rel)?;
    parse_mac(&text).ok_or_else(|| {
        parse_err(
            root,
            &rel,
            FormatError::missing(format!("not a MAC: {}", text.trim())),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture;

    #[test]
    fn captured_vm_neighbours_and_mac() {
        let root = fixture("vm-2cpu-virtio");
        let table = read_arp(&root).unwrap();
        let gw = "192.0.2.1".parse().unwrap();
        assert_eq!(mac_in(&table, "eth0", gw), Some([2, 0xfc, 0, 0, 0, 5]));
        assert_eq!(mac_in(&table, "eth1", gw), None);
        assert_eq!(mac_of(&root, "eth0").unwrap(), [2, 0xfc, 0, 0, 0, 1]);
    }

    #[test]
    fn incomplete_entries_have_no_usable_mac() {
        let text = "IP address HW type Flags HW address Mask Device\n\
                    198.18.0.2 0x1 0x0 00:00:00:00:00:00 * v0\n";
        let table = parse_arp(text).unwrap();
        assert!(!table[0].complete);
        assert_eq!(mac_in(&table, "v0", "198.18.0.2".parse().unwrap()), None);
        assert!(parse_arp("h\n198.18.0.2 0x1 0x2 zz * v0\n").is_err());
        assert_eq!(parse_mac("02:00:5d:00:00:0a:01"), None);
    }
}
