//! Agents' own labels (`sonde serve --label`): refused at the command line when they break
//! the rules, kept from anyone who has not proven the key, stored with each run, and
//! merged under a fleet file's labels.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::bridge::{Bridged, FLEET_PORT};
use common::*;

fn assert_usage_error(args: &[&str], needle: &str) {
    let mut c = sonde_cmd();
    c.arg("serve").args(args);
    let o = run(c);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
    assert_eq!(err.trim().lines().count(), 1, "not one line: {err}");
    assert!(err.contains("--label"), "the flag not named: {err}");
    assert!(err.contains(needle), "'{needle}' not in: {err}");
}

#[test]
fn bad_labels_are_refused_naming_the_flag_and_the_label() {
    let long = format!("zone={}", "v".repeat(129));
    let cases: &[(&str, &str)] = &[
        ("zone", "'zone' is not KEY=VALUE"),
        ("2zone=a", "label '2zone'"),
        ("zo-ne=a", "label 'zo-ne'"),
        ("=a", "Prometheus label name"),
        ("__meta=a", "reserved by Prometheus"),
        ("source=a", "label 'source'"),
        ("quantile=a", "metrics set themselves"),
        ("zone=", "value is empty"),
        (&long, "129 bytes"),
        ("zone=a\tb", "control character"),
        // A right-to-left override and a zero-width joiner (issue 52 L7).
        ("rack=r\u{202E}1", "U+202E, an invisible format"),
        ("rack=r\u{200D}1", "U+200D, an invisible format"),
    ];
    for (label, needle) in cases {
        assert_usage_error(&["--label", label], needle);
    }
    assert_usage_error(
        &[
            "--label", "zone=a", "--label", "node=n", "--label", "zone=b",
        ],
        "--label zone given twice (zone=a and zone=b)",
    );
    let many: Vec<String> = (0..33).map(|i| format!("l{i}=v")).collect();
    let args: Vec<&str> = many.iter().flat_map(|l| ["--label", l.as_str()]).collect();
    assert_usage_error(&args, "--label given 33 times");
}

/// The first frame the agent at `port` answers a `Hello` with, as text.
fn first_answer(port: u16) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let hello = sonde_proto::Message::Hello {
        magic: sonde_proto::MAGIC.into(),
        version: sonde_proto::PROTOCOL_VERSION,
        software: "probe".into(),
        nonce: "42".repeat(32),
        agent: "127.0.0.1".into(),
        ticket: None,
    };
    s.write_all(&sonde_proto::encode(&hello).unwrap()).unwrap();
    let mut len = [0u8; 4];
    s.read_exact(&mut len).unwrap();
    let mut frame = vec![0u8; u32::from_be_bytes(len) as usize];
    s.read_exact(&mut frame).unwrap();
    String::from_utf8(frame).unwrap()
}

#[test]
fn a_ping_stores_the_agents_labels_and_a_peer_without_the_key_learns_none() {
    let agent = Agent::on_loopback_with(&["--label", "zone=a", "--label", "node=n-1"]);
    // Before the key is proven the agent says only its version: no label.
    let welcome = first_answer(agent.port);
    assert!(welcome.contains("\"welcome\""), "{welcome}");
    assert!(welcome.contains("challenge"), "a keyed agent: {welcome}");
    assert!(!welcome.contains("n-1"), "labels before the key: {welcome}");

    let mut c = sonde_cmd();
    c.args(agent.short_test("ping", "1", &["--json", "--no-save"]));
    let o = run(c);
    assert!(o.status.success(), "{}", stderr(&o));
    let doc = doc_of(&o);
    let labels = &doc["start"]["server_labels"];
    assert_eq!(labels, &serde_json::json!({"zone": "a", "node": "n-1"}));
    drop(agent); // it holds the timing lock the next one takes

    // An agent without labels: the key is left out, as before labels existed.
    let plain = Agent::on_loopback();
    let mut c = sonde_cmd();
    c.args(plain.short_test("ping", "1", &["--json", "--no-save"]));
    let o = run(c);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(doc_of(&o)["start"].get("server_labels").is_none());
}

fn fleet_file() -> std::path::PathBuf {
    let mut text = format!("name = \"labelled\"\nport = {FLEET_PORT}\n");
    for k in 1..=2 {
        text += &format!(
            "[[agent]]\nname = \"h{k}\"\naddress = \"{}\"\nlabels = {{ zone = \"file{k}\" }}\n",
            Bridged::addr(k)
        );
    }
    text += "[[test]]\ntype = \"stream\"\nduration = 1\nwarmup = 0.2\n";
    let path = temp_file("labelled.toml");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn a_fleet_stores_each_agents_labels_merged_under_the_files() {
    let Some(lab) = Bridged::new(2) else { return };
    let _agents: Vec<_> = (1..=2)
        .map(|k| {
            let (zone, node) = (format!("zone=own{k}"), format!("node=n{k}"));
            lab.start_agent_with(k, &["--label", &zone, "--label", &node])
        })
        .collect();
    let file = fleet_file();
    let db = temp_file("labelled.db");
    let db = db.to_str().unwrap();
    let o = run(lab.controller(&["fleet", file.to_str().unwrap(), "--db", db]));
    assert!(o.status.success(), "{}", stderr(&o));
    let o = run(lab.controller(&["results", "export", "--db", db]));
    assert!(o.status.success(), "{}", stderr(&o));
    let docs: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(docs.len(), 2, "h1>h2 and h2>h1");
    for d in &docs {
        let s = &d["start"];
        let f = &s["fleet"];
        let k = |end: &str| f[end].as_str().unwrap().trim_start_matches('h').to_string();
        let (src, dst) = (k("source"), k("destination"));
        // As each agent announced itself.
        let own = |k: &str| serde_json::json!({"zone": format!("own{k}"), "node": format!("n{k}")});
        assert_eq!(s["server_labels"], own(&dst), "{s}");
        assert_eq!(s["client_agent"]["labels"], own(&src), "{s}");
        // Merged: the agent's node, the file's zone (the file wins).
        let merged =
            |k: &str| serde_json::json!({"zone": format!("file{k}"), "node": format!("n{k}")});
        assert_eq!(f["source_labels"], merged(&src), "{f}");
        assert_eq!(f["destination_labels"], merged(&dst), "{f}");
    }
}
