//! Red team on iperf3's protocol, both ways. Against `sonde serve --iperf3`: a 4 GiB length
//! claim, a parameters frame trickled a byte at a time, states out of order, a test over
//! the agent's limits, RSA authentication, a second client while a test runs; each is
//! refused at a bounded cost (time, memory) and a real `iperf3 -c` is served afterwards.
//! Against `sonde stream --iperf3`: a busy iperf3 server and a rogue one sending a state
//! byte iperf3 does not have end in an error naming the far end, never a hang.

use crate::common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::*;

const COOKIE: &[u8; 37] = b"abcdefghijklmnopqrstuvwxyz234567abcd\0";

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `sonde serve --iperf3 127.0.0.1:PORT` with `extra`, listening once it returns (its
/// stderr said so; no probe connection, which would be a silent client holding the slot).
fn serve(port: u16, extra: &[&str]) -> Child {
    use std::io::BufRead;
    let mut child = sonde_cmd()
        .args(["serve", "--bind", "127.0.0.1", "--port", "0"])
        .args(["--iperf3", &format!("127.0.0.1:{port}")])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let listening = lines
        .by_ref()
        .map_while(Result::ok)
        .any(|l| l.contains("sonde iperf3 server listening"));
    if !listening {
        let _ = child.kill();
        let _ = child.wait();
        panic!("serve --iperf3 did not listen");
    }
    std::thread::spawn(move || lines.for_each(drop));
    child
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap()
}

/// Everything the server says until it closes (or `limit`), and when it closed.
fn until_closed(s: &mut TcpStream, limit: Duration) -> (Vec<u8>, Duration) {
    let t = Instant::now();
    s.set_read_timeout(Some(limit)).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 256];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return (got, t.elapsed()),
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
}

fn params(json: &str) -> Vec<u8> {
    let mut v = (json.len() as u32).to_be_bytes().to_vec();
    v.extend_from_slice(json.as_bytes());
    v
}

fn attacker(port: u16, first: &[u8]) -> TcpStream {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(first).unwrap();
    s
}

#[test]
fn serve_iperf3_refuses_bad_input_at_a_bounded_cost() {
    if !need_tools(&["iperf3"]) {
        return;
    }
    let _serial = Serial::take();
    let port = free_port();
    let mut server = serve(port, &["--max-connections", "8"]);
    let rss_before = rss_kib(server.id());

    // A 4 GiB parameters length: refused before any of it is buffered.
    let mut s = attacker(port, &[&COOKIE[..], &u32::MAX.to_be_bytes()].concat());
    let (got, took) = until_closed(&mut s, Duration::from_secs(5));
    assert!(
        got.iter().all(|b| *b == 9),
        "at most PARAM_EXCHANGE, then the close: {got:?}"
    );
    assert!(took < Duration::from_secs(1), "{took:?}");
    let rss_after = rss_kib(server.id());
    assert!(
        rss_after < rss_before + 8 * 1024,
        "{rss_before} KiB -> {rss_after} KiB"
    );

    // A parameters frame trickled a byte every 100 ms: cut at the 3 s step deadline,
    // however steadily the bytes come.
    let mut s = attacker(port, COOKIE);
    let t = Instant::now();
    let frame = params(&format!(
        "{{\"tcp\":true,\"title\":\"{}\"}}",
        "x".repeat(200)
    ));
    for b in &frame {
        if s.write_all(&[*b]).is_err() || t.elapsed() > Duration::from_secs(6) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let (_, _) = until_closed(&mut s, Duration::from_secs(5));
    let took = t.elapsed();
    assert!(
        took > Duration::from_millis(2900) && took < Duration::from_millis(4500),
        "trickled parameters cut after {took:?}"
    );

    // TEST_END before any data connection: out of order, closed at once.
    let ok = params(r#"{"tcp":true,"time":1,"parallel":1}"#);
    let mut s = attacker(port, &[&COOKIE[..], &ok].concat());
    let mut two = [0u8; 2];
    s.read_exact(&mut two).unwrap();
    assert_eq!(two, [9, 10], "PARAM_EXCHANGE, CREATE_STREAMS");
    s.write_all(&[4]).unwrap();
    let (_, took) = until_closed(&mut s, Duration::from_secs(5));
    assert!(took < Duration::from_secs(1), "{took:?}");

    // Over --max-connections: SERVER_ERROR with iperf3's IENUMSTREAMS (6).
    let many = params(r#"{"tcp":true,"time":1,"parallel":100}"#);
    let mut s = attacker(port, &[&COOKIE[..], &many].concat());
    let (got, _) = until_closed(&mut s, Duration::from_secs(5));
    assert_eq!(got, [9, 0xfe, 0, 0, 0, 6, 0, 0, 0, 0]);

    // RSA authentication: refused by name (IEAUTHTEST, 142), not ignored.
    let auth = params(r#"{"tcp":true,"time":1,"authtoken":"AAAA"}"#);
    let mut s = attacker(port, &[&COOKIE[..], &auth].concat());
    let (got, _) = until_closed(&mut s, Duration::from_secs(5));
    assert_eq!(got, [9, 0xfe, 0, 0, 0, 142, 0, 0, 0, 0]);

    // Unharmed: a real client is served, and a second one meanwhile told ACCESS_DENIED.
    let mut real = std::process::Command::new("iperf3")
        .args(["-c", "127.0.0.1", "-p", &port.to_string(), "-t", "2", "-J"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    let mut s = attacker(port, COOKIE);
    let (got, took) = until_closed(&mut s, Duration::from_secs(5));
    assert_eq!(got, [0xff], "ACCESS_DENIED while a test runs");
    assert!(took < Duration::from_secs(1), "{took:?}");
    let status = wait_with_timeout(&mut real, Duration::from_secs(10)).expect("iperf3 -c ends");
    assert!(status.success(), "iperf3 -c after the attacks");
    let _ = server.kill();
    let _ = server.wait();
}

/// `sonde stream 127.0.0.1 --iperf3 -p PORT -t 1`: its exit and stderr, and how long it took.
fn sonde_against(port: u16) -> (std::process::Output, Duration) {
    let t = Instant::now();
    let o = sonde_cmd()
        .args(["stream", "127.0.0.1", "--iperf3", "-p", &port.to_string()])
        .args(["-t", "1", "--warmup", "0", "--no-save"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (o, t.elapsed())
}

#[test]
fn stream_iperf3_names_a_busy_or_rogue_server() {
    if !need_tools(&["iperf3"]) {
        return;
    }
    let _serial = Serial::take();
    // A rogue server: reads the cookie, answers a state byte iperf3 does not have.
    let rogue = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = rogue.local_addr().unwrap().port();
    let t = std::thread::spawn(move || {
        let (mut s, _) = rogue.accept().unwrap();
        let mut cookie = [0u8; 37];
        s.read_exact(&mut cookie).unwrap();
        s.write_all(&[99]).unwrap();
        std::thread::sleep(Duration::from_millis(500));
    });
    let (o, took) = sonde_against(port);
    t.join().unwrap();
    let err = stderr(&o);
    assert!(!o.status.success());
    assert!(
        err.contains(&format!("iperf3 server at 127.0.0.1:{port}"))
            && err.contains("state byte 99"),
        "{err}"
    );
    assert!(took < Duration::from_secs(3), "{took:?}");

    // A busy iperf3 server: ACCESS_DENIED, said as such.
    let port = free_port();
    let mut server = std::process::Command::new("iperf3")
        .args(["-s", "-B", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let mut busy = std::process::Command::new("iperf3")
        .args(["-c", "127.0.0.1", "-p", &port.to_string(), "-t", "2"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let (o, took) = sonde_against(port);
    let err = stderr(&o);
    assert!(!o.status.success());
    assert!(
        err.contains("busy") && err.contains("ACCESS_DENIED"),
        "{err}"
    );
    assert!(took < Duration::from_secs(2), "{took:?}");
    let _ = wait_with_timeout(&mut busy, Duration::from_secs(5));
    let _ = server.kill();
    let _ = server.wait();
}
