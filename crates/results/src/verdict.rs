//! What a verdict on a run is (`end.limited_by`): the limit named, the figures behind it,
//! a runner-up. Plain data, a leaf of the crate: the document holds it, and the rules that
//! find it (`limit`) read the document.

use serde::{Deserialize, Serialize};

use crate::side::Role;

/// The limits a run can have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Limit {
    SenderCpu,
    ReceiverCpu,
    /// The receiver's advertised window (its buffer, or an application that reads slowly).
    ReceiverWindow,
    /// The sender's socket buffer.
    SenderBuffer,
    /// Path capacity, queueing or loss: the congestion window held TCP back.
    Network,
    /// The test's own `--rate` or pacing.
    TestRate,
    /// Socket or NIC queue overflow at the receiver (pps, rr over UDP).
    ReceiverDrops,
    /// A round trip's stage (`--stages`) held most of the latency: the stage's name.
    ClientSendStack,
    ClientQdisc,
    /// The path between the hosts' stacks: wire, NICs, hypervisor.
    Path,
    ServerWakeUp,
    ServerTurnaround,
    ServerSendStack,
    ClientWakeUp,
}

impl Limit {
    pub fn as_str(self) -> &'static str {
        match self {
            Limit::SenderCpu => "sender_cpu",
            Limit::ReceiverCpu => "receiver_cpu",
            Limit::ReceiverWindow => "receiver_window",
            Limit::SenderBuffer => "sender_buffer",
            Limit::Network => "network",
            Limit::TestRate => "test_rate",
            Limit::ReceiverDrops => "receiver_drops",
            Limit::ClientSendStack => "client_send_stack",
            Limit::ClientQdisc => "client_qdisc",
            Limit::Path => "path",
            Limit::ServerWakeUp => "server_wake_up",
            Limit::ServerTurnaround => "server_turnaround",
            Limit::ServerSendStack => "server_send_stack",
            Limit::ClientWakeUp => "client_wake_up",
        }
    }

    /// In words, for a sentence ("limited by the receiver's window").
    pub fn words(self) -> &'static str {
        match self {
            Limit::SenderCpu => "the sender's CPU",
            Limit::ReceiverCpu => "the receiver's CPU",
            Limit::ReceiverWindow => "the receiver's window",
            Limit::SenderBuffer => "the sender's buffer",
            Limit::Network => "the network",
            Limit::TestRate => "the test's own rate",
            Limit::ReceiverDrops => "drops at the receiver",
            Limit::ClientSendStack => "the client's send stack",
            Limit::ClientQdisc => "the client's qdisc",
            Limit::Path => "the path between the hosts",
            Limit::ServerWakeUp => "the server's receive wake-up",
            Limit::ServerTurnaround => "the server's turnaround",
            Limit::ServerSendStack => "the server's send stack",
            Limit::ClientWakeUp => "the client's receive wake-up",
        }
    }
}

impl std::fmt::Display for Limit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which end of the transfer a figure describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TransferEnd {
    Sender,
    Receiver,
    /// The test as a whole (its spec, or both ends together).
    Test,
}

/// One figure behind a verdict: its value and unit, which end it describes and which
/// side measured it, and a sentence a person reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    pub end: TransferEnd,
    /// `None` for a figure of the test's spec.
    pub measured_by: Option<Role>,
    /// The document's name of the figure, e.g. `rwnd_limited_percent`.
    pub figure: String,
    pub value: f64,
    pub unit: String,
    pub text: String,
}

/// A limit the rules found, with its strength (0 to 1: how much of the run it explains)
/// and its evidence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    pub verdict: Limit,
    pub strength: f64,
    pub evidence: Vec<Evidence>,
}

/// `end.limited_by`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LimitedBy {
    pub verdict: Limit,
    /// How much of the run the verdict explains, 0 to 1.
    pub strength: f64,
    pub evidence: Vec<Evidence>,
    /// A second limit within [`RUNNER_UP_WITHIN`] of the verdict's strength.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner_up: Option<Finding>,
}

impl LimitedBy {
    /// "the receiver's window, because rwnd-limited 87 % of the time (sender, client)".
    pub fn sentence(&self) -> String {
        let why: Vec<&str> = self.evidence.iter().map(|e| e.text.as_str()).collect();
        let mut s = format!("{} ({})", self.verdict.words(), self.verdict);
        if !why.is_empty() {
            s += &format!(" because {}", why.join("; "));
        }
        if let Some(r) = &self.runner_up {
            s += &format!(" (runner-up: {})", r.verdict);
        }
        s
    }
}

impl Evidence {
    pub(crate) fn new(
        end: TransferEnd,
        measured_by: Option<Role>,
        figure: &str,
        value: f64,
        unit: &str,
        text: String,
    ) -> Evidence {
        Evidence {
            end,
            measured_by,
            figure: figure.into(),
            value,
            unit: unit.into(),
            text,
        }
    }
}
