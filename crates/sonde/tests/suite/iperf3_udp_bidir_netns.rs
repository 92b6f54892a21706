//! iperf3's UDP `--bidir` both ways against Debian's real `iperf3`, across two
//! namespaces: `sonde pps --iperf3 --bidir` against `iperf3 -s`, and `iperf3 -c -u
//! --bidir` against `sonde serve --iperf3`. Loss is planted with nftables on each
//! direction's receiver's input by sequence number (iperf3's 32-bit counter, 8 bytes into
//! the payload): toward port 5201 on the server's, from it on the client's. Each
//! direction's loss (iperf3's own, ours, the document's) must equal its nftables counter;
//! per interval each direction's packets are held to iperf3's own `-J` of the same run.

use crate::common;

use common::nft::plant_iperf3_loss as plant;
use common::serve_proc::iperf3_served_doc as served_doc;
use common::*;

/// One-sided margin between our packets in an interval and iperf3's in the interval of
/// the same index: the 1 %. The two ends' edges now fall within a millisecond of
/// each other (a control one-way trip and a wake-up), so an edge moves at most one paced
/// batch a flow from one interval to the next: 4 of 1000 a flow, 0.4 %. (Until the
/// control socket's wait was a ppoll, our edges woke 4-8 ms late on SO_RCVTIMEO's jiffies:
/// our first interval ran +0.4 to +1.0 % long, the last as much short.)
const WITHIN: f64 = 0.01;
/// One-sided margin between a direction's packet rate over the whole test in the served
/// document and in `iperf3 -c`'s own `-J`: the same run's two ends, their windows a round
/// trip and a thread start apart in 2 s. 1 %.
const AGREE: f64 = 0.01;

fn f(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// Packets in each of our intervals: `pick` chooses the side of the direction.
fn ours(doc: &serde_json::Value, pick: fn(&serde_json::Value) -> &serde_json::Value) -> Vec<f64> {
    doc["intervals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| f(&pick(i)["packets_per_second"]) * (f(&i["end_s"]) - f(&i["start_s"])))
        .collect()
}

/// Packets in each of iperf3's whole intervals, of its sum `sum` (`sum`: the client's
/// sending; `sum_bidir_reverse`: the server's).
fn theirs(json: &serde_json::Value, sum: &str) -> Vec<f64> {
    json["intervals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| &i[sum])
        .filter(|s| f(&s["seconds"]) > 0.5)
        .map(|s| f(&s["packets"]))
        .collect()
}

fn intervals_agree(ours: &[f64], theirs: &[f64], what: &str) {
    common::serve_proc::intervals_within(ours, theirs, what, WITHIN);
}

#[test]
fn pps_iperf3_bidir_counts_each_directions_planted_loss_exactly() {
    let Some(lab) = Lab::needing(&["iperf3", "nft", "ss"]) else {
        return;
    };
    // Each stream 1000 datagrams a second each way: ours lose 100 and 700 of each of
    // the two on the server's input, the server's 50, 600 and 1000 on ours.
    plant(&lab.server, "bidirfwd", "dport", "{ 100, 700 }");
    plant(&lab.client, "bidirrev", "sport", "{ 50, 600, 1000 }");
    let (doc, json) = common::serve_proc::pps_against_iperf3_server(
        &lab,
        &[
            "--bidir", "--flows", "2", "--rate", "2000", "--size", "242", "--batch", "4", "-t",
            "2", "--warmup", "0",
        ],
    );
    let fwd = nft_counted(&lab.server, "bidirfwd", "packets");
    let rev = nft_counted(&lab.client, "bidirrev", "packets");
    eprintln!("nftables: {fwd} dropped toward the server, {rev} toward us");
    assert_eq!((fwd, rev), (4, 6), "each direction's planted drops met");
    assert_eq!(doc["start"]["spec"]["bidir"], true, "{}", doc["start"]);
    let end = &doc["end"];
    assert_eq!(end["partial"], false, "{end}");
    let (p, r) = (&end["packets"], &end["reverse"]);
    let sum = &json["end"]["sum"];
    // Forward: we sent, iperf3 received and counted; its count, the document's, exact.
    assert_eq!(sum["lost_packets"].as_u64(), Some(fwd), "{sum}");
    assert_eq!(p["lost_packets"].as_u64(), Some(fwd), "{p}");
    let sent = p["sender"]["total_packets"].as_u64().unwrap();
    assert_eq!(Some(sent), sum["packets"].as_u64());
    assert_eq!(p["receiver"]["total_packets"].as_u64(), Some(sent - fwd));
    assert!(p["receiver"]["host"]
        .as_str()
        .unwrap()
        .starts_with("iperf3 server (iperf 3."));
    // Reverse: iperf3 sent, we received and counted (iperf3's server prints no loss for
    // its sending: 3.12 keeps none of the client's count).
    assert_eq!(r["lost_packets"].as_u64(), Some(rev), "{r}");
    let their_sent = json["end"]["sum_sent_bidir_reverse"]["packets"].as_u64();
    assert_eq!(r["sender"]["total_packets"].as_u64(), their_sent, "{r}");
    assert_eq!(r["sender"]["measured_by"], "server", "{r}");
    assert_eq!(r["receiver"]["measured_by"], "client", "{r}");
    assert_eq!(
        r["receiver"]["total_packets"].as_u64(),
        their_sent.map(|s| s - rev),
        "ours: all it sent but what was dropped"
    );
    assert_eq!(r["socket_drops"].as_u64(), Some(0), "{r}");
    assert_eq!(r["jitter"]["measured_by"], "client", "{r}");
    intervals_agree(
        &ours(&doc, |i| &i["sender"]),
        &theirs(&json, "sum"),
        "--bidir forward",
    );
    intervals_agree(
        &ours(&doc, |i| &i["reverse"]["receiver"]),
        &theirs(&json, "sum_bidir_reverse"),
        "--bidir reverse",
    );
}

/// A direction's packets a second over the whole test in `iperf3 -c`'s `-J`, sum `name`.
fn rate(json: &serde_json::Value, name: &str) -> f64 {
    let s = &json["end"][name];
    f(&s["packets"]) / f(&s["seconds"])
}

#[test]
fn iperf3_udp_bidir_client_against_serve_iperf3_counts_both_ways() {
    let Some(lab) = Lab::needing(&["iperf3", "nft"]) else {
        return;
    };
    let (serve, rx) = common::serve_proc::iperf3_in_lab(&lab, &["--iperf3-allow", "198.18.0.0/15"]);
    plant(&lab.server, "bidirfwd", "dport", "{ 50, 900 }");
    plant(&lab.client, "bidirrev", "sport", "{ 10, 500, 900 }");
    // iperf3_json asserts iperf3 -c exits 0.
    let udp = [
        "-u", "-t", "2", "-b", "8M", "-l", "1000", "-P", "2", "--bidir",
    ];
    let json = common::serve_proc::iperf3_json(&lab, &udp);
    let doc = served_doc(&rx);
    let fwd = nft_counted(&lab.server, "bidirfwd", "packets");
    let rev = nft_counted(&lab.client, "bidirrev", "packets");
    eprintln!("nftables: {fwd} dropped toward us, {rev} toward the client");
    assert_eq!((fwd, rev), (4, 6), "each direction's planted drops met");
    let end = &doc["end"];
    assert_eq!(end["partial"], false, "{end}");
    assert!(end["error"].is_null(), "{end}");
    let (p, r) = (&end["packets"], &end["reverse"]);
    // Forward: iperf3 sent, we received and counted as iperf3 counts; it prints ours.
    assert_eq!(p["receiver"]["measured_by"], "server", "{p}");
    assert_eq!(p["lost_packets"].as_u64(), Some(fwd), "{p}");
    assert_eq!(json["end"]["sum"]["lost_packets"].as_u64(), Some(fwd));
    let sent = json["end"]["sum_sent"]["packets"].as_u64().unwrap();
    assert_eq!(p["sender"]["total_packets"].as_u64(), Some(sent), "{p}");
    assert_eq!(p["receiver"]["total_packets"].as_u64(), Some(sent - fwd));
    // Reverse: we sent, iperf3 received and counted.
    assert_eq!(r["sender"]["measured_by"], "server", "{r}");
    assert_eq!(r["lost_packets"].as_u64(), Some(rev), "{r}");
    let sum_rev = &json["end"]["sum_bidir_reverse"];
    assert_eq!(sum_rev["lost_packets"].as_u64(), Some(rev), "{sum_rev}");
    let ours_sent = r["sender"]["total_packets"].as_u64().unwrap();
    assert_eq!(sum_rev["packets"].as_u64(), Some(ours_sent), "{sum_rev}");
    // iperf3 stops reading at its TEST_END, before ours: what we sent past its last
    // sequence number is neither received nor lost, and counted apart.
    let uncounted = r["uncounted_packets"]
        .as_u64()
        .expect("iperf3 counts by sequence");
    eprintln!("reverse: {uncounted} sent past iperf3's last sequence number");
    assert_eq!(
        r["receiver"]["total_packets"]
            .as_u64()
            .map(|n| n + rev + uncounted),
        Some(ours_sent),
        "{r}"
    );
    // Both directions' rates: iperf3's own against the document's, within 1 %.
    for (what, theirs, ours) in [
        ("forward", rate(&json, "sum_sent"), &p["receiver"]),
        (
            "reverse",
            rate(&json, "sum_received_bidir_reverse"),
            &r["sender"],
        ),
    ] {
        let ours = f(&ours["packets_per_second"]);
        eprintln!(
            "{what}: ours {ours:.1} iperf3 {theirs:.1} packets/s ({:+.2}%)",
            (ours / theirs - 1.0) * 100.0
        );
        assert!((ours - theirs).abs() / theirs < AGREE, "{what}");
    }
    intervals_agree(
        &ours(&doc, |i| &i["receiver"]),
        &theirs(&json, "sum"),
        "iperf3 -c --bidir forward",
    );
    intervals_agree(
        &ours(&doc, |i| &i["reverse"]["sender"]),
        &theirs(&json, "sum_bidir_reverse"),
        "iperf3 -c --bidir reverse",
    );
    drop(serve);
}
