//! What the mesh's red-team tests share: a mesh agent in the lab's server namespace (its
//! `/metrics` on 9464), a scrape of it from the client namespace, a family's sum (in all,
//! or for one destination), the fleet's mesh STAMP key and a second client address.

use std::process::Command;
use std::time::Duration;

use sonde_proto::stamp::StampKey;

use super::{key_file, stderr, Agent, Lab, SERVER_ADDR, SONDE};

/// The mesh agents' reflector port in these tests.
pub const STAMP_PORT: u16 = 8622;

pub fn fleet_stamp_key() -> StampKey {
    let bytes = std::fs::read(key_file()).unwrap();
    sonde_proto::mesh::stamp_key(&sonde_proto::Key::from_file_bytes(&bytes).unwrap())
}

/// `sonde serve --mesh SOURCE` in the lab's server namespace, `/metrics` on 9464.
pub fn mesh_agent(lab: &Lab, source: &str, extra: &[&str]) -> Agent {
    Agent::start(mesh_agent_cmd(lab, source, extra))
}

/// [`mesh_agent`]'s command, to change before it starts.
pub fn mesh_agent_cmd(lab: &Lab, source: &str, extra: &[&str]) -> Command {
    let mut cmd = Lab::in_ns(&lab.server, SONDE);
    cmd.args(["serve", "--bind", SERVER_ADDR, "--port", "5301"])
        .args(["--mesh", source, "--mesh-port", &STAMP_PORT.to_string()])
        .args(["--metrics", &format!("{SERVER_ADDR}:9464")])
        .args(extra);
    cmd
}

/// The agent's `/metrics`, scraped from the client namespace.
pub fn scrape(lab: &Lab) -> String {
    let url = format!("http://{SERVER_ADDR}:9464/metrics");
    let script = "import sys, urllib.request\nsys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())";
    let out = Lab::in_ns(&lab.client, "python3")
        .args(["-c", script, &url])
        .output()
        .unwrap();
    assert!(out.status.success(), "scrape: {}", stderr(&out));
    String::from_utf8(out.stdout).unwrap()
}

/// The sum of a family's samples (every series whose name is exactly `name`).
pub fn sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The value of `family`'s series whose destination is `ip` (any port), 0 without one.
pub fn of_destination(text: &str, family: &str, ip: &str) -> f64 {
    let (exact, with_port) = (
        format!("destination=\"{ip}\""),
        format!("destination=\"{ip}:"),
    );
    text.lines()
        .filter(|l| l.starts_with(&format!("{family}{{")))
        .filter(|l| l.contains(&exact) || l.contains(&with_port))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A second address on the client's side (OTHER_ADDR/24): a spoofed source, or a rogue peer.
pub fn add_other_addr(lab: &Lab) {
    let addr = format!("{}/24", super::data_rogue::OTHER_ADDR);
    lab.client_cmd("ip", &["addr", "add", &addr, "dev", &lab.client_if]);
}

/// Waits until `f` holds (checked every 100 ms) or `most` passed; whether it held.
pub fn wait_for(most: Duration, mut f: impl FnMut() -> bool) -> bool {
    let until = std::time::Instant::now() + most;
    while std::time::Instant::now() < until {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    f()
}
