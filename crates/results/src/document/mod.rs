//! The result document (`--json`): one per test, versioned, shaped like iperf3's
//! `start` / `intervals` / `end` so that scripts can rely on it ([`Document`], in
//! `whole`). Built once from both sides' [`SideResult`](crate::side::SideResult)s; every
//! renderer reads this, none recomputes a figure. Each kind's module builds its section of
//! `end` ([`Section`]) and its intervals from the shared `parts`.
//!
//! This module is the results layer's table of kinds: each kind's document module is
//! declared here, beside its [`Section`] and its [`Row`], found from the document's or
//! spec's [`TestName`] by [`row`], the one match on every kind in this crate (the compiler
//! finds a kind without a row there). Each entry points at the kind's own code; what a
//! kind does not have is [`Row::new`]'s "nothing here". Everything generic reads a kind
//! through its row: building a document (`Document::build`), reading one back
//! ([`End::read`], [`IntervalFigures::read`]), the comparison's metrics
//! (`compare::metrics`), a load's figures of the tests it ran (`load::end_load`), and the
//! bound on what an agent may send (`sonde_proto`'s `bounds`). Nothing that this module
//! imports imports it back (`scripts/import-circles.py`): the readers (`whole`, `end`,
//! `load::assemble`, `compare`) import it, and it uses none of their names.
//!
//! A new kind, all in this file: `pub mod <kind>;`, its [`Section`] variant, its row and
//! its arm in [`row`] (and its `IntervalSection` variant in `interval`, if its intervals
//! have figures of their own).

mod end;
mod fleet_pair;
mod floor;
mod interval;
pub mod load;
mod parts;
pub(crate) mod pps;
pub(crate) mod rr;
mod rr_interval;
pub mod search;
pub mod stamp;
pub(crate) mod stream;
pub mod watch;
mod whole;

pub use end::{End, OneHost};
pub use fleet_pair::FleetPair;
pub use floor::{NoFloor, RrPrelude, SelfNoise};
pub use interval::{
    IntervalFigures, IntervalPair, IntervalSection, IntervalSide, PpsSideFigures, SideFigures,
    StreamSideFigures,
};
pub use parts::{ClientAgent, CpuFigures, HostCounted, Inputs, MeasuredBy, Prelude};
pub use pps::{JitterEnd, PacketsEnd, PpsEnd, PpsEndSide, SearchEnd, Trial};
pub use rr::{RrEnd, RrEndSide};
pub use rr_interval::RrInterval;
pub use stream::{ConnectionSpread, DirectionEnd, EndSide, Retransmits, StreamEnd};
pub use whole::{Document, LocalStart, Relayed, Start, SCHEMA_VERSION};

use serde::de::{DeserializeOwned, Error as _};
use serde::Serialize;
use serde_json::Value;

use self::load::{figures, LoadEnd, LoadFigures};
use self::stamp::StampEnd;
use self::watch::WatchEnd;
use crate::compare::metric::{self, Metric};
use crate::rpm::RpmEnd;
use crate::side::SampleSection;
use crate::spec::{TestName, TestSpec, MAX_CONNECTIONS};

/// A kind's own end figures, flattened into `end` beside the shared keys ([`End`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
// One per document, built once: a stream's and a pps test's sections are both ~4 KB, and
// boxing them would only move the same bytes.
#[allow(clippy::large_enum_variant)]
pub enum Section {
    Stream(StreamEnd),
    /// Ping and rpc.
    Rr(RrEnd),
    Pps(PpsEnd),
    Load {
        load: LoadEnd,
    },
    Watch {
        watch: WatchEnd,
    },
    Stamp {
        stamp: StampEnd,
    },
    Rpm {
        rpm: RpmEnd,
    },
}

/// A kind's intervals and section built from both sides' results.
pub type Build = fn(&Inputs<'_>) -> (Vec<IntervalFigures>, Section);

/// What the results layer does with one kind of test. Each entry is the kind's own code;
/// [`Row::new`] fills in "nothing here" for what a kind does not have.
pub struct Row {
    /// The kind's section of `end` with no figure yet.
    pub empty: fn() -> Section,
    /// `end`'s own keys of the kind (beside the shared ones), as JSON wrote them.
    pub read_end: fn(Value) -> serde_json::Result<Section>,
    /// Its intervals and section from both sides' results; `None`: not built from an
    /// agent's results (a load is assembled from its phases' documents, a watch and a
    /// STAMP run by their own modules in `sonde_run`), so `Document::build` leaves the
    /// section empty.
    pub build: Option<Build>,
    /// An interval's own keys of the kind (beside the span and the sides).
    pub read_interval: fn(Value) -> serde_json::Result<IntervalSection>,
    /// An interval side's own keys of the kind.
    pub read_side: fn(Value) -> serde_json::Result<SideFigures>,
    /// Both ends ran on one host: takes the host's CPU figures out of the section's sides,
    /// and gives the stream sender's cycles per byte, which then describe that host.
    pub take_host_cpu: fn(&mut Section) -> Option<f64>,
    /// The headline figures `sonde compare` compares, in the order a reader looks.
    pub metrics: fn(&Section) -> Vec<Metric>,
    /// What a test of the kind, run as a load's load, adds to the load's figures.
    pub load: fn(&Section) -> LoadFigures,
    /// The most connections an agent's interval sample may describe: the test's own.
    pub connections: fn(&TestSpec) -> u32,
    /// Whether an agent's interval sample is one this kind's test sends.
    pub sample: fn(&SampleSection) -> bool,
}

impl Row {
    /// A kind's row with what every kind has, its section, and nothing else: not built
    /// from an agent's results, no interval or side figures of its own (a side is read as
    /// a stream side's, which every field of defaults), no metric, nothing added to a load,
    /// no sample from an agent, and the most connections any test may open.
    pub const fn new(
        empty: fn() -> Section,
        read_end: fn(Value) -> serde_json::Result<Section>,
    ) -> Row {
        Row {
            empty,
            read_end,
            build: None,
            read_interval: |_| Ok(IntervalSection::Sides {}),
            read_side: |v| Ok(SideFigures::Stream(from(v)?)),
            take_host_cpu: |_| None,
            metrics: |_| Vec::new(),
            load: |_| LoadFigures::default(),
            connections: |_| MAX_CONNECTIONS,
            sample: |_| false,
        }
    }
}

/// The row of `test`: the one match on every kind in this crate.
pub fn row(test: TestName) -> &'static Row {
    match test {
        TestName::Stream => &STREAM,
        TestName::Ping => &PING,
        TestName::Rpc => &RPC,
        TestName::Pps => &PPS,
        TestName::Load => &LOAD,
        TestName::Watch => &WATCH,
        TestName::Stamp => &STAMP,
        TestName::Rpm => &RPM,
    }
}

const STREAM: Row = Row {
    build: Some(|inp| match inp.spec {
        TestSpec::Stream(s) => built(stream::build(s, inp), Section::Stream),
        _ => mismatch(inp),
    }),
    read_side: |v| Ok(SideFigures::Stream(from::<StreamSideFigures>(v)?)),
    take_host_cpu: |s| match s {
        Section::Stream(s) => s.clear_host_cpu(),
        _ => None,
    },
    metrics: |s| match s {
        Section::Stream(s) => metric::stream_metrics(s),
        _ => Vec::new(),
    },
    load: |s| match s {
        Section::Stream(s) => figures::stream(s),
        _ => LoadFigures::default(),
    },
    connections: |s| match s {
        TestSpec::Stream(s) => s.total_connections(),
        _ => MAX_CONNECTIONS,
    },
    sample: |s| matches!(s, SampleSection::Stream(_)),
    ..Row::new(
        || Section::Stream(StreamEnd::default()),
        |v| Ok(Section::Stream(from(v)?)),
    )
};

/// Ping and rpc share their section; a ping measures latency first, an rpc its rate first
/// (msg_gen's order).
const PING: Row = Row {
    build: Some(|inp| match inp.spec {
        TestSpec::Ping(r) | TestSpec::Rpc(r) => built(rr::build(r, inp), Section::Rr),
        _ => mismatch(inp),
    }),
    read_interval: |v| Ok(IntervalSection::Rr(from(v)?)),
    take_host_cpu: |s| {
        if let Section::Rr(r) = s {
            r.clear_host_cpu();
        }
        None
    },
    metrics: |s| match s {
        Section::Rr(r) => metric::rr_metrics(r, true),
        _ => Vec::new(),
    },
    load: |s| match s {
        Section::Rr(r) => figures::rr(r),
        _ => LoadFigures::default(),
    },
    connections: |s| match s {
        TestSpec::Ping(r) | TestSpec::Rpc(r) => r.connections,
        _ => MAX_CONNECTIONS,
    },
    sample: |s| matches!(s, SampleSection::Rr(_)),
    ..Row::new(
        || Section::Rr(RrEnd::default()),
        |v| Ok(Section::Rr(from(v)?)),
    )
};

const RPC: Row = Row {
    metrics: |s| match s {
        Section::Rr(r) => metric::rr_metrics(r, false),
        _ => Vec::new(),
    },
    ..PING
};

const PPS: Row = Row {
    build: Some(|inp| match inp.spec {
        TestSpec::Pps(p) => built(pps::build(p, inp), Section::Pps),
        _ => mismatch(inp),
    }),
    read_side: |v| Ok(SideFigures::Pps(from::<PpsSideFigures>(v)?)),
    take_host_cpu: |s| {
        if let Section::Pps(p) = s {
            p.clear_host_cpu();
        }
        None
    },
    metrics: |s| match s {
        Section::Pps(p) => p
            .packets
            .as_ref()
            .map_or_else(Vec::new, metric::pps_metrics),
        _ => Vec::new(),
    },
    load: |s| match s {
        Section::Pps(p) => figures::pps(p),
        _ => LoadFigures::default(),
    },
    connections: |s| match s {
        TestSpec::Pps(p) => p.flows,
        _ => MAX_CONNECTIONS,
    },
    sample: |s| matches!(s, SampleSection::Pps(_)),
    ..Row::new(
        || Section::Pps(PpsEnd::default()),
        |v| Ok(Section::Pps(from(v)?)),
    )
};

/// Run by the controller as tests of the other kinds (`document::load::build`).
const LOAD: Row = Row {
    read_interval: |v| {
        Ok(IntervalSection::Load {
            load: key(v, "load")?,
        })
    },
    metrics: |s| match s {
        Section::Load { load } => metric::load_metrics(load),
        _ => Vec::new(),
    },
    ..Row::new(
        || Section::Load {
            load: LoadEnd::default(),
        },
        |v| {
            Ok(Section::Load {
                load: key(v, "load")?,
            })
        },
    )
};

/// No agent, no traffic: the host evidence around a command (`sonde_run::watch`).
const WATCH: Row = Row {
    read_interval: |v| {
        Ok(IntervalSection::Watch {
            watch: key(v, "watch")?,
        })
    },
    ..Row::new(
        || Section::Watch {
            watch: WatchEnd::default(),
        },
        |v| {
            Ok(Section::Watch {
                watch: key(v, "watch")?,
            })
        },
    )
};

/// STAMP to any reflector (`sonde_run::stamp`): no agent at the far end.
const STAMP: Row = Row {
    read_interval: |v| {
        Ok(IntervalSection::Stamp {
            stamp: key(v, "stamp")?,
        })
    },
    metrics: |s| match s {
        Section::Stamp { stamp } => metric::stamp_metrics(stamp),
        _ => Vec::new(),
    },
    ..Row::new(
        || Section::Stamp {
            stamp: StampEnd::default(),
        },
        |v| {
            Ok(Section::Stamp {
                stamp: key(v, "stamp")?,
            })
        },
    )
};

impl Section {
    /// The section of `test` with no figure yet.
    pub fn empty(test: TestName) -> Section {
        (row(test).empty)()
    }
}

impl IntervalFigures {
    /// An interval of a document of `test`, as JSON wrote it.
    pub fn read(test: TestName, json: Value) -> serde_json::Result<IntervalFigures> {
        let r = row(test);
        IntervalFigures::read_with(json, r.read_interval, r.read_side)
    }
}

/// The most connections an agent's interval sample of a test of `spec` may describe.
pub fn connections(spec: &TestSpec) -> u32 {
    (row(spec.test_name()).connections)(spec)
}

/// Whether `sample` is one an agent running a test of `spec` sends.
pub fn sample_of(spec: &TestSpec, sample: &SampleSection) -> bool {
    (row(spec.test_name()).sample)(sample)
}

/// A kind's built intervals and end, its end as its section.
fn built<T>(
    (intervals, end): (Vec<IntervalFigures>, T),
    section: fn(T) -> Section,
) -> (Vec<IntervalFigures>, Section) {
    (intervals, section(end))
}

/// A row asked to build a spec of another kind: only a table that lists a kind under the
/// wrong name does; its section stays empty.
fn mismatch(inp: &Inputs<'_>) -> (Vec<IntervalFigures>, Section) {
    (Vec::new(), Section::empty(inp.spec.test_name()))
}

fn from<T: DeserializeOwned>(v: Value) -> serde_json::Result<T> {
    serde_json::from_value(v)
}

/// The value under `name` of an object (a section under its own key: `end.stamp`).
fn key<T: DeserializeOwned>(mut v: Value, name: &'static str) -> serde_json::Result<T> {
    match v.get_mut(name) {
        Some(inner) => from(inner.take()),
        None => Err(serde_json::Error::missing_field(name)),
    }
}

/// Responsiveness against any test endpoint (`sonde rpm`): no agent at the far end.
const RPM: Row = Row {
    metrics: |s| match s {
        Section::Rpm { rpm } => metric::rpm_metrics(rpm),
        _ => Vec::new(),
    },
    ..Row::new(
        || Section::Rpm {
            rpm: RpmEnd::default(),
        },
        |mut v| match v.get_mut("rpm") {
            Some(inner) => Ok(Section::Rpm {
                rpm: serde_json::from_value(inner.take())?,
            }),
            None => Err(serde::de::Error::missing_field("rpm")),
        },
    )
};

#[cfg(test)]
mod tests {
    use super::*;

    /// Each row's empty section is its own kind's, and reads back as written.
    #[test]
    fn every_rows_empty_section_reads_back_through_its_row() {
        for test in TestName::ALL {
            let end = End::new(false, None, Section::empty(test));
            let json = serde_json::to_value(&end).unwrap();
            let back = End::read(test, json).unwrap_or_else(|e| panic!("{test}: {e}"));
            assert_eq!(back, end, "{test}");
        }
    }

    /// A section under its own key that is missing is refused, naming the key.
    #[test]
    fn a_keyed_section_missing_is_refused_by_name() {
        let json = serde_json::json!({"partial": false, "error": null});
        for (test, name) in [
            (TestName::Load, "load"),
            (TestName::Watch, "watch"),
            (TestName::Stamp, "stamp"),
        ] {
            let err = End::read(test, json.clone()).unwrap_err().to_string();
            assert!(err.contains(&format!("missing field `{name}`")), "{err}");
        }
    }
}
