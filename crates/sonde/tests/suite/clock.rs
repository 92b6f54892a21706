//! `sonde clock`: the clock's error bound from captured answers, in text and JSON, and a
//! bad root named.

use crate::common;

use common::*;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../probe/tests/fixtures/clock");

fn clock(args: &[&str]) -> std::process::Output {
    let mut c = sonde_cmd();
    c.arg("clock").args(args);
    run(c)
}

#[test]
fn the_captured_states_read_as_bounds_and_a_bad_root_is_named() {
    let synced = format!("{FIXTURES}/chrony-local");
    let o = clock(&["--root", &synced, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["bound"]["synchronised"], true);
    assert_eq!(v["bound"]["from"], "chrony");
    assert_eq!(v["daemon"]["stratum"], 8);
    assert_eq!(v["kernel"]["status"], 64);
    // The capture is old: 50 ppm of the time since its update is most of the bound.
    assert!(v["bound"]["error_ns"].as_u64().unwrap() > 1_000_000, "{v}");

    let lost = format!("{FIXTURES}/unsynced-no-daemon");
    let text = stdout(&clock(&["--root", &lost]));
    assert!(
        text.starts_with("clock error bound  not synchronised"),
        "{text}"
    );
    assert!(text.contains("time daemon        none answered"), "{text}");

    let o = clock(&["--root", "/nonexistent-sonde-root"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("--root /nonexistent-sonde-root"),
        "{}",
        stderr(&o)
    );
}

/// The live host: whatever its state, a bound or "not synchronised", and the kernel read.
#[test]
fn the_live_clock_is_read() {
    let o = clock(&["--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["kernel"]["status"].is_u64(), "{v}");
    let synced = v["bound"]["synchronised"].as_bool().unwrap();
    assert_eq!(synced, v["bound"]["error_ns"].is_u64(), "{v}");
}

/// Each side of a test says how far its clock can be trusted, in its inventory.
#[test]
fn both_sides_of_a_test_send_their_clock() {
    let agent = Agent::on_loopback();
    let mut c = sonde_cmd();
    c.args(agent.short_test("ping", "0.3", &["--json", "--no-save"]));
    let o = run(c);
    assert!(o.status.success(), "{}", stderr(&o));
    let doc = doc_of(&o);
    for side in ["client", "server"] {
        let bound = &doc["start"][side]["inventory"]["clock"]["bound"];
        assert!(
            bound["synchronised"].is_boolean(),
            "{side}: {}",
            doc["start"][side]
        );
        assert!(
            bound["how"].as_str().is_some_and(|h| !h.is_empty()),
            "{side}"
        );
    }
}
