//! Issue 51: a sonde reflector tells a sonde sender its kernel boot id (a private Boot ID
//! TLV, under the answer's HMAC TLV when authenticated), so that two namespaces of one
//! host read one clock, bound 0, as ping's ends do; a reflector that does not (here: a
//! packet with no room for the TLV) keeps the exchange's bound.

use crate::common;

use std::time::Duration;

use common::mesh_rogue::{mesh_agent, of_destination, scrape, wait_for, STAMP_PORT};
use common::{doc_of, need_tools, run, stderr, temp_file, Agent, Lab, CLIENT_ADDR, SERVER_ADDR};
use serde_json::Value;

const KEY_HEX: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

/// `sonde stamp` from the client namespace to `port`: its document's `end.stamp.oneway`.
fn one_way(lab: &Lab, port: u16, args: &[&str]) -> Value {
    let mut cmd = Lab::in_ns(&lab.client, common::SONDE);
    let target = format!("{SERVER_ADDR}:{port}");
    cmd.args(["stamp", &target, "--json", "--no-save", "--wait", "0.3"])
        .args(["-r", "100", "-n", "30"])
        .args(args);
    let out = run(cmd);
    assert!(
        out.status.success(),
        "sonde stamp {args:?}: {}",
        stderr(&out)
    );
    doc_of(&out)["end"]["stamp"]["oneway"].clone()
}

#[test]
fn sonde_stamp_to_a_sonde_reflector_on_this_host_reads_one_clock() {
    let Some(lab) = Lab::new() else { return };
    let key = temp_file("oneclock-stamp-key");
    std::fs::write(&key, format!("{KEY_HEX}\n")).unwrap();
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let key = key.to_str().unwrap();
    let allow = format!("{CLIENT_ADDR}/32");
    let (open_port, keyed_port) = (8626u16, 8627u16);
    let open = format!("{SERVER_ADDR}:{open_port}");
    let keyed = format!("{SERVER_ADDR}:{keyed_port}");
    let _open = lab.start_agent_with(&["--stamp", &open, "--stamp-allow", &allow]);
    let _keyed = lab.start_agent_with(&[
        "--stamp",
        &keyed,
        "--stamp-allow",
        &allow,
        "--stamp-key-file",
        key,
    ]);
    let plain = one_way(&lab, open_port, &[]);
    let signed = one_way(&lab, keyed_port, &["--stamp-key-file", key]);
    // 52 bytes: the base and the Timestamp Information TLV, no room for the boot id.
    let no_room = one_way(&lab, open_port, &["--size", "52"]);
    eprintln!("one way: default {plain}\nauthenticated {signed}\n52 bytes {no_room}");
    for (what, ow) in [("unauthenticated", &plain), ("authenticated", &signed)] {
        assert_eq!(ow["bound_from"], "one_clock", "{what}: {ow}");
        assert_eq!(ow["bound_ns"].as_f64(), Some(0.0), "{what}: {ow}");
    }
    assert_ne!(no_room["bound_from"], "one_clock", "{no_room}");
    assert!(
        no_room["bound_ns"].as_f64().is_some_and(|b| b > 0.0),
        "{no_room}"
    );
}

/// Two mesh agents in two namespaces of one host, each listing the other: the one-way
/// bound of the pair is 0 (one clock) once each has learned the other's boot id.
#[test]
fn two_mesh_agents_on_one_host_read_one_clock() {
    if !need_tools(&["python3"]) {
        return;
    }
    let Some(lab) = Lab::new() else { return };
    let to_server = temp_file("oneclock-mesh-to-server");
    std::fs::write(&to_server, format!("{SERVER_ADDR}:{STAMP_PORT}\n")).unwrap();
    let mut cmd = Lab::in_ns(&lab.client, common::SONDE);
    cmd.args(["serve", "--bind", CLIENT_ADDR, "--port", "5302"])
        .args(["--mesh", to_server.to_str().unwrap()])
        .args(["--mesh-port", &STAMP_PORT.to_string(), "--mesh-rate", "20"]);
    let _client = Agent::start(cmd);
    let to_client = temp_file("oneclock-mesh-to-client");
    std::fs::write(&to_client, format!("{CLIENT_ADDR}:{STAMP_PORT}\n")).unwrap();
    let _server = mesh_agent(
        &lab,
        to_client.to_str().unwrap(),
        &["--mesh-rate", "20", "--mesh-window", "1"],
    );
    let bound = "sonde_mesh_oneway_bound_seconds";
    let mut text = String::new();
    // The first window may close before the first answer told the boot id: wait for
    // one that holds it.
    let seen = wait_for(Duration::from_secs(6), || {
        text = scrape(&lab);
        text.lines().any(|l| l.starts_with(&format!("{bound}{{")))
            && of_destination(&text, bound, CLIENT_ADDR) == 0.0
    });
    eprintln!(
        "{}",
        text.lines()
            .filter(|l| l.starts_with("sonde_mesh_oneway"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(seen, "no one-way bound of 0 in 6 s:\n{text}");
    assert_eq!(of_destination(&text, bound, CLIENT_ADDR), 0.0, "{text}");
}
