//! Each kind's own part of a side's result: exactly one per side ([`SideSection`]).

use serde::{Deserialize, Serialize};

use super::role::Transfer;
use crate::latency::LatencySummary;
use crate::spec::Direction;

/// A kind's own figures of one side.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SideSection {
    /// No kind's figures: only what the host counted (a watch), or nothing (a side whose
    /// result never arrived).
    HostOnly,
    Stream(StreamResult),
    /// Ping and rpc.
    Rr(RrResult),
    Pps(PpsResult),
}

/// One side's part of a stream test: its half of each direction.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StreamResult {
    pub directions: Vec<DirectionResult>,
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
    /// The whole connection's ECN (TCP_INFO read after its last byte), when negotiated:
    /// the counts since the handshake, warm-up and cool-down included, so that they
    /// reconcile with a path's own count of the CE marks it set; the intervals' are the
    /// window's part.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ecn: Option<super::sample::TcpEcn>,
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

/// One side's part of a request/response test (ping, rpc).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
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
    /// Client only, `--stages`: where the round trips' time went.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stages: Option<crate::stages::Stages>,
    /// Client only, `--stages`: the window's raw one-way delays (see `RrSample`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oneway: Option<Box<crate::oneway::OneWayRaw>>,
    /// Socket options applied, and those the kernel refused, in words.
    pub socket_options: Vec<String>,
    /// The data plane's own system calls over the whole test, where the engine counts
    /// them (kernel sockets, io_uring).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub syscalls: Option<Syscalls>,
    /// UDP with `--dscp`/`--ecn`: what this side received by the marks it arrived with
    /// against those sent (agent: the requests, forward; client: the answers matched to
    /// a request, reverse), over the whole test.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub marks: Option<crate::marks::DirectionFate>,
}

/// System calls the workers made, and the messages they carried (client: requests sent;
/// agent: answers sent), both over the whole test, warm-up and drain included.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Syscalls {
    pub calls: u64,
    pub messages: u64,
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

/// One side's part of a packet-rate test. The default counts nothing: a part that only
/// some engines or peers fill starts from it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
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
    /// Sender (kernel sockets): its sends held back by the queue ahead in the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked_sends: Option<BlockedSends>,
    /// Agent, with `--dscp`/`--ecn`: the marks its datagrams arrived with against those
    /// sent, over the whole test (the forward direction).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub marks: Option<crate::marks::DirectionFate>,
    /// Receiver of datagrams that carry their send time (iperf3's): each flow's
    /// interarrival jitter at the end, RFC 3550's running estimate, milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter_ms: Option<Vec<f64>>,
    /// A receiver that counts by sequence number (iperf3's): per flow, the highest one it
    /// saw. What its sender sent beyond that reached it after it stopped counting, or never:
    /// neither received nor lost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counted_through: Option<Vec<u64>>,
    /// A bidirectional test (iperf3's `--bidir`): this side's part of the other direction,
    /// where it received what it sent here or the other way round.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reverse: Option<Box<PpsResult>>,
}

/// A sender's sends that found no room in the queue ahead (its socket's buffer full of
/// packets a shaper or a NIC ring had not yet taken, or the device's queue full), and how
/// long it waited for room: time its threads neither sent nor used CPU.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BlockedSends {
    /// Sends that found the socket's buffer full (EAGAIN, or a batch cut short by it),
    /// each followed by a wait for room.
    pub would_block: u64,
    /// Sends the device's queue refused (ENOBUFS), each followed by a short sleep.
    pub no_buffers: u64,
    /// Time waited for room, summed over the sending threads.
    pub seconds: f64,
}
