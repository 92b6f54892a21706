//! Human summaries of result documents, and the report layer's table of kinds: each test
//! kind's summary in its module, declared here beside its `Row`; the lab's, the store's
//! and the comparison's, which span kinds, in theirs.
//!
//! One `Row` per kind, found from the document's or spec's [`TestName`] by `row`, the
//! one match on every kind in this crate (the compiler finds a kind without a row there).
//! Each entry points at the kind's own renderer (its module here, its `config` flags, its
//! `openmetrics` gauges); what a kind does not have is `Row::new`'s "nothing here".
//! Everything generic reads a kind through its row: the heading, live line and summary
//! (`look`), a run's name by its configuration (`look::config_name`), the store's list
//! (`store`), the OpenMetrics gauges (`openmetrics::gauges`), a published report's tables
//! (`published::summary`) and whether a run is judged (`html::limits`). Nothing that this
//! module imports imports it back (`scripts/import-circles.py`): the readers import it.
//!
//! A new kind, all in this file: `pub(crate) mod <kind>;`, its row and its arm in `row`.

mod common;
mod lab;
pub(crate) mod load;
pub(crate) mod pps;
pub(crate) mod rpm;
pub(crate) mod rr;
mod stages;
pub(crate) mod stamp;
mod store;
pub(crate) mod stream;
pub(crate) mod watch;

pub use lab::lab;
pub use load::{load, load_heading};
pub use pps::{pps, pps_heading, trial_line};
pub use rpm::{rpm, rpm_heading};
pub use rr::{cstate_comparison, poll_comparison, rr, rr_heading};
pub use stamp::{loss_words, stamp, stamp_heading};
pub use store::{comparison, runs, LIST_WIDTH};
pub use stream::{stream, stream_heading};
pub use watch::watch;

use sonde_results::document::End;
use sonde_results::spec::TestName;
use sonde_results::{Document, IntervalSample, TestSpec};

use crate::openmetrics::figures::{self, Gauges};
use crate::{config, live};

type Sample<'a> = Option<&'a IntervalSample>;

/// What the report layer does with one kind of test. Each entry is the kind's own code;
/// [`Row::new`] fills in "nothing here" for what a kind does not have.
pub(crate) struct Row {
    /// The line a test starts with, given the target it measures (`path`) and whether a
    /// pps run is a zero-loss search.
    pub heading: fn(&TestSpec, &str, bool) -> String,
    /// The human summary of a finished test.
    pub summary: fn(&Document) -> String,
    /// One interval of a running test, from both sides' samples (of a test an agent takes
    /// part in).
    pub live: fn(&TestSpec, Sample<'_>, Sample<'_>) -> String,
    /// The run's one figure in `sonde results list`.
    pub listed: fn(&End) -> String,
    /// The flags of the run's configuration that differ from the defaults, in CLI spelling
    /// (`look::config_name` puts the test's name before them).
    pub flags: fn(&TestSpec) -> Vec<String>,
    /// The run's own gauge figures in OpenMetrics (throughput, RTT, loss).
    pub gauges: fn(&Document, &mut Gauges),
    /// The run is a pair's figure: the OpenMetrics backfill exports it.
    pub paired: bool,
    /// Its table's title in a published report's summary (`published::summary`).
    pub title: &'static str,
    /// A run of the kind is judged for what limited it (`end.limited_by`); else a report
    /// says it names no single limit (`html::limits`).
    pub judged: bool,
}

impl Row {
    /// A kind's row with what every kind has, its heading, summary and title, and nothing
    /// else: a request/response live line, no figure in the store's list ("-"), no flags,
    /// no gauge, a pair's figure, not judged.
    pub(crate) const fn new(
        heading: fn(&TestSpec, &str, bool) -> String,
        summary: fn(&Document) -> String,
        title: &'static str,
    ) -> Row {
        Row {
            heading,
            summary,
            title,
            judged: false,
            live: |_, c, s| live::rr_line(c, s),
            listed: |_| "-".into(),
            flags: |_| Vec::new(),
            gauges: |_, _| {},
            paired: true,
        }
    }
}

/// The row of `test`: the one match on every kind in this crate.
pub(crate) fn row(test: TestName) -> &'static Row {
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

/// The flags of `spec`'s configuration that differ from the defaults (its row's).
/// The marks (`--dscp`, `--ecn`, `--control-dscp`) are every kind's: added here, once.
pub(crate) fn flags(spec: &TestSpec) -> Vec<String> {
    let mut flags = (row(spec.test_name()).flags)(spec);
    flags.extend(config::marks(&spec.execution().marks));
    flags
}

const STREAM: Row = Row {
    live: |spec, c, s| match spec {
        TestSpec::Stream(st) => live::line(st.direction, c, s),
        _ => live::rr_line(c, s),
    },
    listed: stream::listed,
    flags: |spec| match spec {
        TestSpec::Stream(s) => config::stream(s),
        _ => Vec::new(),
    },
    gauges: figures::stream,
    judged: true,
    ..Row::new(
        |spec, path, _| match spec {
            TestSpec::Stream(st) => stream::stream_heading(st, path),
            _ => String::new(),
        },
        stream::stream,
        "TCP stream",
    )
};

const PING: Row = Row {
    listed: rr::listed,
    flags: |spec| match spec {
        TestSpec::Ping(r) => config::rr(r, false),
        _ => Vec::new(),
    },
    gauges: figures::rr,
    judged: true,
    ..Row::new(|spec, path, _| rr::rr_heading(spec, path), rr::rr, "Ping")
};

const RPC: Row = Row {
    title: "Request/response (rpc)",
    flags: |spec| match spec {
        TestSpec::Rpc(r) => config::rr(r, true),
        _ => Vec::new(),
    },
    ..PING
};

const PPS: Row = Row {
    live: |_, c, s| live::pps_line(c, s),
    listed: pps::listed,
    flags: |spec| match spec {
        TestSpec::Pps(p) => config::pps(p),
        _ => Vec::new(),
    },
    gauges: figures::pps,
    judged: true,
    ..Row::new(
        |spec, path, search| match spec {
            TestSpec::Pps(p) => pps::pps_heading(p, path, search),
            _ => String::new(),
        },
        pps::pps,
        "UDP packet rate (pps)",
    )
};

const LOAD: Row = Row {
    flags: |spec| match spec {
        TestSpec::Load(l) => match l.load.as_ref() {
            // A stream load is the default: its flags say enough (`load -P 4`).
            TestSpec::Stream(s) => config::stream(s),
            other => {
                let mut w = vec![other.name().to_string()];
                w.extend(flags(other));
                w
            }
        },
        _ => Vec::new(),
    },
    paired: false,
    ..Row::new(
        |spec, path, _| match spec {
            TestSpec::Load(l) => load::load_heading(l, path),
            _ => String::new(),
        },
        load::load,
        "Latency under load",
    )
};

const WATCH: Row = Row {
    flags: |spec| match spec {
        TestSpec::Watch(w) => w.command.clone(),
        _ => Vec::new(),
    },
    paired: false,
    ..Row::new(
        |spec, _, _| match spec {
            TestSpec::Watch(w) => watch::watch_heading(w),
            _ => String::new(),
        },
        watch::watch,
        "Watched commands",
    )
};

const STAMP: Row = Row {
    listed: stamp::listed,
    flags: |spec| match spec {
        TestSpec::Stamp(s) => config::stamp(s),
        _ => Vec::new(),
    },
    gauges: figures::stamp,
    ..Row::new(
        |spec, _, _| match spec {
            TestSpec::Stamp(s) => stamp::stamp_heading(s),
            _ => String::new(),
        },
        stamp::stamp,
        "STAMP (RFC 8762)",
    )
};

/// Responsiveness against any test endpoint: no agent, no live line of its own.
const RPM: Row = Row {
    listed: rpm::listed,
    gauges: figures::rpm,
    judged: true,
    ..Row::new(
        |spec, _, _| match spec {
            TestSpec::Rpm(r) => rpm::rpm_heading(r),
            _ => String::new(),
        },
        rpm::rpm,
        "Responsiveness (IETF IPPM draft)",
    )
};

#[cfg(test)]
mod tests {
    use super::*;
    use sonde_results::Timing;

    /// Every kind has a table of its own in a published report: a title, none twice.
    #[test]
    fn every_kind_is_published_under_its_own_title() {
        let titles: Vec<&str> = TestName::ALL.iter().map(|&t| row(t).title).collect();
        let mut distinct = titles.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), titles.len(), "{titles:?}");
        assert!(titles.iter().all(|t| !t.is_empty()));
        assert_eq!(row(TestName::Stamp).title, "STAMP (RFC 8762)");
        // Judged: the kinds `results::limit::judge` has rules for.
        let judged: Vec<TestName> = TestName::ALL
            .into_iter()
            .filter(|&t| row(t).judged)
            .collect();
        assert_eq!(
            judged,
            [
                TestName::Stream,
                TestName::Ping,
                TestName::Rpc,
                TestName::Pps,
                TestName::Rpm
            ]
        );
    }

    /// Every kind's row renders its own spec's heading (none is the empty "not mine").
    #[test]
    fn every_kind_has_a_heading_of_its_own() {
        let specs = [
            TestSpec::Stream(Default::default()),
            TestSpec::Ping(Default::default()),
            TestSpec::Rpc(Default::default()),
            TestSpec::Pps(Default::default()),
            TestSpec::Load(Default::default()),
            TestSpec::Watch(sonde_results::WatchSpec {
                command: vec!["true".into()],
                iface: None,
                peer: None,
                timing: Timing::measuring(1_000),
                execution: Default::default(),
            }),
            TestSpec::Stamp(crate::fixtures::stamp_spec()),
        ];
        for spec in specs {
            let h = (row(spec.test_name()).heading)(&spec, "198.18.0.2", false);
            assert!(!h.is_empty(), "{}", spec.name());
        }
    }
}
