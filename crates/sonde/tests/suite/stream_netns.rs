//! `sonde serve` + `sonde stream` across two network namespaces: both sides' figures
//! reconcile, and a `tc tbf` rate limit is measured as what it is, on either engine.

use crate::common;

use common::shaped::{held_to_the_shaper, Against};
use common::*;

fn f(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn sender_and_receiver_reconcile() {
    let Some(lab) = Lab::new() else { return };
    let agent = lab.start_agent();
    let out = temp_file("reconcile.json");
    let mut cmd = lab.stream(
        &agent,
        &[
            "-P", "4", "-t", "2", "--warmup", "0.5", "-i", "0.5", "--output",
        ],
    );
    cmd.arg(&out);
    let o = run(cmd);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    let doc = read_doc(&out);
    let end = &doc["end"];
    assert_eq!(doc["schema_version"], 1);
    assert_eq!(end["partial"], false);
    let (s, r) = (&end["sender"], &end["receiver"]);
    assert_eq!(s["measured_by"], "client");
    assert_eq!(r["measured_by"], "server");
    // Every byte written was read: totals over the whole test match exactly.
    assert_eq!(s["total_bytes"], r["total_bytes"]);
    assert!(s["total_bytes"].as_u64().unwrap() > 0);
    // Inside the window the two clocks differ by the control message's flight time.
    let (sb, rb) = (f(&s["bytes"]), f(&r["bytes"]));
    assert!((sb - rb).abs() / sb < 0.02, "window bytes {sb} vs {rb}");
    assert_eq!(s["connections"]["count"], 4);
    let per: u64 = s["connections"]["per_connection"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["bytes"].as_u64().unwrap())
        .sum();
    assert_eq!(per, s["bytes"].as_u64().unwrap());
    assert_eq!(doc["intervals"].as_array().unwrap().len(), 4);
    // The veth carries the test: its packet counters moved on both sides.
    assert_eq!(s["nic"]["iface"], lab.client_if.as_str());
    assert_eq!(r["nic"]["iface"], lab.server_if.as_str());
    assert!(s["nic"]["tx_packets"].as_u64().unwrap() > 1000);
    // Both namespaces run on one kernel: the host's CPU is counted once, not per side.
    assert!(f(&s["cpu"]["process_cpu_s"]) > 0.0);
    assert!(f(&r["cpu"]["process_cpu_s"]) > 0.0);
    let one = &doc["end"]["one_host"];
    assert!(one["cpu"]["host"]["idle_percent"].is_number(), "{one}");
    assert!(f(&one["cycles_per_byte"]) > 0.0, "{one}");
    for side in [s, r] {
        assert!(side["cpu"]["host"].is_null() && side["cycles_per_byte"].is_null());
    }
    // Both sides' inventories are in the document, each seeing its own namespace's NIC, and
    // a guest names its hypervisor (the CPU's hypervisor leaf), not "unknown".
    let guest = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap()
        .split_whitespace()
        .any(|f| f == "hypervisor");
    for (side, iface) in [("client", &lab.client_if), ("server", &lab.server_if)] {
        let inv = &doc["start"][side]["inventory"];
        if guest {
            let h = inv["hypervisor"].as_str().unwrap_or("none");
            assert!(!h.contains("unknown") && h != "none", "{side}: {h}");
        }
        assert!(
            !inv["cpu"]["online"].as_array().unwrap().is_empty(),
            "{side}"
        );
        assert!(
            inv["nics"]
                .as_array()
                .unwrap()
                .iter()
                .any(|n| n["name"] == iface.as_str()),
            "{side}: {}",
            inv["nics"]
        );
    }
    let _ = std::fs::remove_file(out);
}

#[test]
fn reverse_and_bidir_reconcile() {
    let Some(lab) = Lab::new() else { return };
    let agent = lab.start_agent();
    for mode in ["--reverse", "--bidir"] {
        let out = temp_file("dir.json");
        let mut cmd = lab.stream(
            &agent,
            &[mode, "-P", "2", "-t", "1", "--warmup", "0.3", "--output"],
        );
        cmd.arg(&out);
        let o = run(cmd);
        assert!(o.status.success(), "{mode}: {}{}", stdout(&o), stderr(&o));
        let end = read_doc(&out)["end"].clone();
        let pairs = if mode == "--bidir" {
            vec![end.clone(), end["reverse"].clone()]
        } else {
            vec![end.clone()]
        };
        for p in pairs {
            assert_eq!(
                p["sender"]["total_bytes"], p["receiver"]["total_bytes"],
                "{mode}"
            );
        }
        if mode == "--reverse" {
            assert_eq!(end["sender"]["measured_by"], "server");
        }
        let _ = std::fs::remove_file(out);
    }
}

/// The io_uring engine, with and without zero-copy sends: every byte written was read,
/// the result names the engine, and a zero-copy sender says how its sends went.
#[test]
fn uring_sender_and_receiver_reconcile() {
    let Some(lab) = Lab::new() else { return };
    let agent = lab.start_agent();
    for zerocopy in [false, true] {
        let out = temp_file("uring.json");
        let mut args = vec!["--engine", "uring", "-P", "4", "-t", "1", "--warmup", "0.3"];
        if zerocopy {
            args.push("--zerocopy");
        }
        args.push("--output");
        let mut cmd = lab.stream(&agent, &args);
        cmd.arg(&out);
        let o = run(cmd);
        assert!(o.status.success(), "{args:?}: {}{}", stdout(&o), stderr(&o));
        let doc = read_doc(&out);
        let end = &doc["end"];
        assert_eq!(end["partial"], false, "{args:?}");
        let (s, r) = (&end["sender"], &end["receiver"]);
        assert_eq!(s["total_bytes"], r["total_bytes"], "{args:?}");
        assert!(s["total_bytes"].as_u64().unwrap() > 0, "{args:?}");
        assert_eq!(s["connections"]["count"], 4);
        let text = doc.to_string();
        assert!(
            text.contains("\"uring\""),
            "{args:?}: the engine is not named"
        );
        assert_eq!(text.contains("send_zc:"), zerocopy, "{args:?}");
        let _ = std::fs::remove_file(out);
    }
    // On the kernel engine, zero-copy is refused naming the flag; without --engine it
    // asks for io_uring.
    let o = run(lab.stream(&agent, &["--zerocopy", "--engine", "kernel", "-t", "1"]));
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--zerocopy"), "{}", stderr(&o));
    let args = ["--zerocopy", "-t", "0.5", "--warmup", "0.2", "--json"];
    let doc = doc_of(&run(lab.stream(&agent, &args)));
    assert_eq!(doc["start"]["spec"]["engine"], "uring");
    assert_eq!(
        doc["end"]["sender"]["engine"], "uring",
        "{}",
        doc["end"]["sender"]
    );
}

#[test]
fn tbf_rate_limit_is_measured_within_3_percent() {
    tbf_rate_limit_is_measured("kernel");
}

#[test]
fn tbf_rate_limit_is_measured_within_3_percent_with_uring() {
    tbf_rate_limit_is_measured("uring");
}

/// A `tc tbf` of 200 Mbit/s on the client's veth, measured by a stream on `engine`.
fn tbf_rate_limit_is_measured(engine: &str) {
    let Some(lab) = Lab::needing(&["tc"]) else {
        return;
    };
    let rate_bps = 200e6;
    lab.client_cmd(
        "tc",
        &[
            "qdisc",
            "add",
            "dev",
            &lab.client_if,
            "root",
            "tbf",
            "rate",
            "200mbit",
            "burst",
            "64kb",
            "latency",
            "50ms",
        ],
    );
    let agent = lab.start_agent();
    let mtu_out = run({
        let mut c = Lab::in_ns(&lab.client, "cat");
        c.arg(format!("/sys/class/net/{}/mtu", lab.client_if));
        c
    });
    let mtu: f64 = stdout(&mtu_out).trim().parse().unwrap();
    let one = || {
        let out = temp_file("tbf.json");
        let mut cmd = lab.stream(
            &agent,
            &[
                "--engine", engine, "-P", "1", "-t", "2", "--warmup", "1.5", "--output",
            ],
        );
        cmd.arg(&out);
        let o = run(cmd);
        assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
        let doc = read_doc(&out);
        let _ = std::fs::remove_file(out);
        doc
    };
    // The receiver's goodput against the payload the tbf lets through, and the receiving
    // veth's byte counter (whole frames) against the shaped rate itself, each the other's
    // second reference: 3 % of either ([`held_to_the_shaper`]).
    held_to_the_shaper(engine, 0.03, one, |doc| {
        let r = &doc["end"]["receiver"];
        // tbf meters whole frames: payload + TCP/IP headers (MTU - MSS) + 14 bytes of
        // Ethernet.
        let mss = r["connections"]["per_connection"][0]["snd_mss_bytes"]
            .as_u64()
            .unwrap() as f64;
        let mss = if mss > 0.0 { mss } else { 1448.0 };
        let payload = mss / (mtu + 14.0);
        let got = f(&r["bits_per_second"]);
        let wire = f(&r["nic"]["rx_bytes"]) * 8.0 / f(&r["seconds"]);
        vec![
            Against {
                of: "receiver".into(),
                ours: got,
                theirs: wire * payload,
                shaped: rate_bps * payload,
            },
            Against {
                of: "receiver NIC".into(),
                ours: wire,
                theirs: got / payload,
                shaped: rate_bps,
            },
        ]
    });
}
