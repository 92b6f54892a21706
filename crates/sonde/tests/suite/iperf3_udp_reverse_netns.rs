//! `sonde pps --iperf3 -R` against Debian's real `iperf3 -s`, across two namespaces: the
//! iperf3 server sends UDP, we receive and count. Ground truth is nftables on our input:
//! a named counter sees every data datagram that reached this host, a second rule drops
//! datagrams by sequence number (iperf3's 32-bit counter, 8 bytes into the payload) and
//! counts them. Our received count must be exactly what was let through, the loss exactly
//! what was dropped; the sender's figures are the iperf3 server's, marked as its own;
//! the jitter is ours, per interval and at the end, marked as measured by us.

use crate::common;

use std::time::Duration;

use common::*;

/// One-sided margin between our packets in an interval and the iperf3 server's (its
/// sender's) in the interval of the same index: as in `iperf3_udp_netns`, the two ends'
/// edges start a control round trip and a thread start apart. 2 %.
const WITHIN: f64 = 0.02;

fn f(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// On `ns`'s input: counter `arrived` for every datagram of iperf3's UDP streams from
/// port 5201 (longer than the 4-byte connect reply), then a drop of those numbered `seqs`.
fn count_and_drop(ns: &str, seqs: &str) {
    let nft = |args: &[&str]| {
        let o = Lab::in_ns(ns, "nft").args(args).output().unwrap();
        assert!(o.status.success(), "nft {args:?}: {}", stderr(&o));
    };
    nft(&["add", "table", "inet", "iperf3rev"]);
    nft(&["add", "counter", "inet", "iperf3rev", "arrived"]);
    nft(&["add", "counter", "inet", "iperf3rev", "dropped"]);
    let chain = "{ type filter hook input priority 0 ; }";
    nft(&["add", "chain", "inet", "iperf3rev", "in", chain]);
    let rule = |tail: &[&str]| {
        let head = [
            "add",
            "rule",
            "inet",
            "iperf3rev",
            "in",
            "udp",
            "sport",
            "5201",
        ];
        nft(&[&head[..], tail].concat());
    };
    rule(&["udp", "length", "gt", "100", "counter", "name", "arrived"]);
    rule(&["@th,128,32", seqs, "counter", "name", "dropped", "drop"]);
}

#[test]
fn pps_iperf3_reverse_counts_what_reached_us_exactly() {
    let Some(lab) = Lab::needing(&["iperf3", "nft", "ss"]) else {
        return;
    };
    // Datagrams 100, 700 and 1500 of each of the two streams (1000 a second each).
    count_and_drop(&lab.client, "{ 100, 700, 1500 }");
    let mut server = common::serve_proc::iperf3_server_in_lab(&lab);
    let t = std::time::Instant::now();
    let o = run({
        let mut c = Lab::in_ns(&lab.client, SONDE);
        c.args(["pps", SERVER_ADDR, "--iperf3", "-R", "--json", "--no-save"])
            .args(["--flows", "2", "--rate", "2000", "--size", "242"])
            .args(["-t", "2", "--warmup", "0"]);
        c
    });
    eprintln!("sonde pps --iperf3 -R -t 2 took {:?}", t.elapsed());
    assert!(o.status.success(), "{}", stderr(&o));
    let doc = doc_of(&o);
    wait_with_timeout(&mut server, Duration::from_secs(10)).expect("iperf3 -s ends");
    let json: serde_json::Value =
        serde_json::from_slice(&server.wait_with_output().unwrap().stdout).unwrap();
    let arrived = nft_named_counter(&lab.client, "iperf3rev", "arrived");
    let dropped = nft_named_counter(&lab.client, "iperf3rev", "dropped");
    assert_eq!(dropped, 6, "three datagrams of each stream dropped");
    eprintln!("nftables: {arrived} arrived, {dropped} dropped");
    assert_eq!(doc["start"]["spec"]["reverse"], true, "{}", doc["start"]);
    let p = &doc["end"]["packets"];
    assert_eq!(doc["end"]["partial"], false, "{}", doc["end"]);
    // Ours: the receiver, in the document's server place, measured here.
    let rx = &p["receiver"];
    assert_eq!(rx["measured_by"], "server");
    assert!(!rx["host"].as_str().unwrap().starts_with("iperf3"), "{rx}");
    assert_eq!(
        rx["total_packets"].as_u64(),
        Some(arrived - dropped),
        "ours against nftables' count of what was let through: {rx}"
    );
    assert_eq!(p["socket_drops"].as_u64(), Some(0), "{p}");
    // Theirs: the sender, the iperf3 server's own count, marked as its.
    let tx = &p["sender"];
    assert!(
        tx["host"]
            .as_str()
            .unwrap()
            .starts_with("iperf3 server (iperf 3."),
        "{tx}"
    );
    let sent = json["end"]["sum"]["packets"].as_u64().unwrap();
    assert_eq!(tx["total_packets"].as_u64(), Some(sent), "{tx}");
    assert_eq!(sent, arrived, "everything it sent reached our input");
    assert_eq!(p["lost_packets"].as_u64(), Some(dropped), "{p}");
    // The jitter: ours, measured by the receiver (a veth: well under a millisecond).
    let j = &p["jitter"];
    assert_eq!(j["measured_by"], "server", "{j}");
    assert_eq!(j["host"], rx["host"], "{j}");
    let ours = f(&j["jitter_ms"]);
    eprintln!("jitter: ours {ours:.4} ms");
    assert!(ours > 0.0 && ours < 5.0, "{j}");
    let per: Vec<f64> = j["per_flow_ms"].as_array().unwrap().iter().map(f).collect();
    assert_eq!(per.len(), 2, "{j}");
    assert!((ours - (per[0] + per[1]) / 2.0).abs() < 1e-9, "{j}");
    // Per interval: our received packets against the iperf3 server's sent ones, and our
    // jitter in each.
    let intervals = doc["intervals"].as_array().unwrap();
    let our = common::serve_proc::our_packets(&doc, "receiver");
    let their = common::serve_proc::their_packets(&json);
    assert!(our.len() >= 2 && their.len() >= 2, "{our:?} {their:?}");
    for (k, (o, t)) in our.iter().zip(&their).enumerate() {
        eprintln!(
            "interval {k}: ours {o:.0} iperf3 {t:.0} ({:+.2}%)",
            (o / t - 1.0) * 100.0
        );
        assert!((o - t).abs() / t < WITHIN, "interval {k}: {o} vs {t}");
    }
    for i in intervals {
        let jm = f(&i["receiver"]["jitter_ms"]);
        assert!(jm > 0.0 && jm < 5.0, "{i}");
    }
}
