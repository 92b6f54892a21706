//! What only the driver knows, through the ethtool ioctls (SIOCETHTOOL): channel counts
//! and ring sizes. Drivers that do not implement a call leave the figure absent.

use std::io;

use sonde_results::inventory::{Channels, Rings, Rss};

const SIOCETHTOOL: libc::c_ulong = 0x8946;
const ETHTOOL_GRINGPARAM: u32 = 0x10;
const ETHTOOL_GCHANNELS: u32 = 0x3c;

/// `struct ifreq` with the data pointer the ethtool calls use.
#[repr(C)]
struct IfReq {
    name: [libc::c_char; libc::IFNAMSIZ],
    data: *mut libc::c_void,
    _pad: [u8; 16],
}

/// Nine u32: the command, then the fields of ethtool_channels or ethtool_ringparam.
fn call(iface: &str, cmd: u32) -> io::Result<[u32; 9]> {
    let mut buf = [0u32; 9];
    buf[0] = cmd;
    raw_call(iface, buf.as_mut_ptr().cast())?;
    Ok(buf)
}

/// One SIOCETHTOOL ioctl on `iface` with the command block at `data`, which the caller
/// keeps alive and sized for the command.
fn raw_call(iface: &str, data: *mut libc::c_void) -> io::Result<()> {
    if iface.len() >= libc::IFNAMSIZ {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "interface name too long",
        ));
    }
    let mut req = IfReq {
        name: [0; libc::IFNAMSIZ],
        data,
        _pad: [0; 16],
    };
    for (d, s) in req.name.iter_mut().zip(iface.bytes()) {
        *d = s as libc::c_char;
    }
    // SAFETY: a datagram socket for the ioctl, closed below; req and data outlive the call.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let r = libc::ioctl(fd, SIOCETHTOOL as _, &mut req);
        let err = io::Error::last_os_error();
        libc::close(fd);
        if r < 0 {
            return Err(err);
        }
    }
    Ok(())
}

/// The driver's name and version (ETHTOOL_GDRVINFO); virtual devices without a sysfs
/// driver link (veth) still name theirs here.
pub fn driver_info(iface: &str) -> Option<(String, String)> {
    // struct ethtool_drvinfo: cmd, then driver[32], version[32], fw_version[32], ...
    let mut buf = [0u8; 196];
    buf[..4].copy_from_slice(&0x3u32.to_ne_bytes());
    raw_call(iface, buf.as_mut_ptr().cast()).ok()?;
    let field = |at: usize| {
        let f = &buf[at..at + 32];
        let end = f.iter().position(|&b| b == 0).unwrap_or(32);
        String::from_utf8_lossy(&f[..end]).into_owned()
    };
    Some((field(4), field(36)))
}

/// Offloads through the legacy get calls (each returns one u32 after the command).
pub fn offloads(iface: &str) -> std::collections::BTreeMap<String, bool> {
    const ETH_FLAG_LRO: u32 = 1 << 15;
    let mut out = std::collections::BTreeMap::new();
    for (name, cmd) in [
        ("rx-checksum", 0x14u32),
        ("tx-checksum", 0x16),
        ("tso", 0x1e),
        ("gso", 0x23),
        ("gro", 0x2b),
    ] {
        if let Ok(b) = call(iface, cmd) {
            out.insert(name.to_string(), b[1] != 0);
        }
    }
    if let Ok(b) = call(iface, 0x25) {
        out.insert("lro".to_string(), b[1] & ETH_FLAG_LRO != 0);
    }
    out
}

/// RSS key and indirection table sizes (ETHTOOL_GRSSH with zero sizes asks for them).
pub fn rss(iface: &str) -> Option<Rss> {
    // cmd, rss_context, indir_size, key_size, then hfunc and reserved fields.
    let b = call(iface, 0x46).ok()?;
    (b[2] > 0 || b[3] > 0).then_some(Rss {
        indirection_entries: b[2],
        key_bytes: b[3],
    })
}

pub fn channels(iface: &str) -> Option<Channels> {
    let b = call(iface, ETHTOOL_GCHANNELS).ok()?;
    Some(Channels {
        max_rx: b[1],
        max_tx: b[2],
        max_combined: b[4],
        rx: b[5],
        tx: b[6],
        combined: b[8],
    })
}

pub fn rings(iface: &str) -> Option<Rings> {
    let b = call(iface, ETHTOOL_GRINGPARAM).ok()?;
    Some(Rings {
        max_rx: b[1],
        max_tx: b[4],
        rx: b[5],
        tx: b[8],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn a_veth_reports_its_channels_and_missing_interfaces_do_not() {
        assert!(channels("no-such-if0").is_none());
        assert!(call("an-interface-name-that-is-too-long", ETHTOOL_GCHANNELS).is_err());
        let name = format!("vet{}", std::process::id() % 100_000);
        let made = Command::new("ip")
            .args([
                "link",
                "add",
                &name,
                "type",
                "veth",
                "peer",
                "name",
                &format!("{name}p"),
            ])
            .status()
            .is_ok_and(|s| s.success());
        if !made {
            assert_ne!(
                std::env::var("CI").as_deref(),
                Ok("true"),
                "CI must be able to create a veth (root, iproute2)"
            );
            eprintln!("SKIPPED: cannot create a veth here");
            return;
        }
        let ch = channels(&name);
        let offs = offloads(&name);
        let info = driver_info(&name);
        let _ = Command::new("ip").args(["link", "del", &name]).status();
        let ch = ch.expect("veth implements ETHTOOL_GCHANNELS");
        // veth segments and checksums in software and says so.
        assert_eq!(offs.get("gso"), Some(&true), "{offs:?}");
        assert!(offs.contains_key("tx-checksum"), "{offs:?}");
        assert_eq!(info, Some(("veth".to_string(), "1.0".to_string())));
        assert!(ch.max_rx >= 1 && ch.max_tx >= 1 && ch.rx >= 1, "{ch:?}");
    }
}
