//! Red team on `sonde serve --mesh`: attacks security_mesh.rs does not try. A rogue that
//! took a listed peer's address but has no fleet key echoes the agent's own keyed probes
//! back as answers; a DNS answer names loopback, link-local, multicast, broadcast and the
//! agent itself; a DNS answer of 3,000 peers must keep the probe budget; a keyed probe seen
//! on the wire is replayed, padded, from a spoofed address and from its true source; a
//! rogue peer answers in another peer's name.

use crate::common;

use std::net::{SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::data_rogue::{in_netns, replies, socket_in, OTHER_ADDR};
use common::mesh_rogue::{
    add_other_addr, fleet_stamp_key, mesh_agent, of_destination, scrape, sum, STAMP_PORT,
};
use common::{
    need_tools, nft_named_counter, run, stderr, temp_file, Agent, Lab, CLIENT_ADDR, SERVER_ADDR,
    SONDE,
};
use sonde_proto::mesh::{address_key, probe_key};
use sonde_proto::stamp::{Mode, ReflectorPacket, SenderPacket, StampKey};

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
    nft_named_counter(ns, "redteam", name)
}

#[test]
fn redteam_mesh_a_keyless_rogue_echoing_the_agents_probes_moves_no_figure() {
    if !need_tools(&["python3"]) {
        return;
    }
    let Some(lab) = Lab::new() else { return };
    // The listed peer's address is the rogue's; it holds no key. It answers each probe
    // with the probe's own bytes (their HMAC is the agent's own address key), unauthenticated answers
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
    // Counted from here, not from the agent's start: on a busy machine its start (and the
    // probes it sent meanwhile) can take any time.
    let before = counter(&lab.server, "far");
    let start = Instant::now();
    std::thread::sleep(Duration::from_secs(3));
    let far = counter(&lab.server, "far") - before;
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

/// A keyed probe as the agent at `from` sends it to the server's agent: signed under the
/// key of both addresses, `len` bytes (zeros after the base, which the HMAC does not cover).
fn probe_of(from: &str, seq: u32, len: usize) -> Vec<u8> {
    let key = probe_key(
        &fleet_stamp_key(),
        from.parse().unwrap(),
        SERVER_ADDR.parse().unwrap(),
    );
    let mut p = vec![0u8; len];
    SenderPacket {
        seq,
        ssid: 9,
        ..Default::default()
    }
    .write(Mode::Authenticated(&key), &mut p)
    .unwrap();
    p
}

#[test]
fn redteam_mesh_a_captured_probe_is_answered_once_to_its_sender_and_never_to_a_spoofed_address() {
    if !need_tools(&["python3"]) {
        return;
    }
    let Some(lab) = Lab::new() else { return };
    add_other_addr(&lab);
    let list = temp_file("redteam-mesh-replay");
    std::fs::write(&list, format!("{CLIENT_ADDR}\n")).unwrap();
    let agent = mesh_agent(
        &lab,
        list.to_str().unwrap(),
        &["--mesh-rate", "1", "--mesh-reflect-max", "50"],
    );
    // The client agent's probe as seen on the wire (the test holds the key only to make
    // its bytes), padded to 1,400 bytes, replayed 400 times in about 0.4 s from an address
    // the rogue holds (the victim's: a spoofed source).
    let p = probe_of(CLIENT_ADDR, 7, 1400);
    let to: SocketAddr = format!("{SERVER_ADDR}:{STAMP_PORT}").parse().unwrap();
    let victim = socket_in(&lab.client, OTHER_ADDR, to);
    let start = Instant::now();
    for _ in 0..400 {
        let _ = victim.send(&p);
        std::thread::sleep(Duration::from_millis(1));
    }
    let elapsed = start.elapsed().as_secs_f64();
    let spoofed = replies(&victim, Duration::from_millis(300));
    // The same probe from its true source: answered once, with its own size, signed under
    // the agent's address key (not the sender's, nor the mesh key); again from the same
    // and another port: never.
    let sender = socket_in(&lab.client, CLIENT_ADDR, to);
    let other_port = socket_in(&lab.client, CLIENT_ADDR, to);
    let mut buf = [0u8; 2048];
    sender.send(&p).unwrap();
    let n = in_netns(&lab.client, || {
        sender
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        sender.recv(&mut buf)
    })
    .expect("the true source's first probe is answered");
    let server_key = address_key(&fleet_stamp_key(), SERVER_ADDR.parse().unwrap());
    let a = ReflectorPacket::read(&buf[..n], Mode::Authenticated(&server_key)).unwrap();
    assert_eq!((n, a.sender_seq), (p.len(), 7));
    let client_key = address_key(&fleet_stamp_key(), CLIENT_ADDR.parse().unwrap());
    for k in [client_key, fleet_stamp_key()] {
        assert!(ReflectorPacket::read(&buf[..n], Mode::Authenticated(&k)).is_err());
    }
    for _ in 0..20 {
        sender.send(&p).unwrap();
        other_port.send(&p).unwrap();
        std::thread::sleep(Duration::from_millis(2));
    }
    let again = replies(&sender, Duration::from_millis(300)).len()
        + replies(&other_port, Duration::from_millis(10)).len();
    // A fresh sequence number from the true source is still answered.
    sender.send(&probe_of(CLIENT_ADDR, 8, 112)).unwrap();
    let fresh = replies(&sender, Duration::from_millis(500)).len();
    let refused = sum(&scrape(&lab), "sonde_mesh_refused_total");
    eprintln!(
        "captured probe: 400 x {} bytes from a spoofed address in {elapsed:.2} s: {} answers; from its true source: 1 answer then {again} for 40 replays; a fresh one: {fresh}; refused {refused}",
        p.len(),
        spoofed.len()
    );
    assert!(
        spoofed.is_empty(),
        "{} answers to a spoofed address",
        spoofed.len()
    );
    assert_eq!(again, 0, "a replay from the true source answered");
    assert_eq!(fresh, 1);
    assert!(refused >= 440.0, "refused {refused}");
    // The agent's own tests still run.
    let out = run(lab.sonde(&agent, "ping", &["-t", "1", "--warmup", "0", "--udp"]));
    assert!(
        out.status.success(),
        "ping after the replay: {}",
        stderr(&out)
    );
}

#[test]
fn redteam_mesh_an_answer_replayed_or_forged_for_another_peer_is_not_counted() {
    if !need_tools(&["python3"]) {
        return;
    }
    let Some(lab) = Lab::new() else { return };
    add_other_addr(&lab);
    // Peer A: a real mesh agent at the client's address. Peer B: the rogue, at another
    // address the agent lists, holding no key. For each probe the agent sends B, the rogue
    // sends back the answer A's reflector gives the probe of that sequence number (A's
    // and B's probes carry the same session and numbers: the bytes a capture of A's
    // answers yields, made here under A's key by the test), and one under the mesh key
    // itself (what every answer carried before the fix), for 3 s.
    let to_a = temp_file("redteam-mesh-peer-a");
    std::fs::write(&to_a, format!("{SERVER_ADDR}:{STAMP_PORT}\n")).unwrap();
    let mut a_cmd = Lab::in_ns(&lab.client, SONDE);
    a_cmd
        .args(["serve", "--bind", CLIENT_ADDR, "--port", "5302"])
        .args(["--mesh", to_a.to_str().unwrap()])
        .args(["--mesh-port", &STAMP_PORT.to_string(), "--mesh-rate", "20"]);
    let _peer_a = Agent::start(a_cmd);
    let list = temp_file("redteam-mesh-two-peers");
    std::fs::write(
        &list,
        format!("{CLIENT_ADDR}:{STAMP_PORT}\n{OTHER_ADDR}:{STAMP_PORT}\n"),
    )
    .unwrap();
    let rogue = in_netns(&lab.client, || {
        let s = UdpSocket::bind(format!("{OTHER_ADDR}:{STAMP_PORT}")).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        s
    });
    let _agent = mesh_agent(&lab, list.to_str().unwrap(), &["--mesh-rate", "20"]);
    let a_key = address_key(&fleet_stamp_key(), CLIENT_ADDR.parse().unwrap());
    let mesh_key = fleet_stamp_key();
    let (start, mut buf, mut probes, mut sent) = (Instant::now(), [0u8; 4096], 0, 0);
    while start.elapsed() < Duration::from_secs(3) && sent < 3000 {
        let Ok((n, from)) = rogue.recv_from(&mut buf) else {
            continue;
        };
        probes += 1;
        let seq = u32::from_be_bytes(buf[..4].try_into().unwrap());
        let ssid = u16::from_be_bytes([buf[26], buf[27]]);
        let now = sonde_proto::stamp::Timestamp::from_unix_ns(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64,
            sonde_proto::stamp::TimeFormat::Ntp,
        );
        let answer = ReflectorPacket {
            seq,
            sender_seq: seq,
            ssid,
            receive: now,
            timestamp: now,
            sender_timestamp: sonde_proto::stamp::Timestamp(u64::from_be_bytes(
                buf[16..24].try_into().unwrap(),
            )),
            sender_ttl: 255,
            ..Default::default()
        };
        for k in [&a_key, &mesh_key] {
            let mut out = vec![0u8; n];
            answer.write(Mode::Authenticated(k), &mut out).unwrap();
            let _ = rogue.send_to(&out, from);
            sent += 1;
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    let text = scrape(&lab);
    let answered = "sonde_mesh_probes_answered_total";
    let (a_answered, b_answered) = (
        of_destination(&text, answered, CLIENT_ADDR),
        of_destination(&text, answered, OTHER_ADDR),
    );
    let rtt = "sonde_mesh_rtt_seconds_count";
    let (b_rtt, b_dup) = (
        of_destination(&text, rtt, OTHER_ADDR),
        of_destination(&text, "sonde_mesh_probes_duplicated_total", OTHER_ADDR),
    );
    eprintln!(
        "rogue peer: {probes} probes received, {sent} answers sent in A's name and the mesh key's; B answered {b_answered}, RTT samples {b_rtt}, duplicates {b_dup}; the real peer A answered {a_answered}"
    );
    assert!(probes >= 20, "the agent probed the rogue {probes} times");
    assert!(
        a_answered >= 20.0,
        "the real peer answered {a_answered}:\n{text}"
    );
    assert_eq!(b_answered, 0.0, "answers for another peer counted:\n{text}");
    assert_eq!(b_rtt, 0.0, "answers for another peer timed:\n{text}");
    assert_eq!(
        b_dup, 0.0,
        "answers for another peer counted as duplicates:\n{text}"
    );
}
