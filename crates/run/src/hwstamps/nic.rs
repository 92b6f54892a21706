//! A device's hardware timestamping setting (`struct hwtstamp_config`), read with
//! SIOCGHWTSTAMP and written with SIOCSHWTSTAMP, behind [`Nic`] so that the record and
//! restore logic runs against a file-backed fake in tests ([`FakeNic`]): no NIC here
//! stamps in hardware.
//!
//! The ioctl, not `ethtool --set-hwtimestamp-cfg`: the ioctl is what ptp4l and chrony
//! use, works on every kernel since 3.14 (SIOCGHWTSTAMP) and needs no tool, where the
//! ethtool command needs ethtool 6.11 and a kernel with netlink tsconfig (6.14); this
//! machine's ethtool 6.1 has no such command. SIOCGHWTSTAMP reads the setting first, so
//! the exact previous value is put back, not a guessed "off".

use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

const SIOCSHWTSTAMP: libc::c_ulong = 0x89b0;
const SIOCGHWTSTAMP: libc::c_ulong = 0x89b1;
/// `HWTSTAMP_TX_ON`: every packet the socket asks a stamp for is stamped by the NIC.
pub const TX_ON: i32 = 1;
/// `HWTSTAMP_FILTER_ALL`: every received packet is stamped (ours are not PTP packets).
pub const FILTER_ALL: i32 = 1;

/// `struct hwtstamp_config`: flags, transmit type, receive filter.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HwConfig {
    pub flags: i32,
    pub tx_type: i32,
    pub rx_filter: i32,
}

impl HwConfig {
    /// What a test asks of its device: transmit stamps on, every packet received stamped;
    /// the flags kept as they were.
    pub fn stamping(previous: HwConfig) -> HwConfig {
        HwConfig {
            tx_type: TX_ON,
            rx_filter: FILTER_ALL,
            ..previous
        }
    }
}

impl std::fmt::Display for HwConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "tx_type {} rx_filter {} flags {}",
            self.tx_type, self.rx_filter, self.flags
        )
    }
}

/// Reading and writing a device's setting.
pub trait Nic: Send + Sync {
    fn get(&self, dev: &str) -> io::Result<HwConfig>;
    /// Writes `cfg`; returns what the driver took (it may widen a receive filter).
    fn set(&self, dev: &str, cfg: HwConfig) -> io::Result<HwConfig>;
}

/// The kernel's ioctls, on the network namespace this process is in.
pub struct Ioctl;

/// `struct ifreq` whose data points at a `hwtstamp_config`.
#[repr(C)]
struct IfReq {
    name: [libc::c_char; libc::IFNAMSIZ],
    data: *mut HwConfig,
    _pad: [u8; 16],
}

impl Ioctl {
    fn call(dev: &str, request: libc::c_ulong, cfg: &mut HwConfig) -> io::Result<()> {
        if dev.is_empty() || dev.len() >= libc::IFNAMSIZ {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{dev:?} is not an interface name"),
            ));
        }
        let mut req = IfReq {
            name: [0; libc::IFNAMSIZ],
            data: cfg,
            _pad: [0; 16],
        };
        for (d, s) in req.name.iter_mut().zip(dev.bytes()) {
            *d = s as libc::c_char;
        }
        // SAFETY: a datagram socket for the ioctl, closed below; req and cfg outlive it.
        unsafe {
            let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            let r = libc::ioctl(fd, request as _, &mut req);
            let err = io::Error::last_os_error();
            libc::close(fd);
            if r < 0 {
                return Err(err);
            }
        }
        Ok(())
    }
}

impl Nic for Ioctl {
    fn get(&self, dev: &str) -> io::Result<HwConfig> {
        let mut cfg = HwConfig::default();
        Ioctl::call(dev, SIOCGHWTSTAMP, &mut cfg)?;
        Ok(cfg)
    }

    fn set(&self, dev: &str, cfg: HwConfig) -> io::Result<HwConfig> {
        let mut cfg = cfg;
        Ioctl::call(dev, SIOCSHWTSTAMP, &mut cfg)?;
        Ok(cfg)
    }
}

/// Test-only (`sonde serve --hwstamps-fake DIR`): each device's setting is the file
/// `DIR/nic/DEV` (`tx_type rx_filter flags`; absent: all off), and every write is
/// appended to `DIR/nic/calls.log`, so that a test sees what was set and put back.
pub struct FakeNic {
    dir: PathBuf,
}

impl FakeNic {
    pub fn new(dir: &Path) -> FakeNic {
        FakeNic {
            dir: dir.join("nic"),
        }
    }
}

impl Nic for FakeNic {
    fn get(&self, dev: &str) -> io::Result<HwConfig> {
        let text = match std::fs::read_to_string(self.dir.join(dev)) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(HwConfig::default()),
            r => r?,
        };
        let n: Vec<i32> = text
            .split_whitespace()
            .map(str::parse)
            .collect::<Result<_, _>>()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        match n[..] {
            [tx_type, rx_filter, flags] => Ok(HwConfig {
                flags,
                tx_type,
                rx_filter,
            }),
            _ => Err(io::Error::new(io::ErrorKind::InvalidData, text)),
        }
    }

    fn set(&self, dev: &str, cfg: HwConfig) -> io::Result<HwConfig> {
        use std::io::Write;
        std::fs::create_dir_all(&self.dir)?;
        let line = format!("{} {} {}", cfg.tx_type, cfg.rx_filter, cfg.flags);
        std::fs::write(self.dir.join(dev), &line)?;
        let mut log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("calls.log"))?;
        writeln!(log, "set {dev} {line}")?;
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A device that does not exist is an error of the ioctl itself (ENODEV), not a
    /// setting read as "off".
    #[test]
    fn the_ioctl_reads_no_setting_of_a_missing_device() {
        let e = Ioctl.get("sondenone0").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENODEV), "{e}");
        assert!(Ioctl.get("").is_err());
        // A device without hardware stamping (lo, a veth) has no setting to read.
        let e = Ioctl.get("lo").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EOPNOTSUPP), "{e}");
        assert!(Ioctl.get("a-name-longer-than-ifnamsiz").is_err());
    }

    #[test]
    fn the_fake_keeps_and_logs_what_was_set() {
        let dir = std::env::temp_dir().join(format!("sonde-hwnic-{}", std::process::id()));
        let nic = FakeNic::new(&dir);
        assert_eq!(nic.get("eth0").unwrap(), HwConfig::default());
        let on = HwConfig::stamping(HwConfig::default());
        nic.set("eth0", on).unwrap();
        assert_eq!(nic.get("eth0").unwrap(), on);
        let log = std::fs::read_to_string(dir.join("nic/calls.log")).unwrap();
        assert_eq!(log, "set eth0 1 1 0\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
