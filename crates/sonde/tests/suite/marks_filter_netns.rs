//! The socket filter a marked pps receiver counts its marks with (issue 57): the kernel
//! surface it adds is gone once the agent is, however it ends (the run completed, the
//! agent killed mid-test), and an agent the kernel refuses BPF falls back to each
//! datagram's control message and says so, its counts as exact. (That the filter's
//! counts match the router's rules: `marks_netns`; foreign senders on the socket:
//! the engine's `marks::filter` tests.)

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::common;

use common::*;
use sonde_engine::marks::filter::loaded_filters;
use sonde_engine::pps::FILTER_NOTE;

const MARKED: [&str; 8] = [
    "--rate", "2000", "--flows", "2", "--dscp", "af41", "--ecn", "ect1",
];

/// A short marked pps run whose document a test reads.
fn marked_short() -> Vec<&'static str> {
    [
        &MARKED[..],
        &["-t", "0.5", "--warmup", "0.1", "--json", "--no-save"],
    ]
    .concat()
}

/// Waits up to 5 s (a program is freed after an RCU grace period) for `cond`.
fn within_5s(mut cond: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + Duration::from_secs(5);
    while !cond() {
        if Instant::now() > until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// The receiver's notes and its marks' packet count against its own received packets
/// (no loss at 2000 packets/s: every datagram of the test is one of them).
fn receiver_marks(doc: &serde_json::Value) -> (String, u64, u64) {
    let end = &doc["end"]["packets"];
    let notes = end["receiver"]["notes"].to_string();
    let marked = end["marks"]["forward"]["packets"].as_u64().expect("marks");
    let received = end["receiver"]["total_packets"].as_u64().unwrap();
    (notes, marked, received)
}

#[test]
fn a_marked_pps_receiver_counts_in_the_kernel_and_leaves_nothing_loaded() {
    let Some(lab) = Lab::needing(&[]) else {
        return;
    };
    let before = loaded_filters().unwrap();
    let mut agent = lab.start_agent();
    // Completed: the filter counted every datagram, and is gone with the test.
    let args = marked_short();
    let doc = doc_of(&run(lab.sonde(&agent, "pps", &args)));
    let (notes, marked, received) = receiver_marks(&doc);
    assert!(notes.contains(FILTER_NOTE), "{notes}");
    assert!(received > 500, "{received}");
    assert_eq!(marked, received, "{}", doc["end"]);
    assert!(
        within_5s(|| loaded_filters().unwrap() == before),
        "left loaded after a completed test: {:?}",
        loaded_filters()
    );
    // Killed mid-test (SIGKILL: no code of the agent's runs): nothing stays either.
    let args = [&MARKED[..], &["-t", "3", "--no-save"]].concat();
    let mut client = lab.sonde(&agent, "pps", &args);
    let mut client = client
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let loaded = within_5s(|| loaded_filters().unwrap().len() > before.len());
    agent.kill();
    let _ = wait_with_timeout(&mut client, Duration::from_secs(10));
    let _ = client.kill();
    let _ = client.wait();
    assert!(loaded, "the test's filter never loaded");
    assert!(
        within_5s(|| loaded_filters().unwrap() == before),
        "left loaded by a killed agent: {:?}",
        loaded_filters()
    );
}

/// An agent without CAP_BPF (nor CAP_SYS_ADMIN, nor CAP_PERFMON: dropped from its
/// bounding set by setpriv) on a kernel that refuses unprivileged BPF: the receiver reads
/// each datagram's IP_RECVTOS instead, the note says why, and the counts are as exact.
#[test]
fn an_agent_refused_bpf_reads_the_control_messages_and_says_so() {
    let Some(lab) = Lab::needing(&["setpriv"]) else {
        return;
    };
    let unprivileged = std::fs::read_to_string("/proc/sys/kernel/unprivileged_bpf_disabled")
        .map(|v| v.trim() != "0")
        .unwrap_or(false);
    if !unprivileged {
        eprintln!("skip: this kernel lets unprivileged processes load BPF");
        return;
    }
    let mut cmd = Lab::in_ns(&lab.server, "setpriv");
    cmd.args(["--bounding-set", "-bpf,-sys_admin,-perfmon", SONDE])
        .args(["serve", "--bind", lab.server_addr, "--port", "0"]);
    let agent = Agent::start(cmd);
    let args = marked_short();
    let doc = doc_of(&run(lab.sonde(&agent, "pps", &args)));
    let (notes, marked, received) = receiver_marks(&doc);
    assert!(
        notes.contains("IP_RECVTOS control message: the kernel refused the socket filter"),
        "{notes}"
    );
    assert!(!notes.contains(FILTER_NOTE), "{notes}");
    assert!(received > 500, "{received}");
    assert_eq!(marked, received, "{}", doc["end"]);
}
