//! The verdict rules on documents captured from real runs with a planted bottleneck (veth
//! pairs and a router namespace on a 2-vCPU VM; `bench/limit_evidence.py` plants them):
//! tbf shapers on the sender and in the router, small socket buffers, nftables drops, a
//! CPU hog on the receiver's core, the test's own rate, a pps receiver with one thread
//! and a small buffer; and an rpm run (`sonde rpm` against `serve --rpm`) on the loopback
//! of a namespace of its own through a 40 Mbit/s tbf with a 120 kB queue, whose load in
//! either direction queued its probes 33 ms: the network's (the upload's, the longer by
//! 0.8 ms); and from limit_netns, a busy loop (nice 19, nice 0) on the receiver's core
//! behind a 100 Mbit/s shaper, and two on it with no shaper, with the workers' scheduler
//! figures (`cpu.workers`). `fixtures/limit/verdicts.json` names the limit each run had. Each
//! file is the run's `--json` document with the host inventory and histograms cut out
//! and its own verdict removed, so the rules of today judge it.

use std::collections::BTreeMap;
use std::path::Path;

use sonde_results::limit::{judge, Limit};
use sonde_results::Document;

fn fixtures() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/limit"))
}

#[test]
fn each_planted_bottleneck_is_named() {
    let want: BTreeMap<String, Limit> =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join("verdicts.json")).unwrap())
            .unwrap();
    assert!(want.len() >= 10);
    let mut wrong = Vec::new();
    for (name, limit) in &want {
        let text = std::fs::read_to_string(fixtures().join(format!("{name}.json"))).unwrap();
        let doc: Document = serde_json::from_str(&text).unwrap();
        assert!(
            doc.end.limited_by.is_none(),
            "{name}: its verdict was cut out"
        );
        let v = judge(&doc).unwrap_or_else(|| panic!("{name}: no verdict"));
        if v.verdict != *limit {
            wrong.push(format!("{name}: {} ({})", v.verdict, v.sentence()));
        }
        for e in &v.evidence {
            assert!(!e.text.is_empty() && !e.unit.is_empty(), "{name}: {e:?}");
        }
    }
    assert!(wrong.is_empty(), "misjudged: {wrong:#?}");
}

/// The runs whose receiver core a busy loop kept busy behind a 100 Mbit/s shaper were
/// judged the network only by their workers' own scheduler figures (`cpu.workers`): the
/// same documents without them, as an older sonde wrote them, say receiver_cpu, as
/// before. A starved receiver (two busy loops, no shaper) is its CPU either way.
#[test]
fn the_workers_scheduler_figures_decide_a_busy_core() {
    for (name, with, without) in [
        (
            "busy-core-nice0-tbf-100mbit",
            Limit::Network,
            Limit::ReceiverCpu,
        ),
        (
            "busy-core-nice19-tbf-100mbit",
            Limit::Network,
            Limit::ReceiverCpu,
        ),
        (
            "cpu-hog-2hogs-schedstat",
            Limit::ReceiverCpu,
            Limit::ReceiverCpu,
        ),
    ] {
        let text = std::fs::read_to_string(fixtures().join(format!("{name}.json"))).unwrap();
        let mut doc: Document = serde_json::from_str(&text).unwrap();
        assert_eq!(judge(&doc).unwrap().verdict, with, "{name}");
        let mut json: serde_json::Value = serde_json::from_str(&text).unwrap();
        let cpu = &mut json["end"]["receiver"]["cpu"];
        assert!(cpu["workers"].is_array(), "{name}: {cpu}");
        cpu.as_object_mut().unwrap().remove("workers");
        doc = serde_json::from_value(json).unwrap();
        assert_eq!(
            judge(&doc).unwrap().verdict,
            without,
            "{name} without cpu.workers"
        );
    }
}
