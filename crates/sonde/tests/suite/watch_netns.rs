//! `sonde watch -- COMMAND`: the evidence around a workload agrees with what the workload
//! itself counted, and the command's exit code is sonde's.

use crate::common;

use common::*;

/// A stream run under watch: the watched interface's sent bytes match the stream's own
/// count of bytes sent (the whole test: warm-up and cool-down too), within 2 % once the
/// headers are taken out: a veth counts each (GSO) packet with its Ethernet, IPv4 and TCP
/// headers (14 + 20 + 32 with timestamps). What remains apart, 0.9-1.4 % here, is more on
/// the wire than the stream counted.
#[test]
fn watched_nic_bytes_match_the_streams_own_count() {
    let Some(lab) = Lab::needing(&[]) else {
        return;
    };
    let agent = lab.start_agent();
    let (watch_doc, stream_doc) = (temp_file("watch.json"), temp_file("stream.json"));
    let port = agent.port.to_string();
    let mut cmd = Lab::in_ns(&lab.client, SONDE);
    cmd.args(["watch", "--peer", lab.server_addr, "-i", "0.5", "--output"])
        .arg(&watch_doc)
        .args(["--", SONDE, "stream", lab.server_addr, "--port", &port])
        .args(["-t", "2", "--warmup", "0.5", "--no-save", "--output"])
        .arg(&stream_doc);
    let o = run(cmd);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    let (w, s) = (read_doc(&watch_doc), read_doc(&stream_doc));
    assert_eq!(w["test"], "watch");
    assert_eq!(w["end"]["watch"]["exit_code"], 0);
    assert_eq!(w["end"]["watch"]["iface"], lab.client_if.as_str());
    let nic = &w["end"]["watch"]["nic"];
    let nic_tx = nic["tx_bytes"].as_f64().unwrap();
    let payload = nic_tx - 66.0 * nic["tx_packets"].as_f64().unwrap();
    let sent = s["end"]["sender"]["total_bytes"].as_f64().unwrap();
    let err = (payload - sent).abs() / sent;
    eprintln!(
        "interface sent {nic_tx} bytes ({payload} of payload), the stream {sent} ({:.2} % apart)",
        err * 100.0
    );
    assert!(
        err < 0.02,
        "interface {payload} B of payload, stream {sent} B"
    );
    let intervals = w["intervals"].as_array().unwrap();
    assert!(intervals.len() >= 5, "{}", intervals.len());
    let busy = intervals
        .iter()
        .filter(|i| i["watch"]["tx_bits_per_second"].as_f64().unwrap() > 1e8)
        .count();
    assert!(
        busy >= 3,
        "the stream shows in the intervals: {intervals:?}"
    );
    assert!(!intervals[0]["watch"]["per_cpu_busy_percent"]
        .as_array()
        .unwrap()
        .is_empty());
    // The hypervisor's steal, in every interval, within what the CPUs were busy.
    for i in intervals {
        let (steal, busy) = (
            &i["watch"]["steal_percent"],
            &i["watch"]["cpu_busy_percent"],
        );
        let (steal, busy) = (steal.as_f64().unwrap(), busy.as_f64().unwrap());
        assert!((0.0..=busy).contains(&steal), "{i}");
    }
    for f in [watch_doc, stream_doc] {
        let _ = std::fs::remove_file(f);
    }
}

#[test]
fn the_commands_exit_code_is_sondes_and_the_watch_is_stored() {
    let db = temp_file("watch.db");
    let o = sonde_into(
        &db,
        &["watch", "-i", "0.2", "--", "sh", "-c", "sleep 0.5; exit 7"],
    );
    assert_eq!(o.status.code(), Some(7), "{}", stderr(&o));
    let list = sonde_into(&db, &["results", "list"]);
    assert!(stdout(&list).contains("watch"), "{}", stdout(&list));
    let o = sonde_into(&db, &["watch", "--iface", "no-such-if0", "--", "true"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--iface"), "{}", stderr(&o));
    let o = sonde_into(&db, &["watch", "--", "/nonexistent/command"]);
    assert_ne!(o.status.code(), Some(0));
    assert!(
        stderr(&o).contains("/nonexistent/command"),
        "{}",
        stderr(&o)
    );
    let _ = std::fs::remove_file(db);
}

/// With --json stdout is one JSON document: the watched command's own output goes to
/// stderr.
#[test]
fn a_watched_commands_output_stays_off_a_json_stdout() {
    let db = temp_file("watch-json.db");
    let o = sonde_into(
        &db,
        &["watch", "--json", "-i", "0.2", "--", "echo", "hello"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("stdout is not one JSON document ({e}): {}", stdout(&o)));
    assert_eq!(doc["test"], "watch");
    assert!(stderr(&o).contains("hello"), "{}", stderr(&o));
    let _ = std::fs::remove_file(db);
}
