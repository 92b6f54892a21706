//! The mesh's surfaces attacked (`sonde serve --mesh`, SECURITY.md): its STAMP reflector
//! answers only probes carrying their source address's key (derived from the fleet key), never with more bytes than came, and
//! counts what it refuses; its prober sends only to the peers of its list (an nftables
//! counter on the agent's output: nothing else leaves, whatever a rogue sends it); a list
//! naming loopback, or a mesh without a key off loopback, is refused at start, naming it.

use crate::common;

use std::net::SocketAddr;
use std::time::Duration;

use common::data_rogue::{in_netns, replies, socket_in};
use common::{key_file, need_tools, run, stderr, temp_file, Agent, Lab, SONDE};
use sonde_proto::stamp::{Mode, ReflectorPacket, SenderPacket, StampKey, AUTH_BASE_BYTES};

const STAMP_PORT: u16 = 8620;

fn fleet_stamp_key() -> StampKey {
    let bytes = std::fs::read(key_file()).unwrap();
    sonde_proto::mesh::stamp_key(&sonde_proto::Key::from_file_bytes(&bytes).unwrap())
}

/// The key of the answers sent from `addr` (a reflector's address key).
fn key_of(addr: &str) -> StampKey {
    sonde_proto::mesh::address_key(&fleet_stamp_key(), addr.parse().unwrap())
}

/// The key of the probes sent from `addr` to the lab's server agent.
fn probe_key_of(addr: &str) -> StampKey {
    let server = common::SERVER_ADDR.parse().unwrap();
    sonde_proto::mesh::probe_key(&fleet_stamp_key(), addr.parse().unwrap(), server)
}

fn probe(mode: Mode, seq: u32) -> Vec<u8> {
    let mut b = vec![0u8; mode.base_bytes()];
    let p = SenderPacket {
        seq,
        ssid: 7,
        ..Default::default()
    };
    p.write(mode, &mut b).unwrap();
    b
}

/// A mesh agent in the lab's server namespace whose list names only the client.
fn mesh_agent(lab: &Lab) -> Agent {
    let list = temp_file("mesh-one-peer");
    std::fs::write(&list, format!("{}\n", common::CLIENT_ADDR)).unwrap();
    let mut cmd = Lab::in_ns(&lab.server, SONDE);
    cmd.args(["serve", "--bind", common::SERVER_ADDR, "--port", "5301"])
        .args([
            "--mesh",
            list.to_str().unwrap(),
            "--mesh-port",
            &STAMP_PORT.to_string(),
        ])
        .args([
            "--mesh-rate",
            "20",
            "--metrics",
            &format!("{}:9464", common::SERVER_ADDR),
        ]);
    Agent::start(cmd)
}

fn metric(lab: &Lab, family: &str) -> f64 {
    let url = format!("http://{}:9464/metrics", common::SERVER_ADDR);
    let script = "import sys, urllib.request\nprint(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())";
    let out = Lab::in_ns(&lab.client, "python3")
        .args(["-c", script, &url])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find(|l| l.starts_with(&format!("{family}{{")))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {family} in {text}"))
}

#[test]
fn the_mesh_reflector_answers_only_probes_keyed_with_the_fleet_key_and_no_byte_more() {
    if !need_tools(&["python3"]) {
        return;
    }
    let Some(lab) = Lab::new() else { return };
    let _agent = mesh_agent(&lab);
    let to: SocketAddr = format!("{}:{STAMP_PORT}", common::SERVER_ADDR)
        .parse()
        .unwrap();
    let rogue = socket_in(&lab.client, common::CLIENT_ADDR, to);
    let wrong = StampKey::new(b"not-the-fleet-key-0123").unwrap();
    // Unauthenticated probes, probes under another key, under the mesh key itself and
    // under another address's key, a keyed probe cut short, garbage.
    let mut hostile: Vec<Vec<u8>> = Vec::new();
    let (mesh, server) = (fleet_stamp_key(), key_of(common::SERVER_ADDR));
    for seq in 0..20 {
        hostile.push(probe(Mode::Unauthenticated, seq));
        hostile.push(probe(Mode::Authenticated(&wrong), seq));
        hostile.push(probe(Mode::Authenticated(&mesh), seq));
        hostile.push(probe(Mode::Authenticated(&server), seq));
    }
    let key = probe_key_of(common::CLIENT_ADDR);
    hostile.push(probe(Mode::Authenticated(&key), 99)[..AUTH_BASE_BYTES - 1].to_vec());
    hostile.push(vec![0xff; 1400]);
    for d in &hostile {
        rogue.send(d).unwrap();
    }
    let got = replies(&rogue, Duration::from_millis(500));
    assert!(
        got.is_empty(),
        "the reflector answered {} hostile probes",
        got.len()
    );
    assert_eq!(
        metric(&lab, "sonde_mesh_refused_total"),
        hostile.len() as f64
    );
    // The victim can answer: probes keyed for their source, each answered once, as long as
    // it came, signed under the agent's own address key, numbered by the reflector from 0.
    for seq in 0..5 {
        rogue.send(&probe(Mode::Authenticated(&key), seq)).unwrap();
    }
    let mut buf = [0u8; 2048];
    let mut numbers = Vec::new();
    for _ in 0..5 {
        let n = in_netns(&lab.client, || rogue.recv(&mut buf)).unwrap();
        assert_eq!(
            n, AUTH_BASE_BYTES,
            "an answer longer or shorter than its probe"
        );
        let a = ReflectorPacket::read(&buf[..n], Mode::Authenticated(&server)).unwrap();
        numbers.push((a.seq, a.sender_seq));
    }
    assert_eq!(numbers, (0..5).map(|s| (s, s)).collect::<Vec<_>>());
}

#[test]
fn the_mesh_probes_only_its_listed_peers_whatever_a_rogue_sends() {
    if !need_tools(&["python3", "nft"]) {
        return;
    }
    let Some(lab) = Lab::new() else { return };
    // Counters on the agent's output: UDP probes (not the reflector's answers) to the
    // listed peer's reflector, and to anywhere else.
    // (One match a rule: nft merges adjacent negated port matches into one.)
    let rules = format!(
        "table inet meshout {{\n chain out {{\n  type filter hook output priority 0;\n  oifname \"lo\" return\n  udp sport {STAMP_PORT} return\n  ip daddr {} udp dport {STAMP_PORT} counter name listed return\n  meta l4proto udp counter name other\n }}\n counter listed {{}}\n counter other {{}}\n}}\n",
        common::CLIENT_ADDR
    );
    let nft = |args: &[&str], input: Option<&str>| {
        let mut c = Lab::in_ns(&lab.server, "nft");
        c.args(args);
        if let Some(text) = input {
            let path = temp_file("meshout.nft");
            std::fs::write(&path, text).unwrap();
            c.arg(path);
        }
        let o = run(c);
        assert!(o.status.success(), "nft {args:?}: {}", stderr(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    nft(&["-f"], Some(&rules));
    let _agent = mesh_agent(&lab);
    // A rogue sends keyed probes, forged answers to every port it may guess, and garbage.
    let (key, answer_key) = (
        probe_key_of(common::CLIENT_ADDR),
        key_of(common::CLIENT_ADDR),
    );
    let to: SocketAddr = format!("{}:{STAMP_PORT}", common::SERVER_ADDR)
        .parse()
        .unwrap();
    let rogue = socket_in(&lab.client, common::CLIENT_ADDR, to);
    for seq in 0..50 {
        rogue.send(&probe(Mode::Authenticated(&key), seq)).unwrap();
        let mut answer = vec![0u8; AUTH_BASE_BYTES];
        let forged = ReflectorPacket {
            seq,
            sender_seq: seq,
            ssid: 7,
            ..Default::default()
        };
        forged
            .write(Mode::Authenticated(&answer_key), &mut answer)
            .unwrap();
        rogue.send(&answer).unwrap();
    }
    in_netns(&lab.client, || {
        let s = std::net::UdpSocket::bind(format!("{}:0", common::CLIENT_ADDR)).unwrap();
        for port in (32768..61000).step_by(97) {
            let _ = s.send_to(&[0u8; 112], (common::SERVER_ADDR, port));
        }
    });
    std::thread::sleep(Duration::from_secs(2));
    let counters = nft(&["list", "counters"], None);
    let packets = |name: &str| -> u64 {
        let block = counters.split(&format!("counter {name} ")).nth(1).unwrap();
        let at = block.find("packets ").unwrap() + "packets ".len();
        block[at..]
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    assert!(
        packets("listed") >= 20,
        "the agent probed its peer too little: {counters}"
    );
    assert_eq!(
        packets("other"),
        0,
        "probes left for an unlisted place: {counters}"
    );
}

#[test]
fn a_list_naming_loopback_and_a_mesh_without_a_key_off_loopback_are_refused_naming_them() {
    let list = temp_file("mesh-bad");
    std::fs::write(&list, "198.18.0.2\n127.0.0.1\n").unwrap();
    let o = run({
        let mut c = common::sonde_cmd();
        c.args([
            "serve",
            "--bind",
            "127.0.0.1",
            "--port",
            "0",
            "--mesh",
            list.to_str().unwrap(),
            "--mesh-port",
            "0",
        ]);
        c
    });
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains(&format!(
            "--mesh {}: line 2: 127.0.0.1:0 is a loopback address",
            list.display()
        )),
        "{e}"
    );
    let o = run({
        let mut c = std::process::Command::new(SONDE);
        c.env_remove(common::KEY_ENV)
            .args(["serve", "--bind", "127.0.0.1", "--port", "0"]);
        c.args(["--mesh", list.to_str().unwrap()]);
        c
    });
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("--mesh needs --key-file"),
        "{}",
        stderr(&o)
    );
}
