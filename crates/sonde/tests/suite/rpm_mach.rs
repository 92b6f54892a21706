//! Cloudflare's `mach` (crates.io `cf-mach`, an implementation no one here wrote) measures
//! `sonde serve --rpm` through the same bottleneck as `rpm_netns` (10 ms base, tbf at
//! 20 Mbit/s with a 60 kB queue): it finishes and reports RPM; its idle latency is within
//! 10 % of `sonde rpm`'s against the same endpoint, and its download throughput within 5 %
//! of the shaper's payload rate.
//!
//! Ignored by default: mach builds BoringSSL (cmake, clang, Go) and its install costs far
//! more than CI's minute (BENCHMARKS.md). `scripts/bench-rpm-mach.sh` installs it and runs
//! this test with `--ignored`; it finds mach through `SONDE_MACH`.

use crate::common;

use std::time::Duration;

use common::delay_line::{DelayLine, Ways};
use common::rpm_end::Endpoint;
use common::{skip_unless, Lab};
use serde_json::Value;

const RATE_BPS: f64 = 20e6;
const PAYLOAD_SHARE: f64 = 1448.0 / 1514.0;

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
#[ignore = "needs Cloudflare's mach: scripts/bench-rpm-mach.sh installs it and runs this"]
fn mach_measures_sonde_serve_rpm_and_agrees_on_idle_latency_and_throughput() {
    let mach = std::env::var("SONDE_MACH").unwrap_or_else(|_| "mach".into());
    let Some(lab) = Lab::routed(&["tc", &mach]) else {
        return;
    };
    let line = DelayLine::routed(&lab, "rpmml", Ways::ToServer);
    if !skip_unless("/dev/net/tun", line.as_ref().err().cloned()) {
        return;
    }
    let line = line.unwrap();
    line.set_hold(Duration::from_millis(10));
    let rc = format!("{}rc", lab.client_if);
    lab.router_cmd(
        "tc",
        &[
            "qdisc", "add", "dev", &rc, "root", "tbf", "rate", "20mbit", "burst", "4kb", "limit",
            "60000",
        ],
    );
    let ep = Endpoint::start(
        Some(&lab.server),
        lab.server_addr,
        &["--rpm-allow", "198.18.0.0/15", "--rpm-congestion", "cubic"],
    );
    let config = format!("{}/.well-known/nq", ep.base);
    let out = Lab::in_ns(&lab.client, &mach)
        .args(["rpm", "-c", &config, "--insecure", "--disable-aim-scores"])
        .args(["--interval-duration", "500", "--test-duration", "6000"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "mach: {text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let theirs: Value = serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text}"));
    let ours = Lab::in_ns(&lab.client, common::SONDE)
        .args([
            "rpm",
            &ep.base,
            "--insecure",
            "--download-only",
            "--json",
            "--no-save",
        ])
        .args([
            "--interval",
            "150ms",
            "--stage-limit",
            "2.1",
            "--max-connections",
            "4",
        ])
        .output()
        .unwrap();
    assert!(
        ours.status.success(),
        "{}",
        String::from_utf8_lossy(&ours.stderr)
    );
    let ours: Value = serde_json::from_slice(&ours.stdout).unwrap();
    let r = &ours["end"]["rpm"];
    eprintln!("mach: {theirs}");
    let (their_idle, our_idle) = (
        f(&theirs["unloaded_latency_ms"]),
        f(&r["idle"]["trimmed_mean_ms"]),
    );
    eprintln!("idle: mach {their_idle:.2} ms, sonde rpm {our_idle:.2} ms");
    assert!(
        (their_idle / our_idle - 1.0).abs() < 0.10,
        "{their_idle} vs {our_idle}"
    );
    assert!(f(&theirs["download"]["rpm"]) > 0.0 && f(&theirs["upload"]["rpm"]) > 0.0);
    // mach's throughput is in bits a second.
    let down = f(&theirs["download"]["throughput"]);
    let payload = RATE_BPS * PAYLOAD_SHARE;
    eprintln!(
        "mach download {:.2} Mbit/s of {:.2}",
        down / 1e6,
        payload / 1e6
    );
    assert!(
        (down / payload - 1.0).abs() < 0.05,
        "mach's download {down}"
    );
    line.stop();
}
