//! The mesh's `/metrics` under issue 52's M2: a large mesh's body (2.4 kB a peer, 24 MB at
//! 10,000) asked for by many clients that never read it. Each request kept its own copy
//! until written, so 64 never-read GETs took an agent of 10,000 peers from 76 MB to a
//! gigabyte; now one rendering a period is shared by every connection, within a byte
//! budget. The agent's peers are phantoms: addresses routed to a namespace that forwards
//! nothing, where every probe is dropped.

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use common::agent_proc::{status, MIB};
use common::data_rogue::in_netns;
use common::{temp_file, Agent, Lab, SERVER_ADDR, SONDE};

/// Phantom peers (SONDE_TEST_MESH_PEERS for another count: 10,000 is the list's cap).
fn peers() -> usize {
    std::env::var("SONDE_TEST_MESH_PEERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000)
}

/// Never-read GETs, as the red team sent them.
const GETS: usize = 64;

fn metrics_addr() -> SocketAddr {
    format!("{SERVER_ADDR}:9464").parse().unwrap()
}

/// A whole scrape from the client namespace: its status line and body (none if it took
/// more than 10 s).
fn scrape(lab: &Lab) -> (String, String) {
    in_netns(&lab.client, || {
        let mut c = TcpStream::connect(metrics_addr()).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        c.write_all(b"GET /metrics HTTP/1.1\r\nHost: agent\r\n\r\n")
            .unwrap();
        let mut out = Vec::new();
        if c.read_to_end(&mut out).is_err() {
            return ("(no answer in 10 s)".into(), String::new());
        }
        let out = String::from_utf8(out).unwrap();
        let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
        (head.lines().next().unwrap_or("").to_string(), body.into())
    })
}

/// A GET from a client that reads nothing, with the smallest receive buffer the kernel
/// allows (so that the agent's copy stays in the agent).
fn never_read(lab: &Lab) -> TcpStream {
    in_netns(&lab.client, || {
        use socket2::{Domain, Socket, Type};
        let s = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        s.set_recv_buffer_size(1).unwrap();
        s.connect(&metrics_addr().into()).unwrap();
        let mut c: TcpStream = s.into();
        c.write_all(b"GET /metrics HTTP/1.1\r\nHost: agent\r\n\r\n")
            .unwrap();
        c
    })
}

#[test]
fn never_read_scrapes_of_a_large_mesh_share_one_body_and_the_agent_stays_bounded() {
    let Some(lab) = Lab::new() else { return };
    // 198.19.0.0/16 goes to the client namespace, which forwards nothing: every probe to
    // a phantom is dropped there.
    let via = common::CLIENT_ADDR;
    lab.server_cmd("ip", &["route", "add", "198.19.0.0/16", "via", via]);
    let n = peers();
    let list = temp_file("mesh-metrics-phantoms");
    let text: String = (0..n)
        .map(|i| {
            format!(
                "198.19.{}.{} zone=z{} rack=r{}\n",
                i / 250,
                1 + i % 250,
                i % 3,
                i % 40
            )
        })
        .collect();
    std::fs::write(&list, text).unwrap();
    let mut cmd = Lab::in_ns(&lab.server, SONDE);
    cmd.args(["serve", "--bind", SERVER_ADDR, "--port", "0"])
        .args(["--mesh", list.to_str().unwrap(), "--mesh-port", "8620"])
        .args(["--metrics", &metrics_addr().to_string()])
        .args(["--label", "zone=z0", "--label", "rack=r0"]);
    let agent = Agent::start(cmd);
    let pid = agent.child.id();
    let (line, body) = scrape(&lab);
    assert_eq!(line, "HTTP/1.1 200 OK");
    assert!(body.ends_with("# EOF\n"), "a cut body");
    let peers_line = format!(
        "sonde_mesh_peers{{source=\"{SERVER_ADDR}\",source_rack=\"r0\",source_zone=\"z0\"}} {n}\n"
    );
    assert!(body.contains(&peers_line), "no {peers_line}");
    let len = body.len() as u64;
    // The peak so far holds one rendering already (its String and its shared copy).
    let idle = status(pid, "VmHWM:") * 1024;
    // The attack: the GETs at once, held open for as long as the agent keeps them (5 s
    // from their accept). A copy per connection, made one after the other (half a second
    // each in this debug build), grew the agent by 24 bodies here (208 MB), 64 in a
    // release build; the shared rendering keeps one.
    let held: Vec<TcpStream> = (0..GETS).map(|_| never_read(&lab)).collect();
    std::thread::sleep(Duration::from_millis(5500));
    let peak = status(pid, "VmHWM:") * 1024;
    let over = peak.saturating_sub(idle);
    eprintln!(
        "FIGURE {n} phantom peers, /metrics {} kB; {GETS} never-read GETs: agent peak {} MiB over {} MiB before ({} kB over, {:.1} bodies)",
        len / 1000,
        peak / MIB,
        idle / MIB,
        over / 1000,
        over as f64 / len as f64
    );
    // The bound: the rendering a request may find stale and the one it makes (its String
    // up to twice the body, its capacity), and 16 MiB of everything else.
    let bound = 4 * len + 16 * MIB;
    assert!(
        over <= bound,
        "the agent grew {} kB under {GETS} never-read GETs of a {} kB body (bound {} kB)",
        over / 1000,
        len / 1000,
        bound / 1000
    );
    // A real scrape after them is whole.
    let (line, after) = scrape(&lab);
    assert_eq!(line, "HTTP/1.1 200 OK");
    assert!(after.ends_with("# EOF\n") && after.contains(&peers_line));
    drop(held);
}
