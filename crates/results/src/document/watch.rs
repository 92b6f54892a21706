//! A watch's document: the host evidence of each interval around a command, and over its
//! whole run, with the command's exit code.

use serde::{Deserialize, Serialize};

use crate::side::{CpuUsage, NicCounters};

/// One interval of a watch: the interface's rates and the host's CPU, retransmits, IRQs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WatchInterval {
    pub rx_bits_per_second: Option<f64>,
    pub tx_bits_per_second: Option<f64>,
    pub rx_packets_per_second: Option<f64>,
    pub tx_packets_per_second: Option<f64>,
    pub rx_dropped: Option<u64>,
    pub tx_dropped: Option<u64>,
    pub cpu_busy_percent: Option<f64>,
    pub softirq_percent: Option<f64>,
    /// The hypervisor's steal, counted in `cpu_busy_percent`; absent in documents from
    /// before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steal_percent: Option<f64>,
    /// Busy percent of each CPU, by CPU number.
    pub per_cpu_busy_percent: Vec<(usize, f64)>,
    pub tcp_retransmits: Option<u64>,
    pub interrupts: Option<u64>,
}

/// The whole run of the command.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WatchEnd {
    /// The command's exit code; `None` when a signal ended it.
    pub exit_code: Option<i32>,
    pub seconds: f64,
    pub iface: Option<String>,
    /// The interface's counters over the run (deltas).
    pub nic: Option<NicCounters>,
    pub rx_bits_per_second: Option<f64>,
    pub tx_bits_per_second: Option<f64>,
    pub cpu: Option<CpuUsage>,
    /// The host's TCP RetransSegs over the run (/proc/net/snmp).
    pub tcp_retransmits: Option<u64>,
    pub interrupts: Option<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}
