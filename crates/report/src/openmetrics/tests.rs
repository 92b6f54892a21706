use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use sonde_results::document::{FleetPair, Section};
use sonde_results::Document;

use super::{export, Exporter, RunOutcome, MAX_AGENT_LABELS};
use crate::fixtures::stored;

fn pair(source: &str, destination: &str) -> FleetPair {
    FleetPair {
        fleet: "zones".into(),
        source: source.into(),
        destination: destination.into(),
        source_labels: BTreeMap::from([("zone".into(), "a".into())]),
        destination_labels: BTreeMap::from([("zone".into(), "b".into())]),
        round: 1,
        ..FleetPair::default()
    }
}

/// A stored fixture as a run of `pair`, judged (the v1 fixtures predate `limited_by`).
fn run_of(name: &str, pair: &FleetPair) -> Document {
    let mut d = stored(name);
    d.start.fleet = Some(pair.clone());
    d.end.limited_by = sonde_results::limit::judge(&d);
    d
}

fn at(s: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + s)
}

/// The sample lines of `name` (exact family name, `_total` included) in `text`.
fn lines<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .collect()
}

fn value(line: &str) -> f64 {
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

#[test]
fn a_stored_stream_gives_the_receivers_throughput_and_the_senders_retransmits() {
    let p = pair("a", "b");
    let doc = run_of("v1-stream.json", &p);
    let mut e = Exporter::new();
    e.record(&p, "stream -P 1", RunOutcome::Stored(&doc), at(0));
    let text = e.encode();
    assert!(text.ends_with("# EOF\n"), "{text}");
    let tp = lines(&text, "sonde_throughput_bits_per_second");
    assert_eq!(tp.len(), 1, "{text}");
    let want = doc
        .end
        .stream()
        .unwrap()
        .receiver
        .as_ref()
        .unwrap()
        .bits_per_second;
    assert!((value(tp[0]) - want).abs() <= want * 1e-12, "{}", tp[0]);
    for label in [
        "fleet=\"zones\"",
        "source=\"a\"",
        "destination=\"b\"",
        "test=\"stream -P 1\"",
        "source_zone=\"a\"",
        "destination_zone=\"b\"",
        "direction=\"forward\"",
    ] {
        assert!(tp[0].contains(label), "{label} missing: {}", tp[0]);
    }
    let sent = doc.end.stream().unwrap().sender.as_ref().unwrap();
    let retrans = lines(&text, "sonde_retransmits_total");
    match sent.tcp_retransmits.connections {
        Some(n) => assert_eq!(value(retrans[0]), n as f64, "{text}"),
        None => assert!(retrans.is_empty(), "{text}"),
    }
    assert!(lines(&text, "sonde_rtt_seconds").is_empty(), "{text}");
}

#[test]
fn a_ping_gives_three_rtt_quantiles_in_seconds_and_udp_loss() {
    let p = pair("a", "b");
    let mut doc = run_of("v1-ping-udp.json", &p);
    if let Section::Rr(r) = &mut doc.end.section {
        r.lost_messages = Some(7);
    }
    let mut e = Exporter::new();
    e.record(&p, "ping --udp", RunOutcome::Stored(&doc), at(0));
    let text = e.encode();
    assert!(text.contains("# TYPE sonde_rtt_seconds summary"), "{text}");
    let rtt = lines(&text, "sonde_rtt_seconds");
    let l = doc.end.rr().unwrap().latency_ns.as_ref().unwrap();
    let want = [("0.5", l.p50), ("0.99", l.p99), ("0.999", l.p999)];
    assert_eq!(rtt.len(), want.len(), "{text}");
    for ((q, ns), line) in want.iter().zip(&rtt) {
        assert!(line.contains(&format!("quantile=\"{q}\"")), "{line}");
        assert_eq!(value(line), *ns as f64 / 1e9, "{line}");
    }
    let r = doc.end.rr().unwrap();
    let loss = lines(&text, "sonde_packet_loss_ratio");
    let sent = r.client.as_ref().unwrap().requests_sent.unwrap();
    assert_eq!(loss.len(), 1, "{text}");
    assert_eq!(value(loss[0]), 7.0 / sent as f64);
}

#[test]
fn a_failed_run_removes_the_pairs_figures_and_counts_as_failed() {
    let p = pair("a", "b");
    let doc = run_of("v1-bidir.json", &p);
    let mut e = Exporter::new();
    e.record(&p, "stream -P 1", RunOutcome::Stored(&doc), at(0));
    let before = e.encode();
    assert_eq!(lines(&before, "sonde_throughput_bits_per_second").len(), 2);
    assert!(before.contains("direction=\"reverse\""), "{before}");
    let no_labels = FleetPair {
        source_labels: BTreeMap::new(),
        ..p.clone()
    };
    e.record(
        &no_labels,
        "stream -P 1",
        RunOutcome::Failed("agent gone"),
        at(60),
    );
    let after = e.encode();
    for gone in [
        "sonde_throughput_bits_per_second",
        "sonde_limited_by",
        "sonde_rtt_seconds",
    ] {
        assert!(lines(&after, gone).is_empty(), "{gone} kept: {after}");
    }
    let runs = lines(&after, "sonde_runs_total");
    let count = |status: &str| {
        let l = runs
            .iter()
            .find(|l| l.contains(&format!("status=\"{status}\"")));
        value(l.unwrap_or_else(|| panic!("no {status}: {after}")))
    };
    assert_eq!(
        (count("ok"), count("partial"), count("failed")),
        (1.0, 0.0, 1.0)
    );
    // The failed run's counter keeps the labels the stored run had.
    assert!(
        runs.iter().all(|l| l.contains("source_zone=\"a\"")),
        "{after}"
    );
    let ts = lines(&after, "sonde_run_timestamp_seconds");
    assert_eq!(value(ts[0]), 1_800_000_060.0, "{after}");
}

#[test]
fn expire_drops_pairs_not_recorded_since_the_cutoff() {
    let (ab, ba) = (pair("a", "b"), pair("b", "a"));
    let mut e = Exporter::new();
    e.record(
        &ab,
        "ping --udp",
        RunOutcome::Stored(&run_of("v1-rpc.json", &ab)),
        at(0),
    );
    e.record(
        &ba,
        "ping --udp",
        RunOutcome::Stored(&run_of("v1-rpc.json", &ba)),
        at(100),
    );
    e.expire(at(50));
    let text = e.encode();
    let ts = lines(&text, "sonde_run_timestamp_seconds");
    assert_eq!(ts.len(), 1, "{text}");
    assert!(ts[0].contains("source=\"b\""), "{text}");
    assert!(!text.contains("source=\"a\""), "{text}");
}

#[test]
fn the_limited_by_verdict_is_a_one_labelled_by_its_verdict() {
    let p = pair("a", "b");
    let doc = run_of("limit/rcvbuf-64K.json", &p);
    let verdict = doc.end.limited_by.as_ref().expect("a verdict").verdict;
    let mut e = Exporter::new();
    e.record(&p, "stream -P 1", RunOutcome::Stored(&doc), at(0));
    let text = e.encode();
    let l = lines(&text, "sonde_limited_by");
    assert_eq!(l.len(), 1, "{text}");
    assert!(l[0].contains(&format!("verdict=\"{verdict}\"")), "{}", l[0]);
    assert_eq!(value(l[0]), 1.0);
}

#[test]
fn agent_labels_are_sanitized_bounded_and_cannot_clobber_fixed_labels() {
    let mut p = pair("a", "b");
    p.source_labels = BTreeMap::from([
        ("source".into(), "evil".into()),
        ("test".into(), "evil".into()),
        ("topology.kubernetes.io/zone".into(), "eu \"1\"\n".into()),
    ]);
    for i in 0..MAX_AGENT_LABELS + 5 {
        p.destination_labels.insert(format!("k{i:03}"), "v".into());
    }
    let doc = run_of("v1-rpc.json", &p);
    let mut e = Exporter::new();
    e.record(&p, "ping --udp", RunOutcome::Stored(&doc), at(0));
    let text = e.encode();
    let line = lines(&text, "sonde_run_timestamp_seconds")[0];
    assert!(
        line.contains("{fleet=\"zones\",source=\"a\",destination=\"b\",test=\"ping --udp\""),
        "{line}"
    );
    assert!(line.contains("source_source=\"evil\""), "{line}");
    assert!(line.contains("source_test=\"evil\""), "{line}");
    assert!(
        line.contains(r#"source_topology_kubernetes_io_zone="eu \"1\"\n""#),
        "{line}"
    );
    let kept = line.matches("destination_k").count();
    assert_eq!(kept, MAX_AGENT_LABELS, "{line}");
}

#[test]
fn export_writes_every_run_at_its_end_time_with_counters_that_add_up() {
    let p = pair("a", "b");
    let first = run_of("v1-stream.json", &p);
    let mut second = first.clone();
    second.start.finished_at = Some("2026-11-24T00:00:00.5Z".into());
    let text = export(&[second.clone(), first.clone()]);
    assert!(text.ends_with("# EOF\n"), "{text}");
    let tp = lines(&text, "sonde_throughput_bits_per_second");
    let stamps: Vec<&str> = tp.iter().map(|l| l.rsplit(' ').next().unwrap()).collect();
    let first_end = super::figures::ended_at(&first).unwrap();
    assert_eq!(
        stamps,
        [format!("{:.3}", first_end).as_str(), "1795478400.500"]
    );
    let ok: Vec<f64> = lines(&text, "sonde_runs_total")
        .iter()
        .filter(|l| l.contains("status=\"ok\""))
        .map(|l| l.split(' ').nth(1).unwrap().parse().unwrap())
        .collect();
    assert_eq!(ok, [1.0, 2.0], "{text}");
    assert!(tp[0].contains("test=\"stream\""), "{}", tp[0]);
    // A fleet's run is labelled with its test case, as the live exporter labels it.
    let mut case = first.clone();
    case.start.fleet.as_mut().unwrap().test = "stream -P 8".into();
    let text = export(&[&case]);
    let tp = lines(&text, "sonde_throughput_bits_per_second");
    assert!(tp[0].contains("test=\"stream -P 8\""), "{}", tp[0]);
}

#[test]
fn a_run_outside_a_fleet_is_the_client_host_to_the_agent_address() {
    let doc = stored("v1-pps.json");
    let text = export(std::slice::from_ref(&doc));
    let line = lines(&text, "sonde_throughput_bits_per_second")[0];
    let source = format!("source=\"{}\"", doc.start.client.hostname);
    let destination = format!("destination=\"{}\"", doc.start.server_address);
    assert!(
        line.contains(&source) && line.contains(&destination),
        "{line}"
    );
}

/// A STAMP run to a reflector (no agent there): its document as `sonde stamp` writes it.
fn stamp_run(lost: (u64, u64)) -> Document {
    use sonde_results::document::stamp::StampEnd;
    use sonde_results::document::{End, LocalStart};
    use sonde_results::latency::{new_histogram, LatencySummary};
    let mut h = new_histogram();
    for ns in [40_000, 50_000, 60_000] {
        h.record(ns).unwrap();
    }
    let stamp = StampEnd {
        reflector: "198.18.0.2:862".into(),
        sent: 100,
        received: 100 - lost.0 - lost.1,
        lost: lost.0 + lost.1,
        lost_forward: Some(lost.0),
        lost_reverse: Some(lost.1),
        lost_after_last_answer: Some(0),
        latency_ns: LatencySummary::of(&h),
        stateful: true,
        ..Default::default()
    };
    let spec = crate::fixtures::stored("v1-ping-udp.json").start;
    let start = LocalStart {
        spec: sonde_results::TestSpec::Stamp(sonde_results::StampSpec {
            packet_bytes: 52,
            stateful: true,
            timing: sonde_results::Timing::measuring(10_000),
            ..crate::fixtures::stamp_spec()
        }),
        command: "sonde stamp 198.18.0.2".into(),
        host: spec.client,
        started_at: "2027-01-15T08:00:00Z".into(),
        software: "sonde test".into(),
    };
    Document::local(
        start,
        Vec::new(),
        End::new(false, None, Section::Stamp { stamp }),
    )
}

#[test]
fn a_stamp_run_gives_its_rtt_and_loss_each_way_toward_its_reflector() {
    let p = pair("a", "router");
    let doc = stamp_run((3, 2));
    let mut e = Exporter::new();
    e.record(&p, "stamp", RunOutcome::Stored(&doc), at(0));
    let text = e.encode();
    assert_eq!(lines(&text, "sonde_rtt_seconds").len(), 3, "{text}");
    let loss = lines(&text, "sonde_packet_loss_ratio");
    assert_eq!(loss.len(), 2, "{text}");
    let of = |d: &str| {
        value(
            loss.iter()
                .find(|l| l.contains(&format!("direction=\"{d}\"")))
                .unwrap(),
        )
    };
    assert_eq!((of("forward"), of("reverse")), (0.03, 0.02));
    // Stored and backfilled, its destination is the reflector.
    let text = export(&[doc]);
    let rtt = lines(&text, "sonde_rtt_seconds");
    assert!(
        rtt.iter()
            .all(|l| l.contains("destination=\"198.18.0.2:862\"")),
        "{text}"
    );
}

/// An rpm run with a verdict per direction (a real run through a 40 Mbit/s tbf: both the
/// network's), the run's the upload's; the download's changed here to tell them apart.
fn rpm_run(p: &FleetPair) -> Document {
    use sonde_results::limit::Limit;
    let mut d = run_of("limit/rpm-lo-tbf-40mbit.json", p);
    if let Section::Rpm { rpm } = &mut d.end.section {
        let down = rpm.download.as_mut().unwrap().limited_by.as_mut().unwrap();
        down.verdict = Limit::ReceiverWindow;
    }
    d
}

#[test]
fn an_rpm_run_gives_each_directions_verdict_labelled_by_its_direction() {
    let p = pair("a", "b");
    let doc = rpm_run(&p);
    let run = doc.end.limited_by.as_ref().expect("the run's verdict");
    assert_eq!(run.verdict.as_str(), "network");
    assert!(run.evidence.iter().all(|e| e.figure.starts_with("upload.")));
    let mut e = Exporter::new();
    e.record(&p, "rpm", RunOutcome::Stored(&doc), at(0));
    let text = e.encode();
    let l = lines(&text, "sonde_limited_by");
    assert_eq!(l.len(), 2, "one per direction, the run's not again: {text}");
    for (way, verdict) in [("download", "receiver_window"), ("upload", "network")] {
        let want = format!("direction=\"{way}\",verdict=\"{verdict}\"}}");
        let line = l.iter().find(|s| s.contains(&want));
        assert_eq!(line.map(|s| value(s)), Some(1.0), "{want}: {l:#?}");
    }
    // The backfill writes the same two series, each with both labels.
    let text = export(&[doc]);
    let l = lines(&text, "sonde_limited_by");
    assert_eq!(l.len(), 2, "{text}");
    assert!(
        l.iter()
            .any(|s| s.contains("direction=\"download\",verdict=\"receiver_window\"} 1 ")),
        "{l:#?}"
    );
}

#[test]
fn a_stream_run_still_gives_its_one_verdict_without_a_direction() {
    let p = pair("a", "b");
    let doc = run_of("limit/rcvbuf-64K.json", &p);
    let text = export(&[doc]);
    let l = lines(&text, "sonde_limited_by");
    assert_eq!(l.len(), 1, "{text}");
    assert!(!l[0].contains("direction="), "{}", l[0]);
}
