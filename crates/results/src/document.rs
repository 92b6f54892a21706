//! The result document (`--json`): one per test, versioned, shaped like iperf3's
//! `start` / `intervals` / `end` so that scripts can rely on it. Built once from both
//! sides' [`SideResult`]s; every renderer reads this, none recomputes a figure.

use serde::{Deserialize, Serialize};

use crate::latency::LatencySummary;
use crate::side::{
    ConnectionResult, CpuUsage, DirectionResult, HostInfo, IntervalSample, NicCounters, Role,
    SideResult, Transfer,
};
use crate::spec::{Direction, TestSpec, Transport};
use crate::stats::{bits_per_second, mean_stddev};

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
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IntervalPair {
    pub sender: Option<IntervalSide>,
    pub receiver: Option<IntervalSide>,
}

/// Fairness across connections: a slow connection hides in a sum.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConnectionSpread {
    pub count: usize,
    pub min_bits_per_second: f64,
    pub max_bits_per_second: f64,
    pub mean_bits_per_second: f64,
    pub stddev_bits_per_second: f64,
    pub per_connection: Vec<ConnectionResult>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Retransmits {
    /// RetransSegs delta of the whole host's network namespace (/proc/net/snmp).
    pub system: Option<u64>,
    /// Sum of the test's connections' tcpi_total_retrans deltas.
    pub connections: Option<u64>,
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
}

impl MeasuredBy {
    fn of(side: &SideResult) -> MeasuredBy {
        MeasuredBy {
            measured_by: side.role,
            host: side.host.hostname.clone(),
            engine: side.engine.clone(),
            threads: side.threads,
            pinned_cpus: side.pinned_cpus.clone(),
        }
    }
}

/// `end.sender` / `end.receiver`: one side's totals for one direction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EndSide {
    #[serde(flatten)]
    pub by: MeasuredBy,
    pub seconds: f64,
    pub bytes: u64,
    pub total_bytes: u64,
    pub bits_per_second: f64,
    /// 10^6 bytes per second.
    pub megabytes_per_second: f64,
    /// Throughput in units of the buffer size (ntttcp's Buffers/s).
    pub buffers_per_second: f64,
    /// send()/recv() calls per second that moved data.
    pub calls_per_second: f64,
    pub connections: ConnectionSpread,
    pub tcp_retransmits: Retransmits,
    pub cpu: CpuFigures,
    /// Host busy cycles per byte moved: busy fraction × CPUs × Hz × seconds / bytes.
    pub cycles_per_byte: Option<f64>,
    /// NIC packets per second in this side's direction of transfer (tx for a sender).
    pub packets_per_second: Option<f64>,
    pub nic: Option<NicCounters>,
    pub interrupts: Option<u64>,
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DirectionEnd {
    pub sender: Option<EndSide>,
    pub receiver: Option<EndSide>,
}

/// `end.client` / `end.server` of a request/response test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RrEndSide {
    #[serde(flatten)]
    pub by: MeasuredBy,
    pub poll: String,
    pub seconds: f64,
    /// Client: responses received; server: responses sent.
    pub messages: u64,
    pub messages_per_second: f64,
    /// Client: requests sent over the whole test, warm-up and drain included.
    pub requests_sent: Option<u64>,
    pub cpu: CpuFigures,
    /// This side's process CPU time per message: the cost of its receive mode.
    pub cpu_us_per_message: Option<f64>,
    pub socket_options: Vec<String>,
    pub tcp_retransmits: Option<u64>,
    pub nic: Option<NicCounters>,
    pub interrupts: Option<u64>,
    pub notes: Vec<String>,
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

/// One side of a packet-rate test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PpsEndSide {
    #[serde(flatten)]
    pub by: MeasuredBy,
    pub poll: String,
    pub seconds: f64,
    /// Inside the window.
    pub packets: u64,
    pub packets_per_second: f64,
    /// Wire bits (packet size × 8) per second, as testpmd reports them.
    pub bits_per_second: f64,
    /// Over the whole test: sent, or distinct packets received.
    pub total_packets: u64,
    pub cpu: CpuFigures,
    pub nic: Option<NicCounters>,
    pub interrupts: Option<u64>,
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PacketsEnd {
    pub size_bytes: u32,
    pub udp_payload_bytes: u32,
    pub flows: usize,
    pub sender: Option<PpsEndSide>,
    pub receiver: Option<PpsEndSide>,
    pub lost_packets: Option<u64>,
    pub loss_percent: Option<f64>,
    pub reordered_packets: Option<u64>,
    pub duplicated_packets: Option<u64>,
    /// The receive sockets' own drop counter: the part of the loss inside the agent's host.
    pub socket_drops: Option<u64>,
    /// Receiver packets/s over sender packets/s: the honest figure over the optimistic one.
    pub receiver_to_sender_ratio: Option<f64>,
    pub flows_with_loss: Option<usize>,
}

/// One trial of a zero-loss search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trial {
    /// `None`: as fast as the sender could.
    pub offered_pps: Option<f64>,
    pub sent_pps: f64,
    pub received_pps: f64,
    pub lost_packets: u64,
    pub loss_percent: f64,
    pub passed: bool,
    /// The sender fell short of the offered rate (more than 2 % below it): this trial
    /// tested what it sent, not what was offered.
    #[serde(default)]
    pub sender_short: bool,
    /// The final trial at the result rate that confirms it (RFC 2544).
    #[serde(default)]
    pub verification: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchEnd {
    pub max_loss_percent: f64,
    pub trial_ms: u64,
    pub trials: Vec<Trial>,
    /// Highest sent rate whose loss stayed within the limit; 0 when none did.
    pub result_pps: f64,
    /// Trials run at each rate; a rate passes only if every one of them does.
    #[serde(default = "one")]
    pub trials_per_step: u32,
    /// What bounds the result: `sender` (the sender reached no higher rate, and lost
    /// nothing at it: the path may carry more), `loss` (the bisection converged between a
    /// rate without loss and one with), `none_passed`.
    #[serde(default)]
    pub limited_by: String,
}

fn one() -> u32 {
    1
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
}

impl Document {
    pub fn build(inp: Inputs<'_>) -> Document {
        let stream = match inp.spec {
            TestSpec::Stream(s) => s,
            TestSpec::Ping(_) | TestSpec::Rpc(_) => return build_rr(inp),
            TestSpec::Pps(_) => return build_pps(inp),
        };
        let (primary, bidir) = match stream.direction {
            Direction::Forward => (Direction::Forward, false),
            Direction::Reverse => (Direction::Reverse, false),
            Direction::Bidir => (Direction::Forward, true),
        };
        let partial = is_partial(&inp);
        let end_pair = |dir: Direction| DirectionEnd {
            sender: sending_side(dir, inp.client, inp.server)
                .and_then(|s| end_side(s, dir, Transfer::Send)),
            receiver: receiving_side(dir, inp.client, inp.server)
                .and_then(|s| end_side(s, dir, Transfer::Receive)),
        };
        let primary_end = end_pair(primary);
        let reverse = bidir.then(|| end_pair(Direction::Reverse));

        let intervals = merge_intervals(inp.client_intervals, inp.server_intervals, primary, bidir);
        let mut end = End {
            partial,
            error: inp.error.clone(),
            sender: primary_end.sender.map(SideTotals::Bytes),
            receiver: primary_end.receiver.map(SideTotals::Bytes),
            reverse,
            ..End::empty(partial)
        };
        end.count_one_host(&inp);
        Document {
            schema_version: SCHEMA_VERSION,
            test: inp.spec.name().to_string(),
            start: start(&inp),
            intervals,
            end,
        }
    }
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

    fn empty(partial: bool) -> End {
        End {
            partial,
            error: None,
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
            client: None,
            server: None,
            lost_packets: None,
            packets: None,
            search: None,
            one_host: None,
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
    }
}

fn is_partial(inp: &Inputs<'_>) -> bool {
    inp.error.is_some()
        || inp.server.is_none()
        || inp.client.partial
        || inp.server.is_some_and(|s| s.partial)
}

fn rr_end_side(side: &SideResult) -> Option<RrEndSide> {
    let rr = side.rr.as_ref()?;
    let secs = side.window_s;
    Some(RrEndSide {
        by: MeasuredBy::of(side),
        poll: rr.poll.clone(),
        seconds: secs,
        messages: rr.messages,
        messages_per_second: if secs > 0.0 {
            rr.messages as f64 / secs
        } else {
            0.0
        },
        requests_sent: (side.role == Role::Client).then_some(rr.sent),
        cpu: CpuFigures {
            usage: side.cpu.clone(),
            process_cpu_s: side.process_cpu_s,
        },
        cpu_us_per_message: side
            .process_cpu_s
            .filter(|_| rr.messages > 0)
            .map(|c| c * 1e6 / rr.messages as f64),
        socket_options: rr.socket_options.clone(),
        tcp_retransmits: side.tcp_retransmits,
        nic: side.nic.clone(),
        interrupts: side.interrupts,
        notes: side.notes.clone(),
    })
}

fn pps_end_side(side: &SideResult) -> Option<PpsEndSide> {
    let p = side.pps.as_ref()?;
    let secs = side.window_s;
    let per_s = |v: f64| if secs > 0.0 { v / secs } else { 0.0 };
    Some(PpsEndSide {
        by: MeasuredBy::of(side),
        poll: p.poll.clone(),
        seconds: secs,
        packets: p.packets,
        packets_per_second: per_s(p.packets as f64),
        bits_per_second: per_s(p.packets as f64 * p.size_bytes as f64 * 8.0),
        total_packets: p.per_flow.iter().sum(),
        cpu: CpuFigures {
            usage: side.cpu.clone(),
            process_cpu_s: side.process_cpu_s,
        },
        nic: side.nic.clone(),
        interrupts: side.interrupts,
        notes: side.notes.clone(),
    })
}

/// The document of a packet-rate test: both sides' rates and the loss between them.
fn build_pps(inp: Inputs<'_>) -> Document {
    let TestSpec::Pps(spec) = inp.spec else {
        unreachable!("build_pps is called for pps specs")
    };
    let partial = is_partial(&inp);
    let tx = inp.client.pps.as_ref();
    let rx = inp.server.and_then(|s| s.pps.as_ref());
    let sender = pps_end_side(inp.client);
    let receiver = inp.server.and_then(pps_end_side);
    let (lost, flows_with_loss) = match (tx, rx) {
        (Some(t), Some(r)) => {
            let per: Vec<u64> = t
                .per_flow
                .iter()
                .zip(&r.per_flow)
                .map(|(s, g)| s.saturating_sub(*g))
                .collect();
            (
                Some(per.iter().sum::<u64>()),
                Some(per.iter().filter(|&&l| l > 0).count()),
            )
        }
        _ => (None, None),
    };
    let sent_total = tx.map(|t| t.per_flow.iter().sum::<u64>());
    let packets = PacketsEnd {
        size_bytes: spec.size_bytes,
        udp_payload_bytes: spec.payload_bytes(),
        flows: spec.flows as usize,
        lost_packets: lost,
        loss_percent: lost.zip(sent_total).map(|(l, s)| {
            if s > 0 {
                l as f64 * 100.0 / s as f64
            } else {
                0.0
            }
        }),
        reordered_packets: rx.map(|r| r.reordered),
        duplicated_packets: rx.map(|r| r.duplicated),
        socket_drops: rx.and_then(|r| r.socket_drops),
        receiver_to_sender_ratio: match (&sender, &receiver) {
            (Some(s), Some(r)) if s.packets_per_second > 0.0 => {
                Some(r.packets_per_second / s.packets_per_second)
            }
            _ => None,
        },
        flows_with_loss,
        sender,
        receiver,
    };
    let size = spec.size_bytes as f64;
    let side = |x: Option<&IntervalSample>, role: Role| {
        x.map(|x| {
            let secs = (x.end_s - x.start_s).max(1e-9);
            let pk = x.packets.unwrap_or(0) as f64;
            IntervalSide {
                measured_by: role,
                bytes: (pk * size) as u64,
                bits_per_second: pk * size * 8.0 / secs,
                cpu_busy_percent: x.cpu_busy_percent,
                packets_per_second: Some(pk / secs),
                partial: x.partial,
            }
        })
    };
    let intervals = (0..inp.client_intervals.len().max(inp.server_intervals.len()))
        .map(|i| {
            let c = inp.client_intervals.get(i);
            let s = inp.server_intervals.get(i);
            let (start_s, end_s) = c.or(s).map(|x| (x.start_s, x.end_s)).unwrap_or_default();
            IntervalFigures {
                start_s,
                end_s,
                sender: side(c, Role::Client),
                receiver: side(s, Role::Server),
                reverse: None,
                requests_per_second: None,
                latency_ns: None,
                client_cpu_busy_percent: None,
                server_cpu_busy_percent: None,
            }
        })
        .collect();
    let mut end = End {
        error: inp.error.clone(),
        lost_packets: lost,
        sender: packets.sender.clone().map(SideTotals::Packets),
        receiver: packets.receiver.clone().map(SideTotals::Packets),
        packets: Some(packets),
        ..End::empty(partial)
    };
    end.count_one_host(&inp);
    Document {
        schema_version: SCHEMA_VERSION,
        test: inp.spec.name().to_string(),
        start: start(&inp),
        intervals,
        end,
    }
}

/// The document of a ping or rpc test: latency and rate from the client, CPU per message
/// from both sides.
fn build_rr(inp: Inputs<'_>) -> Document {
    let partial = is_partial(&inp);
    let open_loop = matches!(inp.spec, TestSpec::Rpc(r) | TestSpec::Ping(r) if r.open_loop);
    let udp =
        matches!(inp.spec, TestSpec::Rpc(r) | TestSpec::Ping(r) if r.transport == Transport::Udp);
    let c_rr = inp.client.rr.as_ref();
    let client = rr_end_side(inp.client);
    let intervals = (0..inp.client_intervals.len().max(inp.server_intervals.len()))
        .map(|i| {
            let c = inp.client_intervals.get(i);
            let s = inp.server_intervals.get(i);
            let (start_s, end_s) = c.or(s).map(|x| (x.start_s, x.end_s)).unwrap_or_default();
            IntervalFigures {
                start_s,
                end_s,
                sender: None,
                receiver: None,
                reverse: None,
                requests_per_second: c
                    .and_then(|c| c.messages)
                    .map(|m| m as f64 / (end_s - start_s).max(1e-9)),
                latency_ns: c.and_then(|c| c.latency_ns),
                client_cpu_busy_percent: c.and_then(|c| c.cpu_busy_percent),
                server_cpu_busy_percent: s.and_then(|s| s.cpu_busy_percent),
            }
        })
        .collect();
    let mut end = End {
        error: inp.error.clone(),
        latency_ns: c_rr.and_then(|r| r.latency_ns),
        latency_is: Some(
            if open_loop {
                "round_trip_time_from_intended_send"
            } else {
                "round_trip_time"
            }
            .into(),
        ),
        requests_per_second: client.as_ref().map(|c| c.messages_per_second),
        unanswered_requests: c_rr.map(|r| r.unanswered),
        unsent_requests: c_rr.filter(|_| open_loop).map(|r| r.not_sent),
        lost_messages: c_rr.filter(|r| r.lost > 0).map(|r| r.lost),
        late_replies: c_rr.filter(|_| udp).map(|r| r.late),
        duplicated_replies: c_rr.filter(|_| udp).map(|r| r.duplicated),
        foreign_replies: c_rr.filter(|_| udp).map(|r| r.foreign),
        server: inp.server.and_then(rr_end_side),
        client,
        ..End::empty(partial)
    };
    end.count_one_host(&inp);
    Document {
        schema_version: SCHEMA_VERSION,
        test: inp.spec.name().to_string(),
        start: start(&inp),
        intervals,
        end,
    }
}

fn sending_side<'a>(
    dir: Direction,
    client: &'a SideResult,
    server: Option<&'a SideResult>,
) -> Option<&'a SideResult> {
    match dir {
        Direction::Reverse => server,
        _ => Some(client),
    }
}

fn receiving_side<'a>(
    dir: Direction,
    client: &'a SideResult,
    server: Option<&'a SideResult>,
) -> Option<&'a SideResult> {
    match dir {
        Direction::Reverse => Some(client),
        _ => server,
    }
}

fn end_side(side: &SideResult, dir: Direction, transfer: Transfer) -> Option<EndSide> {
    let d: &DirectionResult = side.direction(dir)?;
    let secs = side.window_s;
    let per_sec = |v: f64| if secs > 0.0 { v / secs } else { 0.0 };
    let conn_rates: Vec<f64> = d
        .connections
        .iter()
        .map(|c| bits_per_second(c.bytes, secs))
        .collect();
    let (mean, stddev) = mean_stddev(&conn_rates).unwrap_or((0.0, 0.0));
    let conn_retrans = d
        .connections
        .iter()
        .map(|c| c.retransmits)
        .sum::<Option<u64>>();
    let cycles_per_byte = match (&side.cpu, side.host.cpu_hz) {
        (Some(cpu), Some(hz)) if d.bytes > 0 => {
            Some(cpu.host.busy_percent() / 100.0 * cpu.cpus as f64 * hz * secs / d.bytes as f64)
        }
        _ => None,
    };
    let packets_per_second = side.nic.as_ref().map(|n| match transfer {
        Transfer::Send => per_sec(n.tx_packets as f64),
        Transfer::Receive => per_sec(n.rx_packets as f64),
    });
    Some(EndSide {
        by: MeasuredBy::of(side),
        seconds: secs,
        bytes: d.bytes,
        total_bytes: d.total_bytes,
        bits_per_second: bits_per_second(d.bytes, secs),
        megabytes_per_second: per_sec(d.bytes as f64 / 1e6),
        buffers_per_second: per_sec(d.bytes as f64 / d.buffer_bytes.max(1) as f64),
        calls_per_second: per_sec(d.calls as f64),
        connections: ConnectionSpread {
            count: d.connections.len(),
            min_bits_per_second: conn_rates.iter().copied().reduce(f64::min).unwrap_or(0.0),
            max_bits_per_second: conn_rates.iter().copied().fold(0.0, f64::max),
            mean_bits_per_second: mean,
            stddev_bits_per_second: stddev,
            per_connection: d.connections.clone(),
        },
        tcp_retransmits: Retransmits {
            system: side.tcp_retransmits,
            connections: conn_retrans,
        },
        cpu: CpuFigures {
            usage: side.cpu.clone(),
            process_cpu_s: side.process_cpu_s,
        },
        cycles_per_byte,
        packets_per_second,
        nic: side.nic.clone(),
        interrupts: side.interrupts,
        notes: side.notes.clone(),
    })
}

fn interval_side(s: &IntervalSample, role: Role, transfer: Transfer) -> IntervalSide {
    let bytes = match transfer {
        Transfer::Send => s.sent_bytes,
        Transfer::Receive => s.received_bytes,
    };
    IntervalSide {
        measured_by: role,
        bytes,
        bits_per_second: bits_per_second(bytes, s.end_s - s.start_s),
        cpu_busy_percent: s.cpu_busy_percent,
        packets_per_second: None,
        partial: s.partial,
    }
}

/// Pairs the two sides' samples by index; a side that stopped early leaves `None`s.
fn merge_intervals(
    client: &[IntervalSample],
    server: &[IntervalSample],
    primary: Direction,
    bidir: bool,
) -> Vec<IntervalFigures> {
    let n = client.len().max(server.len());
    (0..n)
        .map(|i| {
            let c = client.get(i);
            let s = server.get(i);
            let (start_s, end_s) = c.or(s).map(|x| (x.start_s, x.end_s)).unwrap_or_default();
            let pick = |dir: Direction, transfer: Transfer| {
                let client_sends = dir != Direction::Reverse;
                let on_client = (transfer == Transfer::Send) == client_sends;
                if on_client {
                    c.map(|x| interval_side(x, Role::Client, transfer))
                } else {
                    s.map(|x| interval_side(x, Role::Server, transfer))
                }
            };
            IntervalFigures {
                start_s,
                end_s,
                sender: pick(primary, Transfer::Send),
                receiver: pick(primary, Transfer::Receive),
                reverse: bidir.then(|| IntervalPair {
                    sender: pick(Direction::Reverse, Transfer::Send),
                    receiver: pick(Direction::Reverse, Transfer::Receive),
                }),
                requests_per_second: None,
                latency_ns: None,
                client_cpu_busy_percent: None,
                server_cpu_busy_percent: None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::side::CpuBreakdown;
    use crate::spec::StreamSpec;

    fn side(role: Role, transfer: Transfer, bytes: &[u64]) -> SideResult {
        SideResult {
            role,
            host: HostInfo {
                hostname: role.as_str().into(),
                cpu_hz: Some(2e9),
                ..Default::default()
            },
            window_s: 2.0,
            threads: 1,
            pinned_cpus: None,
            directions: vec![DirectionResult {
                direction: Direction::Forward,
                transfer,
                buffer_bytes: 1000,
                bytes: bytes.iter().sum(),
                total_bytes: bytes.iter().sum::<u64>() + 10,
                calls: 10,
                connections: bytes
                    .iter()
                    .enumerate()
                    .map(|(i, &b)| ConnectionResult {
                        index: i as u32,
                        bytes: b,
                        total_bytes: b + 5,
                        retransmits: Some(1),
                        rtt_us: None,
                        rttvar_us: None,
                        snd_cwnd_segments: None,
                        snd_mss_bytes: None,
                    })
                    .collect(),
            }],
            cpu: Some(CpuUsage {
                cpus: 2,
                host: CpuBreakdown {
                    idle_percent: 75.0,
                    ..Default::default()
                },
                busiest_cpu: 1,
                busiest: CpuBreakdown {
                    idle_percent: 50.0,
                    ..Default::default()
                },
            }),
            process_cpu_s: Some(0.5),
            tcp_retransmits: Some(3),
            nic: None,
            interrupts: None,
            notes: vec![],
            partial: false,
            engine: None,
            rr: None,
            pps: None,
        }
    }

    fn inputs<'a>(spec: &'a TestSpec, c: &'a SideResult, s: Option<&'a SideResult>) -> Inputs<'a> {
        Inputs {
            spec,
            command: "sonde stream x".into(),
            server_command: None,
            server_address: "198.18.0.2:5301".into(),
            started_at: "2026-01-01T00:00:00Z".into(),
            software: "test".into(),
            client: c,
            server: s,
            client_intervals: &[],
            server_intervals: &[],
            error: None,
        }
    }

    #[test]
    fn forward_figures() {
        let spec = TestSpec::Stream(StreamSpec::default());
        let c = side(Role::Client, Transfer::Send, &[1_000_000, 3_000_000]);
        let s = side(Role::Server, Transfer::Receive, &[1_000_000, 3_000_000]);
        let doc = Document::build(inputs(&spec, &c, Some(&s)));
        assert!(!doc.end.partial);
        let snd = doc.end.stream_sender().cloned().unwrap();
        assert_eq!(snd.by.measured_by, Role::Client);
        assert_eq!(snd.bits_per_second, 16e6);
        assert_eq!(snd.megabytes_per_second, 2.0);
        assert_eq!(snd.buffers_per_second, 2000.0);
        assert_eq!(snd.connections.min_bits_per_second, 4e6);
        assert_eq!(snd.connections.max_bits_per_second, 12e6);
        assert_eq!(snd.connections.stddev_bits_per_second, 4e6);
        assert_eq!(snd.tcp_retransmits.connections, Some(2));
        // 25 % busy of 2 CPUs at 2 GHz for 2 s over 4 MB.
        assert_eq!(snd.cycles_per_byte, Some(0.25 * 2.0 * 2e9 * 2.0 / 4e6));
        assert_eq!(
            doc.end.stream_receiver().unwrap().by.measured_by,
            Role::Server
        );
        let json = serde_json::to_value(&doc).unwrap();
        assert_eq!(json["schema_version"], 1);
        assert_eq!(json["end"]["sender"]["cpu"]["host"]["idle_percent"], 75.0);
        assert_eq!(json["end"]["sender"]["cpu"]["process_cpu_s"], 0.5);
    }

    #[test]
    fn missing_server_is_partial_with_no_receiver() {
        let spec = TestSpec::Stream(StreamSpec::default());
        let c = side(Role::Client, Transfer::Send, &[10]);
        let doc = Document::build(inputs(&spec, &c, None));
        assert!(doc.end.partial);
        assert!(doc.end.receiver.is_none());
        assert!(doc.end.sender.is_some());
    }

    #[test]
    fn intervals_pair_by_index() {
        let spec = TestSpec::Stream(StreamSpec::default());
        let c = side(Role::Client, Transfer::Send, &[10]);
        let sample = |i: u32, sent, recv| IntervalSample {
            index: i,
            start_s: i as f64,
            end_s: i as f64 + 1.0,
            sent_bytes: sent,
            received_bytes: recv,
            cpu_busy_percent: None,
            messages: None,
            latency_ns: None,
            packets: None,
            partial: false,
        };
        let ci = [sample(0, 100, 0), sample(1, 200, 0)];
        let si = [sample(0, 0, 90)];
        let mut inp = inputs(&spec, &c, None);
        inp.client_intervals = &ci;
        inp.server_intervals = &si;
        let doc = Document::build(inp);
        assert_eq!(doc.intervals.len(), 2);
        assert_eq!(doc.intervals[0].sender.as_ref().unwrap().bytes, 100);
        assert_eq!(doc.intervals[0].receiver.as_ref().unwrap().bytes, 90);
        assert!(doc.intervals[1].receiver.is_none());
        assert_eq!(
            doc.intervals[1].sender.as_ref().unwrap().bits_per_second,
            1600.0
        );
    }
}
