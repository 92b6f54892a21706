//! The OpenMetrics a fleet's runs become, checked by Prometheus' own tools: the exporter's
//! text by `promtool check metrics`, `sonde results export --format openmetrics` by
//! `promtool tsdb create-blocks-from openmetrics` (a backfill), and every query of the
//! Grafana dashboard (deploy/grafana/sonde.json) against the metrics and labels served.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

use common::{need_tools, run, sonde_into, stderr, stdout, temp_file};
use sonde_report::openmetrics::{Exporter, RunOutcome};
use sonde_results::document::FleetPair;
use sonde_results::Document;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Stored fixtures (the results crate's) of every kind the exporter reads, the limit
/// fixtures judged so that a verdict is among them (an rpm run's, one per direction).
const FIXTURES: [(&str, &str); 8] = [
    ("v1-stream.json", "stream -P 1"),
    ("v1-bidir.json", "stream --bidir"),
    ("limit/rcvbuf-64K.json", "stream --window 64K"),
    ("v1-ping-udp.json", "ping --udp"),
    ("v1-rpc.json", "rpc -t 1"),
    ("v1-pps.json", "pps -t 1"),
    ("limit/pps-nft-drop-2pct.json", "pps --flows 2"),
    ("limit/rpm-lo-tbf-40mbit.json", "rpm"),
];

fn fixture(name: &str) -> Document {
    let path = repo().join("crates/results/tests/fixtures").join(name);
    let mut d: Document = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    d.end.limited_by = sonde_results::limit::judge(&d);
    d
}

fn pair(source: &str, destination: &str) -> FleetPair {
    let zone = |a: &str| BTreeMap::from([("zone".to_string(), format!("zone-{a}"))]);
    FleetPair {
        fleet: "mesh".into(),
        source: source.into(),
        destination: destination.into(),
        source_labels: zone(source),
        destination_labels: zone(destination),
        round: 1,
        ..FleetPair::default()
    }
}

/// Three agents' pairs, each with every fixture's test, and one pair whose run failed.
fn exporter_text() -> String {
    let mut e = Exporter::new();
    let now = SystemTime::now();
    for (s, d) in [("a", "b"), ("b", "c"), ("c", "a")] {
        for (name, test) in FIXTURES {
            let mut doc = fixture(name);
            doc.start.fleet = Some(pair(s, d));
            e.record(&pair(s, d), test, RunOutcome::Stored(&doc), now);
        }
    }
    e.record(
        &pair("a", "c"),
        "stream -P 1",
        RunOutcome::Failed("cannot connect"),
        now,
    );
    e.expire(now - Duration::from_secs(600));
    e.encode()
}

use common::prometheus::promtool;

/// What promtool 2.42's linter says of valid OpenMetrics and is accepted here: it reads
/// the classic text format, so a counter's `_total` sample has no `# HELP` of its own
/// (OpenMetrics names the family without `_total`); and it wants throughput in bytes, where
/// the issue and every network tool give bits per second.
fn accepted(problem: &str) -> bool {
    let counter = ["sonde_runs_total", "sonde_retransmits_total"]
        .iter()
        .any(|c| problem == format!("{c} no help text"));
    let bits =
        problem == "sonde_throughput_bits_per_second use base unit \"bytes\" instead of \"bits\"";
    counter || bits
}

#[test]
fn the_exporters_text_passes_promtool_check_metrics() {
    if !need_tools(&["promtool"]) {
        return;
    }
    let text = exporter_text();
    let o = promtool(&["check", "metrics"], &text);
    let said = format!("{}{}", stdout(&o), stderr(&o));
    let problems: Vec<&str> = said.lines().filter(|l| !accepted(l.trim())).collect();
    assert!(problems.is_empty(), "{said}\n{text}");
    // Exit 3 is lint problems only (the accepted ones); 1 would be a text it cannot parse.
    assert!(matches!(o.status.code(), Some(0 | 3)), "{said}\n{text}");
    // And the text is not trivially empty: every family has samples.
    for name in [
        "sonde_throughput_bits_per_second{",
        "sonde_rtt_seconds{",
        "sonde_packet_loss_ratio{",
        "sonde_retransmits_total{",
        "sonde_run_timestamp_seconds{",
        "sonde_runs_total{",
        "sonde_limited_by{",
        // An rpm run's verdict per direction: two labels after the pair's.
        "direction=\"upload\",verdict=\"network\"} 1",
    ] {
        assert!(text.contains(name), "no {name}: {text}");
    }
}

#[test]
fn a_stored_fleet_exports_as_a_prometheus_backfill() {
    if !need_tools(&["promtool"]) {
        return;
    }
    let db = temp_file("om.db");
    for (s, d) in [("a", "b"), ("b", "a")] {
        for (name, test) in FIXTURES {
            let mut doc = fixture(name);
            doc.start.fleet = Some(FleetPair {
                test: test.to_string(),
                ..pair(s, d)
            });
            let file = temp_file("run.json");
            std::fs::write(&file, serde_json::to_vec(&doc).unwrap()).unwrap();
            let file = file.to_str().unwrap();
            let o = sonde_into(&db, &["results", "import", "--label", "mesh", file]);
            assert!(o.status.success(), "{}", stderr(&o));
        }
    }
    let o = sonde_into(
        &db,
        &[
            "results",
            "export",
            "--format",
            "openmetrics",
            "--label",
            "mesh",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("source_zone=\"zone-b\""), "{text}");
    for (_, test) in FIXTURES {
        assert!(text.contains(&format!("test=\"{test}\"")), "{test}: {text}");
    }
    let file = temp_file("backfill.om");
    std::fs::write(&file, &text).unwrap();
    let blocks = temp_file("blocks");
    let o = run({
        let mut c = Command::new("promtool");
        c.args(["tsdb", "create-blocks-from", "openmetrics"])
            .args([&file, &blocks]);
        c
    });
    let said = format!("{}{}", stdout(&o), stderr(&o));
    assert!(o.status.success(), "{said}\n{text}");
    // promtool's table: a block's samples and series counts after its ULID and times.
    let samples: usize = said
        .lines()
        .filter_map(|l| l.split_whitespace().nth(4)?.parse::<usize>().ok())
        .sum();
    let lines = text.lines().filter(|l| !l.starts_with('#')).count();
    assert_eq!(samples, lines, "{said}\n{text}");

    let bad = sonde_into(&db, &["results", "export", "--label", "none-such"]);
    assert!(!bad.status.success());
    assert!(
        stderr(&bad).contains("--label none-such"),
        "{}",
        stderr(&bad)
    );
}

/// Every PromQL expression of the dashboard: its panels' targets and its variables'
/// queries.
fn dashboard_queries(dash: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    for p in dash["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().unwrap() {
            out.push(t["expr"].as_str().unwrap().to_string());
        }
    }
    for v in dash["templating"]["list"].as_array().unwrap() {
        out.push(v["definition"].as_str().unwrap().to_string());
    }
    out
}

/// The `sonde_*` names of an expression.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = expr;
    while let Some(i) = rest.find("sonde_") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        names.insert(tail[..end].to_string());
        rest = &tail[end..];
    }
    names
}

/// The labels an expression filters on (`name=`, `name=~`, `name!=`), groups by
/// (`by (...)`) or asks for (`label_values(..., name)`).
fn label_names(expr: &str) -> BTreeSet<String> {
    let mut labels = BTreeSet::new();
    let word = |s: &str| s.trim().trim_matches(|c| c == '(' || c == ')').to_string();
    for (i, _) in expr.match_indices(['=', '~', '!']) {
        let before = &expr[..i];
        let Some(start) = before.rfind(['{', ',']) else {
            continue;
        };
        let name = before[start + 1..].trim();
        if !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            labels.insert(name.to_string());
        }
    }
    for part in expr.split(" by (").skip(1) {
        let list = part.split(')').next().unwrap();
        labels.extend(list.split(',').map(word));
    }
    if let Some(args) = expr.strip_prefix("label_values(") {
        labels.insert(word(args.rsplit(',').next().unwrap()));
    }
    labels
}

#[test]
fn every_dashboard_query_names_metrics_and_labels_the_exporter_serves() {
    let path = repo().join("deploy/grafana/sonde.json");
    let dash: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).expect("the dashboard is JSON");
    assert_eq!(dash["__inputs"][0]["name"], "DS_PROMETHEUS");
    let text = exporter_text();
    let samples: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
    let served: BTreeSet<&str> = samples
        .iter()
        .map(|l| l.split('{').next().unwrap())
        .collect();
    let labelled: BTreeSet<&str> = samples
        .iter()
        .flat_map(|l| l.split(['{', ',']).skip(1))
        .filter_map(|kv| kv.split_once('=').map(|(k, _)| k))
        .collect();
    let queries = dashboard_queries(&dash);
    assert!(queries.len() >= 10, "{queries:?}");
    let mut used = BTreeSet::new();
    for q in &queries {
        let names = metric_names(q);
        assert!(!names.is_empty(), "no sonde metric in {q}");
        for n in names {
            assert!(
                served.contains(n.as_str()),
                "{q}: {n} is not served: {served:?}"
            );
            used.insert(n);
        }
        for l in label_names(q) {
            assert!(
                labelled.contains(l.as_str()),
                "{q}: no series has label {l}"
            );
        }
    }
    // Labels the panels' matrices and legends read must exist too.
    let json = std::fs::read_to_string(&path).unwrap();
    for field in ["rowField", "columnField"] {
        for part in json.split(&format!("\"{field}\": \"")).skip(1) {
            let l = part.split('"').next().unwrap();
            assert!(labelled.contains(l), "{field} {l} is no label");
        }
    }
    for part in json.split("{{").skip(1) {
        let l = part.split("}}").next().unwrap();
        assert!(labelled.contains(l), "legend {{{{{l}}}}} is no label");
    }
    // The dashboard shows every family the exporter serves.
    assert_eq!(used.len(), served.len(), "{used:?} against {served:?}");
}

#[test]
fn the_query_parsers_see_what_a_query_names() {
    let q = r#"max by (source, destination) (sonde_rtt_seconds{fleet=~"$f", quantile="0.5"})"#;
    assert_eq!(
        metric_names(q).into_iter().collect::<Vec<_>>(),
        ["sonde_rtt_seconds"]
    );
    let labels: Vec<String> = label_names(q).into_iter().collect();
    assert_eq!(labels, ["destination", "fleet", "quantile", "source"]);
    let v = label_names(r#"label_values(sonde_runs_total{fleet=~"$fleet"}, source_zone)"#);
    assert!(v.contains("source_zone") && v.contains("fleet"), "{v:?}");
}
