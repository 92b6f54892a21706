//! A STAMP run's document (`sonde stamp`): the round trips, each direction's delay with
//! its bound, loss (by direction against a stateful reflector), reordering, duplicates and
//! what the reflector said of its clock; and the same per interval of sending.

use serde::{Deserialize, Serialize};

use crate::latency::LatencySummary;
use crate::oneway::OneWay;

/// The whole run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StampEnd {
    /// The reflector's address and port.
    pub reflector: String,
    pub sent: u64,
    /// Packets whose send time (T1) is the kernel's software stamp of their hand-over to
    /// the driver (`SO_TIMESTAMPING`), not the clock read written into them; the rest
    /// (and answers that came before their stamp: `answers_clock_timed`) are timed from
    /// that clock read.
    #[serde(default)]
    pub sent_kernel_stamped: u64,
    #[serde(default)]
    pub answers_clock_timed: u64,
    /// From the clock read written into each packet to the kernel's driver stamp: the
    /// time a send takes in this process and the stack, kept out of every figure, in ns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send_path_ns: Option<LatencySummary>,
    /// Answers to packets we sent, each counted once.
    pub received: u64,
    /// `sent - received`.
    pub lost: u64,
    /// Against a stateful reflector: lost on the way there, lost on the way back (both up
    /// to the last answer), and after the last answer (either way).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_forward: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_reverse: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_after_last_answer: Option<u64>,
    /// Answers seen again.
    pub duplicates: u64,
    /// Answers that came after an answer to a later packet.
    pub reordered: u64,
    /// Round trips outside the reflector ((T4 - T1) - (T3 - T2), RFC 8762 §4.2.1),
    /// in ns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ns: Option<LatencySummary>,
    /// The reflector's own time between receiving and answering (T3 - T2), in ns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reflector_turnaround_ns: Option<LatencySummary>,
    /// Whole round trips, the reflector's turnaround included (T4 - T1: what an echo's
    /// ping counts), in ns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub round_trip_whole_ns: Option<LatencySummary>,
    /// Each direction's delay ± bound (the exchange's own fit or both clocks' bounds):
    /// `end.stamp.oneway`, the name ping's and rpc's `end.oneway` has; builds before
    /// issue 53 wrote `one_way`, still read.
    #[serde(default, skip_serializing_if = "Option::is_none", alias = "one_way")]
    pub oneway: Option<OneWay>,
    /// What the reflector said of its clock; absent when nothing answered (no reflector
    /// said anything).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock: Option<ReflectorClock>,
    pub packet_bytes: u32,
    pub authenticated: bool,
    /// The reflector numbered its answers itself (seen, or said with --stateful).
    pub stateful: bool,
    /// Answers shorter than a STAMP reflector's 44 bytes: a TWAMP-light reflector's.
    pub twamp_light_answers: u64,
    /// Answers whose HMAC, sequence or length did not match a packet we sent.
    pub rejected_answers: u64,
    /// ICMP port unreachable seen on the socket (the host of the reflector's address said
    /// nothing listens on that port); each is one packet's, at most.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub port_unreachable: u64,
    /// ICMP host or network unreachable seen on the socket.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub host_unreachable: u64,
    /// Nothing answered at all: why, as far as the network said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_answer: Option<NoAnswer>,
    /// What the path did to the marks (`--dscp`, `--ecn`), each direction: forward from
    /// the reflector's Class of Service TLV, reverse from each answer's own TOS byte.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub marks: Option<Box<crate::marks::Fate>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Why a run got no answer at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoAnswer {
    /// ICMP port unreachable: the host is there, nothing listens on the port.
    PortUnreachable,
    /// ICMP host or network unreachable.
    HostUnreachable,
    /// Datagrams came back, none an answer to ours (HMAC, sequence or length wrong).
    Rejected,
    /// Nothing came back, not even an ICMP error.
    Silent,
}

impl NoAnswer {
    /// The cause as a person reads it, after "no answer from ADDR: ".
    pub fn words(self, e: &StampEnd) -> String {
        match self {
            NoAnswer::PortUnreachable => format!(
                "its host says nothing listens on that port (ICMP port unreachable, {} of {} packets)",
                e.port_unreachable, e.sent
            ),
            NoAnswer::HostUnreachable => format!(
                "the network says the host is unreachable (ICMP host or network unreachable, {} of {} packets)",
                e.host_unreachable, e.sent
            ),
            NoAnswer::Rejected => format!(
                "{} datagrams came back, none an answer to ours (HMAC, sequence or length did not match: another key?)",
                e.rejected_answers
            ),
            NoAnswer::Silent => "nothing came back, not even an ICMP error: the host is down or silent, or a filter drops the packets or the answers".into(),
        }
    }
}

/// What the reflector said of its clock, in its last answer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReflectorClock {
    /// Its Error Estimate's S bit.
    pub synchronized: bool,
    /// Its Error Estimate as ns (the largest of the run); absent for an invalid one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_ns: Option<u64>,
    /// `ntp` or `ptp`: the Z bit.
    pub format: String,
    /// From its Timestamp Information TLV (RFC 8972 §4.3), when it sent one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_source: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receive_stamp: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transmit_stamp: Option<String>,
}

/// One interval: the packets sent in it and their answers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StampInterval {
    pub sent: u64,
    pub received: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ns: Option<LatencySummary>,
    /// The marks' fate of this interval's answered packets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub marks: Option<crate::marks::Fate>,
}
