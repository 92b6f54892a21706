//! What a host is, as `sonde host` reports it and as every result document embeds it for
//! both sides: CPU layout and NUMA, caches, idle states, NICs with their queues and
//! interrupts, the sysctls that matter, and recommendations with their evidence.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Formats a sorted CPU list the way the kernel and taskset read it (`0-3,8`).
pub fn cpu_list(cpus: &[usize]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            cpus[i].to_string()
        } else {
            format!("{}-{}", cpus[i], cpus[j])
        });
        i = j + 1;
    }
    out.join(",")
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Inventory {
    pub kernel: Option<String>,
    pub hypervisor: Option<String>,
    /// The hypervisor's steal since boot, percent of all CPUs' time (`/proc/stat`): time
    /// this VM had work and its host ran others. Absent in documents from before it was read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steal_since_boot_percent: Option<f64>,
    pub clocksource: Option<String>,
    /// The clock as a delay measurement needs it (`sonde clock`): the live host's only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock: Option<crate::clock::ClockState>,
    pub cpu: CpuLayout,
    pub nics: Vec<Nic>,
    /// sysctl name (dotted) → value as the kernel prints it.
    pub sysctls: BTreeMap<String, String>,
    pub recommendations: Vec<Recommendation>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuLayout {
    pub model: Option<String>,
    pub online: Vec<usize>,
    pub sockets: usize,
    pub cores: usize,
    pub threads_per_core: usize,
    /// Sibling sets: the CPUs of each physical core, lowest first.
    pub cores_cpus: Vec<Vec<usize>>,
    pub numa_nodes: Vec<NumaNode>,
    pub caches: Vec<Cache>,
    pub max_mhz: Option<f64>,
    pub governor: Option<String>,
    pub idle_states: Vec<IdleState>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NumaNode {
    pub node: usize,
    pub cpus: Vec<usize>,
    pub memory_kib: Option<u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Cache {
    pub level: u32,
    /// Data, Instruction or Unified.
    pub kind: String,
    pub size_kib: u64,
    /// How many of this cache there are on the host.
    pub instances: usize,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IdleState {
    pub name: String,
    pub exit_latency_us: u64,
    /// Disabled on CPU 0 (by `cpupower idle-set -d` or a tuning profile).
    pub disabled: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Nic {
    pub name: String,
    pub driver: Option<String>,
    #[serde(default)]
    pub driver_version: Option<String>,
    pub bus_address: Option<String>,
    pub numa_node: Option<i64>,
    pub mac: Option<String>,
    pub mtu: Option<u32>,
    pub speed_mbit: Option<u64>,
    pub operstate: Option<String>,
    pub rx_queues: usize,
    pub tx_queues: usize,
    /// From the ethtool ioctls, where the driver answers them.
    pub channels: Option<Channels>,
    pub rings: Option<Rings>,
    /// Offloads the driver reports on (ethtool): tso, gso, gro, lro, rx-checksum, tx-checksum.
    #[serde(default)]
    pub offloads: BTreeMap<String, bool>,
    #[serde(default)]
    pub rss: Option<Rss>,
    /// Whether the driver runs XDP programs natively (in the driver): the kernel's own
    /// `xdp-features` where it has them (6.3+), else a list of drivers known to.
    #[serde(default)]
    pub native_xdp: Option<bool>,
    /// Whether AF_XDP sockets can bind in zero-copy mode (the kernel's `xdp-features`).
    #[serde(default)]
    pub xdp_zero_copy: Option<bool>,
    pub irqs: Vec<Irq>,
    /// Per receive queue RPS mask and per transmit queue XPS mask (hex, as in sysfs).
    pub rps_cpus: Vec<String>,
    pub xps_cpus: Vec<String>,
    pub napi_defer_hard_irqs: Option<u64>,
    pub gro_flush_timeout_ns: Option<u64>,
    /// A synthetic NIC (hv_netvsc) paired with an SR-IOV VF of the same MAC: the VF's name.
    pub accelerated_networking_vf: Option<String>,
}

impl Nic {
    /// The device argument DPDK's MANA driver takes for this NIC (Azure's DPDK guide:
    /// `--vdev=<bus>,mac=<MAC>`); `None` for other NICs.
    pub fn dpdk_vdev(&self) -> Option<String> {
        if self.driver.as_deref() != Some("mana") {
            return None;
        }
        Some(format!(
            "--vdev={},mac={}",
            self.bus_address.as_deref()?,
            self.mac.as_deref()?
        ))
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Channels {
    pub rx: u32,
    pub tx: u32,
    pub combined: u32,
    pub max_rx: u32,
    pub max_tx: u32,
    pub max_combined: u32,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rings {
    pub rx: u32,
    pub tx: u32,
    pub max_rx: u32,
    pub max_tx: u32,
}

/// Receive-side scaling as the driver reports it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rss {
    pub key_bytes: u32,
    pub indirection_entries: u32,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Irq {
    pub irq: String,
    pub name: String,
    pub affinity: Option<Vec<usize>>,
}

/// A rule's advice: what it saw, what to do, and the command that does it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Recommendation {
    pub rule: String,
    pub observed: String,
    pub advice: String,
    pub command: Option<String>,
}
