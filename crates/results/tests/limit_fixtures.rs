//! The verdict rules on documents captured from real runs with a planted bottleneck (veth
//! pairs and a router namespace on a 2-vCPU VM; `bench/limit_evidence.py` plants them):
//! tbf shapers on the sender and in the router, small socket buffers, nftables drops, a
//! CPU hog on the receiver's core, the test's own rate, a pps receiver with one thread
//! and a small buffer; and an rpm run (`sonde rpm` against `serve --rpm`) on the loopback
//! of a namespace of its own through a 40 Mbit/s tbf with a 120 kB queue, whose load in
//! either direction queued its probes 33 ms: the network's (the upload's, the longer by
//! 0.8 ms). `fixtures/limit/verdicts.json` names the limit each run had. Each
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
