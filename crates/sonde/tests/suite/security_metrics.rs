//! `/metrics` of `sonde fleet --every --metrics` attacked as SECURITY.md lists it: slow
//! (slowloris) and silent connections, floods, huge heads, pipelining, traversal,
//! smuggling and other methods, while real scrapes are timed; and its bearer token, with
//! Debian's `prometheus` scraping through `authorization.credentials_file`. The fleet's
//! agents are loopback addresses where nothing listens: its runs fail at once and the
//! monitor then only serves.

use crate::common;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::metrics_monitor::{certificate, Monitor};
use common::*;

/// The monitor, run apart from every other timing test; the monitor stops first.
fn monitor(extra: &[&str]) -> (Monitor, Serial) {
    let serial = Serial::take();
    (Monitor::start("monitor", extra), serial)
}

/// What a real scrape's median must stay under, under every attack here ("well under a
/// second").
const SCRAPE_LIMIT: Duration = Duration::from_millis(500);
/// How long the server may hold a connection that never finishes its request: past its
/// 2 s request deadline, short of its 5 s close deadline and of a slowloris's whole 7.2 s
/// trickle, so a hold under it is the request deadline's cut and nothing else. (2.6 s
/// before: a loaded machine wakes the server's poll late now and then.)
const HOLD_LIMIT: Duration = Duration::from_millis(4000);
/// The server's deadline from accept to a whole request (`REQUEST_DEADLINE` of
/// sonde_run::metrics_http).
const REQUEST_DEADLINE: Duration = Duration::from_secs(2);

/// Sends `request` on a new connection and reads the answer to its end.
fn exchange(addr: SocketAddr, request: &[u8]) -> String {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c.write_all(request).unwrap();
    let mut out = Vec::new();
    // A reset after a refusal is an answer too: what came before it is returned.
    let _ = c.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// A real scrape (as Prometheus sends it, with `token` if any): its status line, and how
/// long it took from connect to the answer's end.
fn scrape(addr: SocketAddr, token: Option<&str>) -> (String, Duration) {
    let began = Instant::now();
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let req = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nAccept: application/openmetrics-text\r\n{auth}\r\n");
    let out = exchange(addr, req.as_bytes());
    let status = out.lines().next().unwrap_or("").to_string();
    (status, began.elapsed())
}

/// Real scrapes every 100 ms for `length`, each answered; the slowest. A server that
/// served the attackers' connections before the scrapes (one at a time, or waiting out a
/// connection's request deadline) would hold the scrapes behind them for a deadline (2 s) or
/// more: so no scrape may take the 2 s deadline, and their median stays under
/// `SCRAPE_LIMIT`. A single scrape is not held to `SCRAPE_LIMIT`: the machine's other
/// work delays one now and then (1.05 s once with builds beside it), and the median does
/// not move for one.
fn scrapes_for(addr: SocketAddr, length: Duration) -> Duration {
    let (until, mut took_all) = (Instant::now() + length, Vec::new());
    while Instant::now() < until && took_all.len() < 100 {
        let (status, took) = scrape(addr, None);
        assert_eq!(status, "HTTP/1.1 200 OK");
        assert!(
            took < REQUEST_DEADLINE,
            "scrape {} took {took:?}: as long as an attacker's deadline",
            took_all.len()
        );
        took_all.push(took);
        std::thread::sleep(Duration::from_millis(100));
    }
    took_all.sort();
    let median = took_all[took_all.len() / 2];
    assert!(
        median < SCRAPE_LIMIT,
        "median scrape {median:?}: {took_all:?}"
    );
    *took_all.last().unwrap()
}

/// A slowloris: a request's start, then a byte every 0.9 s; how long the server held it
/// before closing it (bounded: 8 bytes).
fn slowloris(addr: SocketAddr) -> Duration {
    let began = Instant::now();
    let mut c = TcpStream::connect(addr).unwrap();
    c.write_all(b"GET /metrics HTTP/1.1\r\nX-Slow: ").unwrap();
    c.set_read_timeout(Some(Duration::from_millis(900)))
        .unwrap();
    for _ in 0..8 {
        // Waits 0.9 s for the server to close, then sends one more byte.
        match c.read(&mut [0u8; 256]) {
            Ok(0) => return began.elapsed(),
            Ok(_) => panic!("a request never finished was answered"),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return began.elapsed(),
        }
        if c.write_all(b"a").is_err() {
            return began.elapsed();
        }
    }
    began.elapsed()
}

/// `n` connections that send nothing, opened now.
fn silent(addr: SocketAddr, n: usize) -> Vec<TcpStream> {
    (0..n).map(|_| TcpStream::connect(addr).unwrap()).collect()
}

/// Whether the server closed `c` (EOF within 3 s, nothing answered).
fn closed_by_server(c: &TcpStream) -> bool {
    c.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    matches!((&*c).read(&mut [0u8; 64]), Ok(0))
}

#[test]
fn slowloris_and_silent_connections_delay_no_scrape() {
    let (m, _serial) = monitor(&[]);
    let addr = m.addr;
    // 6 slowloris and 100 silent connections, fewer than the server's 128 places: each
    // is held to its deadline while real scrapes go on.
    let lorises: Vec<_> = (0..6)
        .map(|_| std::thread::spawn(move || slowloris(addr)))
        .collect();
    let quiet = silent(addr, 100);
    let slowest = scrapes_for(addr, Duration::from_secs(4));
    let held: Vec<Duration> = lorises.into_iter().map(|t| t.join().unwrap()).collect();
    assert!(quiet.iter().all(closed_by_server));
    eprintln!("FIGURE metrics: slowest scrape {slowest:?} beside 6 slowloris (held {held:?}) and 100 silent connections");
    assert!(
        held.iter()
            .all(|h| *h > Duration::from_millis(1800) && *h < HOLD_LIMIT),
        "{held:?}"
    );
    // Past the places: 400 silent connections, 40 every 100 ms; the oldest are dropped.
    let flood = std::thread::spawn(move || {
        let mut held = Vec::new();
        for _ in 0..10 {
            held.extend(silent(addr, 40));
            std::thread::sleep(Duration::from_millis(100));
        }
        held
    });
    let slowest = scrapes_for(addr, Duration::from_millis(1500));
    let quiet = flood.join().unwrap();
    eprintln!(
        "FIGURE metrics: slowest scrape {slowest:?} beside {} silent connections",
        quiet.len()
    );
    assert!(closed_by_server(&quiet[0]) && closed_by_server(&quiet[quiet.len() - 1]));
}

#[test]
fn floods_huge_heads_pipelining_traversal_smuggling_and_methods_are_refused() {
    let (m, _serial) = monitor(&[]);
    let addr = m.addr;
    // 100 kB of headers: refused at 8 KiB, and the answer arrives whole.
    let huge = format!(
        "GET /metrics HTTP/1.1\r\nX-Big: {}\r\n\r\n",
        "a".repeat(100_000)
    );
    assert!(exchange(addr, huge.as_bytes()).starts_with("HTTP/1.1 431 "));
    // 50 pipelined requests: one answer, then the close.
    let fifty = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n".repeat(50);
    let out = exchange(addr, fifty.as_bytes());
    assert_eq!(out.matches("HTTP/1.1 ").count(), 1, "{out}");
    assert!(
        out.starts_with("HTTP/1.1 200 OK") && out.ends_with("# EOF\n"),
        "{out}"
    );
    for path in [
        "/../../etc/passwd",
        "/metrics/../../../etc/shadow",
        "/%2e%2e/%2e%2e/etc/passwd",
        "//etc/passwd",
    ] {
        let out = exchange(addr, format!("GET {path} HTTP/1.1\r\n\r\n").as_bytes());
        assert!(
            out.starts_with("HTTP/1.1 404 ") && !out.contains("root:"),
            "{path}: {out}"
        );
    }
    let smuggled = "GET /metrics HTTP/1.1\r\nContent-Length: 38\r\n\r\nGET /metrics/../x HTTP/1.1\r\nX: y\r\n\r\n";
    let out = exchange(addr, smuggled.as_bytes());
    assert!(
        out.starts_with("HTTP/1.1 400 ") && out.matches("HTTP/1.1").count() == 1,
        "{out}"
    );
    let chunked = "GET /metrics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n";
    assert!(exchange(addr, chunked.as_bytes()).starts_with("HTTP/1.1 400 "));
    for method in [
        "POST", "PUT", "DELETE", "OPTIONS", "TRACE", "CONNECT", "HEAD",
    ] {
        let out = exchange(
            addr,
            format!("{method} /metrics HTTP/1.1\r\n\r\n").as_bytes(),
        );
        assert!(out.starts_with("HTTP/1.1 405 "), "{method}: {out}");
    }
    // A flood from two threads, 2000 connections each at most, for 3 s: some close at
    // once, some after half a request; real scrapes are timed meanwhile.
    let flood = |half: bool| {
        std::thread::spawn(move || {
            let until = Instant::now() + Duration::from_secs(3);
            let mut n = 0;
            while n < 2000 && Instant::now() < until {
                if let Ok(mut c) = TcpStream::connect(addr) {
                    if half {
                        let _ = c.write_all(b"GET /met");
                    }
                    n += 1;
                }
            }
            n
        })
    };
    let (a, b) = (flood(false), flood(true));
    let slowest = scrapes_for(addr, Duration::from_secs(3));
    let n = a.join().unwrap() + b.join().unwrap();
    eprintln!("FIGURE metrics: slowest scrape {slowest:?} during a flood of {n} connections");
    assert!(n > 500, "the flood made {n} connections");
}

/// A 0600 file holding a fresh random token.
fn token_file() -> (PathBuf, String) {
    use std::os::unix::fs::PermissionsExt;
    let mut raw = [0u8; 24];
    std::fs::File::open("/dev/urandom")
        .unwrap()
        .read_exact(&mut raw)
        .unwrap();
    let token: String = raw.iter().map(|b| format!("{b:02x}")).collect();
    let path = temp_file("metrics-token");
    std::fs::write(&path, format!("{token}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    (path, token)
}

/// Debian's Prometheus on loopback scraping `target` every second, once with the token
/// file and once without; killed on drop.
struct Prometheus(Child, SocketAddr);

impl Prometheus {
    /// With `ca`: over TLS, trusting that certificate.
    fn start(target: SocketAddr, token: &Path, ca: Option<&Path>) -> Prometheus {
        let web = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let dir = temp_file("prometheus");
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("prometheus.yml");
        let tls = ca.map_or(String::new(), |ca| {
            format!(
                "    scheme: https\n    tls_config: {{ ca_file: {} }}\n",
                ca.display()
            )
        });
        let job = |name: &str, auth: &str| {
            format!(
                "  - job_name: {name}\n    static_configs:\n      - targets: ['{target}']\n{auth}{tls}"
            )
        };
        let auth = format!(
            "    authorization:\n      credentials_file: {}\n",
            token.display()
        );
        let text = format!(
            "global: {{ scrape_interval: 1s, scrape_timeout: 1s }}\nscrape_configs:\n{}{}",
            job("with_token", &auth),
            job("without_token", "")
        );
        std::fs::write(&config, text).unwrap();
        let child = std::process::Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={web}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus starts");
        Prometheus(child, web)
    }

    /// `up` of each job, once both have been scraped, within 30 s.
    fn up(&self) -> (f64, f64) {
        let began = Instant::now();
        loop {
            let out = TcpStream::connect(self.1).ok().map(|mut c| {
                let _ = c.set_read_timeout(Some(Duration::from_secs(5)));
                let _ = c.write_all(b"GET /api/v1/query?query=up HTTP/1.0\r\n\r\n");
                let mut s = String::new();
                let _ = c.read_to_string(&mut s);
                s
            });
            let json = out
                .as_deref()
                .and_then(|o| o.split_once("\r\n\r\n"))
                .map(|(_, b)| b);
            let v: serde_json::Value = json
                .and_then(|b| serde_json::from_str(b).ok())
                .unwrap_or_default();
            let up = |job: &str| {
                v["data"]["result"]
                    .as_array()?
                    .iter()
                    .find(|r| r["metric"]["job"] == job)?["value"][1]
                    .as_str()?
                    .parse::<f64>()
                    .ok()
            };
            if let (Some(a), Some(b)) = (up("with_token"), up("without_token")) {
                return (a, b);
            }
            assert!(
                began.elapsed() < Duration::from_secs(30),
                "no scrape of both jobs: {out:?}"
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_token_file_admits_prometheus_and_refuses_scrapes_without_it() {
    if !need_tools(&["prometheus"]) {
        return;
    }
    let (file, token) = token_file();
    let (m, _serial) = monitor(&["--metrics-token-file", file.to_str().unwrap()]);
    assert_eq!(scrape(m.addr, Some(&token)).0, "HTTP/1.1 200 OK");
    assert_eq!(scrape(m.addr, None).0, "HTTP/1.1 401 Unauthorized");
    assert_eq!(
        scrape(m.addr, Some(&token[1..])).0,
        "HTTP/1.1 401 Unauthorized"
    );
    let prom = Prometheus::start(m.addr, &file, None);
    assert_eq!(
        prom.up(),
        (1.0, 0.0),
        "with the token up, without it refused"
    );
}

#[test]
fn a_token_file_others_may_read_or_too_short_is_refused_naming_the_flag() {
    use std::os::unix::fs::PermissionsExt;
    let (open, _) = token_file();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).unwrap();
    let short = temp_file("short-token");
    std::fs::write(&short, "abc\n").unwrap();
    std::fs::set_permissions(&short, std::fs::Permissions::from_mode(0o600)).unwrap();
    let fleet = temp_file("unused.toml");
    std::fs::write(&fleet, "name = \"m\"\n[[agent]]\naddress = \"127.0.0.2\"\n[[agent]]\naddress = \"127.0.0.3\"\n[[test]]\ntype = \"ping\"\n").unwrap();
    for (file, needle) in [
        (
            &open,
            format!(
                "mode 0644 lets others read or change it; run `chmod 600 {}`",
                open.display()
            ),
        ),
        (&short, "at least 16 printable characters".to_string()),
    ] {
        let mut c = sonde_cmd();
        c.args([
            "fleet",
            fleet.to_str().unwrap(),
            "--every",
            "1h",
            "--metrics",
            "127.0.0.1:0",
        ])
        .args(["--metrics-token-file", file.to_str().unwrap()]);
        let o = run(c);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(
            err.contains(&format!("--metrics-token-file {}", file.display()))
                && err.contains(&needle),
            "{err}"
        );
    }
}

#[test]
fn over_tls_prometheus_scrapes_with_the_token_and_plain_or_silent_clients_get_nothing() {
    if !need_tools(&["prometheus", "openssl"]) {
        return;
    }
    let (file, _) = token_file();
    let (cert, key) = certificate("metrics");
    let (m, _serial) = monitor(&[
        "--metrics-token-file",
        file.to_str().unwrap(),
        "--metrics-tls-cert",
        cert.to_str().unwrap(),
        "--metrics-tls-key",
        key.to_str().unwrap(),
    ]);
    // Plain HTTP gets no HTTP answer; a silent client is closed at the deadline.
    let plain = exchange(m.addr, b"GET /metrics HTTP/1.1\r\n\r\n");
    assert!(
        !plain.contains("HTTP/1.1") && !plain.contains("sonde_"),
        "{plain}"
    );
    let began = Instant::now();
    assert!(closed_by_server(&silent(m.addr, 1)[0]));
    assert!(began.elapsed() < HOLD_LIMIT, "{:?}", began.elapsed());
    let prom = Prometheus::start(m.addr, &file, Some(&cert));
    assert_eq!(
        prom.up(),
        (1.0, 0.0),
        "over TLS: with the token up, without it refused"
    );
}

#[test]
fn a_tls_key_others_may_read_or_a_certificate_without_one_is_refused_naming_the_flag() {
    if !need_tools(&["openssl"]) {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let (cert, key) = certificate("metrics");
    let open = temp_file("open-key.pem");
    std::fs::copy(&key, &open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).unwrap();
    let fleet = temp_file("unused.toml");
    std::fs::write(&fleet, "name = \"m\"\n[[agent]]\naddress = \"127.0.0.2\"\n[[agent]]\naddress = \"127.0.0.3\"\n[[test]]\ntype = \"ping\"\n").unwrap();
    let cases = [
        (
            &cert,
            &open,
            format!("refused --metrics-tls-key {}: mode 0644", open.display()),
        ),
        (
            &key,
            &key,
            format!("--metrics-tls-cert {}: no CERTIFICATE", key.display()),
        ),
    ];
    for (c, k, needle) in cases {
        let mut cmd = sonde_cmd();
        cmd.args([
            "fleet",
            fleet.to_str().unwrap(),
            "--every",
            "1h",
            "--metrics",
            "127.0.0.1:0",
        ])
        .args([
            "--metrics-tls-cert",
            c.to_str().unwrap(),
            "--metrics-tls-key",
            k.to_str().unwrap(),
        ]);
        let o = run(cmd);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(err.contains(&needle), "{needle}: {err}");
    }
}
