//! The pieces every kind's document shares: who measured an end side and what its host
//! counted, interval figures, and the inputs a kind builds its section from. A leaf that
//! each kind's module and the document itself import.

use serde::{Deserialize, Serialize};

use super::fleet_pair::FleetPair;
use super::floor::RrPrelude;
use crate::side::{ControlThread, CpuUsage, IntervalSample, NicCounters, Role, SideResult};
use crate::spec::TestSpec;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CpuFigures {
    #[serde(flatten)]
    pub usage: Option<CpuUsage>,
    /// CPU seconds of the measuring process over the window.
    pub process_cpu_s: Option<f64>,
    /// The CPUs the side's workers were pinned to, each over the window; kept when both
    /// ends share one host (each side's cores are still its own).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub worker_cpus: Vec<crate::side::CoreUsage>,
    /// Each pinned worker's own share of the window on CPU and waiting to run: whose work
    /// a busy worker core was. Absent in older documents, which are judged without it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workers: Vec<crate::side::WorkerSched>,
}

/// Who measured an end side's figures, with which engine, on how many workers: the part
/// every kind's end sides share (flattened: the JSON names are the fields' own).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MeasuredBy {
    pub measured_by: Role,
    pub host: String,
    /// The data-plane engine that ran the side (`kernel`); absent in older documents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<String>,
    /// Worker threads of this side, and the CPUs they were pinned to (`None`: not pinned).
    pub threads: u32,
    pub pinned_cpus: Option<Vec<usize>>,
    /// A kernel-bypass engine's interface, queues, modes and program.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bypass: Option<crate::Bypass>,
    /// The PM QoS CPU latency limit this side held (`--cpu-latency-us`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_latency: Option<crate::CpuLatency>,
    /// With `--stamps hardware|auto`: which stamps this end took, on which device, and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stamps: Option<crate::stamps::SideStamps>,
}

/// What the host itself counted over an end side's window (its NIC, its interrupts), and
/// what the side noted: the part every kind's end sides share after their own figures
/// (flattened: the JSON names are the fields' own).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HostCounted {
    pub nic: Option<NicCounters>,
    /// The test interface's root qdisc, where it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qdisc: Option<crate::side::QdiscCounters>,
    pub interrupts: Option<u64>,
    pub notes: Vec<String>,
    /// The side's control thread during the window: the tool's own work beside its
    /// workers, and whether it was kept off their CPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_thread: Option<ControlThread>,
}

impl HostCounted {
    pub(super) fn of(side: &SideResult) -> HostCounted {
        HostCounted {
            nic: side.nic.clone(),
            qdisc: side.qdisc.clone(),
            interrupts: side.interrupts,
            notes: side.notes.clone(),
            control_thread: side.control_thread.clone(),
        }
    }
}

impl CpuFigures {
    pub(super) fn of(side: &SideResult) -> CpuFigures {
        CpuFigures {
            usage: side.cpu.clone(),
            process_cpu_s: side.process_cpu_s,
            worker_cpus: side.worker_cpus.clone(),
            workers: side.workers.clone(),
        }
    }
}

impl MeasuredBy {
    pub(super) fn of(side: &SideResult) -> MeasuredBy {
        MeasuredBy {
            measured_by: side.role,
            host: side.host.hostname.clone(),
            engine: side.engine.map(|e| e.name().to_string()),
            threads: side.threads,
            pinned_cpus: side.pinned_cpus.clone(),
            bypass: side.bypass.clone(),
            cpu_latency: side.cpu_latency.clone(),
            stamps: side.stamps.clone(),
        }
    }
}

/// The agent that ran a third-party test's client side.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClientAgent {
    /// As the controller reached it.
    pub address: String,
    /// Its exact command line, as it reported it.
    pub command: Option<String>,
    /// Its own labels (`sonde serve --label`), as it announced them, cut to the rules.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub labels: std::collections::BTreeMap<String, String>,
}

/// Everything a document is assembled from, all known before it is: the controller fills
/// it as the test goes, and nothing is added to the document afterwards.
pub struct Inputs<'a> {
    pub spec: &'a TestSpec,
    pub command: String,
    pub server_command: Option<String>,
    pub server_address: String,
    pub started_at: String,
    pub software: String,
    pub client: &'a SideResult,
    pub server: Option<&'a SideResult>,
    pub client_intervals: &'a [IntervalSample],
    pub server_intervals: &'a [IntervalSample],
    pub error: Option<String>,
    /// A test between two agents: the one that ran the client side.
    pub client_agent: Option<ClientAgent>,
    /// When the test ended (RFC 3339, UTC).
    pub finished_at: Option<String>,
    /// The serving agent's own labels, as its session kept them.
    pub server_labels: std::collections::BTreeMap<String, String>,
    /// A fleet's run: its pair as the fleet file names it; both agents' own labels join
    /// it under the file's.
    pub fleet: Option<FleetPair>,
    /// What the test's kind measured on the controller before the test, for its section.
    pub prelude: Option<Prelude>,
}

impl<'a> Inputs<'a> {
    /// The inputs of a test of `spec` run by `command` with only its client's side known:
    /// no server side, intervals, error, agent, fleet, labels or prelude, the addresses,
    /// times and software empty. The caller sets what it knows beside them.
    pub fn new(spec: &'a TestSpec, command: impl Into<String>, client: &'a SideResult) -> Self {
        Inputs {
            spec,
            command: command.into(),
            server_command: None,
            server_address: String::new(),
            started_at: String::new(),
            software: String::new(),
            client,
            server: None,
            client_intervals: &[],
            server_intervals: &[],
            error: None,
            client_agent: None,
            finished_at: None,
            server_labels: Default::default(),
            fleet: None,
            prelude: None,
        }
    }
}

/// What a kind measured on the controller before its test (`Kind::prelude` in the run
/// layer), handed to its own section of the document.
#[derive(Debug, Clone, PartialEq)]
pub enum Prelude {
    /// Ping and rpc.
    Rr(RrPrelude),
}

/// `v` per second of `secs`; 0 over no time.
pub(super) fn per_second(v: f64, secs: f64) -> f64 {
    if secs > 0.0 {
        v / secs
    } else {
        0.0
    }
}

/// The test was cut short: an error, no agent's side, or a side that stopped early.
pub(super) fn is_partial(inp: &Inputs<'_>) -> bool {
    inp.error.is_some()
        || inp.server.is_none()
        || inp.client.partial
        || inp.server.is_some_and(|s| s.partial)
}
