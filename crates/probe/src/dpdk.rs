//! What DPDK needs of a host: free hugepages, and a device bound to a driver it can use.

use std::path::Path;

use crate::{read, ProbeError};

/// Drivers that hand a whole PCI device to user space.
const USER_SPACE: &[&str] = &["vfio-pci", "uio_pci_generic", "igb_uio"];
/// Drivers whose DPDK driver shares the device with the kernel's (bifurcated).
const BIFURCATED: &[&str] = &["mlx5_core", "mlx4_core", "mana"];

/// The default-size hugepages of the host (/proc/meminfo).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hugepages {
    pub total: u64,
    pub free: u64,
    pub page_bytes: u64,
}

pub fn hugepages(root: &Path) -> Result<Hugepages, ProbeError> {
    let text = read(root, "proc/meminfo")?;
    let field = |name: &str| -> Option<u64> {
        let line = text.lines().find(|l| l.starts_with(name))?;
        line[name.len()..].split_whitespace().next()?.parse().ok()
    };
    let parse = |reason: &str| ProbeError::Parse {
        path: root.join("proc/meminfo"),
        reason: crate::FormatError::missing(reason),
    };
    Ok(Hugepages {
        total: field("HugePages_Total:").ok_or_else(|| parse("no HugePages_Total"))?,
        free: field("HugePages_Free:").ok_or_else(|| parse("no HugePages_Free"))?,
        page_bytes: field("Hugepagesize:").ok_or_else(|| parse("no Hugepagesize"))? * 1024,
    })
}

/// Who holds a PCI device, as far as DPDK is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Binding {
    /// A user-space driver (vfio-pci, ...): DPDK can take it.
    UserSpace(String),
    /// A kernel driver DPDK shares the device with (mlx5, MANA).
    Bifurcated(String),
    /// A kernel driver that owns the device: DPDK cannot use it while it is bound.
    Kernel(String),
    Unbound,
    /// No such PCI device on this host.
    Missing,
}

/// `0000:3b:00.0` for `3b:00.0`.
fn full_pci_address(addr: &str) -> String {
    if addr.matches(':').count() == 1 {
        format!("0000:{addr}")
    } else {
        addr.to_string()
    }
}

pub fn binding(root: &Path, addr: &str) -> Binding {
    let dev = root
        .join("sys/bus/pci/devices")
        .join(full_pci_address(addr));
    if !dev.exists() {
        return Binding::Missing;
    }
    let Ok(link) = std::fs::read_link(dev.join("driver")) else {
        return Binding::Unbound;
    };
    let driver = link
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if USER_SPACE.contains(&driver.as_str()) {
        Binding::UserSpace(driver)
    } else if BIFURCATED.contains(&driver.as_str()) {
        Binding::Bifurcated(driver)
    } else {
        Binding::Kernel(driver)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture;

    #[test]
    fn hugepages_are_read_from_meminfo() {
        let h = hugepages(&fixture("vm-2cpu-virtio")).unwrap();
        assert_eq!((h.total, h.free, h.page_bytes), (512, 512, 2 << 20));
        let e = hugepages(&fixture("smt-4cpu")).unwrap_err();
        assert!(e.to_string().contains("meminfo"), "{e}");
    }

    #[test]
    fn bindings_tell_kernel_from_dpdk_drivers() {
        let vm = fixture("vm-2cpu-virtio");
        assert_eq!(
            binding(&vm, "00:03.0"),
            Binding::Kernel("virtio-pci".into())
        );
        assert_eq!(binding(&vm, "0000:00:09.0"), Binding::Missing);
        let azure = fixture("azure-e192-mana");
        assert_eq!(
            binding(&azure, "7870:00:00.0"),
            Binding::Bifurcated("mana".into())
        );
    }

    #[test]
    fn a_mana_nic_gets_its_vdev_form() {
        let inv = crate::inventory::collect(&fixture("azure-e192-mana"));
        let by_name = |n: &str| inv.nics.iter().find(|x| x.name == n).unwrap();
        let vdev = by_name("enP30832s1").dpdk_vdev().unwrap();
        assert!(vdev.starts_with("--vdev=7870:00:00.0,mac="), "{vdev}");
        assert_eq!(by_name("eth0").dpdk_vdev(), None);
    }
}
