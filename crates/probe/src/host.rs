//! Who this host is: name, kernel, CPU model and nominal clock, own addresses.

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;

use sonde_results::HostInfo;

use crate::{read, topology};

/// Best-effort description; fields that cannot be read stay `None`.
pub fn host_info(root: &Path) -> HostInfo {
    let cpuinfo = read(root, "proc/cpuinfo").unwrap_or_default();
    let field = |key: &str| {
        cpuinfo.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == key).then(|| v.trim().to_string())
        })
    };
    let max_khz = read(root, "sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
        .ok()
        .and_then(|s| s.trim().parse::<f64>().ok());
    let mhz = field("cpu MHz").and_then(|s| s.parse::<f64>().ok());
    HostInfo {
        hostname: read(root, "proc/sys/kernel/hostname")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "unknown".into()),
        kernel: read(root, "proc/sys/kernel/osrelease")
            .ok()
            .map(|s| s.trim().to_string()),
        cpu_model: field("model name"),
        cpus_online: topology::online_cpus(root).ok().map(|c| c.len()),
        cpu_hz: max_khz.map(|k| k * 1e3).or(mhz.map(|m| m * 1e6)),
        cpu_hz_source: if max_khz.is_some() {
            Some("cpuinfo_max_freq".into())
        } else {
            mhz.map(|_| "cpu MHz".into())
        },
        boot_id: read(root, "proc/sys/kernel/random/boot_id")
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty()),
        inventory: None,
    }
}

/// Addresses assigned to this host's interfaces (getifaddrs), in the current namespace.
pub fn local_addresses() -> Vec<IpAddr> {
    interface_addresses()
        .into_iter()
        .map(|(_, ip)| ip)
        .collect()
}

/// The interface that holds `ip`, in the current namespace.
pub fn interface_with(ip: IpAddr) -> Option<String> {
    let found = interface_addresses().into_iter().find(|(_, a)| *a == ip);
    found.map(|(name, _)| name)
}

/// An IPv4 address of one of this host's interfaces, with its prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subnet {
    pub iface: String,
    pub addr: Ipv4Addr,
    pub prefix: u8,
}

impl Subnet {
    /// Its directed broadcast address: none for a /31 or /32 (RFC 3021: no broadcast).
    pub fn broadcast(&self) -> Option<Ipv4Addr> {
        let host_bits = 32 - u32::from(self.prefix.min(32));
        (host_bits >= 2).then(|| Ipv4Addr::from(u32::from(self.addr) | ((1u32 << host_bits) - 1)))
    }

    /// Its network, `198.18.0.0/24`.
    pub fn network(&self) -> String {
        let mask = u32::MAX
            .checked_shl(32 - u32::from(self.prefix.min(32)))
            .unwrap_or(0);
        format!(
            "{}/{}",
            Ipv4Addr::from(u32::from(self.addr) & mask),
            self.prefix
        )
    }
}

/// The subnet of `subnets` whose directed broadcast address `ip` is (IPv4, or IPv4 mapped
/// into IPv6), if any: a datagram to it goes to every host of that link.
pub fn broadcast_of(ip: IpAddr, subnets: &[Subnet]) -> Option<&Subnet> {
    let v4 = match ip {
        IpAddr::V4(v4) => v4,
        IpAddr::V6(v6) => v6.to_ipv4_mapped()?,
    };
    subnets.iter().find(|s| s.broadcast() == Some(v4))
}

/// This host's IPv4 subnets (getifaddrs: each address and its netmask), in the current
/// namespace.
pub fn local_subnets() -> Vec<Subnet> {
    let mut out = Vec::new();
    each_ifaddr(|ifa| {
        let (sa, mask) = (ifa.ifa_addr, ifa.ifa_netmask);
        // SAFETY: the entry's pointers are live until the list is freed; an AF_INET
        // address and its netmask are sockaddr_in, the name a C string.
        unsafe {
            if !sa.is_null() && !mask.is_null() && (*sa).sa_family as i32 == libc::AF_INET {
                let addr = &*(sa as *const libc::sockaddr_in);
                let mask = &*(mask as *const libc::sockaddr_in);
                out.push(Subnet {
                    iface: std::ffi::CStr::from_ptr(ifa.ifa_name)
                        .to_string_lossy()
                        .into_owned(),
                    addr: Ipv4Addr::from(u32::from_be(addr.sin_addr.s_addr)),
                    prefix: u32::from_be(mask.sin_addr.s_addr).count_ones() as u8,
                });
            }
        }
    });
    out
}

/// Each interface's addresses (getifaddrs), in the current namespace.
fn interface_addresses() -> Vec<(String, IpAddr)> {
    let mut out = Vec::new();
    each_ifaddr(|ifa| {
        let sa = ifa.ifa_addr;
        // SAFETY: the entry's pointers are live until the list is freed; the address is
        // the sockaddr its family says, the name a C string.
        unsafe {
            let ip = if sa.is_null() {
                None
            } else {
                match (*sa).sa_family as i32 {
                    libc::AF_INET => {
                        let sin = &*(sa as *const libc::sockaddr_in);
                        Some(IpAddr::from(
                            u32::from_be(sin.sin_addr.s_addr).to_be_bytes(),
                        ))
                    }
                    libc::AF_INET6 => {
                        let sin6 = &*(sa as *const libc::sockaddr_in6);
                        Some(IpAddr::from(sin6.sin6_addr.s6_addr))
                    }
                    _ => None,
                }
            };
            if let Some(ip) = ip {
                let name = std::ffi::CStr::from_ptr(ifa.ifa_name);
                out.push((name.to_string_lossy().into_owned(), ip));
            }
        }
    });
    out
}

/// Calls `f` on each entry of getifaddrs' list; none when it fails.
fn each_ifaddr(mut f: impl FnMut(&libc::ifaddrs)) {
    // SAFETY: getifaddrs allocates a list we walk read-only and free exactly once.
    unsafe {
        let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
        if libc::getifaddrs(&mut head) != 0 {
            return;
        }
        let mut cur = head;
        while !cur.is_null() {
            f(&*cur);
            cur = (*cur).ifa_next;
        }
        libc::freeifaddrs(head);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture;

    #[test]
    fn captured_vm() {
        let h = host_info(&fixture("vm-2cpu-virtio"));
        assert_eq!(h.cpu_model.as_deref(), Some("Intel(R) Xeon(R) Processor"));
        assert_eq!(h.cpu_hz, Some(2.6e9));
        assert_eq!(h.cpus_online, Some(2));
        assert!(h.kernel.unwrap().starts_with("6."));
    }

    #[test]
    fn a_subnets_broadcast_is_its_last_address_and_a_31_has_none() {
        let s = |a: &str, prefix| Subnet {
            iface: "v0".into(),
            addr: a.parse().unwrap(),
            prefix,
        };
        let subnets = [
            s("198.18.0.2", 24),
            s("198.19.7.9", 30),
            s("198.18.9.0", 31),
        ];
        assert_eq!(subnets[0].network(), "198.18.0.0/24");
        let found = |ip: &str| broadcast_of(ip.parse().unwrap(), &subnets).map(|s| s.network());
        assert_eq!(found("198.18.0.255").as_deref(), Some("198.18.0.0/24"));
        assert_eq!(
            found("::ffff:198.18.0.255").as_deref(),
            Some("198.18.0.0/24")
        );
        assert_eq!(found("198.19.7.11").as_deref(), Some("198.19.7.8/30"));
        for unicast in ["198.18.0.254", "198.18.9.1", "198.18.1.255", "2001:db8::ff"] {
            assert_eq!(found(unicast), None, "{unicast}");
        }
        // This namespace's loopback, 127.0.0.1/8: its broadcast is 127.255.255.255.
        let lo = local_subnets();
        assert!(
            lo.iter().any(|s| s.iface == "lo" && s.prefix == 8),
            "{lo:?}"
        );
    }

    #[test]
    fn loopback_is_local() {
        assert!(local_addresses().iter().any(|a| a.is_loopback()));
        assert_eq!(
            interface_with("127.0.0.1".parse().unwrap()).as_deref(),
            Some("lo")
        );
    }
}
