//! Red team on `sonde serve --mesh`: attacks security_mesh.rs does not try. A rogue that
//! took a listed peer's address but has no fleet key echoes the agent's own keyed probes
//! back as answers; a DNS answer names loopback, link-local, multicast, broadcast and the
//! agent itself; a DNS answer of 3,000 peers must keep the probe budget; a keyed probe seen
//! on the wire is replayed from an unlisted address, padded.

mod common;

use std::net::{SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::data_rogue::{in_netns, replies, socket_in, OTHER_ADDR};
use common::{
    key_file, need_tools, run, stderr, temp_file, Agent, Lab, CLIENT_ADDR, SERVER_ADDR, SONDE,
};
use sonde_proto::stamp::{Mode, SenderPacket, StampKey};

const STAMP_PORT: u16 = 8622;

fn fleet_stamp_key() -> StampKey {
    let bytes = std::fs::read(key_file()).unwrap();
    sonde_proto::mesh::stamp_key(&sonde_proto::Key::from_file_bytes(&bytes).unwrap())
}

/// `sonde serve --mesh SOURCE` in the lab's server namespace, `/metrics` on 9464.
fn mesh_agent(lab: &Lab, source: &str, extra: &[&str]) -> Agent {
    let mut cmd = Lab::in_ns(&lab.server, SONDE);
    cmd.args(["serve", "--bind", SERVER_ADDR, "--port", "5301"])
        .args(["--mesh", source, "--mesh-port", &STAMP_PORT.to_string()])
        .args(["--metrics", &format!("{SERVER_ADDR}:9464")])
        .args(extra);
    Agent::start(cmd)
}

/// The agent's `/metrics`, scraped from the client namespace.
fn scrape(lab: &Lab) -> String {
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
fn sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// NAME resolving in namespace `ns` (through `ip netns exec`'s /etc/netns/NS/hosts) to
/// `addrs`; the directory is removed on drop.
struct Hosts(PathBuf);

impl Hosts {
    fn new(ns: &str, name: &str, addrs: &[String]) -> Hosts {
        let dir = PathBuf::from("/etc/netns").join(ns);
        std::fs::create_dir_all(&dir).unwrap();
        let text: String = addrs.iter().map(|a| format!("{a} {name}\n")).collect();
        std::fs::write(dir.join("hosts"), text).unwrap();
        Hosts(dir)
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// An nftables table `redteam` in namespace `ns` from `text`'s chains and counters; the
/// namespace's deletion removes it.
fn nft(ns: &str, text: &str) {
    let path = temp_file("redteam-mesh.nft");
    std::fs::write(&path, text).unwrap();
    let o = run({
        let mut c = Lab::in_ns(ns, "nft");
        c.arg("-f").arg(&path);
        c
    });
    assert!(o.status.success(), "nft: {}", stderr(&o));
}

/// Packets counted by the named counter `name` of table `redteam`.
fn counter(ns: &str, name: &str) -> u64 {
    let out = Lab::in_ns(ns, "nft")
        .args(["-j", "list", "counter", "inet", "redteam", name])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["nftables"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|i| i["counter"]["packets"].as_u64())
        .unwrap_or_else(|| panic!("no counter {name}: {v}"))
}

#[test]
fn redteam_mesh_a_keyless_rogue_echoing_the_agents_probes_moves_no_figure() {
    if !need_tools(&["python3"]) {
        return;
    }
    let Some(lab) = Lab::new() else { return };
    // The listed peer's address is the rogue's; it holds no key. It answers each probe
    // with the probe's own bytes (their HMAC is the fleet key's), unauthenticated answers
    // and answers under another key, for 3 s (at most 3,000 datagrams).
    let list = temp_file("redteam-mesh-one-peer");
    std::fs::write(&list, format!("{CLIENT_ADDR}:{STAMP_PORT}\n")).unwrap();
    let rogue = in_netns(&lab.client, || {
        let s = UdpSocket::bind(format!("{CLIENT_ADDR}:{STAMP_PORT}")).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        s
    });
    let _agent = mesh_agent(&lab, list.to_str().unwrap(), &["--mesh-rate", "20"]);
    let wrong = StampKey::new(b"not-the-fleet-key-0123").unwrap();
    let (start, mut buf, mut probes, mut sent) = (Instant::now(), [0u8; 4096], 0, 0);
    while start.elapsed() < Duration::from_secs(3) && sent < 3000 {
        let Ok((n, from)) = rogue.recv_from(&mut buf) else {
            continue;
        };
        probes += 1;
        let seq = u32::from_be_bytes(buf[..4].try_into().unwrap());
        let ssid = u16::from_be_bytes([buf[26], buf[27]]);
        let mut unauth = vec![0u8; 44];
        let mut other = vec![0u8; 112];
        let forged = sonde_proto::stamp::ReflectorPacket {
            seq,
            sender_seq: seq,
            ssid,
            ..Default::default()
        };
        forged.write(Mode::Unauthenticated, &mut unauth).unwrap();
        forged
            .write(Mode::Authenticated(&wrong), &mut other)
            .unwrap();
        for d in [&buf[..n], &unauth[..], &other[..]] {
            let _ = rogue.send_to(d, from);
            sent += 1;
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    let text = scrape(&lab);
    let answered = sum(&text, "sonde_mesh_probes_answered_total");
    let faults = sum(&text, "sonde_mesh_clock_fault");
    let rtt_count = sum(&text, "sonde_mesh_rtt_seconds_count");
    eprintln!(
        "echo rogue: {probes} probes received, {sent} forged answers sent; answered {answered}, rtt samples {rtt_count}, clock faults {faults}"
    );
    assert!(probes >= 20, "the agent probed its peer {probes} times");
    assert_eq!(answered, 0.0, "a keyless rogue's answers counted:\n{text}");
    assert_eq!(rtt_count, 0.0, "a keyless rogue's answers timed:\n{text}");
    assert_eq!(faults, 0.0, "a keyless rogue raised a clock fault:\n{text}");
}

#[test]
fn redteam_mesh_dns_answers_naming_loopback_link_local_multicast_broadcast_or_itself_are_never_probed(
) {
    if !need_tools(&["python3", "nft"]) {
        return;
    }
    let Some(lab) = Lab::new() else { return };
    let name = "peers.redteam.test";
    let bad = [
        "127.0.0.9",
        "169.254.169.254",
        "224.0.0.9",
        "255.255.255.255",
        SERVER_ADDR,
    ];
    let mut addrs: Vec<String> = bad.iter().map(|s| s.to_string()).collect();
    addrs.push(CLIENT_ADDR.to_string());
    let _hosts = Hosts::new(&lab.server, name, &addrs);
    // Every probe leaving, loopback included: to the one good peer, or anywhere else.
    nft(
        &lab.server,
        &format!(
            "table inet redteam {{\n chain out {{\n  type filter hook output priority 0;\n  ip daddr {CLIENT_ADDR} udp dport {STAMP_PORT} counter name good return\n  udp dport {STAMP_PORT} counter name other\n }}\n counter good {{}}\n counter other {{}}\n}}\n"
        ),
    );
    let _agent = mesh_agent(
        &lab,
        &format!("dns:{name}"),
        &["--mesh-rate", "20", "--mesh-refresh", "1"],
    );
    std::thread::sleep(Duration::from_millis(2500));
    let text = scrape(&lab);
    let (good, other) = (counter(&lab.server, "good"), counter(&lab.server, "other"));
    eprintln!("dns with {bad:?}: probes to the peer {good}, elsewhere {other}");
    assert!(good >= 20, "the good peer was probed {good} times");
    assert_eq!(other, 0, "probes went elsewhere");
    assert_eq!(sum(&text, "sonde_mesh_peers"), 1.0, "{text}");
    for b in bad.iter().filter(|b| **b != SERVER_ADDR) {
        assert!(!text.contains(b), "{b} in the metrics:\n{text}");
    }
    // A file naming link-local is refused at start, naming the line.
    let list = temp_file("redteam-mesh-link-local");
    std::fs::write(&list, "198.18.0.1\n169.254.169.254\n").unwrap();
    let o = run({
        let mut c = common::sonde_cmd();
        c.args(["serve", "--bind", "127.0.0.1", "--port", "0"])
            .args(["--mesh", list.to_str().unwrap(), "--mesh-port", "0"]);
        c
    });
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("line 2: 169.254.169.254:0 is a link-local address"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn redteam_mesh_a_dns_answer_of_3000_peers_keeps_the_budget() {
    if !need_tools(&["python3", "nft"]) {
        return;
    }
    let Some(lab) = Lab::new() else { return };
    let name = "many.redteam.test";
    let addrs: Vec<String> = (0..3000u32)
        .map(|i| format!("198.19.{}.{}", 10 + i / 200, 1 + i % 200))
        .collect();
    let _hosts = Hosts::new(&lab.server, name, &addrs);
    // The far peers are routed out of the agent's link, counted and dropped on output.
    lab.server_cmd(
        "ip",
        &["route", "add", "198.19.0.0/16", "dev", &lab.server_if],
    );
    nft(
        &lab.server,
        &format!(
            "table inet redteam {{\n chain out {{\n  type filter hook output priority 0;\n  ip daddr 198.19.0.0/16 udp dport {STAMP_PORT} counter name far drop\n }}\n counter far {{}}\n}}\n"
        ),
    );
    let agent = mesh_agent(
        &lab,
        &format!("dns:{name}"),
        &["--mesh-rate", "10", "--mesh-budget", "100"],
    );
    let start = Instant::now();
    std::thread::sleep(Duration::from_secs(3));
    let far = counter(&lab.server, "far");
    let elapsed = start.elapsed().as_secs_f64();
    let text = scrape(&lab);
    let rss_kib = common::agent_proc::status(agent.child.id(), "VmRSS:");
    let most = (100.0 * (elapsed + 0.5)) as u64;
    eprintln!(
        "3,000 peers by DNS, budget 100/s: {far} probes in {elapsed:.2} s (at most {most}); /metrics {} bytes, {} lines; RSS {} KiB",
        text.len(),
        text.lines().count(),
        rss_kib
    );
    assert_eq!(sum(&text, "sonde_mesh_peers"), 3000.0);
    assert!(far >= 150 && far <= most, "{far} probes in {elapsed:.2} s");
}

#[test]
fn redteam_mesh_a_replayed_probe_is_answered_at_its_own_size_and_rate_only() {
    if !need_tools(&["python3"]) {
        return;
    }
    let Some(lab) = Lab::new() else { return };
    lab.client_cmd(
        "ip",
        &[
            "addr",
            "add",
            &format!("{OTHER_ADDR}/24"),
            "dev",
            &lab.client_if,
        ],
    );
    let list = temp_file("redteam-mesh-replay");
    std::fs::write(&list, format!("{CLIENT_ADDR}\n")).unwrap();
    let agent = mesh_agent(
        &lab,
        list.to_str().unwrap(),
        &["--mesh-rate", "1", "--mesh-reflect-max", "50"],
    );
    // One keyed probe as seen on the wire (the test holds the key only to make it), then
    // padded with zeros the HMAC does not cover, replayed 400 times from an address the
    // agent does not list, in about 0.4 s.
    let key = fleet_stamp_key();
    let mut p = vec![0u8; 1400];
    SenderPacket {
        seq: 7,
        ssid: 9,
        ..Default::default()
    }
    .write(Mode::Authenticated(&key), &mut p)
    .unwrap();
    let to: SocketAddr = format!("{SERVER_ADDR}:{STAMP_PORT}").parse().unwrap();
    let victim = socket_in(&lab.client, OTHER_ADDR, to);
    let start = Instant::now();
    for _ in 0..400 {
        let _ = victim.send(&p);
        std::thread::sleep(Duration::from_millis(1));
    }
    let elapsed = start.elapsed().as_secs_f64();
    let got = replies(&victim, Duration::from_millis(300));
    let bytes: usize = got.iter().sum();
    // Per source address: ten times --mesh-rate (10 a second, a second's burst), well
    // under --mesh-reflect-max's 50: all a spoofed victim can be sent.
    let most = 10 + (10.0 * (elapsed + 0.3)).ceil() as usize;
    eprintln!(
        "replay from an unlisted address: 400 x {} bytes in {elapsed:.2} s, {} answers ({bytes} bytes, at most {most} answers)",
        p.len(),
        got.len()
    );
    assert!(got.iter().all(|&n| n == p.len()), "answer sizes {got:?}");
    assert!(
        !got.is_empty() && got.len() <= most,
        "{} answers, at most {most}",
        got.len()
    );
    // The agent's own tests still run.
    let out = run(lab.sonde(&agent, "ping", &["-t", "1", "--warmup", "0", "--udp"]));
    assert!(
        out.status.success(),
        "ping after the replay: {}",
        stderr(&out)
    );
}
