//! The host inventory read from a root tree: CPU layout and NUMA from sysfs, caches, idle
//! states, NICs (driver, bus, NUMA node, queues, IRQs and their affinity, RPS/XPS, NAPI
//! settings, accelerated networking), and the sysctls that matter. Everything here reads
//! files, so fixture trees captured from machines test it; `ethtool` adds what only the
//! driver knows.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use sonde_results::inventory::{Cache, CpuLayout, IdleState, Inventory, Irq, Nic, NumaNode};

use crate::topology::parse_cpu_list;
use crate::{interrupts, read, topology};

/// sysctls reported, as paths under /proc/sys.
pub const SYSCTLS: &[&str] = &[
    "net/core/busy_poll",
    "net/core/busy_read",
    "net/core/rmem_max",
    "net/core/wmem_max",
    "net/core/netdev_max_backlog",
    "net/core/default_qdisc",
    "net/ipv4/tcp_rmem",
    "net/ipv4/tcp_wmem",
    "net/ipv4/tcp_congestion_control",
];

/// Drivers that run XDP programs in the driver (native mode), as of Linux 6.x.
const NATIVE_XDP_DRIVERS: &[&str] = &[
    "mlx5_core",
    "mlx4_core",
    "mana",
    "hv_netvsc",
    "virtio_net",
    "veth",
    "ixgbe",
    "i40e",
    "ice",
    "igc",
    "ena",
    "bnxt_en",
    "nfp",
    "tun",
];

/// VF drivers that pair with hv_netvsc under Azure accelerated networking.
const VF_DRIVERS: &[&str] = &["mlx4_core", "mlx5_core", "mana", "mlx4_en", "mlx5e"];

fn text(root: &Path, rel: &str) -> Option<String> {
    read(root, rel).ok().map(|s| s.trim().to_string())
}

fn num<T: std::str::FromStr>(root: &Path, rel: &str) -> Option<T> {
    text(root, rel)?.parse().ok()
}

fn link_name(root: &Path, rel: &str) -> Option<String> {
    let target = std::fs::read_link(root.join(rel)).ok()?;
    Some(target.file_name()?.to_string_lossy().into_owned())
}

fn dirs(root: &Path, rel: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(root.join(rel))
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The inventory of the running host: the files under `/`, what the drivers answer
/// through ethtool, and the recommendations that follow.
pub fn collect_live() -> Inventory {
    let mut inv = collect(Path::new("/"));
    for n in &mut inv.nics {
        n.channels = crate::ethtool::channels(&n.name);
        n.rings = crate::ethtool::rings(&n.name);
        n.offloads = crate::ethtool::offloads(&n.name);
        if let Some((driver, version)) = crate::ethtool::driver_info(&n.name) {
            if n.driver.is_none() && !driver.is_empty() {
                n.native_xdp = Some(NATIVE_XDP_DRIVERS.contains(&driver.as_str()));
                n.driver = Some(driver);
            }
            n.driver_version = (!version.is_empty()).then_some(version);
        }
        n.rss = crate::ethtool::rss(&n.name);
        if let Ok(f) = crate::xdp_features::query(ifindex(&n.name)) {
            n.native_xdp = Some(f.native);
            n.xdp_zero_copy = Some(f.zero_copy);
        }
    }
    inv.recommendations = crate::advice::recommend(&inv);
    inv
}

/// A captured tree laid out like `/` (no ethtool or netlink queries: they would ask
/// this host), with the advice for it.
pub fn collect_advised(root: &Path) -> Inventory {
    let mut inv = collect(root);
    inv.recommendations = crate::advice::recommend(&inv);
    inv
}

/// The index of interface `name` in this namespace (0: none).
fn ifindex(name: &str) -> u32 {
    let Ok(c) = std::ffi::CString::new(name) else {
        return 0;
    };
    // SAFETY: c is a live NUL-terminated string.
    unsafe { libc::if_nametoindex(c.as_ptr()) }
}

pub fn collect(root: &Path) -> Inventory {
    let cpuinfo = read(root, "proc/cpuinfo").unwrap_or_default();
    // The CPU's own word only for the live host, not for a captured tree.
    let cpuid = (root == Path::new("/"))
        .then(crate::hypervisor::cpuid_signature)
        .flatten();
    let hypervisor = crate::hypervisor::detect(root, cpuid);
    let mut inv = Inventory {
        kernel: text(root, "proc/sys/kernel/osrelease"),
        hypervisor,
        steal_since_boot_percent: crate::cpustat::read_snapshot(root)
            .ok()
            .map(|s| s.total.breakdown().steal_percent),
        clocksource: text(
            root,
            "sys/devices/system/clocksource/clocksource0/current_clocksource",
        ),
        clock: None,
        cpu: cpu_layout(root, &cpuinfo),
        nics: Vec::new(),
        sysctls: BTreeMap::new(),
        recommendations: Vec::new(),
    };
    for s in SYSCTLS {
        if let Some(v) = text(root, &format!("proc/sys/{s}")) {
            inv.sysctls.insert(
                s.replace('/', "."),
                v.split_whitespace().collect::<Vec<_>>().join(" "),
            );
        }
    }
    let irq_lines = interrupts::read_interrupts(root).unwrap_or_default();
    for name in dirs(root, "sys/class/net") {
        if name == "lo" || name == "bonding_masters" {
            continue;
        }
        inv.nics.push(nic(root, &name, &irq_lines));
    }
    // Accelerated networking: a netvsc NIC and a VF with the same MAC.
    let vfs: Vec<(String, String)> = inv
        .nics
        .iter()
        .filter(|n| n.driver.as_deref().is_some_and(|d| VF_DRIVERS.contains(&d)))
        .filter_map(|n| Some((n.mac.clone()?, n.name.clone())))
        .collect();
    for n in inv
        .nics
        .iter_mut()
        .filter(|n| n.driver.as_deref() == Some("hv_netvsc"))
    {
        n.accelerated_networking_vf = vfs
            .iter()
            .find(|(mac, _)| Some(mac) == n.mac.as_ref())
            .map(|(_, vf)| vf.clone());
    }
    inv
}

fn cpu_layout(root: &Path, cpuinfo: &str) -> CpuLayout {
    let online = topology::online_cpus(root).unwrap_or_default();
    let mut packages = BTreeSet::new();
    let mut cores: BTreeMap<(u32, u32), Vec<usize>> = BTreeMap::new();
    for &c in &online {
        if let Ok(id) = topology::core_of(root, c) {
            packages.insert(id.0);
            cores.entry(id).or_default().push(c);
        }
    }
    let threads_per_core = cores.values().map(Vec::len).max().unwrap_or(1);
    let mut numa_nodes = Vec::new();
    for d in dirs(root, "sys/devices/system/node")
        .iter()
        .filter(|d| d.starts_with("node"))
    {
        let Ok(node) = d[4..].parse::<usize>() else {
            continue;
        };
        let cpus = text(root, &format!("sys/devices/system/node/{d}/cpulist"))
            .and_then(|l| parse_cpu_list(&l).ok())
            .unwrap_or_default();
        let memory_kib = read(root, &format!("sys/devices/system/node/{d}/meminfo"))
            .ok()
            .and_then(|m| {
                m.lines()
                    .find(|l| l.contains("MemTotal:"))?
                    .split_whitespace()
                    .rev()
                    .nth(1)?
                    .parse()
                    .ok()
            });
        numa_nodes.push(NumaNode {
            node,
            cpus,
            memory_kib,
        });
    }
    numa_nodes.sort_by_key(|n| n.node);
    let mut caches = Vec::new();
    for idx in dirs(root, "sys/devices/system/cpu/cpu0/cache")
        .iter()
        .filter(|d| d.starts_with("index"))
    {
        let base = format!("sys/devices/system/cpu/cpu0/cache/{idx}");
        let size_kib =
            text(root, &format!("{base}/size")).and_then(|s| s.trim_end_matches('K').parse().ok());
        let shared = text(root, &format!("{base}/shared_cpu_list"))
            .and_then(|l| parse_cpu_list(&l).ok())
            .map(|v| v.len())
            .unwrap_or(1);
        if let (Some(level), Some(size_kib)) =
            (num::<u32>(root, &format!("{base}/level")), size_kib)
        {
            caches.push(Cache {
                level,
                kind: text(root, &format!("{base}/type")).unwrap_or_default(),
                size_kib,
                instances: online.len().div_ceil(shared.max(1)),
            });
        }
    }
    let idle_states = idle_states(root);
    let field = |key: &str| {
        cpuinfo.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == key).then(|| v.trim().to_string())
        })
    };
    CpuLayout {
        model: field("model name"),
        sockets: packages.len(),
        cores: cores.len(),
        threads_per_core,
        cores_cpus: cores.into_values().collect(),
        online,
        numa_nodes,
        caches,
        max_mhz: num::<f64>(root, "sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
            .map(|k| k / 1e3),
        governor: text(root, "sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"),
        idle_states,
    }
}

fn nic(root: &Path, name: &str, irq_lines: &[interrupts::IrqLine]) -> Nic {
    let base = format!("sys/class/net/{name}");
    let dev = format!("{base}/device");
    // A virtio or VMBus NIC's bus address and NUMA node are on the device above it.
    let bus_address = link_name(root, &dev).map(|d| {
        if d.starts_with("virtio") {
            std::fs::canonicalize(root.join(&dev).join(".."))
                .ok()
                .and_then(|p| p.file_name().map(|f| f.to_string_lossy().into_owned()))
                .unwrap_or(d)
        } else {
            d
        }
    });
    let numa_node = num::<i64>(root, &format!("{dev}/numa_node"))
        .or_else(|| num(root, &format!("{dev}/../numa_node")));
    let queues = dirs(root, &format!("{base}/queues"));
    let rx: Vec<&String> = queues.iter().filter(|q| q.starts_with("rx-")).collect();
    let tx: Vec<&String> = queues.iter().filter(|q| q.starts_with("tx-")).collect();
    let irqs = interrupts::irqs_of(root, name, irq_lines)
        .into_iter()
        .map(|irq| Irq {
            name: irq_lines
                .iter()
                .find(|l| l.irq == irq)
                .map(|l| {
                    l.description
                        .split_whitespace()
                        .last()
                        .unwrap_or("")
                        .to_string()
                })
                .unwrap_or_default(),
            affinity: text(root, &format!("proc/irq/{irq}/smp_affinity_list"))
                .and_then(|l| parse_cpu_list(&l).ok()),
            irq,
        })
        .collect();
    let driver = link_name(root, &format!("{dev}/driver"));
    Nic {
        name: name.to_string(),
        native_xdp: driver.as_deref().map(|d| NATIVE_XDP_DRIVERS.contains(&d)),
        xdp_zero_copy: None,
        driver,
        driver_version: None,
        bus_address,
        numa_node: numa_node.filter(|&n| n >= 0),
        mac: text(root, &format!("{base}/address")),
        mtu: num(root, &format!("{base}/mtu")),
        speed_mbit: num::<i64>(root, &format!("{base}/speed"))
            .filter(|&s| s > 0)
            .map(|s| s as u64),
        operstate: text(root, &format!("{base}/operstate")),
        rx_queues: rx.len(),
        tx_queues: tx.len(),
        channels: None,
        rings: None,
        offloads: BTreeMap::new(),
        rss: None,
        irqs,
        rps_cpus: rx
            .iter()
            .filter_map(|q| text(root, &format!("{base}/queues/{q}/rps_cpus")))
            .collect(),
        xps_cpus: tx
            .iter()
            .filter_map(|q| text(root, &format!("{base}/queues/{q}/xps_cpus")))
            .collect(),
        napi_defer_hard_irqs: num(root, &format!("{base}/napi_defer_hard_irqs")),
        gro_flush_timeout_ns: num(root, &format!("{base}/gro_flush_timeout")),
        accelerated_networking_vf: None,
    }
}

/// CPU 0's idle states (cpuidle), shallowest first, with their exit latencies.
pub fn idle_states(root: &Path) -> Vec<IdleState> {
    let mut out = Vec::new();
    for st in dirs(root, "sys/devices/system/cpu/cpu0/cpuidle")
        .iter()
        .filter(|d| d.starts_with("state"))
    {
        let base = format!("sys/devices/system/cpu/cpu0/cpuidle/{st}");
        out.push(IdleState {
            name: text(root, &format!("{base}/name")).unwrap_or_else(|| st.clone()),
            exit_latency_us: num(root, &format!("{base}/latency")).unwrap_or(0),
            disabled: num::<u32>(root, &format!("{base}/disable")).unwrap_or(0) != 0,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture;

    #[test]
    fn a_captured_tree_comes_with_its_advice() {
        let root = fixture("azure-e192-mana");
        let inv = collect_advised(&root);
        assert_eq!(
            inv.recommendations,
            crate::advice::recommend(&collect(&root))
        );
    }

    #[test]
    fn captured_vm() {
        let inv = collect(&fixture("vm-2cpu-virtio"));
        let c = &inv.cpu;
        assert_eq!((c.sockets, c.cores, c.threads_per_core), (1, 2, 1));
        assert_eq!(c.online, vec![0, 1]);
        assert_eq!(c.numa_nodes.len(), 1);
        assert_eq!(c.numa_nodes[0].cpus, vec![0, 1]);
        assert!(c.numa_nodes[0].memory_kib.unwrap() > 1_000_000);
        assert!(
            c.caches.iter().any(|x| x.level == 3 && x.kind == "Unified"),
            "{:?}",
            c.caches
        );
        assert_eq!(c.idle_states.len(), 2);
        assert_eq!(inv.clocksource.as_deref(), Some("tsc"));
        assert_eq!(inv.hypervisor.as_deref(), Some("KVM (Firecracker)"));
        let eth0 = inv.nics.iter().find(|n| n.name == "eth0").unwrap();
        assert_eq!(eth0.driver.as_deref(), Some("virtio_net"));
        assert_eq!(eth0.bus_address.as_deref(), Some("0000:00:03.0"));
        assert_eq!((eth0.rx_queues, eth0.tx_queues), (1, 1));
        assert_eq!(eth0.irqs.len(), 3);
        assert_eq!(eth0.irqs[1].name, "virtio2-input.0");
        assert_eq!(eth0.irqs[1].affinity, Some(vec![0, 1]));
        assert_eq!(eth0.mtu, Some(1400));
        assert_eq!(eth0.native_xdp, Some(true));
        assert_eq!(
            inv.sysctls.get("net.core.busy_poll").map(String::as_str),
            Some("0")
        );
        assert_eq!(
            inv.sysctls.get("net.ipv4.tcp_rmem").map(String::as_str),
            Some("4096 131072 33554432")
        );
    }

    #[test]
    fn azure_192_cpu_layout_and_accelerated_networking() {
        let inv = collect(&fixture("azure-e192-mana"));
        let c = &inv.cpu;
        assert_eq!(c.online.len(), 192);
        assert_eq!((c.sockets, c.cores, c.threads_per_core), (2, 96, 2));
        assert_eq!(
            c.numa_nodes
                .iter()
                .map(|n| n.cpus.len())
                .collect::<Vec<_>>(),
            vec![48; 4]
        );
        assert_eq!(c.numa_nodes[2].cpus[0], 96);
        assert_eq!(c.cores_cpus[0], vec![0, 1]);
        let eth0 = inv.nics.iter().find(|n| n.name == "eth0").unwrap();
        assert_eq!(eth0.driver.as_deref(), Some("hv_netvsc"));
        assert_eq!(
            eth0.accelerated_networking_vf.as_deref(),
            Some("enP30832s1")
        );
        let vf = inv.nics.iter().find(|n| n.name == "enP30832s1").unwrap();
        assert_eq!(vf.driver.as_deref(), Some("mana"));
        assert_eq!(vf.numa_node, Some(0));
        assert_eq!(vf.rx_queues, 16);
        assert_eq!(inv.hypervisor.as_deref(), Some("Microsoft Corporation"));
    }
}
