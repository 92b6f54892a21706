//! One interval as one side saw it: what every kind's sample has, and its kind's own
//! figures ([`SampleSection`]).

use serde::{Deserialize, Serialize};

use super::Transfer;
use crate::latency::LatencySummary;

/// One interval as this side saw it, relative to the start of the measured window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IntervalSample {
    pub index: u32,
    pub start_s: f64,
    pub end_s: f64,
    /// Host CPU busy percent over this interval.
    pub cpu_busy_percent: Option<f64>,
    /// Cut short: the test ended before this interval's planned end (its rates divide by
    /// the time it really lasted).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub partial: bool,
    pub section: SampleSection,
}

#[cfg(test)]
impl IntervalSample {
    /// Whole second `index` of the window, neither cut short nor CPU-sampled.
    pub(crate) fn second(index: u32, section: SampleSection) -> IntervalSample {
        IntervalSample {
            index,
            start_s: index as f64,
            end_s: index as f64 + 1.0,
            cpu_busy_percent: None,
            partial: false,
            section,
        }
    }
}

/// A kind's own figures of one interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SampleSection {
    Stream(StreamSample),
    /// Ping and rpc.
    Rr(RrSample),
    Pps(PpsSample),
}

/// A stream interval: bytes each way, and each of this side's connections' TCP_INFO.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StreamSample {
    pub sent_bytes: u64,
    pub received_bytes: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tcp: Vec<TcpSample>,
}

/// A request/response interval.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RrSample {
    /// Messages completed (client) or answered (agent).
    pub messages: u64,
    /// Client only: latency of the messages completed in it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ns: Option<LatencySummary>,
    /// Client only, `--stages`: where the time of its messages went.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stages: Option<crate::stages::Stages>,
    /// Client only, `--stages`: its messages' raw one-way delays, corrected in the
    /// document once the whole run's clock offset is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oneway: Option<Box<crate::oneway::OneWayRaw>>,
}

/// A packet-rate interval: packets sent (client) or received (agent).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PpsSample {
    pub packets: u64,
    /// Agent, with `--dscp`/`--ecn`: the interval's datagrams by the marks they arrived
    /// with against those sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub marks: Option<crate::marks::DirectionFate>,
    /// Receiver of datagrams that carry their send time (iperf3's): the flows' mean
    /// interarrival jitter at the interval's end (RFC 3550's estimate), milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter_ms: Option<f64>,
    /// A bidirectional test: this side's interval of the other direction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reverse: Option<Box<PpsSample>>,
}

impl IntervalSample {
    pub fn stream(&self) -> Option<&StreamSample> {
        match &self.section {
            SampleSection::Stream(s) => Some(s),
            _ => None,
        }
    }

    pub fn rr(&self) -> Option<&RrSample> {
        match &self.section {
            SampleSection::Rr(r) => Some(r),
            _ => None,
        }
    }

    pub fn pps(&self) -> Option<&PpsSample> {
        match &self.section {
            SampleSection::Pps(p) => Some(p),
            _ => None,
        }
    }

    /// Bytes this side sent and received in it (stream; 0 for other kinds).
    pub fn bytes(&self) -> (u64, u64) {
        self.stream()
            .map_or((0, 0), |s| (s.sent_bytes, s.received_bytes))
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
    /// ECN on the connection when negotiated (`--ecn`, the hosts' `net.ipv4.tcp_ecn`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ecn: Option<TcpEcn>,
}

/// A connection's ECN over one interval, from TCP_INFO: the negotiation's outcome and the
/// CE marks each way. Counts are the interval's; a count the kernel does not keep is
/// absent (the AccECN ones before Linux 6.18, or without AccECN negotiated).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TcpEcn {
    /// ECT seen from the peer (tcpi_options' ECN_SEEN).
    pub ect_seen: bool,
    /// Segments delivered that the peer reported CE-marked: ECE (classic, counted per
    /// acked segment while ECE is set) or AccECN's exact count (tcpi_delivered_ce).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivered_ce: Option<u32>,
    /// AccECN: CE marks this end received (tcpi_received_ce).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub received_ce: Option<u32>,
    /// AccECN: CE-marked bytes delivered (the peer's feedback) and received.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivered_ce_bytes: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub received_ce_bytes: Option<u32>,
}
