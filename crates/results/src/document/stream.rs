//! A stream test's document: each direction's sender and receiver, connection spread,
//! retransmits and cycles per byte.

use serde::{Deserialize, Serialize};

use super::interval::{
    paired, IntervalFigures, IntervalPair, IntervalSide, SideFigures, StreamSideFigures,
};
use super::parts::{per_second, CpuFigures, HostCounted, Inputs, MeasuredBy};
use crate::side::{ConnectionResult, DirectionResult, IntervalSample, Role, SideResult, Transfer};
use crate::spec::{Direction, StreamSpec};
use crate::stats::{bits_per_second, mean_stddev};
use crate::tcp::{TcpSample, TcpSummary};

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
    /// This side's connections' TCP_INFO over the window, across connections.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_info: Option<Box<TcpSummary>>,
    #[serde(flatten)]
    pub counted: HostCounted,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DirectionEnd {
    pub sender: Option<EndSide>,
    pub receiver: Option<EndSide>,
}

/// A stream test's section of `end`: the primary direction's sides, and the reverse
/// direction of a bidirectional test.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StreamEnd {
    pub sender: Option<EndSide>,
    pub receiver: Option<EndSide>,
    /// The agent-to-controller direction of a bidirectional test.
    pub reverse: Option<DirectionEnd>,
}

impl StreamEnd {
    /// Clears every side's host CPU and cycles per byte; the sender's cycles per byte.
    pub(crate) fn clear_host_cpu(&mut self) -> Option<f64> {
        let cycles_per_byte = self.sender.as_ref().and_then(|s| s.cycles_per_byte);
        let reverse = self
            .reverse
            .iter_mut()
            .flat_map(|r| [&mut r.sender, &mut r.receiver]);
        for s in [&mut self.sender, &mut self.receiver]
            .into_iter()
            .chain(reverse)
            .flatten()
        {
            s.cpu.usage = None;
            s.cycles_per_byte = None;
        }
        cycles_per_byte
    }
}

/// The intervals and end section of a stream test.
pub(crate) fn build(stream: &StreamSpec, inp: &Inputs<'_>) -> (Vec<IntervalFigures>, StreamEnd) {
    let (primary, bidir) = match stream.direction {
        Direction::Forward => (Direction::Forward, false),
        Direction::Reverse => (Direction::Reverse, false),
        Direction::Bidir => (Direction::Forward, true),
    };
    let end_pair = |dir: Direction| DirectionEnd {
        sender: side_of(dir, Transfer::Send, inp).and_then(|s| end_side(s, dir, Transfer::Send)),
        receiver: side_of(dir, Transfer::Receive, inp)
            .and_then(|s| end_side(s, dir, Transfer::Receive)),
    };
    let primary_end = end_pair(primary);
    let reverse = bidir.then(|| end_pair(Direction::Reverse));

    let intervals = merge_intervals(inp.client_intervals, inp.server_intervals, primary, bidir);
    let end = StreamEnd {
        sender: primary_end.sender,
        receiver: primary_end.receiver,
        reverse,
    };
    (intervals, end)
}

/// The side that does `transfer` in direction `dir` (the controller sends forward), with
/// its intervals.
fn side_of<'a>(
    dir: Direction,
    transfer: Transfer,
    inp: &Inputs<'a>,
) -> Option<(&'a SideResult, &'a [IntervalSample])> {
    let client_sends = dir != Direction::Reverse;
    if (transfer == Transfer::Send) == client_sends {
        Some((inp.client, inp.client_intervals))
    } else {
        inp.server.map(|s| (s, inp.server_intervals))
    }
}

fn end_side(
    (side, intervals): (&SideResult, &[IntervalSample]),
    dir: Direction,
    transfer: Transfer,
) -> Option<EndSide> {
    let d: &DirectionResult = side.direction(dir)?;
    let secs = side.window_s;
    let per_sec = |v: f64| per_second(v, secs);
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
        cpu: CpuFigures::of(side),
        cycles_per_byte,
        packets_per_second,
        tcp_info: TcpSummary::of(
            intervals.iter().map(|i| {
                (
                    i.end_s - i.start_s,
                    i.stream().map_or(&[][..], |s| &s.tcp[..]),
                )
            }),
            transfer,
        )
        .map(Box::new),
        counted: HostCounted::of(side),
    })
}

fn interval_side(s: &IntervalSample, role: Role, transfer: Transfer) -> IntervalSide {
    let (sent, received) = s.bytes();
    let bytes = match transfer {
        Transfer::Send => sent,
        Transfer::Receive => received,
    };
    IntervalSide {
        measured_by: role,
        bytes,
        bits_per_second: bits_per_second(bytes, s.end_s - s.start_s),
        cpu_busy_percent: s.cpu_busy_percent,
        section: SideFigures::Stream(StreamSideFigures {
            tcp: s
                .stream()
                .map(|st| &st.tcp[..])
                .unwrap_or_default()
                .iter()
                .filter(|t| t.transfer == transfer)
                .cloned()
                .collect::<Vec<TcpSample>>(),
        }),
        partial: s.partial,
    }
}

/// Both sides' intervals of the primary direction (and the reverse one of a bidir test).
fn merge_intervals(
    client: &[IntervalSample],
    server: &[IntervalSample],
    primary: Direction,
    bidir: bool,
) -> Vec<IntervalFigures> {
    paired(client, server)
        .map(|(span, c, s)| {
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
                sender: pick(primary, Transfer::Send),
                receiver: pick(primary, Transfer::Receive),
                reverse: bidir.then(|| IntervalPair {
                    sender: pick(Direction::Reverse, Transfer::Send),
                    receiver: pick(Direction::Reverse, Transfer::Receive),
                }),
                ..span
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::document::{Document, Inputs};
    use crate::side::CpuBreakdown;
    use crate::side::{ConnectionResult, CpuUsage, HostInfo};
    use crate::side::{SampleSection, SideSection, StreamResult, StreamSample};
    use crate::spec::{StreamSpec, TestSpec};

    fn side(role: Role, transfer: Transfer, bytes: &[u64]) -> SideResult {
        let host = HostInfo {
            hostname: role.as_str().into(),
            cpu_hz: Some(2e9),
            ..Default::default()
        };
        let mut side = SideResult::new(role, host, 2.0, (1, None), vec![]);
        side.section = SideSection::Stream(StreamResult {
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
                        ecn: None,
                    })
                    .collect(),
            }],
        });
        side.cpu = Some(CpuUsage {
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
        });
        side.process_cpu_s = Some(0.5);
        side.tcp_retransmits = Some(3);
        side
    }

    fn inputs<'a>(spec: &'a TestSpec, c: &'a SideResult, s: Option<&'a SideResult>) -> Inputs<'a> {
        Inputs {
            server_address: "198.18.0.2:5301".into(),
            started_at: "2026-01-01T00:00:00Z".into(),
            software: "test".into(),
            server: s,
            ..Inputs::new(spec, "sonde stream x", c)
        }
    }

    #[test]
    fn forward_figures() {
        let spec = TestSpec::Stream(StreamSpec::default());
        let c = side(Role::Client, Transfer::Send, &[1_000_000, 3_000_000]);
        let s = side(Role::Server, Transfer::Receive, &[1_000_000, 3_000_000]);
        let doc = Document::build(inputs(&spec, &c, Some(&s)));
        assert!(!doc.end.partial);
        let snd = doc.end.stream().unwrap().sender.clone().unwrap();
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
            doc.end
                .stream()
                .unwrap()
                .receiver
                .as_ref()
                .unwrap()
                .by
                .measured_by,
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
        assert!(doc.end.stream().unwrap().receiver.is_none());
        assert!(doc.end.stream().unwrap().sender.is_some());
    }

    #[test]
    fn intervals_pair_by_index() {
        let spec = TestSpec::Stream(StreamSpec::default());
        let c = side(Role::Client, Transfer::Send, &[10]);
        let sample = |i: u32, sent, recv| {
            IntervalSample::second(
                i,
                SampleSection::Stream(StreamSample {
                    sent_bytes: sent,
                    received_bytes: recv,
                    tcp: Vec::new(),
                }),
            )
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
