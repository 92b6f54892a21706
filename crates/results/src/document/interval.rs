//! `intervals`: what every kind's interval figures share (the span, each direction's sides,
//! the hosts' CPU) and one typed section per kind, produced by the kind's module. The
//! sections are flattened, so every JSON key stays where schema version 1 put it; reading
//! one back needs the document's `test` to know which section to expect
//! ([`IntervalFigures::read`], through the kind's row in `document`), as for `end`.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::load::LoadInterval;
use super::rr_interval::RrInterval;
use super::stamp::StampInterval;
use super::watch::WatchInterval;
use crate::side::{IntervalSample, Role};
use crate::tcp::TcpSample;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IntervalFigures {
    pub start_s: f64,
    pub end_s: f64,
    pub sender: Option<IntervalSide>,
    pub receiver: Option<IntervalSide>,
    /// The agent-to-controller direction of a bidirectional test.
    pub reverse: Option<IntervalPair>,
    #[serde(flatten)]
    pub section: IntervalSection,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_cpu_busy_percent: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_cpu_busy_percent: Option<f64>,
}

/// A kind's own figures of one interval.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum IntervalSection {
    /// Stream and pps: their own figures are their sides' ([`SideFigures`]).
    Sides {},
    /// Ping and rpc: the client's rate and latency.
    Rr(RrInterval),
    /// Load tests: the phase, both pings and the load.
    Load { load: LoadInterval },
    /// Watches: the host evidence of the interval.
    Watch { watch: WatchInterval },
    /// STAMP runs: the packets sent in the interval and their answers.
    Stamp { stamp: StampInterval },
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IntervalPair {
    pub sender: Option<IntervalSide>,
    pub receiver: Option<IntervalSide>,
}

/// One side's view of one interval of one direction.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IntervalSide {
    pub measured_by: Role,
    pub bytes: u64,
    pub bits_per_second: f64,
    pub cpu_busy_percent: Option<f64>,
    #[serde(flatten)]
    pub section: SideFigures,
    /// This side's interval was cut short by the end of the test.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub partial: bool,
}

/// A kind's own figures of one side of one interval.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum SideFigures {
    Stream(StreamSideFigures),
    Pps(PpsSideFigures),
}

/// A stream side's interval: TCP_INFO of each connection this side moved the bytes of, as
/// it read them (so a reverse test's sender series come from the agent).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StreamSideFigures {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tcp: Vec<TcpSample>,
}

/// A packet-rate side's interval.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PpsSideFigures {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packets_per_second: Option<f64>,
    /// The receiver's, with `--dscp`/`--ecn`: this interval's datagrams sent as X and
    /// arrived as Y, and its CE marks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub marks: Option<Box<crate::marks::DirectionFate>>,
    /// The receiver's, where datagrams carry their send time (iperf3's): the flows' mean
    /// interarrival jitter at the interval's end (RFC 3550), milliseconds; measured by
    /// this side (`measured_by`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter_ms: Option<f64>,
}

impl IntervalFigures {
    /// An interval from `start_s` to `end_s` with no figure yet, of a kind whose figures
    /// are its sides'.
    pub fn span(start_s: f64, end_s: f64) -> IntervalFigures {
        IntervalFigures {
            start_s,
            end_s,
            sender: None,
            receiver: None,
            reverse: None,
            section: IntervalSection::Sides {},
            client_cpu_busy_percent: None,
            server_cpu_busy_percent: None,
        }
    }

    /// Ping and rpc: the client's rate and latency of the interval.
    pub fn rr(&self) -> Option<&RrInterval> {
        match &self.section {
            IntervalSection::Rr(r) => Some(r),
            _ => None,
        }
    }

    pub fn load(&self) -> Option<&LoadInterval> {
        match &self.section {
            IntervalSection::Load { load } => Some(load),
            _ => None,
        }
    }

    pub fn watch(&self) -> Option<&WatchInterval> {
        match &self.section {
            IntervalSection::Watch { watch } => Some(watch),
            _ => None,
        }
    }

    pub fn stamp(&self) -> Option<&StampInterval> {
        match &self.section {
            IntervalSection::Stamp { stamp } => Some(stamp),
            _ => None,
        }
    }

    /// An interval as JSON wrote it, its own figures read by `section` and its sides' by
    /// `side` (the kind's row's readers: `IntervalFigures::read`).
    pub(crate) fn read_with(
        json: Value,
        section: fn(Value) -> serde_json::Result<IntervalSection>,
        side: fn(Value) -> serde_json::Result<SideFigures>,
    ) -> serde_json::Result<IntervalFigures> {
        let w: Wire = serde_json::from_value(json)?;
        let side = |s: Option<SideWire>| s.map(|s| s.read(side)).transpose();
        let reverse = match w.reverse {
            Some(p) => Some(IntervalPair {
                sender: side(p.sender)?,
                receiver: side(p.receiver)?,
            }),
            None => None,
        };
        let rest = Value::Object(w.rest);
        Ok(IntervalFigures {
            start_s: w.start_s,
            end_s: w.end_s,
            sender: side(w.sender)?,
            receiver: side(w.receiver)?,
            reverse,
            section: section(rest)?,
            client_cpu_busy_percent: w.client_cpu_busy_percent,
            server_cpu_busy_percent: w.server_cpu_busy_percent,
        })
    }
}

impl IntervalSide {
    /// A stream side: TCP_INFO of its connections (none for other kinds).
    pub fn tcp(&self) -> &[TcpSample] {
        match &self.section {
            SideFigures::Stream(s) => &s.tcp,
            SideFigures::Pps(_) => &[],
        }
    }

    /// A packet-rate side: its packets per second.
    pub fn packets_per_second(&self) -> Option<f64> {
        match &self.section {
            SideFigures::Pps(p) => p.packets_per_second,
            SideFigures::Stream(_) => None,
        }
    }
}

/// An interval as written: the shared keys, and the kind's own ones left in `rest`.
#[derive(Deserialize)]
struct Wire {
    start_s: f64,
    end_s: f64,
    sender: Option<SideWire>,
    receiver: Option<SideWire>,
    reverse: Option<PairWire>,
    #[serde(default)]
    client_cpu_busy_percent: Option<f64>,
    #[serde(default)]
    server_cpu_busy_percent: Option<f64>,
    #[serde(flatten)]
    rest: Map<String, Value>,
}

#[derive(Deserialize)]
struct PairWire {
    sender: Option<SideWire>,
    receiver: Option<SideWire>,
}

#[derive(Deserialize)]
struct SideWire {
    measured_by: Role,
    bytes: u64,
    bits_per_second: f64,
    cpu_busy_percent: Option<f64>,
    #[serde(default)]
    partial: bool,
    #[serde(flatten)]
    rest: Map<String, Value>,
}

impl SideWire {
    /// This side with its kind's figures, read by `figures`.
    fn read(
        self,
        figures: fn(Value) -> serde_json::Result<SideFigures>,
    ) -> serde_json::Result<IntervalSide> {
        let rest = Value::Object(self.rest);
        Ok(IntervalSide {
            measured_by: self.measured_by,
            bytes: self.bytes,
            bits_per_second: self.bits_per_second,
            cpu_busy_percent: self.cpu_busy_percent,
            section: figures(rest)?,
            partial: self.partial,
        })
    }
}

/// Both sides' interval samples paired by index, with the interval's span; a side that
/// stopped early leaves `None`s.
pub(super) fn paired<'a>(
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
