//! What limited a run (`end.limited_by`): one named limit, the few figures that decided it
//! with their sides and units, and a runner-up when a second limit came close. The rules
//! are pure functions of the document's figures (no I/O), one module per kind, so that a
//! stored document can be judged again and every rule is tested on plain numbers.

mod cpu;
mod pps;
mod rr;
mod stream;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_packets;
mod window;

use serde::{Deserialize, Serialize};

use crate::document::Document;
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
pub enum End {
    Sender,
    Receiver,
    /// The test as a whole (its spec, or both ends together).
    Test,
}

/// One figure behind a verdict: its value and unit, which end it describes and which
/// side measured it, and a sentence a person reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    pub end: End,
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

/// A second finding this close to the first (in strength) is named as the runner-up: the
/// two limits are then within the noise of each other's evidence.
pub const RUNNER_UP_WITHIN: f64 = 0.25;

/// The findings of a run, strongest first, as one verdict.
pub(crate) fn pick(mut findings: Vec<Finding>) -> Option<LimitedBy> {
    findings.retain(|f| f.strength > 0.0);
    findings.sort_by(|a, b| b.strength.total_cmp(&a.strength));
    let mut it = findings.into_iter();
    let first = it.next()?;
    let runner_up = it
        .find(|f| f.verdict != first.verdict)
        .filter(|f| f.strength >= first.strength - RUNNER_UP_WITHIN);
    Some(LimitedBy {
        verdict: first.verdict,
        strength: first.strength,
        evidence: first.evidence,
        runner_up,
    })
}

/// Lost or retransmitted packets per packet sent at which loss alone explains a run:
/// above 1 %, TCP spends much of each RTT recovering and a packet-rate test's receiver
/// got visibly less than was sent. 0.05 % is noise: the odd drop any path has, and the
/// needless retransmissions D-SACK does not report on a path that reorders (a veth
/// stream that dropped nothing showed 0.04 % net of D-SACKs). Between the two the signal
/// rises with the logarithm of the rate.
pub const LOSS_DECISIVE: f64 = 0.01;
pub const LOSS_NOISE: f64 = 0.0005;

/// How strongly a loss fraction (lost per sent) says loss limited the run: 0 to 1.
pub(crate) fn loss_signal(fraction: f64) -> f64 {
    if fraction <= LOSS_NOISE {
        return 0.0;
    }
    ((fraction / LOSS_NOISE).log10() / (LOSS_DECISIVE / LOSS_NOISE).log10()).clamp(0.0, 1.0)
}

/// A test that got this share of its own `--rate` ran at the rate it asked for: pacing
/// holds within 3 % of a tbf-measured rate (stream_netns' accuracy test).
pub const RATE_MET: f64 = 0.95;
/// Below this share of its rate something else held the test back; between the two the
/// finding's strength rises linearly.
pub const RATE_FLOOR: f64 = 0.85;

/// The test's own rate as a finding: `asked` per second, `got` per second, in `unit`.
pub(crate) fn rate_finding(asked: f64, got: f64, got_by: (End, Role), unit: &str) -> Finding {
    let share = got / asked;
    let who = match got_by.0 {
        End::Receiver => "receiver",
        _ => "sender",
    };
    Finding {
        verdict: Limit::TestRate,
        strength: ((share - RATE_FLOOR) / (RATE_MET - RATE_FLOOR)).clamp(0.0, 1.0),
        evidence: vec![
            Evidence::new(
                End::Test,
                None,
                "spec.rate",
                asked,
                unit,
                format!("--rate {}", per_second(asked, unit)),
            ),
            Evidence::new(
                got_by.0,
                Some(got_by.1),
                "rate",
                got,
                unit,
                format!(
                    "{who} ({}) got {} ({:.1} % of it)",
                    got_by.1.as_str(),
                    per_second(got, unit),
                    share * 100.0
                ),
            ),
        ],
    }
}

/// A rate in the unit a person reads: bit/s scaled to Mbit/s or Gbit/s, others as they are.
pub(crate) fn per_second(v: f64, unit: &str) -> String {
    match unit {
        "bit/s" if v >= 1e9 => format!("{:.2} Gbit/s", v / 1e9),
        "bit/s" => format!("{:.1} Mbit/s", v / 1e6),
        _ if v >= 1e6 => format!("{:.2} M{unit}", v / 1e6),
        _ => format!("{v:.0} {unit}"),
    }
}

/// The verdict on a document's run: `None` for a kind without one (load, watch), a run
/// with too little evidence, or one cut short before any window was measured.
pub fn judge(doc: &Document) -> Option<LimitedBy> {
    if let Some(s) = doc.end.stream() {
        return stream::judge(doc, s);
    }
    if let Some(r) = doc.end.rr() {
        return rr::judge(doc, r);
    }
    if let Some(p) = doc.end.pps() {
        return pps::judge(doc, p);
    }
    None
}

impl Evidence {
    pub(crate) fn new(
        end: End,
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
