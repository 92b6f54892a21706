//! `--stages` across two namespaces: every message split from both ends' kernel
//! timestamps, the stages adding up to the round trips, and busy polling taking the
//! wake-ups away (the other planted causes are in stages_planted.rs).

mod common;

use common::stages::{stage, staged, staged_for, staged_test, two_cpus, STAGES};
use common::*;
use serde_json::Value;

#[test]
fn every_message_splits_into_stages_that_sum_to_its_round_trip() {
    let Some(lab) = Lab::new() else { return };
    if !two_cpus() {
        return;
    }
    let agent = lab.start_agent();
    for extra in [&[][..], &["--udp"][..]] {
        every_message_split(&staged(&lab, &agent, extra), extra);
    }
}

/// The same on the io_uring engine (both ends): ping over TCP and UDP, and rpc over 4
/// TCP or UDP connections of windows of 1 on one worker.
#[test]
fn io_uring_splits_every_message_into_the_same_stages() {
    let Some(lab) = Lab::new() else { return };
    if !two_cpus() {
        return;
    }
    let agent = lab.start_agent();
    let uring = ["--engine", "uring"];
    for (test, extra) in [
        ("ping", &uring[..]),
        ("ping", &["--engine", "uring", "--udp"][..]),
        ("rpc", &["--engine", "uring", "-C", "4"][..]),
        // Four connections answered by one echo socket, their sequence numbers alike.
        ("rpc", &["--engine", "uring", "-C", "4", "--udp"][..]),
    ] {
        let doc = staged_test(&lab, &agent, test, extra);
        for side in ["client", "server"] {
            assert_eq!(doc["end"][side]["engine"], "uring", "{test} {extra:?}");
        }
        every_message_split(&doc, extra);
    }
}

/// Every message of `doc` split (but a few first ones missing a stamp), none out of
/// order, and the stages' means summing to the round trips' mean within 3 %.
fn every_message_split(doc: &Value, extra: &[&str]) {
    let end = &doc["end"];
    let s = &end["stages"];
    let count = end["latency_ns"]["count"].as_u64().unwrap();
    let split = s["split"].as_u64().unwrap();
    assert_eq!(s["disordered"], 0, "{extra:?}: {s}");
    // The first messages may beat the kernel's switching its receive stamps on.
    assert!(
        split + s["missing"].as_u64().unwrap() == count && split * 100 >= count * 99,
        "{extra:?}: {split} of {count} split: {s}"
    );
    for name in STAGES {
        assert_eq!(s["ns"][name]["count"].as_u64(), Some(split), "{name}");
    }
    // Each message's stages sum to its round trip, so the stages' means sum to the
    // mean round trip (of the split messages: all but a few).
    let sum: f64 = STAGES.iter().map(|n| stage(doc, n, "mean")).sum();
    let mean = end["latency_ns"]["mean"].as_f64().unwrap();
    assert!(
        (sum - mean).abs() / mean < 0.03,
        "{extra:?}: stages sum to {sum:.0} ns, the round trips' mean is {mean:.0}"
    );
    // Every interval says where its own round trips went.
    for i in doc["intervals"].as_array().unwrap() {
        assert!(i["stages"]["split"].as_u64().unwrap_or(0) > 0, "{i}");
    }
}

/// Busy polling on both ends: neither application sleeps, so both receive wake-ups fall.
/// What is left of a wake stage is the stack's delivery and the read, common to both
/// modes; how much a sleeping thread's wake-up adds depends on how deep the idle CPU
/// slept (a busy machine's CPUs barely idle), so the runs alternate and the medians of
/// three of each are compared.
#[test]
fn busy_polling_takes_both_wake_ups_away() {
    let Some(lab) = Lab::new() else { return };
    if !two_cpus() {
        return;
    }
    let agent = lab.start_agent();
    let (mut block, mut busy) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        block.push(staged_for(&lab, &agent, "0.5", &[]));
        busy.push(staged_for(&lab, &agent, "0.5", &["--poll", "busy"]));
    }
    let median = |docs: &[Value], f: &dyn Fn(&Value) -> f64| {
        let mut v: Vec<f64> = docs.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        v[1]
    };
    for name in ["server_wake", "client_wake"] {
        let p50 = |d: &Value| stage(d, name, "p50");
        let (b, a) = (median(&block, &p50), median(&busy, &p50));
        // A wake-up of a sleeping thread costs microseconds in a VM: at least a quarter
        // of the stage, and a whole microsecond, goes.
        assert!(
            a < b * 0.75 && b - a > 1_000.0,
            "{name}: block {b:.0} ns, busy {a:.0} ns (P50, medians of 3)"
        );
    }
    let rtt = |d: &Value| d["end"]["latency_ns"]["p50"].as_f64().unwrap();
    let (b, a) = (median(&block, &rtt), median(&busy, &rtt));
    assert!(
        a < b,
        "busy polling lowers the round trip: {b:.0} -> {a:.0} ns"
    );
}
