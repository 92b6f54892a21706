//! What deploy/ ships for the mesh (`sonde serve --mesh`), checked without a cluster: the
//! rules by `promtool check rules` and their unit test (the loss alert fires for the lossy
//! rack pair only; a threshold moved makes it fail), the scrape config by `promtool check
//! config`, the DaemonSet's flags against its Service, and every dashboard query against
//! the metrics an agent serves and the series the rules record.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{need_tools, run, stderr, stdout, temp_file};
use sonde_report::openmetrics::{encode_mesh, MeshAgent, MeshPeer};
use sonde_results::mesh::{Judging, PeerStats};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn promtool(args: &[&str], dir: &Path) -> (bool, String) {
    let o = run({
        let mut c = Command::new("promtool");
        c.args(args).current_dir(dir);
        c
    });
    (o.status.success(), format!("{}{}", stdout(&o), stderr(&o)))
}

/// deploy/prometheus's rules `NAME.yaml`: `promtool check rules` finds `count` rules and
/// their unit test `NAME.test.yaml` passes; then, in a scratch copy, the same unit test
/// against the rules with each threshold of `moved` (from, to) moved fails: it can fail.
/// The rules' text.
fn rules_and_their_unit_test(name: &str, count: usize, moved: &[(&str, &str)]) -> String {
    let dir = repo().join("deploy/prometheus");
    let (file, test) = (format!("{name}.yaml"), format!("{name}.test.yaml"));
    let (ok, said) = promtool(&["check", "rules", &file], &dir);
    let found = format!("SUCCESS: {count} rules found");
    assert!(ok && said.contains(&found), "{said}");
    let (ok, said) = promtool(&["test", "rules", &test], &dir);
    assert!(ok, "{said}");
    let scratch = temp_file(name);
    std::fs::create_dir_all(&scratch).unwrap();
    std::fs::copy(dir.join(&test), scratch.join(&test)).unwrap();
    let rules = std::fs::read_to_string(dir.join(&file)).unwrap();
    for (from, to) in moved {
        assert!(rules.contains(from), "{from}");
        std::fs::write(scratch.join(&file), rules.replace(from, to)).unwrap();
        let (ok, said) = promtool(&["test", "rules", &test], &scratch);
        assert!(!ok, "{to}: the unit test still passed: {said}");
    }
    rules
}

/// What an agent's metrics `text` serves: its families, with every series `rules`
/// records, and its label names.
fn served(text: &str, rules: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let samples: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
    let mut known: BTreeSet<String> = samples
        .iter()
        .map(|l| l.split('{').next().unwrap().to_string())
        .collect();
    let labels = samples
        .iter()
        .flat_map(|l| l.split(['{', ',']).skip(1))
        .filter_map(|kv| kv.split_once('=').map(|(k, _)| k.to_string()))
        .collect();
    for line in rules.lines() {
        if let Some(r) = line.trim().strip_prefix("- record: ") {
            known.insert(r.to_string());
        }
    }
    (known, labels)
}

/// Labels from `(name, value)` pairs.
fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A marked agent's metrics (`--mesh-dscp`), labelled `own`, with one peer labelled the
/// same whose probes left EF and came back bleached and CE-marked.
fn marked_agent_text(own: &BTreeMap<String, String>) -> String {
    let mut stats = PeerStats::new(0, &Judging::default());
    let ef0 = 46 << 2 | 2;
    stats.on_marks(Some((ef0, 2)), Some((ef0, ef0 | 3)));
    let peer = MeshPeer {
        address: "198.18.3.1",
        labels: own,
        stats: &stats.figures(),
    };
    encode_mesh(&agent_of(own), &[peer])
}

#[test]
fn the_mesh_rules_check_and_their_unit_test_fires_the_loss_alert_for_the_lossy_pair_only() {
    if !need_tools(&["promtool"]) {
        return;
    }
    // The unit test can fail: the same test against rules whose loss threshold is 50 %
    // (the lossy pair's 10 % no longer fires) and whose P99 threshold is 100 ms.
    let moved = [
        ("ratio_rate1m > 0.01", "ratio_rate1m > 0.5"),
        ("p99_1m > 0.01", "p99_1m > 0.1"),
    ];
    rules_and_their_unit_test("mesh-rules", 9, &moved);
}

/// The marks' rules: `promtool check rules`, their unit test (each alert fires for its
/// pair and direction only, the classes named), and a test that can fail: each threshold
/// moved past the unit test's pair (bleached 90 %, remarked 2 %, CE 10 %) makes it fail.
/// Every series and label they read is one a marked agent serves.
#[test]
fn the_marks_rules_check_fire_for_the_pair_that_changes_the_marks_and_read_served_series() {
    if !need_tools(&["promtool"]) {
        return;
    }
    let moved = [
        (r#"{fate="bleached"} > 0.01"#, r#"{fate="bleached"} > 0.95"#),
        (r#"{fate="remarked"} > 0.01"#, r#"{fate="remarked"} > 0.05"#),
        ("ce:ratio_rate5m > 0.05", "ce:ratio_rate5m > 0.5"),
    ];
    let rules = rules_and_their_unit_test("mesh-marks-rules", 6, &moved);
    // What a marked agent serves: the families and labels the rules may read.
    let text = marked_agent_text(&labels(&[("zone", "z1"), ("rack", "r1")]));
    let (known, labels) = served(&text, &rules);
    let is_name = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let mut read = 0;
    for line in rules.lines().map(str::trim) {
        for n in line.split(|c: char| !is_name(c)) {
            if n.starts_with("sonde_") || n.starts_with("sonde:") {
                assert!(
                    known.contains(n),
                    "{line}: {n} is neither served nor recorded"
                );
                read += 1;
            }
        }
        let grouped = [" by (", " on ("].map(|w| line.split(w).skip(1));
        for part in grouped.into_iter().flatten() {
            for l in part.split(')').next().unwrap().split(',') {
                assert!(
                    labels.contains(l.trim()),
                    "{line}: no served series has {l}"
                );
            }
        }
        for l in line.split("$labels.").skip(1) {
            let l = l.split(' ').next().unwrap();
            assert!(labels.contains(l), "{line}: no served series has {l}");
        }
    }
    assert!(read >= 10, "{read} series read");
}

#[test]
fn the_mesh_scrape_config_checks_and_finds_the_agents_by_their_service_with_their_token() {
    if !need_tools(&["promtool"]) {
        return;
    }
    let dir = repo().join("deploy/prometheus");
    let scrape = std::fs::read_to_string(dir.join("mesh-scrape.yaml")).unwrap();
    // promtool checks that the token file exists: the config is checked in a scratch
    // directory, the file it names made there (and without it, refused).
    let credentials = "authorization: {credentials_file: /etc/prometheus/sonde-mesh-metrics-token}";
    assert!(scrape.contains(credentials), "no token in {scrape}");
    let scratch = temp_file("mesh-scrape");
    std::fs::create_dir_all(&scratch).unwrap();
    for rules in ["mesh-rules.yaml", "mesh-marks-rules.yaml"] {
        std::fs::copy(dir.join(rules), scratch.join(rules)).unwrap();
    }
    let token = scratch.join("token");
    let checked = scrape.replace(
        "/etc/prometheus/sonde-mesh-metrics-token",
        token.to_str().unwrap(),
    );
    std::fs::write(scratch.join("mesh-scrape.yaml"), checked).unwrap();
    let (ok, said) = promtool(&["check", "config", "mesh-scrape.yaml"], &scratch);
    assert!(!ok && said.contains("token"), "{said}");
    std::fs::write(&token, "a-token-of-16-characters-or-more\n").unwrap();
    let (ok, said) = promtool(&["check", "config", "mesh-scrape.yaml"], &scratch);
    assert!(ok, "{said}");
    let ds = std::fs::read_to_string(repo().join("deploy/kubernetes/mesh-daemonset.yaml")).unwrap();
    let service = "sonde-mesh.netsonde.svc.cluster.local";
    assert!(scrape.contains(&format!("names: [{service}]")), "{scrape}");
    assert!(scrape.contains("port: 9464"));
    for want in [
        format!(r#""--mesh", "dns:{service}""#),
        r#""--metrics", "0.0.0.0:9464""#.into(),
        r#""--mesh-port", "8620""#.into(),
        r#""--key-file", "/etc/sonde/key""#.into(),
        r#""--metrics-token-file", "/etc/sonde-metrics/token""#.into(),
        "- {name: metrics-token, mountPath: /etc/sonde-metrics, readOnly: true}".into(),
        "secret: {secretName: sonde-mesh-metrics-token, defaultMode: 288}".into(),
        "kind: Secret\nmetadata:\n  name: sonde-mesh-metrics-token".into(),
        "- {name: stamp, port: 8620, targetPort: stamp, protocol: UDP}".into(),
        "clusterIP: None".into(),
    ] {
        assert!(ds.contains(&want), "mesh-daemonset.yaml lacks {want}");
    }
    let monitor = std::fs::read_to_string(dir.join("mesh-podmonitor.yaml")).unwrap();
    assert!(
        monitor.contains("- port: metrics")
            && monitor.contains("app.kubernetes.io/name: sonde-mesh")
            && monitor.contains(
                "authorization: {credentials: {name: sonde-mesh-metrics-token, key: token}}"
            ),
        "{monitor}"
    );
}

/// The agent at 198.18.2.1 labelled `own`, at 1 probe/s of its budget of 100.
fn agent_of(own: &BTreeMap<String, String>) -> MeshAgent<'_> {
    MeshAgent {
        source: "198.18.2.1",
        labels: own,
        budget_per_s: 100.0,
        rate_per_s: 1.0,
        reflected: 1,
        refused: 0,
        departed_kernel: 0,
        departed_process: 0,
        t3_stamp: 0,
        t3_clock: 0,
    }
}

/// An agent's metrics with one peer: every family and label the exporter writes.
fn agent_text() -> String {
    let own = labels(&[("zone", "z1"), ("rack", "r1"), ("node", "n1")]);
    let theirs = labels(&[("zone", "z1"), ("rack", "r2"), ("node", "n2")]);
    let j = Judging {
        window_ns: 1,
        ..Judging::default()
    };
    let mut stats = PeerStats::new(0, &j);
    stats.on_sent(0, 0);
    stats.on_answer(0, 0, 50_000, 0);
    stats.tick(10);
    encode_mesh(
        &agent_of(&own),
        &[MeshPeer {
            address: "198.18.3.1",
            labels: &theirs,
            stats: &stats.figures(),
        }],
    )
}

#[test]
fn every_mesh_dashboard_query_names_served_metrics_or_recorded_series() {
    let path = repo().join("deploy/grafana/sonde-mesh.json");
    let dash: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(dash["__inputs"][0]["name"], "DS_PROMETHEUS");
    let rules = std::fs::read_to_string(repo().join("deploy/prometheus/mesh-rules.yaml")).unwrap();
    let (known, labels) = served(&agent_text(), &rules);
    let mut queries = Vec::new();
    for p in dash["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().unwrap() {
            queries.push(t["expr"].as_str().unwrap().to_string());
        }
    }
    queries.push(
        dash["templating"]["list"][0]["definition"]
            .as_str()
            .unwrap()
            .into(),
    );
    assert!(queries.len() >= 8, "{queries:?}");
    let is_name = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    for q in &queries {
        let names: Vec<&str> = q
            .split(|c: char| !is_name(c))
            .filter(|w| w.starts_with("sonde_") || w.starts_with("sonde:"))
            .collect();
        assert!(!names.is_empty(), "no sonde series in {q}");
        for n in names {
            assert!(known.contains(n), "{q}: {n} is neither served nor recorded");
        }
        for part in q.split(" by (").skip(1) {
            for l in part.split(')').next().unwrap().split(',') {
                let l = l.trim();
                assert!(
                    l == "direction" || labels.contains(l),
                    "{q}: no series has label {l}"
                );
            }
        }
    }
    let json = std::fs::read_to_string(&path).unwrap();
    for part in json.split("{{").skip(1) {
        let l = part.split("}}").next().unwrap();
        assert!(labels.contains(l), "legend {{{{{l}}}}} is no label");
    }
}

/// A marked agent's text (`--mesh-dscp`: the marks and CE families beside the others)
/// passes `promtool check metrics`: only the classic-format linter's "no help text" of a
/// counter's `_total` sample is accepted (OpenMetrics names the family without `_total`).
#[test]
fn a_marked_agents_metrics_pass_promtool_check_metrics() {
    if !need_tools(&["promtool"]) {
        return;
    }
    let text = marked_agent_text(&labels(&[("rack", "r1")]));
    for family in ["marks", "dscp_fate", "ect", "ce"] {
        assert!(text.contains(&format!("# TYPE sonde_mesh_{family}_packets counter")));
    }
    let o = common::prometheus::promtool(&["check", "metrics"], &text);
    let said = format!("{}{}", stdout(&o), stderr(&o));
    let problems: Vec<&str> = said
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.ends_with("_total no help text"))
        .collect();
    assert!(problems.is_empty(), "{said}");
}
