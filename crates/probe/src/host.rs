//! Who this host is: name, kernel, CPU model and nominal clock, own addresses.

use std::net::IpAddr;
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

/// Each interface's addresses (getifaddrs), in the current namespace.
fn interface_addresses() -> Vec<(String, IpAddr)> {
    let mut out = Vec::new();
    // SAFETY: getifaddrs allocates a list we walk read-only and free exactly once.
    unsafe {
        let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
        if libc::getifaddrs(&mut head) != 0 {
            return out;
        }
        let mut cur = head;
        while !cur.is_null() {
            let sa = (*cur).ifa_addr;
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
                let name = std::ffi::CStr::from_ptr((*cur).ifa_name);
                out.push((name.to_string_lossy().into_owned(), ip));
            }
            cur = (*cur).ifa_next;
        }
        libc::freeifaddrs(head);
    }
    out
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
    fn loopback_is_local() {
        assert!(local_addresses().iter().any(|a| a.is_loopback()));
        assert_eq!(
            interface_with("127.0.0.1".parse().unwrap()).as_deref(),
            Some("lo")
        );
    }
}
