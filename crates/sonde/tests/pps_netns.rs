//! `sonde pps` across two namespaces: loss equal to an nftables rule's own drop count, a
//! zero-loss search that finds a `tc tbf` packet rate, sender and receiver both reported.

mod common;

use common::*;

fn doc_of(o: &std::process::Output) -> serde_json::Value {
    assert!(o.status.success(), "{}{}", stdout(o), stderr(o));
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn measured_loss_equals_the_nftables_drop_counter() {
    let Some(lab) = Lab::needing(&["nft"]) else { return };
    let agent = lab.start_agent();
    // Every 100th UDP packet reaching the agent's namespace is dropped, and counted.
    lab.server_nft_rule(&[
        "meta", "l4proto", "udp", "numgen", "inc", "mod", "100", "==", "0", "counter", "drop",
    ]);
    // A rate the receiver keeps up with, so the rule is the only cause of loss.
    let doc = doc_of(&run(lab.sonde(
        &agent,
        "pps",
        &[
            "--rate", "20000", "--flows", "4", "-t", "2", "--warmup", "0.5", "--json",
        ],
    )));
    let dropped = lab.server_nft_count();
    let p = &doc["end"]["packets"];
    let lost = doc["end"]["lost_packets"].as_u64().unwrap();
    eprintln!(
        "nftables dropped {dropped}, sonde counted {lost} lost of {}",
        p["sender"]["total_packets"]
    );
    assert!(dropped > 400, "{dropped}");
    assert_eq!(lost, dropped);
    assert_eq!(p["socket_drops"], 0);
    assert_eq!(p["flows_with_loss"], 4);
    let sent = p["sender"]["total_packets"].as_u64().unwrap();
    assert_eq!(
        p["receiver"]["total_packets"].as_u64().unwrap() + lost,
        sent
    );
    let loss = p["loss_percent"].as_f64().unwrap();
    assert!((loss - 1.0).abs() < 0.05, "{loss}");
}

#[test]
fn zero_loss_search_finds_a_tbf_packet_rate_within_5_percent() {
    let Some(lab) = Lab::needing(&["tc"]) else { return };
    // tbf meters whole frames: 64-byte packets at 20 Mbit/s are 39062 packets/s. A small
    // queue (limit) makes excess packets drop rather than wait.
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
            "20mbit",
            "burst",
            "8kb",
            "latency",
            "10ms",
        ],
    );
    let shaped = 20e6 / (8.0 * 64.0);
    let agent = lab.start_agent();
    let doc = doc_of(&run(lab.sonde(
        &agent,
        "pps",
        &[
            "--search", "--trial", "1.5", "--warmup", "0.3", "--batch", "8", "--json",
        ],
    )));
    let s = &doc["end"]["search"];
    let result = s["result_pps"].as_f64().unwrap();
    let trials = s["trials"].as_array().unwrap();
    eprintln!(
        "search: {result:.0} packets/s after {} trials; tbf allows {shaped:.0}",
        trials.len()
    );
    // Unthrottled, the sender either overflows the shaper (and the search bisects) or is
    // held to the shaped rate by its own socket buffer (and the first trial passes); both
    // must land on the shaped rate.
    assert!(!trials.is_empty());
    let err = (result - shaped).abs() / shaped;
    assert!(
        err < 0.05,
        "search found {result:.0} packets/s, tbf shapes to {shaped:.0} ({:.1} % off)",
        err * 100.0
    );
    assert_eq!(doc["end"]["lost_packets"], 0);
}

#[test]
fn flows_spread_over_receivers_and_both_sides_are_reported() {
    let Some(lab) = Lab::new() else { return };
    let agent = lab.start_agent();
    let doc = doc_of(&run(lab.sonde(
        &agent,
        "pps",
        &[
            "--flows",
            "8",
            "--tx-threads",
            "2",
            "--rx-threads",
            "2",
            "-t",
            "1",
            "--warmup",
            "0.3",
            "-i",
            "0.5",
            "--json",
        ],
    )));
    let p = &doc["end"]["packets"];
    let (tx, rx) = (
        p["sender"]["packets_per_second"].as_f64().unwrap(),
        p["receiver"]["packets_per_second"].as_f64().unwrap(),
    );
    assert!(tx > 10_000.0 && rx > 10_000.0, "{tx} {rx}");
    assert_eq!(p["sender"]["measured_by"], "client");
    assert_eq!(p["receiver"]["measured_by"], "server");
    assert_eq!(p["size_bytes"], 64);
    assert_eq!(p["udp_payload_bytes"], 22);
    assert_eq!(doc["intervals"].as_array().unwrap().len(), 2);
    assert!(
        doc["intervals"][0]["receiver"]["packets_per_second"]
            .as_f64()
            .unwrap()
            > 0.0
    );
    // Loss is what was sent and never received, over the whole test.
    let lost = doc["end"]["lost_packets"].as_u64().unwrap();
    let sent = p["sender"]["total_packets"].as_u64().unwrap();
    assert_eq!(
        p["receiver"]["total_packets"].as_u64().unwrap() + lost,
        sent
    );
    assert_eq!(p["duplicated_packets"], 0);
}

#[test]
fn packet_size_above_the_mtu_is_refused() {
    let Some(lab) = Lab::new() else { return };
    let agent = lab.start_agent();
    let o = run(lab.sonde(&agent, "pps", &["--size", "1600", "-t", "1"]));
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.contains("--size") && err.contains("MTU"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}
