//! `--cpu-latency-us` and `ping --cstate-sweep`: both sides hold the PM QoS limit for the
//! test and record it, the host's limit is back afterwards (also when sonde is killed), and
//! the sweep runs once per idle state of this host.

use crate::common;

use std::time::Duration;

use common::*;

/// The host's CPU latency limit now, µs.
fn limit_now() -> i32 {
    let b = std::fs::read("/dev/cpu_dma_latency").unwrap();
    i32::from_ne_bytes(b[..4].try_into().unwrap())
}

#[test]
fn both_sides_hold_the_limit_for_the_test_and_record_it() {
    if !need_cpu_latency_device() {
        return;
    }
    let before = limit_now();
    let agent = Agent::on_loopback();
    let mut c = sonde_cmd();
    c.args(agent.short_test("ping", "1", &["--udp", "--cpu-latency-us", "0", "--json"]));
    let o = run(c);
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["start"]["spec"]["cpu_latency_us"], 0);
    // (name, exit latency µs) of CPU 0's idle states, shallowest first.
    let states: Vec<(String, u64)> = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cpuidle")
        .map(|d| {
            let mut v: Vec<_> = d.flatten().map(|e| e.path()).collect();
            v.sort();
            v.iter()
                .filter_map(|p| {
                    let name = std::fs::read_to_string(p.join("name")).ok()?;
                    let us = std::fs::read_to_string(p.join("latency")).ok()?;
                    Some((name.trim().to_string(), us.trim().parse().ok()?))
                })
                .collect()
        })
        .unwrap_or_default();
    let names: Vec<&str> = states.iter().map(|s| s.0.as_str()).collect();
    // At 0 µs every state slower to leave than 0 µs is kept out.
    let kept_out: Vec<&str> = states
        .iter()
        .filter(|s| s.1 > 0)
        .map(|s| s.0.as_str())
        .collect();
    for side in ["client", "server"] {
        let l = &doc["end"][side]["cpu_latency"];
        assert_eq!(l["requested_us"], 0, "{side}: {l}");
        assert_eq!(l["in_force_us"], 0, "{side}: {l}");
        assert_eq!(l["idle_states"], serde_json::json!(names), "{side}");
        assert_eq!(
            l["excluded_idle_states"],
            serde_json::json!(kept_out),
            "{side}"
        );
    }
    assert_eq!(limit_now(), before, "the limit outlived the test");
}

#[test]
fn a_killed_controller_leaves_no_limit_behind() {
    if !need_cpu_latency_device() {
        return;
    }
    let before = limit_now();
    let agent = Agent::on_loopback();
    let mut child = sonde_cmd()
        .args(agent.short_test("ping", "10", &["--cpu-latency-us", "3", "--no-save"]))
        .spawn_keeping(Keep::Nothing);
    let held = (0..50).any(|_| {
        std::thread::sleep(Duration::from_millis(100));
        limit_now() <= 3
    });
    assert!(held, "the limit was never in force");
    child.kill().unwrap();
    child.wait().unwrap();
    // The agent's side ends when it sees the controller go, and closes its hold too.
    let back = (0..50).any(|_| {
        std::thread::sleep(Duration::from_millis(100));
        limit_now() == before
    });
    assert!(back, "limit still {} µs, was {before}", limit_now());
}

#[test]
fn the_sweep_runs_once_per_idle_state_exit_latency() {
    if !need_cpu_latency_device() {
        return;
    }
    let mut latencies: Vec<u64> = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cpuidle")
        .map(|d| {
            d.flatten()
                .filter_map(|e| std::fs::read_to_string(e.path().join("latency")).ok())
                .filter_map(|l| l.trim().parse().ok())
                .collect()
        })
        .unwrap_or_default();
    latencies.sort_unstable();
    latencies.dedup();
    let agent = Agent::on_loopback();
    let mut c = sonde_cmd();
    c.args(agent.short_test(
        "ping",
        "0.5",
        &["--udp", "--cstate-sweep", "--json", "--no-save"],
    ));
    let o = run(c);
    assert!(o.status.success(), "{}", stderr(&o));
    let out: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let docs = match out {
        serde_json::Value::Array(a) => a,
        one => vec![one],
    };
    let limits: Vec<u64> = docs
        .iter()
        .filter_map(|d| d["start"]["spec"]["cpu_latency_us"].as_u64())
        .collect();
    assert_eq!(limits, latencies, "one run per exit latency");
    for d in &docs {
        assert_eq!(d["end"]["partial"], false);
    }
}
