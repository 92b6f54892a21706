//! What one side (controller or agent) measured during one test. Each side builds one
//! [`SideResult`] from its own counters and its own host; the agent sends its copy to the
//! controller in `Results`, and [`crate::document`] merges the two.
//!
//! Counters a side could not read are `None`, never zero: a missing figure and a measured
//! zero mean different things.

use serde::{Deserialize, Serialize};

use crate::spec::{Direction, Engine};

mod role;
mod sample;
mod sections;

pub use role::{Role, Transfer};
pub use sample::{
    IntervalSample, PpsSample, RrSample, SampleSection, StreamSample, TcpEcn, TcpSample,
};
pub use sections::{
    BlockedSends, ConnectionResult, DirectionResult, PortCounters, PpsResult, QueueCounters,
    RrResult, SideSection, StreamResult, Syscalls,
};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HostInfo {
    pub hostname: String,
    pub kernel: Option<String>,
    pub cpu_model: Option<String>,
    pub cpus_online: Option<usize>,
    /// Clock used for cycles per byte: busy time × this clock, as ntttcp does (ntttcp
    /// takes /proc/cpuinfo's current "cpu MHz"; sonde prefers the maximum frequency, which
    /// does not move with load). `cpu_hz_source` says which this is.
    pub cpu_hz: Option<f64>,
    /// `cpuinfo_max_freq` (cpufreq's maximum) or `cpu MHz` (/proc/cpuinfo's current).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_hz_source: Option<String>,
    /// The running kernel's boot id: two sides with the same one share one host (a lab
    /// of namespaces, or loopback), whose CPU is then counted once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
    /// The host's layout, NICs and settings, as `sonde host` reports them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inventory: Option<Box<crate::inventory::Inventory>>,
}

/// CPU time split in percent of the CPUs' wall time over the window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuBreakdown {
    pub user_percent: f64,
    pub nice_percent: f64,
    pub system_percent: f64,
    pub iowait_percent: f64,
    pub irq_percent: f64,
    pub softirq_percent: f64,
    pub steal_percent: f64,
    pub idle_percent: f64,
}

/// Steal at which a figure names it: the hypervisor ran others on a vCPU that had work (a
/// burstable VM out of credits, a crowded host). Less is /proc/stat's tick noise.
pub const STEAL_NAMED_PERCENT: f64 = 1.0;

impl CpuBreakdown {
    /// Steal counts as busy: time the host's work could not have.
    pub fn busy_percent(&self) -> f64 {
        (100.0 - self.idle_percent - self.iowait_percent).max(0.0)
    }

    /// The hypervisor's steal, where it reached [`STEAL_NAMED_PERCENT`].
    pub fn steal_named(&self) -> Option<f64> {
        (self.steal_percent >= STEAL_NAMED_PERCENT).then_some(self.steal_percent)
    }
}

/// Host CPU over the window from /proc/stat: the whole host and its busiest CPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CpuUsage {
    pub cpus: usize,
    pub host: CpuBreakdown,
    pub busiest_cpu: usize,
    pub busiest: CpuBreakdown,
}

/// One CPU's time split over the window: a CPU a side's workers were pinned to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CoreUsage {
    pub cpu: usize,
    #[serde(flatten)]
    pub time: CpuBreakdown,
}

/// One pinned worker thread over the window, as the scheduler counted it
/// (/proc/PID/task/TID/schedstat): whether a busy core was its own work, or it waited
/// there to run (starved), or it slept while other processes kept the core busy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerSched {
    /// The CPU it was pinned to.
    pub cpu: usize,
    /// Its time on CPU, percent of the window.
    pub on_cpu_percent: f64,
    /// Its time runnable but waiting on the run queue, percent of the window.
    pub waited_percent: f64,
}

/// Deltas of /sys/class/net/IFACE/statistics over the window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NicCounters {
    pub iface: String,
    pub rx_packets: u64,
    pub tx_packets: u64,
    pub rx_bytes: u64,
    pub tx_bytes: u64,
    pub rx_dropped: u64,
    pub tx_dropped: u64,
}

/// The root qdisc of the test's interface over the window (`tc -s qdisc`'s figures): the
/// queue a sender's packets wait in before the device takes them. Counts are deltas; the
/// backlog is the queue held at the window's end.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QdiscCounters {
    pub iface: String,
    /// The qdisc's kind: tbf, fq_codel, mq, ...
    pub kind: String,
    /// Packets it passed on to the device.
    pub packets: u64,
    pub drops: u64,
    /// Times it held a packet back because it was over its rate (a shaper's throttling).
    pub overlimits: u64,
    pub requeues: u64,
    pub backlog_bytes: u64,
    pub backlog_packets: u64,
}

/// Everything one side measured: what every kind's side has, and its kind's own section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SideResult {
    pub role: Role,
    pub host: HostInfo,
    /// Length of the measured window on this side's clock.
    pub window_s: f64,
    pub threads: u32,
    /// CPUs the workers were pinned to, in worker order; `None`: not pinned.
    pub pinned_cpus: Option<Vec<usize>>,
    pub cpu: Option<CpuUsage>,
    /// The CPUs the workers were pinned to, each over the window (empty: not pinned).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub worker_cpus: Vec<CoreUsage>,
    /// The pinned workers' own time on CPU and waiting to run (empty: not pinned, or an
    /// older side).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workers: Vec<WorkerSched>,
    /// CPU seconds (user + system) this side's process used in the window.
    pub process_cpu_s: Option<f64>,
    /// System-wide TCP RetransSegs delta from /proc/net/snmp.
    pub tcp_retransmits: Option<u64>,
    pub nic: Option<NicCounters>,
    /// The test interface's root qdisc; absent without one (noqueue, a veth's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qdisc: Option<QdiscCounters>,
    /// Interrupts of the NIC carrying the test; absent when it has none (veth, loopback).
    pub interrupts: Option<u64>,
    /// Things the reader should know: options the kernel refused, counters not found.
    pub notes: Vec<String>,
    /// True when this side stopped before the planned end.
    pub partial: bool,
    /// The data-plane engine that ran this side; `None` where none ran (a watch, a side
    /// whose result never arrived).
    pub engine: Option<Engine>,
    /// Kernel-bypass engines only: how this side left the socket path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bypass: Option<Bypass>,
    /// The CPU latency limit this side held (`--cpu-latency-us`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_latency: Option<CpuLatency>,
    /// With `--stamps hardware|auto`: which stamps this end took and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stamps: Option<crate::stamps::SideStamps>,
    /// The tool's own work beside its measuring workers during the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_thread: Option<ControlThread>,
    /// What this side's kind measured.
    pub section: SideSection,
}

/// What a side's control thread (interval reports, the control connection) did during the
/// measured window, and whether it could run where the measuring workers ran: a reader
/// can tell the tool's noise on the measuring CPUs from the path's.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ControlThread {
    /// Times it slept and woke again (voluntary context switches).
    pub wakeups: u64,
    /// Times the scheduler took its CPU away (involuntary context switches).
    pub preempted: u64,
    pub cpu_ms: f64,
    /// The CPUs it was allowed on during the window.
    pub cpus: Vec<usize>,
    /// True when none of them is a measuring worker's: it was kept apart. False when it
    /// shared theirs, or the workers were not pinned and the scheduler chose.
    pub apart: bool,
}

/// The PM QoS CPU latency limit a side held for its test (`--cpu-latency-us`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuLatency {
    pub requested_us: u32,
    /// The host's limit while the test ran: the lowest of every holder's request.
    pub in_force_us: Option<u64>,
    /// Idle states (CPU 0's cpuidle) the limit keeps out.
    pub excluded_idle_states: Vec<String>,
    /// Every idle state the host has, shallowest first.
    pub idle_states: Vec<String>,
}

/// How an AF_XDP (or other bypass) engine ran on one side.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bypass {
    pub interface: String,
    /// Queues of the interface with a socket of this side, in order.
    pub queues: Vec<u32>,
    /// The driver's zero-copy mode (false: copy mode).
    pub zero_copy: bool,
    /// XDP attach mode of the receive program, `native` or `generic`; `None` on a side
    /// that only sends (it needs no program).
    pub attach: Option<String>,
    /// What the receive program does, in words.
    pub program: Option<String>,
    /// The sockets ask the kernel to busy-poll their queues (SO_PREFER_BUSY_POLL).
    pub busy_poll: bool,
    /// An engine that runs a tool (DPDK: dpdk-testpmd): its exact command line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// That tool's version (`DPDK 22.11.11`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

impl SideResult {
    /// A side whose result never arrived (its agent was lost): no figure, partial, and why.
    pub fn missing(role: Role, why: String) -> SideResult {
        let mut side = SideResult::new(role, HostInfo::default(), 0.0, (0, None), vec![why]);
        side.partial = true;
        side
    }

    /// A side's result with what every kind has and no kind's section yet; the host
    /// figures (`cpu`, `nic`, ...) and the section are filled in by the side that
    /// measured them.
    pub fn new(
        role: Role,
        host: HostInfo,
        window_s: f64,
        placement: (u32, Option<Vec<usize>>),
        notes: Vec<String>,
    ) -> SideResult {
        SideResult {
            role,
            host,
            window_s,
            threads: placement.0,
            pinned_cpus: placement.1,
            cpu: None,
            worker_cpus: Vec::new(),
            workers: Vec::new(),
            process_cpu_s: None,
            tcp_retransmits: None,
            nic: None,
            qdisc: None,
            interrupts: None,
            notes,
            partial: false,
            engine: None,
            bypass: None,
            cpu_latency: None,
            stamps: None,
            control_thread: None,
            section: SideSection::HostOnly,
        }
    }

    /// A stream side's half of `direction`.
    pub fn direction(&self, direction: Direction) -> Option<&DirectionResult> {
        self.stream()?
            .directions
            .iter()
            .find(|d| d.direction == direction)
    }

    pub fn stream(&self) -> Option<&StreamResult> {
        match &self.section {
            SideSection::Stream(s) => Some(s),
            _ => None,
        }
    }

    pub fn rr(&self) -> Option<&RrResult> {
        match &self.section {
            SideSection::Rr(r) => Some(r),
            _ => None,
        }
    }

    pub fn pps(&self) -> Option<&PpsResult> {
        match &self.section {
            SideSection::Pps(p) => Some(p),
            _ => None,
        }
    }
}
