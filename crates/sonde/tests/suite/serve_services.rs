//! `sonde serve --stamp --mesh --metrics` as a set of services: SIGTERM or SIGINT stops
//! every service in the stated order (the reverse of their start: the agent, the mesh's
//! `/metrics`, the mesh, the STAMP reflector), each joined before the next is stopped
//! (its "stopped" line comes after its threads ended), the process exits 0 within a
//! second, and every port it held can be bound again. Loopback only; the mesh's list
//! names nobody, so nothing is probed.

use crate::common;

use std::io::{BufRead, BufReader, Read};
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::*;

/// The order every service must stop in.
const STOPS: [&str; 4] = [
    "agent stopped",
    "mesh metrics stopped",
    "mesh stopped",
    "stamp reflector stopped",
];

/// Reads `sonde serve`'s stderr line by line into a channel, and keeps it all.
fn lines_of(stderr: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    rx
}

/// The address after `after` in the first line (of those read so far or coming) with it.
fn addr_after(seen: &mut Vec<String>, rx: &mpsc::Receiver<String>, after: &str) -> SocketAddr {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(at) = seen.iter().find_map(|l| l.split_once(after)) {
            let word = at.1.split_whitespace().next().unwrap();
            return word.trim_end_matches("/metrics").parse().unwrap();
        }
        let left = until.saturating_duration_since(Instant::now());
        seen.push(rx.recv_timeout(left).expect("serve said where it listens"));
    }
}

fn serve_and_stop(signal: libc::c_int) {
    let list = temp_file("mesh-peers");
    std::fs::write(&list, "# nobody yet\n").unwrap();
    let mut cmd = sonde_cmd();
    cmd.env("SONDE_LOG", "info")
        .args(["serve", "--bind", "127.0.0.1", "--port", "0"])
        .args(["--stamp", "127.0.0.1:0", "--stamp-allow", "127.0.0.1/32"])
        .args(["--mesh", list.to_str().unwrap(), "--mesh-port", "0"])
        .args(["--metrics", "127.0.0.1:0"]);
    let mut child = cmd.spawn_keeping(Keep::Both);
    let rx = lines_of(child.stderr.take().unwrap());
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let agent: SocketAddr = first
        .split_whitespace()
        .nth(4)
        .expect("sonde agent listening on ADDR")
        .parse()
        .unwrap();
    let mut seen = Vec::new();
    let stamp = addr_after(&mut seen, &rx, "stamp reflector listening on ");
    let mesh = addr_after(&mut seen, &rx, "mesh reflecting on ");
    let metrics = addr_after(&mut seen, &rx, "mesh metrics: http://");
    let sent = Instant::now();
    // SAFETY: signals our own child.
    unsafe { libc::kill(child.id() as libc::pid_t, signal) };
    let status = wait_with_timeout(&mut child, Duration::from_secs(5)).expect("serve exits");
    let took = sent.elapsed();
    seen.extend(rx.iter());
    let log = seen.join("\n");
    assert_eq!(status.code(), Some(0), "{log}");
    // Nothing to wait for but threads reading their stop flags (the agent's and the
    // mesh's wake on the signal; the reflector's reads every 100 ms).
    assert!(took < Duration::from_secs(1), "stopped in {took:?}: {log}");
    let stops: Vec<&str> = seen
        .iter()
        .filter_map(|l| STOPS.iter().find(|s| l.ends_with(*s)).copied())
        .collect();
    assert_eq!(stops, STOPS, "{log}");
    TcpListener::bind(agent).unwrap_or_else(|e| panic!("agent port {agent}: {e}"));
    TcpListener::bind(metrics).unwrap_or_else(|e| panic!("metrics port {metrics}: {e}"));
    for port in [stamp, mesh] {
        UdpSocket::bind(port).unwrap_or_else(|e| panic!("UDP port {port}: {e}"));
    }
}

#[test]
fn a_signal_stops_every_service_in_order_exits_0_and_frees_its_ports() {
    let _serial = Serial::take();
    serve_and_stop(libc::SIGTERM);
    serve_and_stop(libc::SIGINT);
}
