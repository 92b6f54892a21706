//! Documents written by the build before each kind's results became their own section of
//! `end` (issue 29): every one still loads, into the section its `test` names, and is
//! written back as the same JSON, so stores and `sonde results import` keep working.

use sonde_results::document::Section;
use sonde_results::spec::TestName;
use sonde_results::Document;

/// Whether a section is the one a fixture should load into, with its figures.
type Expected = fn(&Section) -> bool;

/// Each fixture, the test it names, and its section.
const FIXTURES: &[(&str, TestName, Expected)] = &[
    (
        "v1-stream.json",
        TestName::Stream,
        |s| matches!(s, Section::Stream(e) if e.sender.is_some() && e.reverse.is_none()),
    ),
    (
        "v1-bidir.json",
        TestName::Stream,
        |s| matches!(s, Section::Stream(e) if e.reverse.is_some()),
    ),
    (
        "v1-ping-udp.json",
        TestName::Ping,
        |s| matches!(s, Section::Rr(e) if e.latency_ns.is_some() && e.late_replies.is_some()),
    ),
    (
        "v1-rpc.json",
        TestName::Rpc,
        |s| matches!(s, Section::Rr(e) if e.requests_per_second.is_some()),
    ),
    (
        "v1-pps.json",
        TestName::Pps,
        |s| matches!(s, Section::Pps(e) if e.receiver.is_some() && e.packets.is_some()),
    ),
    (
        "v1-pps-search.json",
        TestName::Pps,
        |s| matches!(s, Section::Pps(e) if e.search.as_ref().is_some_and(|s| !s.trials.is_empty())),
    ),
    (
        "v1-load.json",
        TestName::Load,
        |s| matches!(s, Section::Load { load } if !load.phases.is_empty()),
    ),
    (
        "v1-watch.json",
        TestName::Watch,
        |s| matches!(s, Section::Watch { watch } if watch.exit_code == Some(0)),
    ),
];

fn fixture(name: &str) -> String {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn old_documents_load_into_their_section() {
    for (name, test, expected) in FIXTURES {
        let doc: Document =
            serde_json::from_str(&fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(doc.test, *test, "{name}");
        assert!(expected(&doc.end.section), "{name}: {:?}", doc.end.section);
    }
}

#[test]
fn old_documents_are_written_back_unchanged() {
    for (name, _, _) in FIXTURES {
        let text = fixture(name);
        let before: serde_json::Value = serde_json::from_str(&text).unwrap();
        let doc: Document = serde_json::from_str(&text).unwrap();
        let after = serde_json::to_value(&doc).unwrap();
        assert_eq!(before, after, "{name}");
    }
}

#[test]
fn keys_in_any_order_still_load() {
    // `end` before `test`: the section is chosen once the whole document is read.
    let mut v: serde_json::Value = serde_json::from_str(&fixture("v1-pps.json")).unwrap();
    let end = v.as_object_mut().unwrap().remove("end").unwrap();
    let mut reordered = serde_json::Map::new();
    reordered.insert("end".into(), end);
    reordered.extend(v.as_object().unwrap().clone());
    let doc: Document = serde_json::from_value(serde_json::Value::Object(reordered)).unwrap();
    assert!(matches!(doc.end.section, Section::Pps(_)));
}
