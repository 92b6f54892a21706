//! Which hypervisor a guest runs under, and on whose platform: "KVM (Firecracker)",
//! "Hyper-V (Microsoft Corporation)". A VM's network path is the hypervisor's (virtio,
//! netvsc, ENA), so a result names it. The vendor comes from the CPU's hypervisor leaf
//! (what the hypervisor says of itself), else from the paravirtual clocksources the kernel
//! offers; the platform from DMI, else from the ACPI tables' OEM id (microVMs have no DMI).

use std::path::Path;

/// The CPU's hypervisor vendor signature (CPUID leaf 0x4000_0000), when the CPU says it runs
/// under one.
pub fn cpuid_signature() -> Option<[u8; 12]> {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::__cpuid;
        // SAFETY: CPUID exists on every x86_64 CPU; leaf 1 and the hypervisor leaves only
        // read registers.
        #[allow(unused_unsafe)]
        let (flags, leaf) = unsafe { (__cpuid(1), __cpuid(0x4000_0000)) };
        if flags.ecx & (1 << 31) == 0 {
            return None;
        }
        let mut sig = [0u8; 12];
        sig[..4].copy_from_slice(&leaf.ebx.to_le_bytes());
        sig[4..8].copy_from_slice(&leaf.ecx.to_le_bytes());
        sig[8..].copy_from_slice(&leaf.edx.to_le_bytes());
        Some(sig)
    }
    #[cfg(not(target_arch = "x86_64"))]
    None
}

/// The hypervisor of the host whose /proc and /sys are under `root`, with its platform;
/// `cpuid` is the live CPU's signature (`None` for a captured tree). `None`: bare metal.
pub fn detect(root: &Path, cpuid: Option<[u8; 12]>) -> Option<String> {
    let read = |p: &str| std::fs::read(root.join(p)).ok();
    let text = |p: &str| {
        read(p)
            .map(|b| String::from_utf8_lossy(&b).trim().to_string())
            .filter(|s| !s.is_empty())
    };
    let flagged = text("proc/cpuinfo").is_some_and(|c| {
        c.lines()
            .any(|l| l.starts_with("flags") && l.split_whitespace().any(|f| f == "hypervisor"))
    });
    let vendor = cpuid.and_then(|s| vendor_of_signature(&s)).or_else(|| {
        let clocks = text("sys/devices/system/clocksource/clocksource0/available_clocksource");
        vendor_of_clocksources(clocks.as_deref().unwrap_or(""))
            .or_else(|| (text("sys/hypervisor/type")? == "xen").then_some("Xen".to_string()))
    });
    let dmi = text("sys/class/dmi/id/sys_vendor");
    let platform = dmi.or_else(|| acpi_platform(&read("sys/firmware/acpi/tables/FACP")?));
    match (vendor, platform) {
        (Some(v), Some(p)) if p != v => Some(format!("{v} ({p})")),
        (Some(v), _) => Some(v),
        (None, Some(p)) if flagged || is_virtual_platform(&p) => Some(p),
        (None, _) if flagged => Some("unknown hypervisor".into()),
        (None, _) => None,
    }
}

/// The vendor a hypervisor names itself by in CPUID.
fn vendor_of_signature(sig: &[u8; 12]) -> Option<String> {
    let known = [
        (&b"KVMKVMKVM"[..], "KVM"),
        (b"Microsoft Hv", "Hyper-V"),
        (b"VMwareVMware", "VMware"),
        (b"XenVMMXenVMM", "Xen"),
        (b"TCGTCGTCGTCG", "QEMU (TCG)"),
        (b"bhyve bhyve ", "bhyve"),
        (b" lrpepyh  vr", "Parallels"),
        (b"ACRNACRNACRN", "ACRN"),
        (b"VBoxVBoxVBox", "VirtualBox"),
    ];
    if let Some((_, name)) = known.iter().find(|(s, _)| sig.starts_with(s)) {
        return Some(name.to_string());
    }
    let raw: String = sig
        .iter()
        .filter(|b| b.is_ascii_graphic() || **b == b' ')
        .map(|&b| b as char)
        .collect();
    Some(raw.trim().to_string()).filter(|s| !s.is_empty())
}

/// The vendor whose paravirtual clock the kernel found.
fn vendor_of_clocksources(available: &str) -> Option<String> {
    available.split_whitespace().find_map(|c| {
        let name = match c {
            "kvm-clock" => "KVM",
            c if c.starts_with("hyperv_clocksource") => "Hyper-V",
            "xen" => "Xen",
            _ => return None,
        };
        Some(name.to_string())
    })
}

/// The platform an ACPI table's OEM id (bytes 10..16) names, spelled out for the ones
/// clouds and VMMs are known by.
fn acpi_platform(table: &[u8]) -> Option<String> {
    let oem = String::from_utf8_lossy(table.get(10..16)?)
        .trim()
        .to_string();
    let name = match oem.as_str() {
        "FIRECK" => "Firecracker",
        "BOCHS" => "QEMU",
        "AMAZON" => "Amazon EC2",
        "GOOGLE" | "Google" => "Google Compute Engine",
        "VRTUAL" => "Microsoft Corporation",
        "CLOUDH" => "Cloud Hypervisor",
        _ => return None,
    };
    Some(name.to_string())
}

/// DMI vendors that are a hypervisor's, even when the CPU flag is hidden.
fn is_virtual_platform(p: &str) -> bool {
    ["Microsoft", "QEMU", "Amazon", "Google", "Firecracker"]
        .iter()
        .any(|v| p.contains(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_name_their_vendor() {
        assert_eq!(
            vendor_of_signature(b"KVMKVMKVM\0\0\0").as_deref(),
            Some("KVM")
        );
        assert_eq!(
            vendor_of_signature(b"Microsoft Hv").as_deref(),
            Some("Hyper-V")
        );
        assert_eq!(
            vendor_of_signature(b"NewVisorABCD").as_deref(),
            Some("NewVisorABCD")
        );
        assert_eq!(vendor_of_signature(&[0; 12]), None);
    }

    #[test]
    fn clocksources_and_acpi_tell_without_cpuid() {
        assert_eq!(
            vendor_of_clocksources("tsc kvm-clock").as_deref(),
            Some("KVM")
        );
        assert_eq!(
            vendor_of_clocksources("tsc hyperv_clocksource_tsc_page acpi_pm").as_deref(),
            Some("Hyper-V")
        );
        assert_eq!(vendor_of_clocksources("tsc hpet acpi_pm"), None);
        let mut facp = b"FACP\x14\x01\0\0\x06\x66FIRECKFCVMFADT".to_vec();
        assert_eq!(acpi_platform(&facp).as_deref(), Some("Firecracker"));
        facp[10..16].copy_from_slice(b"ALASKA");
        assert_eq!(acpi_platform(&facp), None);
        assert_eq!(acpi_platform(b"FACP"), None);
    }

    #[test]
    fn the_live_cpu_agrees_with_its_cpuinfo_flag() {
        let flagged = std::fs::read_to_string("/proc/cpuinfo")
            .unwrap_or_default()
            .lines()
            .any(|l| l.starts_with("flags") && l.split_whitespace().any(|f| f == "hypervisor"));
        if cfg!(target_arch = "x86_64") {
            assert_eq!(cpuid_signature().is_some(), flagged);
        }
    }
}
