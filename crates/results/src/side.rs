//! What one side (controller or agent) measured during one test. Each side builds one
//! [`SideResult`] from its own counters and its own host; the agent sends its copy to the
//! controller in `Results`, and [`crate::document`] merges the two.
//!
//! Counters a side could not read are `None`, never zero: a missing figure and a measured
//! zero mean different things.

use serde::{Deserialize, Serialize};

use crate::latency::LatencySummary;
use crate::spec::Direction;

/// Which process measured a figure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The controller: the side that ran `sonde stream`.
    Client,
    /// The agent: `sonde serve`.
    Server,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Client => "client",
            Role::Server => "server",
        }
    }

    /// The client's or the server's of a pair of values, as this role is.
    pub fn pick<T>(self, client: T, server: T) -> T {
        match self {
            Role::Client => client,
            Role::Server => server,
        }
    }
}

/// What this side did with a direction's bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Transfer {
    #[default]
    Send,
    Receive,
}

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

/// One TCP connection's share of the measured window, with its kernel view (TCP_INFO)
/// read at the end of the window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConnectionResult {
    pub index: u32,
    /// Bytes moved inside the measured window.
    pub bytes: u64,
    /// Bytes moved from start to end, warm-up and cool-down included.
    pub total_bytes: u64,
    /// Segments retransmitted inside the window (tcpi_total_retrans delta); sender side.
    pub retransmits: Option<u64>,
    pub rtt_us: Option<u32>,
    pub rttvar_us: Option<u32>,
    pub snd_cwnd_segments: Option<u32>,
    pub snd_mss_bytes: Option<u32>,
}

/// This side's half of one direction of the test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DirectionResult {
    pub direction: Direction,
    pub transfer: Transfer,
    pub buffer_bytes: u32,
    /// Bytes inside the measured window.
    pub bytes: u64,
    /// Bytes from start to end of the whole test; both sides' totals reconcile exactly
    /// when the test ended cleanly.
    pub total_bytes: u64,
    /// send()/recv() calls that moved data inside the window.
    pub calls: u64,
    pub connections: Vec<ConnectionResult>,
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

impl CpuBreakdown {
    pub fn busy_percent(&self) -> f64 {
        (100.0 - self.idle_percent - self.iowait_percent).max(0.0)
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

/// One interval as this side saw it, relative to the start of the measured window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IntervalSample {
    pub index: u32,
    pub start_s: f64,
    pub end_s: f64,
    pub sent_bytes: u64,
    pub received_bytes: u64,
    /// Host CPU busy percent over this interval.
    pub cpu_busy_percent: Option<f64>,
    /// Request/response tests: messages completed (client) or answered (agent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub messages: Option<u64>,
    /// Request/response tests, client only: latency of the messages completed in it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ns: Option<LatencySummary>,
    /// Packet-rate tests: packets sent (client) or received (agent) in it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packets: Option<u64>,
    /// Cut short: the test ended before this interval's planned end (its rates divide by
    /// the time it really lasted).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub partial: bool,
    /// Stream tests: each of this side's connections' TCP_INFO over the interval.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tcp: Vec<TcpSample>,
}

/// One side's part of a request/response test (ping, rpc).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RrResult {
    /// The receive mode used, e.g. `block`, `busy`, `hybrid=50us`.
    pub poll: String,
    /// Messages completed (client: responses received; agent: responses sent) in the window.
    pub messages: u64,
    /// Requests sent over the whole test (client).
    pub sent: u64,
    /// Requests sent and never answered by the end (client).
    pub unanswered: u64,
    /// Open loop: requests due but never sent because the window was full (client).
    pub not_sent: u64,
    /// UDP: requests whose answer never came within the loss timeout (client).
    pub lost: u64,
    /// UDP: replies that came after their request was counted lost (client).
    #[serde(default)]
    pub late: u64,
    /// UDP: second replies to a request already answered (client).
    #[serde(default)]
    pub duplicated: u64,
    /// UDP: datagrams that answer no request sent (client); datagrams the echo dropped
    /// unanswered, not being the test's whole requests with its cookie (agent).
    #[serde(default)]
    pub foreign: u64,
    /// Round-trip latency of the window's messages, measured by the client.
    pub latency_ns: Option<LatencySummary>,
    /// Socket options applied, and those the kernel refused, in words.
    pub socket_options: Vec<String>,
    /// The data plane's own system calls over the whole test, where the engine counts
    /// them (kernel sockets, io_uring).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub syscalls: Option<Syscalls>,
}

/// System calls the workers made, and the messages they carried (client: requests sent;
/// agent: answers sent), both over the whole test, warm-up and drain included.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Syscalls {
    pub calls: u64,
    pub messages: u64,
}

/// Everything one side measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SideResult {
    pub role: Role,
    pub host: HostInfo,
    /// Length of the measured window on this side's clock.
    pub window_s: f64,
    pub threads: u32,
    /// CPUs the workers were pinned to, in worker order; `None`: not pinned.
    pub pinned_cpus: Option<Vec<usize>>,
    pub directions: Vec<DirectionResult>,
    pub cpu: Option<CpuUsage>,
    /// The CPUs the workers were pinned to, each over the window (empty: not pinned).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub worker_cpus: Vec<CoreUsage>,
    /// CPU seconds (user + system) this side's process used in the window.
    pub process_cpu_s: Option<f64>,
    /// System-wide TCP RetransSegs delta from /proc/net/snmp.
    pub tcp_retransmits: Option<u64>,
    pub nic: Option<NicCounters>,
    /// Interrupts of the NIC carrying the test; absent when it has none (veth, loopback).
    pub interrupts: Option<u64>,
    /// Things the reader should know: options the kernel refused, counters not found.
    pub notes: Vec<String>,
    /// True when this side stopped before the planned end.
    pub partial: bool,
    /// The data-plane engine that ran this side (`kernel`: kernel sockets).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<String>,
    /// Request/response tests only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rr: Option<RrResult>,
    /// Packet-rate tests only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pps: Option<PpsResult>,
    /// Kernel-bypass engines only: how this side left the socket path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bypass: Option<Bypass>,
    /// The CPU latency limit this side held (`--cpu-latency-us`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_latency: Option<CpuLatency>,
    /// The tool's own work beside its measuring workers during the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_thread: Option<ControlThread>,
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

/// A DPDK port's own counters over the whole test (testpmd's `show port xstats`), as that
/// side's device counted them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortCounters {
    /// Packets sent (sender) or received (receiver) by the port.
    pub packets: u64,
    pub bytes: u64,
    /// Receiver: packets the port dropped for want of a free descriptor (imissed).
    pub missed: u64,
    /// Packets the port counted as errors in this side's direction.
    pub errors: u64,
    /// Receiver: packets dropped for want of an mbuf.
    pub no_mbuf: u64,
    /// Sender: packets testpmd built that the port did not take (its TX-dropped).
    pub dropped: u64,
    pub queues: Vec<QueueCounters>,
}

/// One queue of a DPDK port, in this side's direction.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueCounters {
    pub queue: u32,
    pub packets: u64,
    pub bytes: u64,
    /// Receive queues only (DPDK counts no per-queue transmit errors).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errors: Option<u64>,
    /// Sender: what testpmd built for this queue that it did not take.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dropped: Option<u64>,
}

/// One side's part of a packet-rate test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PpsResult {
    pub size_bytes: u32,
    /// Packets sent (client) or received (agent) inside the window.
    pub packets: u64,
    /// Over the whole test: sent (client) or distinct packets received (agent), per flow.
    pub per_flow: Vec<u64>,
    /// Agent: packets that arrived after a higher sequence number of their flow.
    pub reordered: u64,
    /// Agent: packets received twice.
    pub duplicated: u64,
    /// Agent: datagrams on the port that were not this test's.
    pub foreign: u64,
    /// Agent: the receive sockets' drop counter (/proc/net/udp) over the whole test.
    pub socket_drops: Option<u64>,
    pub poll: String,
    /// The DPDK engine: the port's own counters, per queue too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<PortCounters>,
}

impl SideResult {
    /// A side whose result never arrived (its agent was lost): no figure, partial, and why.
    pub fn missing(role: Role, why: String) -> SideResult {
        SideResult::new(role, HostInfo::default(), 0.0, (0, None), vec![why], true)
    }

    /// A side's result with what every test type has; the host figures (`cpu`, `nic`, ...)
    /// and the test type's own part are filled in by the caller.
    pub fn new(
        role: Role,
        host: HostInfo,
        window_s: f64,
        placement: (u32, Option<Vec<usize>>),
        notes: Vec<String>,
        partial: bool,
    ) -> SideResult {
        SideResult {
            role,
            host,
            window_s,
            threads: placement.0,
            pinned_cpus: placement.1,
            directions: Vec::new(),
            cpu: None,
            worker_cpus: Vec::new(),
            process_cpu_s: None,
            tcp_retransmits: None,
            nic: None,
            interrupts: None,
            notes,
            partial,
            engine: None,
            rr: None,
            pps: None,
            bypass: None,
            cpu_latency: None,
            control_thread: None,
        }
    }

    pub fn direction(&self, direction: Direction) -> Option<&DirectionResult> {
        self.directions.iter().find(|d| d.direction == direction)
    }
}

/// One connection over one interval. Gauges (RTT, windows, rates) are read at the
/// interval's end; counts and time shares cover the interval.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TcpSample {
    /// The connection's test-wide index.
    pub connection: u32,
    /// What this side does with the connection's bytes.
    pub transfer: Transfer,
    /// Smoothed RTT and its variation (tcpi_rtt, tcpi_rttvar).
    pub srtt_us: u32,
    pub rttvar_us: u32,
    /// The lowest RTT the connection has seen (tcpi_min_rtt).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_rtt_us: Option<u32>,
    pub cwnd_segments: u32,
    /// Absent while the connection is still in slow start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssthresh_segments: Option<u32>,
    pub mss_bytes: u32,
    /// The peer's advertised receive window (sender), scaled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snd_wnd_bytes: Option<u32>,
    /// The window this side advertises (receiver), scaled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rcv_wnd_bytes: Option<u32>,
    /// The receiver's autotuned buffer target (tcpi_rcv_space).
    pub rcv_space_bytes: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery_rate_bits_per_second: Option<f64>,
    /// Absent when unlimited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pacing_rate_bits_per_second: Option<f64>,
    /// Segments retransmitted in the interval.
    pub retransmits: u32,
    /// Of them, those the peer reported as duplicates (D-SACK): spurious, the original was
    /// reordered or late, not lost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dsack_dups: Option<u32>,
    /// Segments held lost at the interval's end, and the reordering degree assumed.
    pub lost_segments: u32,
    pub reordering: u32,
    /// Bytes written and not yet sent (sender).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notsent_bytes: Option<u32>,
    /// Share of the interval with data in flight (tcpi_busy_time), and the shares of it
    /// limited by the receiver's window and by the send buffer; percent of the interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub busy_percent: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rwnd_limited_percent: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sndbuf_limited_percent: Option<f64>,
}
