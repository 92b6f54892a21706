//! Issue 52 L5: a flood of unfinished TLS handshakes against the `/metrics` of `sonde fleet
//! --every --metrics --metrics-tls-*`. Each ClientHello costs its sender a few bytes and
//! the one metrics thread a key exchange and a signature; at the red team's 1,120 a
//! second from a few addresses, scrapes failed. Here four loopback addresses send raw
//! ClientHellos at that rate and never finish, while a real TLS client (rustls, verifying
//! the certificate) scrapes from 127.0.0.1 and five more addresses of the flood's /24.

use crate::common;

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::metrics_monitor::{certificate, Monitor};
use common::*;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use socket2::{Domain, Socket, Type};

/// Prometheus's scrape timeout in `security_metrics`'s TLS test: a scrape taking longer failed.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(1);
/// The red team's rate, from [`FLOODERS`] addresses, for [`FLOOD`].
const FLOOD_RATE: u32 = 1120;
const FLOODERS: u8 = 4;
const FLOOD: Duration = Duration::from_secs(3);
/// How often each scraper scrapes.
const SCRAPE_PERIOD: Duration = Duration::from_millis(700);
/// How long a flood connection is held unfinished before it is dropped.
const HOLD: Duration = Duration::from_millis(500);

fn client_config(cert: &PathBuf) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(cert).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    Arc::new(config)
}

/// A real scrape over TLS from 127.0.0.1, the certificate verified: whether the whole
/// answer (200, the body to its `# EOF`) came within [`SCRAPE_TIMEOUT`], and how long.
fn scrape(addr: SocketAddr, from: IpAddr, config: &Arc<rustls::ClientConfig>) -> (bool, Duration) {
    let began = Instant::now();
    let s = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    s.bind(&SocketAddr::new(from, 0).into()).unwrap();
    if s.connect_timeout(&addr.into(), SCRAPE_TIMEOUT).is_err() {
        return (false, began.elapsed());
    }
    let tcp: TcpStream = s.into();
    tcp.set_read_timeout(Some(SCRAPE_TIMEOUT)).unwrap();
    tcp.set_write_timeout(Some(SCRAPE_TIMEOUT)).unwrap();
    let name = ServerName::IpAddress(addr.ip().into());
    let conn = rustls::ClientConnection::new(Arc::clone(config), name).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    let req = format!(
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nAccept: application/openmetrics-text\r\n\r\n"
    );
    let mut out = Vec::new();
    let ok = tls.write_all(req.as_bytes()).is_ok() && {
        // The server closes after its answer (with close_notify).
        let _ = tls.read_to_end(&mut out);
        let text = String::from_utf8_lossy(&out);
        text.starts_with("HTTP/1.1 200 OK\r\n") && text.ends_with("# EOF\n")
    };
    let took = began.elapsed();
    (ok && took < SCRAPE_TIMEOUT, took)
}

/// A ClientHello as rustls sends it to `addr`: the flood's bytes, sent again and again.
fn client_hello(addr: SocketAddr, config: &Arc<rustls::ClientConfig>) -> Vec<u8> {
    let name = ServerName::IpAddress(addr.ip().into());
    let mut conn = rustls::ClientConnection::new(Arc::clone(config), name).unwrap();
    let mut hello = Vec::new();
    while conn.wants_write() {
        conn.write_tls(&mut hello).unwrap();
    }
    hello
}

/// From `source`, `rate` connections a second for [`FLOOD`], each sending `hello` and
/// never finishing, held [`HOLD`] then dropped: how many were made, and how many the
/// server answered (its ServerHello came) rather than closed unanswered.
fn flood(addr: SocketAddr, source: IpAddr, rate: u32, hello: Vec<u8>) -> (u32, u32) {
    let (began, gap) = (Instant::now(), Duration::from_secs(1) / rate);
    let (mut made, mut answered) = (0, 0);
    let mut held: std::collections::VecDeque<(Instant, TcpStream)> = Default::default();
    let settle = |c: TcpStream| {
        let _ = c.set_nonblocking(true);
        u32::from(matches!(c.peek(&mut [0u8; 8]), Ok(n) if n > 0))
    };
    while began.elapsed() < FLOOD && made < rate * FLOOD.as_secs() as u32 {
        let s = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        s.bind(&SocketAddr::new(source, 0).into()).unwrap();
        if s.connect(&addr.into()).is_ok() {
            let c: TcpStream = s.into();
            let _ = (&c).write_all(&hello);
            held.push_back((Instant::now(), c));
            made += 1;
        }
        while held.front().is_some_and(|(at, _)| at.elapsed() >= HOLD) {
            answered += settle(held.pop_front().unwrap().1);
        }
        let next = began + gap * (made + 1);
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
    std::thread::sleep(HOLD);
    answered += held.into_iter().map(|(_, c)| settle(c)).sum::<u32>();
    (made, answered)
}

#[test]
fn an_unfinished_handshake_flood_from_four_addresses_fails_no_scrape() {
    if !need_tools(&["openssl"]) {
        return;
    }
    let _serial = Serial::take();
    let (cert, key) = certificate("hs");
    let (cert_s, key_s) = (cert.to_str().unwrap(), key.to_str().unwrap());
    let m = Monitor::start(
        "hs-monitor",
        &["--metrics-tls-cert", cert_s, "--metrics-tls-key", key_s],
    );
    let config = client_config(&cert);
    let before = IpAddr::from([127, 0, 0, 9]);
    assert!(
        scrape(m.addr, before, &config).0,
        "a scrape before the flood"
    );
    let hello = client_hello(m.addr, &config);
    let cpu_before = m.cpu();
    let flooders: Vec<_> = (2..2 + FLOODERS)
        .map(|k| {
            let (addr, hello) = (m.addr, hello.clone());
            let source = IpAddr::from([127, 0, 0, k]);
            std::thread::spawn(move || flood(addr, source, FLOOD_RATE / FLOODERS as u32, hello))
        })
        .collect();
    // Six Prometheus servers at 127.0.0.1 and .6 to .10, in the flood's /24, each
    // scraping every 700 ms (Prometheus's shortest usual interval is 1 s) while the
    // flood lasts, 100 ms apart.
    let scrapers: Vec<_> = [1, 6, 7, 8, 9, 10]
        .into_iter()
        .enumerate()
        .map(|(i, k)| {
            let (addr, config) = (m.addr, Arc::clone(&config));
            let from = IpAddr::from([127, 0, 0, k]);
            std::thread::spawn(move || {
                let began = Instant::now();
                let mut at = Duration::from_millis(200 + 100 * i as u64);
                let mut scrapes = Vec::new();
                while at + SCRAPE_TIMEOUT < FLOOD {
                    std::thread::sleep(at.saturating_sub(began.elapsed()));
                    // A period from this one's start, however late it started.
                    at = began.elapsed() + SCRAPE_PERIOD;
                    scrapes.push(scrape(addr, from, &config));
                }
                scrapes
            })
        })
        .collect();
    let scrapes: Vec<_> = scrapers
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    let (made, answered) = flooders
        .into_iter()
        .map(|t| t.join().unwrap())
        .fold((0, 0), |(m, a), (mm, aa)| (m + mm, a + aa));
    let cpu = m.cpu() - cpu_before;
    let failed = scrapes.iter().filter(|(ok, _)| !ok).count();
    let slowest = scrapes.iter().map(|s| s.1).max().unwrap();
    eprintln!(
        "FIGURE metrics TLS: {made} unfinished handshakes in {FLOOD:?} from {FLOODERS} addresses, {answered} answered; {failed} of {} scrapes failed, slowest {slowest:?}; monitor CPU {cpu:?}",
        scrapes.len()
    );
    // The red team's rate was held (within 10 %).
    assert!(made >= FLOOD_RATE * 3 * 9 / 10, "the flood made {made}");
    assert!(scrapes.len() >= 14, "{} scrapes", scrapes.len());
    assert_eq!(failed, 0, "scrapes failed: {scrapes:?}");
    // Each flooding address is held to its budget (4 a second and a burst of 8, over 3 s
    // and the hold): at most 24 handshakes each, not the 840 it sent.
    assert!(
        answered <= 24 * FLOODERS as u32,
        "{answered} of the flood's handshakes done"
    );
}
