//! `sonde load` across namespaces: the latency a bulk upload adds equals the drain time of
//! a shaper's queue it fills, and every phase runs, tagged, stored.

use crate::common;

use common::*;

/// The shaper sits in a router on the upload path, with a deep byte queue. TCP keeps it
/// nearly full (no sender-side limit holds it back, unlike a qdisc on the sender's own
/// interface under TCP Small Queues), so every ping request waits behind a full queue:
/// queue bytes / rate. With `--stages`, split by direction: all of it on the way out
/// (forward), none on the way back.
#[test]
fn added_latency_under_upload_is_the_shaped_queue_drain_time() {
    let Some(lab) = Lab::routed(&["tc"]) else {
        return;
    };
    let (rate_bps, limit_bytes) = (20e6, 100_000.0);
    lab.router_tbf("20mbit", "8kb", "100000");
    let drain_ns = limit_bytes * 8.0 / rate_bps * 1e9;
    let agent = lab.start_agent();
    let doc = doc_of(&run(lab.sonde(
        &agent,
        "load",
        &[
            "--phases",
            "idle,upload",
            "-t",
            "3",
            "-P",
            "8",
            "--stages",
            "--json",
            "--no-save",
        ],
    )));
    assert_eq!(doc["test"], "load");
    assert_eq!(doc["end"]["partial"], false, "{}", doc["end"]["error"]);
    let l = &doc["end"]["load"];
    let up = &l["phases"][1];
    assert_eq!(up["phase"], "upload");
    let got = up["upload_bits_per_second"].as_f64().unwrap();
    assert!(got > 0.85 * rate_bps && got < 1.01 * rate_bps, "{got}");
    let added = l["added_latency"].as_array().unwrap();
    assert_eq!(added.len(), 2, "{added:?}");
    for a in added {
        let p50 = a["p50_added_ns"].as_f64().unwrap();
        let err = (p50 - drain_ns).abs() / drain_ns;
        eprintln!(
            "{} ping: +{:.1} ms at P50, the queue drains in {:.1} ms",
            a["transport"],
            p50 / 1e6,
            drain_ns / 1e6
        );
        assert!(
            err < 0.15,
            "{a} against {drain_ns} ns ({:.0} % off)",
            err * 100.0
        );
        let way = |k: &str| a[k].as_f64().unwrap_or_else(|| panic!("no {k}: {a}"));
        let (fwd, rev) = (way("forward_p50_added_ns"), way("reverse_p50_added_ns"));
        eprintln!(
            "  by direction: forward +{:.2} ms, reverse {:+.3} ms",
            fwd / 1e6,
            rev / 1e6
        );
        assert!(
            (fwd - drain_ns).abs() < 0.15 * drain_ns,
            "forward +{fwd} ns"
        );
        assert!(rev.abs() < 0.02 * drain_ns, "reverse {rev:+} ns");
    }
}

/// The default four phases, each with its load's direction, every interval tagged with
/// its phase on one clock; the document is stored as a `load` run.
#[test]
fn every_phase_runs_in_order_tagged_and_stored() {
    let Some(lab) = Lab::needing(&[]) else {
        return;
    };
    let agent = lab.start_agent();
    let db = temp_file("load.db");
    let mut cmd = lab.sonde(&agent, "load", &["-t", "1", "--warmup", "0.3", "--json"]);
    cmd.env("SONDE_DB", &db);
    let doc = doc_of(&run(cmd));
    assert_eq!(doc["end"]["partial"], false, "{}", doc["end"]["error"]);
    let phases = doc["end"]["load"]["phases"].as_array().unwrap();
    let names: Vec<&str> = phases
        .iter()
        .map(|p| p["phase"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["idle", "upload", "download", "both"]);
    let has = |p: &serde_json::Value, key: &str| p[key].as_f64().is_some_and(|v| v > 0.0);
    for p in phases {
        let name = p["phase"].as_str().unwrap();
        let up = matches!(name, "upload" | "both");
        let down = matches!(name, "download" | "both");
        assert_eq!(has(p, "upload_bits_per_second"), up, "{p}");
        assert_eq!(has(p, "download_bits_per_second"), down, "{p}");
        for t in ["udp_rtt_ns", "tcp_rtt_ns"] {
            assert!(p[t]["count"].as_u64().unwrap() >= 50, "{name} {t}: {p}");
        }
    }
    let intervals = doc["intervals"].as_array().unwrap();
    let tags: Vec<&str> = intervals
        .iter()
        .map(|i| i["load"]["phase"].as_str().unwrap())
        .collect();
    let mut order = tags.clone();
    order.dedup();
    assert_eq!(order, names, "one run of intervals per phase, in order");
    let starts: Vec<f64> = intervals
        .iter()
        .map(|i| i["start_s"].as_f64().unwrap())
        .collect();
    assert!(starts.windows(2).all(|w| w[0] < w[1]), "{starts:?}");
    for i in intervals.iter().filter(|i| i["load"]["phase"] == "upload") {
        assert!(i["load"]["udp_rtt_ns"]["p50"].as_u64().is_some(), "{i}");
        assert!(
            i["load"]["upload_bits_per_second"].as_f64().is_some(),
            "{i}"
        );
    }
    let list = sonde_into(&db, &["results", "list"]);
    assert!(stdout(&list).contains("load"), "{}", stdout(&list));
    let _ = std::fs::remove_file(db);
}
