//! HTTP/1.1 on `serve --rpm`: a TLS client that asks for it by ALPN (Cloudflare's mach
//! times its idle round trips over HTTP/1.1) gets the same answers as over HTTP/2, and the
//! same deadlines: one dribbling its request's headers after the handshake is cut within
//! [`FIRST_REQUEST`]. curl and openssl from Debian as the clients, on loopback.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::rpm_end::Endpoint;
use common::{skip_unless, Serial};
use sonde_rpm::server::FIRST_REQUEST;

#[test]
fn http1_over_tls_is_served_and_its_slowloris_cut() {
    for tool in ["curl", "openssl"] {
        let found = Command::new(tool).arg("version").output();
        if !skip_unless(tool, found.err().map(|e| e.to_string())) {
            return;
        }
    }
    let _serial = Serial::take();
    let ep = Endpoint::start(None, "127.0.0.1", &[]);
    let curl = |path: &str, version: &str| {
        let out = Command::new("curl")
            .args(["-sk", version, "-w", "\n%{http_version}"])
            .arg(format!("{}{path}", ep.base))
            .output()
            .unwrap();
        assert!(out.status.success(), "curl {path} {version}");
        String::from_utf8(out.stdout).unwrap()
    };
    assert_eq!(curl("/small", "--http1.1"), "x\n1.1");
    assert_eq!(curl("/small", "--http2"), "x\n2");
    let nq = curl("/.well-known/nq", "--http1.1");
    assert!(
        nq.contains("\"large_download_url\"") && nq.ends_with("\n1.1"),
        "{nq}"
    );

    // After the handshake, a header byte every 200 ms: cut by the first-request deadline.
    let port = ep.port().to_string();
    let mut s = Command::new("openssl")
        .args(["s_client", "-quiet", "-alpn", "http/1.1"])
        .args(["-connect", &format!("127.0.0.1:{port}")])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut input = s.stdin.take().unwrap();
    let start = Instant::now();
    let mut wrote = 0;
    for b in b"GET /small HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "
        .iter()
        .chain(&[b'a'; 200])
    {
        if s.try_wait().unwrap().is_some() || input.write_all(&[*b]).is_err() {
            break;
        }
        let _ = input.flush();
        wrote += 1;
        if start.elapsed() > Duration::from_secs(10) {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let _ = s.kill();
    let _ = s.wait();
    let held = start.elapsed();
    eprintln!("HTTP/1.1 slowloris: {wrote} header bytes, cut after {held:?}");
    assert!(
        held < FIRST_REQUEST + Duration::from_secs(1),
        "held {held:?}"
    );
}
