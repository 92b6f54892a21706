//! Documents written by earlier builds: `v1-*` before each kind's results became their own
//! section of `end` (issue 29), `v2-*` by the build before the interval figures became a
//! shared part and a section per kind (262f79e, `bench/doc_keys.py`'s runs: every kind,
//! the xdp and uring engines, a floor, a search, a fleet pair). Every one still loads,
//! into the sections its `test` names, and is written back as the same JSON (a key renamed
//! since under its new name: [`RENAMED`]), so stores and `sonde results import` keep
//! working. `v2-stamp.json` is a STAMP run of 0103d00, its one-way figures as `one_way`.

use sonde_results::document::Section;
use sonde_results::spec::TestName;
use sonde_results::Document;

/// Whether a document loaded into the sections it should, with their figures.
type Expected = fn(&Document) -> bool;

/// Each fixture, the test it names, and its section.
const FIXTURES: &[(&str, TestName, Expected)] = &[
    (
        "v1-stream.json",
        TestName::Stream,
        |d| matches!(&d.end.section, Section::Stream(e) if e.sender.is_some() && e.reverse.is_none()),
    ),
    (
        "v1-bidir.json",
        TestName::Stream,
        |d| matches!(&d.end.section, Section::Stream(e) if e.reverse.is_some()),
    ),
    (
        "v1-ping-udp.json",
        TestName::Ping,
        |d| matches!(&d.end.section, Section::Rr(e) if e.latency_ns.is_some() && e.late_replies.is_some()),
    ),
    (
        "v1-rpc.json",
        TestName::Rpc,
        |d| matches!(&d.end.section, Section::Rr(e) if e.requests_per_second.is_some()),
    ),
    (
        "v1-pps.json",
        TestName::Pps,
        |d| matches!(&d.end.section, Section::Pps(e) if e.receiver.is_some() && e.packets.is_some()),
    ),
    (
        "v1-pps-search.json",
        TestName::Pps,
        |d| matches!(&d.end.section, Section::Pps(e) if e.search.as_ref().is_some_and(|s| !s.trials.is_empty())),
    ),
    (
        "v1-load.json",
        TestName::Load,
        |d| matches!(&d.end.section, Section::Load { load } if !load.phases.is_empty()),
    ),
    (
        "v1-watch.json",
        TestName::Watch,
        |d| matches!(&d.end.section, Section::Watch { watch } if watch.exit_code == Some(0)),
    ),
    ("v2-stream.json", TestName::Stream, |d| {
        d.intervals
            .iter()
            .all(|i| i.sender.as_ref().is_some_and(|s| !s.tcp().is_empty()))
    }),
    ("v2-bidir.json", TestName::Stream, |d| {
        d.intervals
            .iter()
            .all(|i| i.reverse.as_ref().is_some_and(|r| r.receiver.is_some()))
    }),
    ("v2-ping-udp.json", TestName::Ping, |d| {
        d.intervals
            .iter()
            .all(|i| i.rr().is_some_and(|r| r.latency_ns.is_some()))
    }),
    // --stages with the echo's clock shifted 1.234 ms (the test hook): each interval's
    // directions, and the offset the exchange found.
    ("v2-ping-oneway.json", TestName::Ping, |d| {
        let end = d.end.rr().and_then(|r| r.oneway.as_deref());
        let found = end.and_then(|o| o.offset_ns).unwrap_or(0.0);
        (found - 1_234_000.0).abs() < 10_000.0
            && d.intervals
                .iter()
                .all(|i| i.rr().is_some_and(|r| r.oneway.is_some()))
    }),
    ("v2-rpc.json", TestName::Rpc, |d| {
        d.intervals
            .iter()
            .all(|i| i.rr().is_some_and(|r| r.requests_per_second > Some(0.0)))
    }),
    ("v2-pps-xdp.json", TestName::Pps, |d| {
        d.end
            .pps()
            .is_some_and(|p| p.sender.as_ref().is_some_and(|s| s.by.bypass.is_some()))
            && d.intervals.iter().all(|i| {
                i.receiver
                    .as_ref()
                    .is_some_and(|r| r.packets_per_second().is_some())
            })
    }),
    ("v2-ping-floor.json", TestName::Ping, |d| {
        d.end.rr().is_some_and(|r| r.self_noise.is_some())
    }),
    ("v2-pps-search.json", TestName::Pps, |d| {
        d.end
            .pps()
            .and_then(|p| p.search.as_ref())
            .is_some_and(|s| !s.trials.is_empty())
    }),
    ("v2-load.json", TestName::Load, |d| {
        !d.intervals.is_empty() && d.intervals.iter().all(|i| i.load().is_some())
    }),
    ("v2-watch.json", TestName::Watch, |d| {
        !d.intervals.is_empty() && d.intervals.iter().all(|i| i.watch().is_some())
    }),
    ("v2-fleet-stream.json", TestName::Stream, |d| {
        d.start.fleet.is_some() && d.start.client_agent.is_some()
    }),
    // A stateful STAMP run on one host (0103d00): its one-way figures under the name of
    // that build, `end.stamp.one_way`, read into `oneway`.
    ("v2-stamp.json", TestName::Stamp, |d| {
        d.end.stamp().is_some_and(|s| {
            s.oneway.as_ref().is_some_and(|o| o.exchanges == 30) && s.lost_forward == Some(0)
        }) && d.intervals.iter().all(|i| i.stamp().is_some())
    }),
];

/// Keys renamed since a fixture was written, as `(object path, old, new)`: written back
/// under the new name, with nothing else changed. Issue 53: one-way figures are `oneway`
/// in every document.
const RENAMED: &[(&[&str], &str, &str)] = &[(&["end", "stamp"], "one_way", "oneway")];

/// `doc` as this build writes it: each renamed key under its new name, in place.
fn renamed(mut doc: serde_json::Value) -> serde_json::Value {
    for (path, old, new) in RENAMED {
        let mut at = Some(&mut doc);
        for key in *path {
            at = at.and_then(|v| v.get_mut(*key));
        }
        if let Some(obj) = at.and_then(|v| v.as_object_mut()) {
            if let Some(v) = obj.remove(*old) {
                obj.insert(new.to_string(), v);
            }
        }
    }
    doc
}

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
        assert!(expected(&doc), "{name}: {:?}", doc.end.section);
    }
}

#[test]
fn old_documents_are_written_back_unchanged() {
    for (name, _, _) in FIXTURES {
        let text = fixture(name);
        let before: serde_json::Value = serde_json::from_str(&text).unwrap();
        let doc: Document = serde_json::from_str(&text).unwrap();
        let after = serde_json::to_value(&doc).unwrap();
        assert_eq!(renamed(before), after, "{name}");
    }
}

/// One name for one-way figures in every document: a STAMP run's are written as
/// `end.stamp.oneway`, as a ping's are `end.oneway`; the old `one_way` is read, not written.
#[test]
fn one_way_figures_are_oneway_in_every_document_and_the_old_name_still_reads() {
    let stamp =
        serde_json::to_value(serde_json::from_str::<Document>(&fixture("v2-stamp.json")).unwrap())
            .unwrap();
    let text = fixture("v2-stamp.json");
    assert!(text.contains("\"one_way\""), "the fixture has the old name");
    assert!(stamp["end"]["stamp"]["oneway"]["forward_ns"]["p50"].is_u64());
    assert!(stamp["end"]["stamp"].get("one_way").is_none());
    let ping = serde_json::to_value(
        serde_json::from_str::<Document>(&fixture("v2-ping-oneway.json")).unwrap(),
    )
    .unwrap();
    assert!(ping["end"]["oneway"]["forward_ns"]["p50"].is_u64());
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

#[test]
fn a_floor_and_its_spec_round_trip_and_are_absent_without_it() {
    use sonde_results::document::SelfNoise;
    use sonde_results::TestSpec;
    let mut doc: Document = serde_json::from_str(&fixture("v1-ping-udp.json")).unwrap();
    let rtt = doc.end.rr().unwrap().latency_ns.clone().unwrap();
    let Section::Rr(rr) = &mut doc.end.section else {
        unreachable!("a ping")
    };
    rr.self_noise = Some(SelfNoise {
        socket: "unix_seqpacket".into(),
        seconds: 1.0,
        messages: rtt.count,
        latency_ns: rtt,
    });
    let TestSpec::Ping(spec) = &mut doc.start.spec else {
        unreachable!("a ping")
    };
    spec.self_noise_ms = Some(1000);
    let text = serde_json::to_string(&doc).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["end"]["self_noise"]["socket"], "unix_seqpacket");
    assert_eq!(v["start"]["spec"]["self_noise_ms"], 1000);
    assert_eq!(serde_json::from_str::<Document>(&text).unwrap(), doc);
    // The fixture itself has neither key, and writing it back adds none.
    let plain = serde_json::to_string(
        &serde_json::from_str::<Document>(&fixture("v1-ping-udp.json")).unwrap(),
    )
    .unwrap();
    assert!(!plain.contains("self_noise"), "{plain}");
}
