//! A run against an iperf3 far end is a stream run like any in the store: `sonde stream
//! --iperf3` twice against Debian's `iperf3 -s` across two namespaces, saved into a
//! temporary store; `results list` and `show` read them back with the far end's figures
//! marked as measured by the iperf3 server (its version) and what iperf3 does not report
//! absent, not zero; `compare` names both runs and their throughput (the iperf3 server's
//! figure); `report` renders them.

use crate::common;

use common::serve_proc::{iperf3_server_in_lab, iperf3_server_json};
use common::*;
use serde_json::Value;

/// `iperf3 --version`'s name for itself (`iperf 3.12`): what its server sends in its
/// results as `server_output`'s version.
fn iperf3_version() -> String {
    let o = run({
        let mut c = std::process::Command::new("iperf3");
        c.arg("--version");
        c
    });
    let first = stdout(&o).lines().next().unwrap_or_default().to_string();
    first
        .split(" (")
        .next()
        .unwrap_or_default()
        .trim()
        .to_string()
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn iperf3_runs_are_stored_listed_shown_compared_and_reported() {
    let Some(lab) = Lab::needing(&["iperf3", "ss"]) else {
        return;
    };
    let db = temp_file("iperf3-store.db");
    let who = format!("iperf3 server ({})", iperf3_version());
    let mut theirs = Vec::new();
    for label in ["iperf3-one", "iperf3-two"] {
        let server = iperf3_server_in_lab(&lab);
        let mut c = Lab::in_ns(&lab.client, SONDE);
        c.env("SONDE_DB", &db)
            .args([
                "stream",
                SERVER_ADDR,
                "--iperf3",
                "-t",
                "1",
                "--warmup",
                "0",
            ])
            .args(["--label", label]);
        let o = run(c);
        assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
        assert!(stderr(&o).contains("saved as run"), "{}", stderr(&o));
        theirs.push(iperf3_server_json(server));
    }

    let list = stdout(&sonde_into(&db, &["results", "list"]));
    assert_eq!(list.matches("┆ stream ┆").count(), 2, "{list}");
    assert!(
        list.contains("iperf3-one") && list.contains("iperf3-two"),
        "{list}"
    );

    let mut docs = Vec::new();
    for (id, json) in ["1", "2"].into_iter().zip(&theirs) {
        let show = sonde_into(&db, &["results", "show", id]);
        assert!(show.status.success(), "{}", stderr(&show));
        let doc: Value = serde_json::from_slice(&show.stdout).unwrap();
        assert_eq!(doc["test"], "stream");
        assert_eq!(doc["start"]["server_command"], who.as_str(), "run {id}");
        let (s, r) = (&doc["end"]["sender"], &doc["end"]["receiver"]);
        assert_eq!(doc["end"]["partial"], false, "run {id}");
        // The far end's side is the iperf3 server's, named with its version, and its
        // bytes are the ones it printed for the run, byte for byte.
        assert_eq!(r["measured_by"], "server");
        assert_eq!(r["host"], who.as_str(), "run {id}");
        assert_eq!(r["bytes"], json["end"]["sum_received"]["bytes"], "run {id}");
        assert!(
            r["notes"].as_array().unwrap().iter().any(|n| n
                .as_str()
                .unwrap()
                .starts_with(&format!("measured by {who}"))),
            "{r}"
        );
        // What iperf3 does not measure stays absent through the store, never zero.
        let conn = &r["connections"]["per_connection"][0];
        assert!(
            conn["rtt_us"].is_null() && conn["snd_cwnd_segments"].is_null(),
            "run {id}: {conn}"
        );
        assert!(r["nic"].is_null() && r["cpu"]["host"].is_null(), "{r}");
        // Ours is measured as any stream's sender: TCP_INFO, CPU.
        assert_eq!(s["measured_by"], "client");
        assert!(s["connections"]["per_connection"][0]["rtt_us"].as_u64() > Some(0));
        assert!(f(&s["cpu"]["process_cpu_s"]) > 0.0, "{s}");
        eprintln!(
            "run {id}: iperf3 server received {:.1} Mbit/s, we sent {:.1} Mbit/s",
            f(&r["bits_per_second"]) / 1e6,
            f(&s["bits_per_second"]) / 1e6
        );
        docs.push(doc);
    }

    // Compared by the iperf3 server's figure, each group's own.
    let cmp = sonde_into(&db, &["compare", "iperf3-one", "iperf3-two", "--json"]);
    assert!(cmp.status.success(), "{}", stderr(&cmp));
    let rows: Value = serde_json::from_slice(&cmp.stdout).unwrap();
    let row = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["metric"] == "receiver_gbit_per_s")
        .unwrap_or_else(|| panic!("no throughput row: {rows}"));
    for (side, doc) in [("value_a", &docs[0]), ("value_b", &docs[1])] {
        let want = f(&doc["end"]["receiver"]["bits_per_second"]) / 1e9;
        assert!((f(&row[side]) - want).abs() < 1e-9, "{side}: {row}");
    }
    let text = stdout(&sonde_into(&db, &["compare", "iperf3-one", "iperf3-two"]));
    assert!(
        text.contains("iperf3-one")
            && text.contains("iperf3-two")
            && text.contains("Throughput received"),
        "{text}"
    );

    let html = temp_file("iperf3-report.html");
    let report = sonde_into(
        &db,
        &[
            "report",
            "iperf3-one",
            "iperf3-two",
            "-o",
            html.to_str().unwrap(),
        ],
    );
    assert!(report.status.success(), "{}", stderr(&report));
    assert!(stdout(&report).contains("(2 runs)"), "{}", stdout(&report));
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        page.contains("--iperf3") && page.contains(&who),
        "the report names the runs and their far end"
    );
}
