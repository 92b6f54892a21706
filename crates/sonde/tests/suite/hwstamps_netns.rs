//! `--stamps hardware|auto` (issue 54): a veth has no PTP clock, so `auto` falls back to
//! software at both ends and says why, and `hardware` is refused naming the device and
//! the flag; an agent not started with `--allow hwstamps` refuses by that name. A faked
//! NIC (`common::hwstamps`) shows the agent's setting switched on for the test, put back
//! after it, and put back by a restarted agent after a kill -9.

use std::time::{Duration, Instant};

use crate::common;

use common::hwstamps::FakeNic;
use common::*;
use serde_json::Value;

/// A short ping with sampled stages and `extra`, its output.
fn ping(lab: &Lab, agent: &Agent, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "--stages",
        "-t",
        "0.5",
        "--warmup",
        "0.1",
        "--json",
        "--no-save",
    ];
    args.extend_from_slice(extra);
    run(lab.sonde(agent, "ping", &args))
}

fn stamps<'a>(doc: &'a Value, side: &str) -> &'a Value {
    &doc["end"][side]["stamps"]
}

/// A refused run: non-zero, its error naming each of `names`.
fn refused(o: &std::process::Output, names: &[&str]) {
    let e = stderr(o);
    assert!(!o.status.success(), "not refused: {}", stdout(o));
    eprintln!("refused: {}", e.trim());
    for n in names {
        assert!(e.contains(n), "the refusal does not name {n}: {e}");
    }
}

#[test]
fn a_veth_falls_back_to_software_or_is_refused_by_name() {
    let Some(lab) = Lab::new() else { return };
    let state = temp_file("hwstate");
    let agent = lab.start_agent_with(&[
        "--allow",
        "hwstamps",
        "--state-dir",
        &state.to_string_lossy(),
    ]);
    let doc = doc_of(&ping(&lab, &agent, &["--stamps", "auto"]));
    for (side, dev) in [("client", &lab.client_if), ("server", &lab.server_if)] {
        let s = stamps(&doc, side);
        assert_eq!(s["asked"], "auto", "{side}: {s}");
        assert_eq!(s["device"], dev.as_str(), "{side}: {s}");
        assert_eq!(s["nic_hardware_on"], false, "{side}: {s}");
        assert_eq!(s["stages_from"], "software", "{side}: {s}");
        // Counted as the kernel marked them: software only.
        assert!(s["read"]["software"].as_u64().unwrap() > 0, "{side}: {s}");
        assert_eq!(s["read"]["hardware"], 0, "{side}: {s}");
        let why = s["fallback"].as_str().unwrap_or_default();
        assert!(
            why.contains(dev.as_str()) && why.contains("no PTP hardware clock"),
            "{side}: {s}"
        );
    }
    assert!(doc["end"]["stages"]["split"].as_u64().unwrap() > 0);
    // Hardware is refused at the agent's end first, naming its device and the flag.
    refused(
        &ping(&lab, &agent, &["--stamps", "hardware"]),
        &["--stamps", &lab.server_if],
    );
    // Software (the default) says nothing of stamps.
    let plain = doc_of(&ping(&lab, &agent, &[]));
    assert!(stamps(&plain, "server").is_null() && stamps(&plain, "client").is_null());
    // Stamps choose the stages' stamps: without stages they are bad input.
    refused(
        &run(lab.sonde(&agent, "ping", &["--stages", "off", "--stamps", "hardware"])),
        &["--stamps", "--stages"],
    );
    assert!(
        list(&state).is_empty(),
        "nothing recorded: {:?}",
        list(&state)
    );
}

#[test]
fn an_agent_without_the_allow_refuses_hardware_and_auto_says_why() {
    let Some(lab) = Lab::new() else { return };
    let agent = lab.start_agent();
    refused(
        &ping(&lab, &agent, &["--stamps", "hardware"]),
        &["--stamps hardware", "--allow hwstamps"],
    );
    let doc = doc_of(&ping(&lab, &agent, &["--stamps", "auto"]));
    let why = stamps(&doc, "server")["fallback"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(why.contains("--allow hwstamps"), "{why}");
    // The summary says it too, for each end.
    let args = [
        "--stages",
        "-t",
        "0.5",
        "--warmup",
        "0.1",
        "--no-save",
        "--stamps",
        "auto",
    ];
    let text = stdout(&run(lab.sonde(&agent, "ping", &args)));
    let server =
        "stamps: server: software (auto: not allowed here (start the agent with --allow hwstamps))";
    assert!(text.contains(server), "{text}");
    assert!(text.contains("stamps: client: software (auto: "), "{text}");
}

/// A device whose capability says hardware (faked) meets the real ioctl: a veth has no
/// setting to read (EOPNOTSUPP). Refused clearly, nothing recorded or changed.
#[test]
fn the_ioctl_refused_by_a_veth_is_reported_and_nothing_is_left() {
    let Some(lab) = Lab::new() else { return };
    let fake = FakeNic::new(&lab.server_if, None);
    let agent = fake.agent(&lab, &["--allow", "hwstamps"]);
    let o = ping(&lab, &agent, &["--stamps", "hardware"]);
    refused(
        &o,
        &[
            &lab.server_if,
            "SIOCGHWTSTAMP",
            "not supported",
            "nothing was changed",
        ],
    );
    assert!(
        fake.ethtool_calls()
            .contains(&format!("-T {}", lab.server_if)),
        "{}",
        fake.ethtool_calls()
    );
    let doc = doc_of(&ping(&lab, &agent, &["--stamps", "auto"]));
    let s = stamps(&doc, "server");
    assert_eq!(s["nic_hardware_on"], false, "{s}");
    assert!(
        s["fallback"].as_str().unwrap().contains("SIOCGHWTSTAMP"),
        "{s}"
    );
    assert!(fake.state_files().is_empty(), "{:?}", fake.state_files());
}

/// The faked NIC's setting is switched on for the test (the record written first) and
/// put back after it; the client's veth falls back on its own end.
#[test]
fn hardware_stamping_is_put_back_after_the_test() {
    let Some(lab) = Lab::new() else { return };
    let fake = FakeNic::new(&lab.server_if, Some("0 12 0"));
    let agent = fake.agent(&lab, &["--allow", "hwstamps"]);
    let doc = doc_of(&ping(&lab, &agent, &["--stamps", "auto"]));
    let s = stamps(&doc, "server");
    assert_eq!(s["nic_hardware_on"], true, "{s}");
    assert_eq!(s["phc"], 0, "{s}");
    // The stages are taken from the software stamps, and the echo's sockets, asking for
    // the NIC's receive stamps, read none (the NIC is a fake): never said hardware.
    assert_eq!(s["stages_from"], "software", "{s}");
    assert!(s["read"]["software"].as_u64().unwrap() > 0, "{s}");
    assert_eq!(s["read"]["hardware"], 0, "{s}");
    assert_eq!(stamps(&doc, "client")["nic_hardware_on"], false);
    let dev = &lab.server_if;
    assert_eq!(
        fake.sets(),
        [format!("set {dev} 1 1 0"), format!("set {dev} 0 12 0")]
    );
    assert_eq!(fake.setting(), "0 12 0");
    assert!(fake.state_files().is_empty(), "{:?}", fake.state_files());
    // --stamps hardware: the client's own veth refuses, by its name, and the agent puts
    // its device back when the client goes.
    let o = ping(&lab, &agent, &["--stamps", "hardware"]);
    refused(&o, &["--stamps", &lab.client_if]);
    let until = Instant::now() + Duration::from_secs(5);
    while fake.setting() != "0 12 0" && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(fake.setting(), "0 12 0", "{:?}", fake.sets());
    assert_eq!(fake.sets().len(), 4, "{:?}", fake.sets());
}

/// An agent killed (SIGKILL) while it holds the setting leaves its record; the next
/// agent started on the same state directory puts the setting back and removes it.
#[test]
fn a_restarted_agent_restores_what_a_killed_one_left() {
    let Some(lab) = Lab::new() else { return };
    let fake = FakeNic::new(&lab.server_if, Some("0 12 0"));
    let mut agent = fake.agent(&lab, &["--allow", "hwstamps"]);
    let mut client = lab
        .sonde(
            &agent,
            "ping",
            &["--stages", "--stamps", "auto", "-t", "10", "--no-save"],
        )
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    while !fake.record().exists() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(fake.record().exists(), "no record while the test runs");
    // The record is written before the change: once both are there, kill.
    while fake.setting() != "1 1 0" && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    agent.kill();
    assert_eq!(
        fake.setting(),
        "1 1 0",
        "the kill left the setting switched"
    );
    assert!(fake.record().exists(), "and its record");
    let _ = wait_with_timeout(&mut client, Duration::from_secs(10));
    let _ = client.kill();
    let _ = client.wait();
    // Restored before the restarted agent says it listens.
    let _again = fake.agent(&lab, &[]);
    assert_eq!(fake.setting(), "0 12 0", "{:?}", fake.sets());
    assert!(
        !fake.record().exists(),
        "the record stays after the restore"
    );
    let dev = &lab.server_if;
    assert_eq!(fake.sets().last(), Some(&format!("set {dev} 0 12 0")));
}

fn list(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default()
}
