//! A load test's document, built from the tests each phase ran at once: the UDP ping, the
//! TCP ping and the load. Per phase the pings' percentiles (each from its own histogram of
//! that phase), the load's throughput each way as its receivers measured it, retransmits
//! and both hosts' CPU; per interval the same, tagged with the phase; the headline is the
//! latency each loaded phase added to the idle one.

use serde::{Deserialize, Serialize};

mod assemble;

pub use assemble::{build, end_load, PhaseRun};

use crate::latency::LatencySummary;
use crate::spec::{Phase, Transport};

/// The load's throughput each way in one phase or interval, as its receivers measured it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LoadFigures {
    /// Controller to agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upload_bits_per_second: Option<f64>,
    /// Agent to controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub download_bits_per_second: Option<f64>,
    /// A pps load: packets per second the agent received.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upload_packets_per_second: Option<f64>,
    /// An rpc load: requests per second the controller completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_second: Option<f64>,
}

/// One interval of a load test: which phase, both pings' round trips, the load.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadInterval {
    pub phase: Phase,
    pub udp_rtt_ns: Option<LatencySummary>,
    pub tcp_rtt_ns: Option<LatencySummary>,
    #[serde(flatten)]
    pub load: LoadFigures,
}

/// One phase's end figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseEnd {
    pub phase: Phase,
    pub start_s: f64,
    pub seconds: f64,
    /// Round trips timed from the intended send, over the phase's window.
    pub udp_rtt_ns: Option<LatencySummary>,
    pub tcp_rtt_ns: Option<LatencySummary>,
    /// UDP pings whose echo never came.
    pub udp_lost: Option<u64>,
    #[serde(flatten)]
    pub load: LoadFigures,
    /// The load's connections' retransmitted segments, both directions.
    pub tcp_retransmits: Option<u64>,
    /// Whole-host CPU busy over the phase (the UDP ping's window), each side's host.
    pub client_cpu_busy_percent: Option<f64>,
    pub server_cpu_busy_percent: Option<f64>,
    pub partial: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}

/// The latency a loaded phase adds to the idle phase's, for one ping.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AddedLatency {
    pub phase: Phase,
    pub transport: Transport,
    pub p50_added_ns: i64,
    pub p99_added_ns: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LoadEnd {
    pub phases: Vec<PhaseEnd>,
    /// Each loaded phase against idle, per ping; empty without an idle phase.
    pub added_latency: Vec<AddedLatency>,
}

impl LoadEnd {
    pub fn phase(&self, p: Phase) -> Option<&PhaseEnd> {
        self.phases.iter().find(|e| e.phase == p)
    }
}
