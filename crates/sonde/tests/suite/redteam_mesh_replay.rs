//! Red team on the mesh's sessions (issue 52: H2, M3, L3): a probe captured on its way to
//! one peer and replayed to another from its sender's address, once and live; spoofed
//! answers from an `open` peer naming labels; a keyless mesh's reflector asked by a source
//! it does not list.

use crate::common;

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use common::data_rogue::{in_netns, replies, socket_in, OTHER_ADDR};
use common::mesh_rogue::{
    add_other_addr, mesh_agent, mesh_agent_cmd, of_destination, scrape, sum, STAMP_PORT,
};
use common::{need_tools, temp_file, Agent, Lab, CLIENT_ADDR, KEY_ENV, SERVER_ADDR, SONDE};
use sonde_proto::stamp::{Mode, ReflectorPacket, SenderPacket, TimeFormat, Timestamp};

/// A rogue's socket at `addr`:`STAMP_PORT` in the client namespace, reading for 100 ms.
fn rogue_at(lab: &Lab, addr: &str) -> UdpSocket {
    let addr = format!("{addr}:{STAMP_PORT}");
    in_netns(&lab.client, || {
        let s = UdpSocket::bind(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        s
    })
}

/// A real mesh agent at the client's address listing the server's agent, probing at
/// `rate` (its reflector answers ten times that per source).
fn client_agent(lab: &Lab, rate: &str, extra: &[&str]) -> Agent {
    let list = temp_file("redteam-mesh-replay-client-list");
    std::fs::write(&list, format!("{SERVER_ADDR}:{STAMP_PORT}\n")).unwrap();
    let mut cmd = Lab::in_ns(&lab.client, SONDE);
    cmd.args(["serve", "--bind", CLIENT_ADDR, "--port", "5302"])
        .args(["--mesh", list.to_str().unwrap()])
        .args(["--mesh-port", &STAMP_PORT.to_string(), "--mesh-rate", rate])
        .args(extra);
    Agent::start(cmd)
}

/// H2. Agent A (the server) probes B (a rogue at OTHER_ADDR that only listens: it sees
/// A's probes as anyone on the path would) at 100/s for 2 s; then C (a real agent at the
/// client's address) joins A's list, so A numbers its probes to C from 0 while its probes
/// to B are near 200. One captured A->B probe is re-sent to C from A's address (another
/// port: sessions are not keyed by port); 1.5 s later, for 2 s, every A->B probe is
/// re-sent to C as it passes. Before the fix, C's window for A's session (address, SSID)
/// moved to the replayed numbers: C refused A's own probes, lost in A's figures for C.
#[test]
fn redteam_mesh_a_probe_replayed_to_another_peer_neither_blinds_it_nor_forges_loss() {
    if !need_tools(&["python3"]) {
        return;
    }
    let Some(lab) = Lab::new() else { return };
    add_other_addr(&lab);
    let _c = client_agent(&lab, "100", &["--mesh-timeout", "1"]);
    let list = temp_file("redteam-mesh-replay-list");
    std::fs::write(&list, format!("{OTHER_ADDR}:{STAMP_PORT}\n")).unwrap();
    let _a = mesh_agent(
        &lab,
        list.to_str().unwrap(),
        &[
            "--mesh-rate",
            "100",
            "--mesh-budget",
            "1000",
            "--mesh-refresh",
            "1",
            "--mesh-timeout",
            "1",
        ],
    );
    let b = rogue_at(&lab, OTHER_ADDR);
    let mut buf = [0u8; 2048];
    let mut captured = Vec::new();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(2) {
        if let Ok(n) = b.recv(&mut buf) {
            captured = buf[..n].to_vec();
        }
    }
    let seq = u32::from_be_bytes(captured[..4].try_into().unwrap());
    std::fs::write(
        &list,
        format!("{OTHER_ADDR}:{STAMP_PORT}\n{CLIENT_ADDR}:{STAMP_PORT}\n"),
    )
    .unwrap();
    let c: SocketAddr = format!("{CLIENT_ADDR}:{STAMP_PORT}").parse().unwrap();
    let spoof = socket_in(&lab.server, SERVER_ADDR, c);
    spoof.send(&captured).unwrap();
    // One replay's effect: 1.5 s of A's probes to C (C joins within the list's 1 s).
    let phase = Instant::now();
    while phase.elapsed() < Duration::from_millis(1500) {
        let _ = b.recv(&mut buf);
    }
    // Live: every A->B probe re-sent to C from A's address as it passes (2 s, bounded by
    // A's 100 probes/s to B).
    let (live, mut replayed) = (Instant::now(), 0);
    while live.elapsed() < Duration::from_secs(2) && replayed < 400 {
        if let Ok(n) = b.recv(&mut buf) {
            let _ = spoof.send(&buf[..n]);
            replayed += 1;
        }
    }
    // Every probe sent settled: the timeout (1 s) and a margin.
    std::thread::sleep(Duration::from_millis(1500));
    let text = scrape(&lab);
    let to_c = |family: &str| of_destination(&text, family, CLIENT_ADDR);
    let (sent, answered, lost, dup) = (
        to_c("sonde_mesh_probes_sent_total"),
        to_c("sonde_mesh_probes_answered_total"),
        to_c("sonde_mesh_probes_lost_total"),
        to_c("sonde_mesh_probes_duplicated_total"),
    );
    eprintln!(
        "A->B probe {seq} replayed to C once, then {replayed} A->B probes live: A's probes to C: sent {sent}, answered {answered}, lost {lost}, duplicated {dup}"
    );
    assert!(replayed >= 100, "{replayed} probes replayed");
    assert!(sent >= 200.0, "A sent C {sent} probes:\n{text}");
    assert_eq!(lost, 0.0, "a replay forged loss:\n{text}");
    assert_eq!(dup, 0.0, "a replay forged duplicates:\n{text}");
    assert!(answered >= sent - 110.0, "answered {answered} of {sent}");
}

/// An answer to a probe of A's to its `open` peer (a keyless rogue at OTHER_ADDR), carrying
/// a Labels TLV of the rogue's choosing, new values each time.
fn spoofed_answer(probe: &[u8], n: u32) -> Vec<u8> {
    let asked = SenderPacket::read(probe, Mode::Unauthenticated).unwrap();
    let now = Timestamp::from_unix_ns(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64,
        TimeFormat::Ntp,
    );
    let answer = ReflectorPacket {
        seq: asked.seq,
        sender_seq: asked.seq,
        ssid: asked.ssid,
        receive: now,
        timestamp: now,
        sender_timestamp: asked.timestamp,
        sender_ttl: 255,
        ..Default::default()
    };
    let text = format!("evil=v{n}\nrack=forged{n}\n");
    let mut out = vec![0u8; 44 + 4 + text.len()];
    answer.write(Mode::Unauthenticated, &mut out).unwrap();
    let value =
        sonde_proto::stamp::tlv::put(&mut out[44..], sonde_proto::mesh::TYPE_LABELS, text.len())
            .unwrap();
    value.copy_from_slice(text.as_bytes());
    out
}

/// M3. A's list names an `open` peer (an agent-less reflector: unauthenticated STAMP); a
/// keyless rogue holding its address answers each probe with labels of its choosing. The
/// answers count (an open peer proves nothing either way), the labels must not: before the
/// fix they went on every series of the pair.
#[test]
fn redteam_mesh_an_open_peers_spoofed_answers_put_no_label_on_its_series() {
    if !need_tools(&["python3"]) {
        return;
    }
    let Some(lab) = Lab::new() else { return };
    add_other_addr(&lab);
    let list = temp_file("redteam-mesh-open-labels");
    std::fs::write(&list, format!("{OTHER_ADDR}:{STAMP_PORT} open\n")).unwrap();
    let _a = mesh_agent(&lab, list.to_str().unwrap(), &["--mesh-rate", "20"]);
    let rogue = rogue_at(&lab, OTHER_ADDR);
    let (start, mut buf, mut answered) = (Instant::now(), [0u8; 2048], 0);
    while start.elapsed() < Duration::from_secs(2) && answered < 200 {
        if let Ok((n, from)) = rogue.recv_from(&mut buf) {
            let _ = rogue.send_to(&spoofed_answer(&buf[..n], answered), from);
            answered += 1;
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    let text = scrape(&lab);
    let counted = of_destination(&text, "sonde_mesh_probes_answered_total", OTHER_ADDR);
    eprintln!("open peer: {answered} spoofed answers with labels; {counted} counted");
    assert!(
        answered >= 20 && counted >= 10.0,
        "{answered} {counted}:\n{text}"
    );
    assert!(
        !text.contains("evil=") && !text.contains("forged"),
        "a spoofed answer's labels reached /metrics:\n{text}"
    );
}

/// L3. A keyless mesh (`--insecure-no-key`) listing only the client: an unauthenticated
/// probe from an address it does not list (OTHER_ADDR, a spoofed victim or a stranger)
/// gets no answer; its listed peer's does.
#[test]
fn redteam_mesh_a_keyless_reflector_answers_only_its_listed_peers() {
    if !need_tools(&["python3"]) {
        return;
    }
    let Some(lab) = Lab::new() else { return };
    add_other_addr(&lab);
    let list = temp_file("redteam-mesh-keyless-allow");
    std::fs::write(&list, format!("{CLIENT_ADDR}:{STAMP_PORT}\n")).unwrap();
    let mut cmd = mesh_agent_cmd(
        &lab,
        list.to_str().unwrap(),
        &["--insecure-no-key", "--mesh-rate", "5"],
    );
    cmd.env_remove(KEY_ENV);
    let _a = Agent::start(cmd);
    let to: SocketAddr = format!("{SERVER_ADDR}:{STAMP_PORT}").parse().unwrap();
    let stranger = socket_in(&lab.client, OTHER_ADDR, to);
    let peer = socket_in(&lab.client, CLIENT_ADDR, to);
    let probe = |seq: u32| {
        let mut p = vec![0u8; 44];
        let sp = SenderPacket {
            seq,
            ssid: 5,
            ..Default::default()
        };
        sp.write(Mode::Unauthenticated, &mut p).unwrap();
        p
    };
    for seq in 0..20 {
        let _ = stranger.send(&probe(seq));
        let _ = peer.send(&probe(seq));
        std::thread::sleep(Duration::from_millis(5));
    }
    let (to_stranger, to_peer) = (
        replies(&stranger, Duration::from_millis(300)).len(),
        replies(&peer, Duration::from_millis(300)).len(),
    );
    let refused = sum(&scrape(&lab), "sonde_mesh_refused_total");
    eprintln!("keyless mesh: 20 probes from an unlisted source: {to_stranger} answers; from its listed peer: {to_peer}; refused {refused}");
    assert_eq!(
        to_stranger, 0,
        "a keyless mesh answered a source it does not list"
    );
    assert_eq!(to_peer, 20);
    assert!(refused >= 20.0, "refused {refused}");
}
