//! Which renderer speaks for which kind: a test's heading, its live line, its summary, and
//! the table comparing several runs of one command. The run layer's pipeline asks for
//! these by kind; this is the one place that answers.

use sonde_results::{Document, IntervalSample, TestSpec};

use crate::{live, summary};

/// The line a test starts with; `search` for a pps zero-loss search.
pub fn heading(spec: &TestSpec, path: &str, search: bool) -> String {
    match spec {
        TestSpec::Stream(st) => summary::stream_heading(st, path),
        TestSpec::Ping(_) | TestSpec::Rpc(_) => summary::rr_heading(spec, path),
        TestSpec::Pps(p) => summary::pps_heading(p, path, search),
        TestSpec::Load(l) => summary::load_heading(l, path),
        TestSpec::Watch(w) => format!(
            "sonde watch: {} (interface {}, every {:.1} s)",
            w.command.join(" "),
            w.iface.as_deref().unwrap_or("none"),
            w.timing.interval_ms as f64 / 1e3
        ),
        TestSpec::Stamp(s) => summary::stamp_heading(s),
    }
}

/// One interval of a running test, from both sides' samples.
pub fn live_line(
    spec: &TestSpec,
    client: Option<&IntervalSample>,
    server: Option<&IntervalSample>,
) -> String {
    match spec {
        TestSpec::Stream(st) => live::line(st.direction, client, server),
        TestSpec::Pps(_) => live::pps_line(client, server),
        _ => live::rr_line(client, server),
    }
}

/// The human summary of a finished test.
pub fn summary(doc: &Document) -> String {
    match &doc.start.spec {
        TestSpec::Stream(_) => summary::stream(doc),
        TestSpec::Ping(_) | TestSpec::Rpc(_) => summary::rr(doc),
        TestSpec::Pps(_) => summary::pps(doc),
        TestSpec::Load(_) => summary::load(doc),
        TestSpec::Watch(_) => summary::watch(doc),
        TestSpec::Stamp(_) => summary::stamp(doc),
    }
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
