//! The result document (`--json`): one per test, versioned, shaped like iperf3's
//! `start` / `intervals` / `end` so that scripts can rely on it. Built once from both
//! sides' [`SideResult`]s; every renderer reads this, none recomputes a figure.

pub mod load;
mod pps;
mod rr;
mod stream;
pub mod watch;

pub use pps::{PacketsEnd, PpsEndSide, SearchEnd, Trial};
pub use rr::RrEndSide;
pub use stream::{ConnectionSpread, DirectionEnd, EndSide, Retransmits};

use serde::{Deserialize, Serialize};

use crate::latency::LatencySummary;
use crate::side::{CpuUsage, HostInfo, IntervalSample, NicCounters, Role, SideResult};
use crate::spec::TestSpec;

/// Bumped on any change a parser of the document could notice.
pub const SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Document {
    pub schema_version: u32,
    pub test: String,
    pub start: Start,
    pub intervals: Vec<IntervalFigures>,
    pub end: End,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Start {
    pub spec: TestSpec,
    /// The controller's exact command line.
    pub command: String,
    /// The agent's exact command line, as it reported it.
    pub server_command: Option<String>,
    pub client: HostInfo,
    pub server: Option<HostInfo>,
    /// Address of the agent as the controller reached it.
    pub server_address: String,
    /// RFC 3339, UTC.
    pub started_at: String,
    pub software: String,
    /// When the controller built the document, RFC 3339, UTC (what `sonde fleet` checks
    /// hosts' overlap by).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    /// A test between two agents: the agent that ran the client side (the controller's
    /// host sent no test traffic; `command` is the controller's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_agent: Option<ClientAgent>,
    /// A test run by `sonde fleet`: which pair of which fleet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fleet: Option<FleetPair>,
}

/// The agent that ran a third-party test's client side.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClientAgent {
    /// As the controller reached it.
    pub address: String,
    /// Its exact command line, as it reported it.
    pub command: Option<String>,
}

/// A fleet test's place in its fleet: the pair, each end's labels, the round.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FleetPair {
    /// The fleet file's `name`.
    pub fleet: String,
    /// The agent that sent (ran the client side), by its name in the fleet.
    pub source: String,
    pub destination: String,
    #[serde(default)]
    pub source_labels: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    pub destination_labels: std::collections::BTreeMap<String, String>,
    /// The scheduler's round, from 1.
    pub round: u32,
}

/// One side's view of one interval of one direction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IntervalSide {
    pub measured_by: Role,
    pub bytes: u64,
    pub bits_per_second: f64,
    pub cpu_busy_percent: Option<f64>,
    /// Packet-rate tests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packets_per_second: Option<f64>,
    /// This side's interval was cut short by the end of the test.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub partial: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IntervalFigures {
    pub start_s: f64,
    pub end_s: f64,
    pub sender: Option<IntervalSide>,
    pub receiver: Option<IntervalSide>,
    /// The agent-to-controller direction of a bidirectional test.
    pub reverse: Option<IntervalPair>,
    /// Request/response tests: completed requests per second (client).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_second: Option<f64>,
    /// Request/response tests: round-trip latency of this interval (client).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ns: Option<LatencySummary>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_cpu_busy_percent: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_cpu_busy_percent: Option<f64>,
    /// Load tests: the phase, both pings and the load.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<load::LoadInterval>,
    /// Watches: the host evidence of the interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watch: Option<watch::WatchInterval>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IntervalPair {
    pub sender: Option<IntervalSide>,
    pub receiver: Option<IntervalSide>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CpuFigures {
    #[serde(flatten)]
    pub usage: Option<CpuUsage>,
    /// CPU seconds of the measuring process over the window.
    pub process_cpu_s: Option<f64>,
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
}

/// What the host itself counted over an end side's window (its NIC, its interrupts), and
/// what the side noted: the part every kind's end sides share after their own figures
/// (flattened: the JSON names are the fields' own).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HostCounted {
    pub nic: Option<NicCounters>,
    pub interrupts: Option<u64>,
    pub notes: Vec<String>,
}

impl HostCounted {
    fn of(side: &SideResult) -> HostCounted {
        HostCounted {
            nic: side.nic.clone(),
            interrupts: side.interrupts,
            notes: side.notes.clone(),
        }
    }
}

impl CpuFigures {
    fn of(side: &SideResult) -> CpuFigures {
        CpuFigures {
            usage: side.cpu.clone(),
            process_cpu_s: side.process_cpu_s,
        }
    }
}

impl MeasuredBy {
    fn of(side: &SideResult) -> MeasuredBy {
        MeasuredBy {
            measured_by: side.role,
            host: side.host.hostname.clone(),
            engine: side.engine.clone(),
            threads: side.threads,
            pinned_cpus: side.pinned_cpus.clone(),
            bypass: side.bypass.clone(),
            cpu_latency: side.cpu_latency.clone(),
        }
    }
}

/// `end.sender` / `end.receiver`: a byte stream's totals (stream) or a packet-rate side's
/// (pps), so that `end.sender.packets_per_second` means the same to a script in both.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SideTotals {
    Bytes(EndSide),
    Packets(PpsEndSide),
}

impl SideTotals {
    pub fn bytes(&self) -> Option<&EndSide> {
        match self {
            SideTotals::Bytes(s) => Some(s),
            SideTotals::Packets(_) => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct End {
    pub partial: bool,
    pub error: Option<String>,
    pub sender: Option<SideTotals>,
    pub receiver: Option<SideTotals>,
    /// The agent-to-controller direction of a bidirectional test.
    pub reverse: Option<DirectionEnd>,
    /// Request/response tests: round-trip latency measured by the client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ns: Option<LatencySummary>,
    /// What `latency_ns` measures: `round_trip_time`, from the actual send (closed loop) or
    /// from the intended send time (open loop).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_is: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_second: Option<f64>,
    /// Requests sent and never answered by the end of the test.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unanswered_requests: Option<u64>,
    /// Open loop: requests due but never sent (every slot of the window was waiting).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unsent_requests: Option<u64>,
    /// UDP: requests whose answer never came.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_messages: Option<u64>,
    /// UDP: replies matched by sequence number to a request already counted lost (late),
    /// already answered (duplicated), or to none sent (foreign); none is credited to
    /// another request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub late_replies: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duplicated_replies: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub foreign_replies: Option<u64>,
    /// UDP: datagrams the agent's echo dropped unanswered: from another address, not the
    /// request's length, or without the test's cookie (so never reflected).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejected_requests: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<RrEndSide>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<RrEndSide>,
    /// Packet-rate tests: sent by the sender and never received, over the whole test.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_packets: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packets: Option<PacketsEnd>,
    /// Zero-loss rate search: every trial and the result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search: Option<SearchEnd>,
    /// Both ends ran on one host (same kernel boot id): its CPU figures are here, once,
    /// and absent from the sides, which keep their own process CPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub one_host: Option<OneHost>,
    /// Load tests: each phase, and the latency load added.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<load::LoadEnd>,
    /// Watches: the command's run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watch: Option<watch::WatchEnd>,
}

/// The host both ends shared, counted once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OneHost {
    pub hostname: String,
    /// The host's CPU over the controller's window.
    pub cpu: Option<CpuUsage>,
    /// Stream tests: host busy cycles per byte received, once for both ends.
    pub cycles_per_byte: Option<f64>,
}

/// What [`Document::local`] starts from.
pub struct LocalStart {
    pub spec: TestSpec,
    pub command: String,
    pub host: HostInfo,
    /// RFC 3339, UTC.
    pub started_at: String,
    pub software: String,
}

/// Everything needed to build a document; the controller fills it as the test goes.
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
}

impl End {
    /// The sending side of a stream test's primary direction.
    pub fn stream_sender(&self) -> Option<&EndSide> {
        self.sender.as_ref()?.bytes()
    }

    /// The receiving side of a stream test's primary direction.
    pub fn stream_receiver(&self) -> Option<&EndSide> {
        self.receiver.as_ref()?.bytes()
    }

    /// The end of `inp` with no figure yet: partial when it was cut short.
    fn of(inp: &Inputs<'_>) -> End {
        End::empty(is_partial(inp), inp.error.clone())
    }

    /// An end with no figure yet.
    pub fn empty(partial: bool, error: Option<String>) -> End {
        End {
            partial,
            error,
            sender: None,
            receiver: None,
            reverse: None,
            latency_ns: None,
            latency_is: None,
            requests_per_second: None,
            unanswered_requests: None,
            unsent_requests: None,
            lost_messages: None,
            late_replies: None,
            duplicated_replies: None,
            foreign_replies: None,
            rejected_requests: None,
            client: None,
            server: None,
            lost_packets: None,
            packets: None,
            search: None,
            one_host: None,
            load: None,
            watch: None,
        }
    }

    /// When both ends ran on one host, moves its CPU figures out of the sides into
    /// `one_host`, so that no reader adds the same host twice.
    fn count_one_host(&mut self, inp: &Inputs<'_>) {
        let same = inp
            .server
            .is_some_and(|s| s.host.boot_id.is_some() && s.host.boot_id == inp.client.host.boot_id);
        if !same {
            return;
        }
        let cycles_per_byte = self.stream_sender().and_then(|s| s.cycles_per_byte);
        let clear_bytes = |s: &mut EndSide| {
            s.cpu.usage = None;
            s.cycles_per_byte = None;
        };
        for t in [&mut self.sender, &mut self.receiver].into_iter().flatten() {
            match t {
                SideTotals::Bytes(s) => clear_bytes(s),
                SideTotals::Packets(p) => p.cpu.usage = None,
            }
        }
        if let Some(r) = &mut self.reverse {
            r.sender
                .iter_mut()
                .chain(r.receiver.iter_mut())
                .for_each(clear_bytes);
        }
        if let Some(p) = &mut self.packets {
            for s in p.sender.iter_mut().chain(p.receiver.iter_mut()) {
                s.cpu.usage = None;
            }
        }
        for s in self.client.iter_mut().chain(self.server.iter_mut()) {
            s.cpu.usage = None;
        }
        self.one_host = Some(OneHost {
            hostname: inp.client.host.hostname.clone(),
            cpu: inp.client.cpu.clone(),
            cycles_per_byte,
        });
    }
}

impl Document {
    /// The document of a test no agent took part in (a watch; a fake in the run layer's
    /// tests): its spec, command line, host and start, its intervals and end.
    pub fn local(start: LocalStart, intervals: Vec<IntervalFigures>, end: End) -> Document {
        Document {
            schema_version: SCHEMA_VERSION,
            test: start.spec.name().to_string(),
            start: Start {
                spec: start.spec,
                command: start.command,
                server_command: None,
                client: start.host,
                server: None,
                server_address: String::new(),
                started_at: start.started_at,
                software: start.software,
                finished_at: None,
                client_agent: None,
                fleet: None,
            },
            intervals,
            end,
        }
    }

    pub fn build(inp: Inputs<'_>) -> Document {
        match inp.spec {
            TestSpec::Stream(s) => stream::build(s, &inp),
            TestSpec::Ping(r) | TestSpec::Rpc(r) => rr::build(r, &inp),
            TestSpec::Pps(p) => pps::build(p, &inp),
            // The controller runs a load as tests of the other kinds (`load::build`); a watch
            // has no agent (`sonde_run::watch`).
            TestSpec::Load(_) | TestSpec::Watch(_) => Document::of(&inp, Vec::new(), End::of(&inp)),
        }
    }

    /// The document of `inp` with its kind's intervals and end; counts a shared host once.
    fn of(inp: &Inputs<'_>, intervals: Vec<IntervalFigures>, mut end: End) -> Document {
        end.count_one_host(inp);
        Document {
            schema_version: SCHEMA_VERSION,
            test: inp.spec.name().to_string(),
            start: start(inp),
            intervals,
            end,
        }
    }
}

impl IntervalFigures {
    /// An interval from `start_s` to `end_s` with no figure yet.
    pub fn span(start_s: f64, end_s: f64) -> IntervalFigures {
        IntervalFigures {
            start_s,
            end_s,
            sender: None,
            receiver: None,
            reverse: None,
            requests_per_second: None,
            latency_ns: None,
            client_cpu_busy_percent: None,
            server_cpu_busy_percent: None,
            load: None,
            watch: None,
        }
    }
}

/// Both sides' interval samples paired by index, with the interval's span; a side that
/// stopped early leaves `None`s.
fn paired<'a>(
    client: &'a [IntervalSample],
    server: &'a [IntervalSample],
) -> impl Iterator<
    Item = (
        IntervalFigures,
        Option<&'a IntervalSample>,
        Option<&'a IntervalSample>,
    ),
> {
    (0..client.len().max(server.len())).map(|i| {
        let (c, s) = (client.get(i), server.get(i));
        let (start_s, end_s) = c.or(s).map(|x| (x.start_s, x.end_s)).unwrap_or_default();
        (IntervalFigures::span(start_s, end_s), c, s)
    })
}

/// `v` per second of `secs`; 0 over no time.
fn per_second(v: f64, secs: f64) -> f64 {
    if secs > 0.0 {
        v / secs
    } else {
        0.0
    }
}

fn start(inp: &Inputs<'_>) -> Start {
    Start {
        spec: inp.spec.clone(),
        command: inp.command.clone(),
        server_command: inp.server_command.clone(),
        client: inp.client.host.clone(),
        server: inp.server.map(|s| s.host.clone()),
        server_address: inp.server_address.clone(),
        started_at: inp.started_at.clone(),
        software: inp.software.clone(),
        finished_at: None,
        client_agent: inp.client_agent.clone(),
        fleet: None,
    }
}

fn is_partial(inp: &Inputs<'_>) -> bool {
    inp.error.is_some()
        || inp.server.is_none()
        || inp.client.partial
        || inp.server.is_some_and(|s| s.partial)
}
