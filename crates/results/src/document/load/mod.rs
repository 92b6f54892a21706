//! A load test's document, built from the tests each phase ran at once: the UDP ping, the
//! TCP ping and the load. Per phase the pings' percentiles (each from its own histogram of
//! that phase), the load's throughput each way as its receivers measured it, retransmits
//! and both hosts' CPU; per interval the same, tagged with the phase; the headline is the
//! latency each loaded phase added to the idle one.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

mod assemble;
pub(crate) mod figures;
mod oneway;

pub use assemble::{build, end_load, PhaseRun};

use crate::latency::LatencySummary;
use crate::spec::{Phase, Transport};
use crate::stages::{Stage, Stages};

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
    /// `--stages`: where each ping's round trips went in this phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp_stages: Option<Stages>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_stages: Option<Stages>,
    /// `--stages`: each ping's delay each way in this phase; a loaded phase's on the idle
    /// phase's clock offset (`load/oneway.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp_oneway: Option<Box<crate::oneway::OneWay>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_oneway: Option<Box<crate::oneway::OneWay>>,
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
    /// `--stages`: each stage's P50 over idle's, to say where the added latency went.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub stages_p50_added_ns: BTreeMap<Stage, i64>,
    /// `--stages`: the P50 each way over idle's, on one clock offset in both phases, so
    /// the offset's error cancels: where load added its delay, on the way out or back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forward_p50_added_ns: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reverse_p50_added_ns: Option<i64>,
    /// Why a figure is negative, which read bare says "load made the network faster".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// A loaded phase below idle, CPUs free to sleep: at a hundred pings a second the idle
/// phase's CPUs sleep between pings and pay their wake-up on each; load keeps them awake.
pub const BELOW_IDLE_WAKE_UP: &str = "below idle: idle CPUs sleep between pings and pay their wake-up, which load spares them; --cpu-latency-us 0 keeps CPUs awake in every phase";
/// A loaded phase below idle although no CPU could sleep.
pub const BELOW_IDLE_HELD: &str =
    "below idle with CPUs held out of sleep states (--cpu-latency-us 0): not their wake-up";

impl AddedLatency {
    /// `phase`'s P50 and P99 over idle's; a negative one gets its note, which depends on
    /// whether the test held CPUs out of sleep (`--cpu-latency-us`, µs).
    pub fn new(
        phase: Phase,
        transport: Transport,
        (p50_added_ns, p99_added_ns): (i64, i64),
        cpu_latency_us: Option<u32>,
    ) -> AddedLatency {
        let below = p50_added_ns < 0 || p99_added_ns < 0;
        let note = below.then(|| match cpu_latency_us {
            Some(0) => BELOW_IDLE_HELD.to_string(),
            _ => BELOW_IDLE_WAKE_UP.to_string(),
        });
        AddedLatency {
            phase,
            transport,
            p50_added_ns,
            p99_added_ns,
            stages_p50_added_ns: BTreeMap::new(),
            forward_p50_added_ns: None,
            reverse_p50_added_ns: None,
            note,
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_negative_figure_carries_its_note_in_json_and_a_positive_one_none() {
        let below = AddedLatency::new(Phase::Both, Transport::Tcp, (5_000, -1), None);
        let json = serde_json::to_value(&below).unwrap();
        assert_eq!(json["note"], BELOW_IDLE_WAKE_UP);
        let held = AddedLatency::new(Phase::Both, Transport::Tcp, (-5_000, 0), Some(0));
        assert_eq!(held.note.as_deref(), Some(BELOW_IDLE_HELD));
        let above = AddedLatency::new(Phase::Both, Transport::Tcp, (5_000, 0), Some(20));
        let json = serde_json::to_value(&above).unwrap();
        assert!(json.get("note").is_none(), "{json}");
        // Documents of before the note read back without one.
        let old: AddedLatency = serde_json::from_value(serde_json::json!({
            "phase": "upload", "transport": "udp", "p50_added_ns": -37800, "p99_added_ns": 10
        }))
        .unwrap();
        assert_eq!(old.note, None);
    }
}
