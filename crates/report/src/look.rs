//! What the run layer's pipeline asks of the report: a test's heading, its live line, its
//! summary (each its kind's row's: `summary::row`), a run's name by its configuration, and the
//! table comparing several runs of one command.

use sonde_results::{Document, IntervalSample, TestSpec};

use crate::summary::{self, row};

/// The line a test starts with; `search` for a pps zero-loss search.
pub fn heading(spec: &TestSpec, path: &str, search: bool) -> String {
    (row(spec.test_name()).heading)(spec, path, search)
}

/// One interval of a running test, from both sides' samples.
pub fn live_line(
    spec: &TestSpec,
    client: Option<&IntervalSample>,
    server: Option<&IntervalSample>,
) -> String {
    (row(spec.test_name()).live)(spec, client, server)
}

/// The human summary of a finished test.
pub fn summary(doc: &Document) -> String {
    (row(doc.test).summary)(doc)
}

/// `stream -P 8 --bidir`: a run named by its configuration, the test's name and its
/// non-default flags (`config`).
pub fn config_name(spec: &TestSpec) -> String {
    let mut words = vec![spec.name().to_string()];
    words.extend(summary::flags(spec));
    words.join(" ")
}

/// Several documents of one command: by CPU latency limit for a C-state sweep, else by
/// receive mode.
pub fn comparison(docs: &[Document]) -> String {
    let swept = docs
        .iter()
        .any(|d| d.start.spec.execution().cpu_latency_us.is_some());
    if swept {
        summary::cstate_comparison(docs)
    } else {
        summary::poll_comparison(docs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonde_results::{Timing, WatchSpec};

    #[test]
    fn a_watch_heading_names_its_command_and_interface() {
        let spec = TestSpec::Watch(WatchSpec {
            command: vec!["fio".into(), "--rw=read".into()],
            iface: None,
            peer: None,
            timing: Timing {
                duration_ms: 0,
                warmup_ms: 0,
                cooldown_ms: 0,
                interval_ms: 500,
            },
            execution: Default::default(),
        });
        assert_eq!(
            heading(&spec, "", false),
            "sonde watch: fio --rw=read (interface none, every 0.5 s)"
        );
    }
}
