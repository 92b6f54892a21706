//! `--stages` across two namespaces: every message split from both ends' kernel
//! timestamps, the stages adding up to the round trips, and each stage moving when its
//! cause is planted while the others hold.

mod common;

use std::process::{Child, Stdio};

use common::*;
use serde_json::Value;

/// The ping document of `args` with stages, pinned: client on CPU 0, echo on CPU 1.
fn staged(lab: &Lab, agent: &Agent, extra: &[&str]) -> Value {
    staged_test(lab, agent, "ping", extra)
}

/// The document of `test` (ping, rpc) with stages, pinned as [`staged`].
fn staged_test(lab: &Lab, agent: &Agent, test: &str, extra: &[&str]) -> Value {
    let mut args = vec![
        "--stages",
        "-t",
        "1",
        "--warmup",
        "0.3",
        "-i",
        "0.5",
        "--cpus",
        "0",
        "--server-cpus",
        "1",
        "--json",
    ];
    args.extend_from_slice(extra);
    doc_of(&run(lab.sonde(agent, test, &args)))
}

/// A stage's figure `q` (`mean`, `p50`) in nanoseconds.
fn stage(doc: &Value, name: &str, q: &str) -> f64 {
    doc["end"]["stages"]["ns"][name][q]
        .as_f64()
        .unwrap_or_else(|| panic!("no stage {name} {q}: {}", doc["end"]["stages"]))
}

const STAGES: [&str; 7] = [
    "client_send",
    "client_qdisc",
    "outside",
    "server_wake",
    "server_turnaround",
    "server_send",
    "client_wake",
];

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

/// A busy loop on the echo's CPU: the echo waits for the CPU after each request arrives,
/// so its receive wake-up grows; the client's stages, on the other CPU, hold.
#[test]
fn a_hog_on_the_echos_cpu_grows_the_echos_wake_up_only() {
    let Some(lab) = Lab::new() else { return };
    if !two_cpus() {
        return;
    }
    let agent = lab.start_agent();
    let calm = staged(&lab, &agent, &[]);
    let hogged = {
        let _hog = Hog::on_cpu(1);
        staged(&lab, &agent, &[])
    };
    for d in [&calm, &hogged] {
        for n in STAGES {
            eprint!("{n} {:.0}/{:.0} ", stage(d, n, "p50"), stage(d, n, "p99"));
        }
        eprintln!();
    }
    let (before, after) = (
        stage(&calm, "server_wake", "mean"),
        stage(&hogged, "server_wake", "mean"),
    );
    assert!(
        after > 3.0 * before && after - before > 20_000.0,
        "server wake-up {before:.0} -> {after:.0} ns"
    );
    for name in ["client_send", "client_qdisc"] {
        let (b, a) = (stage(&calm, name, "p50"), stage(&hogged, name, "p50"));
        assert!(a < 2.0 * b + 5_000.0, "{name} moved: {b:.0} -> {a:.0} ns");
    }
}

/// Busy polling on both ends: neither application sleeps, so both receive wake-ups fall.
#[test]
fn busy_polling_takes_both_wake_ups_away() {
    let Some(lab) = Lab::new() else { return };
    if !two_cpus() {
        return;
    }
    let agent = lab.start_agent();
    let block = staged(&lab, &agent, &[]);
    let busy = staged(&lab, &agent, &["--poll", "busy"]);
    for name in ["server_wake", "client_wake"] {
        let (b, a) = (stage(&block, name, "p50"), stage(&busy, name, "p50"));
        assert!(a * 2.0 < b, "{name}: block {b:.0} ns, busy {a:.0} ns");
    }
    let rtt = |d: &Value| d["end"]["latency_ns"]["p50"].as_f64().unwrap();
    assert!(
        rtt(&busy) < rtt(&block),
        "busy polling lowers the round trip"
    );
}

fn two_cpus() -> bool {
    let ok = std::thread::available_parallelism().map_or(1, |n| n.get()) >= 2;
    if !ok {
        eprintln!("SKIPPED: needs 2 CPUs");
        assert!(std::env::var("CI").is_err(), "CI must have 2 CPUs");
    }
    ok
}

/// A busy loop pinned to one CPU (the CPU is the host's, whatever the namespace), for at
/// most 10 s, ended on drop.
struct Hog(Child);

impl Hog {
    fn on_cpu(cpu: u32) -> Hog {
        let child = std::process::Command::new("taskset")
            .args([
                "-c",
                &cpu.to_string(),
                "timeout",
                "10",
                "sh",
                "-c",
                "while :; do :; done",
            ])
            .stdout(Stdio::null())
            .spawn()
            .expect("taskset");
        Hog(child)
    }
}

impl Drop for Hog {
    fn drop(&mut self) {
        // SIGTERM: `timeout` passes it on to the loop, its child, and exits.
        let _ = std::process::Command::new("kill")
            .arg(self.0.id().to_string())
            .status();
        let _ = self.0.wait();
    }
}
