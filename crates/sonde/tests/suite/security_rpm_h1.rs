//! HTTP/1.1 on `serve --rpm`: a TLS client that asks for it by ALPN (Cloudflare's mach
//! times its idle round trips over HTTP/1.1) gets the same answers as over HTTP/2, and the
//! same deadlines: one dribbling its request's headers after the handshake is cut within
//! [`FIRST_REQUEST`]. openssl's s_client from Debian as the client, on loopback.

use crate::common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::rpm_end::Endpoint;
use common::{skip_unless, Serial};
use sonde_rpm::server::FIRST_REQUEST;

#[test]
fn http1_over_tls_is_served_and_its_slowloris_cut() {
    let found = Command::new("openssl").arg("version").output();
    if !skip_unless("openssl", found.err().map(|e| e.to_string())) {
        return;
    }
    let _serial = Serial::take();
    let ep = Endpoint::start(None, "127.0.0.1", &[]);
    let port = ep.port().to_string();
    let s_client = || {
        let mut c = Command::new("openssl");
        c.args(["s_client", "-quiet", "-alpn", "http/1.1"])
            .args(["-connect", &format!("127.0.0.1:{port}")])
            .stdin(Stdio::piped())
            .stderr(Stdio::null());
        c
    };
    let get = |path: &str| {
        let mut c = s_client().stdout(Stdio::piped()).spawn().unwrap();
        let req =
            format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
        c.stdin.take().unwrap().write_all(req.as_bytes()).unwrap();
        let out = c.wait_with_output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let small = get("/small");
    assert!(small.starts_with("HTTP/1.1 200"), "{small}");
    assert!(small.ends_with("\r\n\r\nx"), "{small}");
    let nq = get("/.well-known/nq");
    assert!(
        nq.starts_with("HTTP/1.1 200") && nq.contains(&format!("https://127.0.0.1:{port}/large")),
        "{nq}"
    );

    // After the handshake, a header byte every 200 ms: cut by the first-request deadline.
    let mut s = s_client().stdout(Stdio::null()).spawn().unwrap();
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
