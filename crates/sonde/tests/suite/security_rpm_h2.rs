//! `serve --rpm` under HTTP/2 abuse, each attack run with raw frames (common::h2_raw) or
//! hyper's client against the real binary on loopback (h2c: the frames are the same under
//! TLS, which only adds the handshake inside the first-request deadline). Each test names
//! the defence it proves and prints the figures SECURITY.md quotes: how far the attacker
//! got before the cut, and how much the server's resident memory grew.

use crate::common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use common::h2_raw::*;
use common::rpm_end::Endpoint;
use common::Serial;
use hyper::body::{Body, Bytes, Frame};
use sonde_rpm::client::conn::{self, Target};
use sonde_rpm::config::Url;
use sonde_rpm::server::{FIRST_REQUEST, MAX_REQUESTS_PER_S, MAX_STREAMS, STALLED};

fn start(extra: &[&str]) -> (Endpoint, SocketAddr) {
    let mut args = vec!["--rpm-h2c"];
    args.extend_from_slice(extra);
    let ep = Endpoint::start(None, "127.0.0.1", &args);
    let addr = format!("127.0.0.1:{}", ep.port()).parse().unwrap();
    (ep, addr)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// After an attack the endpoint still answers a real client.
fn still_serves(addr: SocketAddr) {
    let t = Target {
        addr,
        host: "127.0.0.1".into(),
        authority: addr.to_string(),
        tls: None,
    };
    let small = Url::parse(&format!("http://{addr}/small")).unwrap();
    let got = runtime().block_on(async {
        let mut c = conn::open(&t).await?;
        conn::timed_get(&mut c.sender, &small, &t.authority).await
    });
    assert!(got.is_ok(), "not served after the attack: {got:?}");
}

fn mib(b: u64) -> f64 {
    b as f64 / (1 << 20) as f64
}

/// CVE-2023-44487: HEADERS then RST_STREAM, on a loop, in the same writes. h2 counts the
/// streams reset before they were accepted and sends GOAWAY (ENHANCE_YOUR_CALM) at the
/// endpoint's `max_pending_accept_reset_streams`.
#[test]
fn rapid_reset_is_cut_by_goaway() {
    let _serial = Serial::take();
    let (ep, addr) = start(&[]);
    let pid = ep.child.id();
    let (cpu0, (rss0, _)) = (cpu_s(pid), rss(pid));
    let mut a = Attacker::connect(addr, &[], true);
    const PAIRS: u32 = 100_000;
    let mut sent = 0;
    while sent < PAIRS && a.opened.elapsed() < Duration::from_secs(10) && !a.seen.cut() {
        let mut batch = Vec::new();
        for i in 0..100 {
            let id = 1 + 2 * (sent + i);
            let block = request_block(false, "/large");
            batch.extend(frame(HEADERS, END_HEADERS | END_STREAM, id, &block));
            batch.extend(rst_stream(id, CANCEL));
        }
        if !a.send(&batch) {
            break;
        }
        sent += 100;
    }
    let cut = a.wait_cut(Duration::from_secs(5));
    let (cpu, (_, hwm)) = (cpu_s(pid) - cpu0, rss(pid));
    eprintln!(
        "rapid reset: {sent} HEADERS+RST_STREAM pairs written before the cut ({cut:?}, GOAWAY {:?}); server CPU {cpu:.2} s, peak RSS +{:.1} MiB",
        a.seen.goaway(),
        mib(hwm.saturating_sub(rss0))
    );
    assert!(cut.is_some(), "never cut after {sent} pairs");
    assert!(sent < PAIRS, "all {PAIRS} pairs taken");
    assert_eq!(
        a.seen.goaway(),
        Some(0xb),
        "GOAWAY ENHANCE_YOUR_CALM expected"
    );
    still_serves(addr);
}

/// The same attack made slower so that h2 accepts every stream before its reset comes (the
/// answer's head is awaited first): h2's count never moves, each stream costs a request.
/// The endpoint's own budget of [`MAX_REQUESTS_PER_S`] requests a second on a connection
/// (the draft's client sends at most 100 probes a second in all) closes it.
#[test]
fn accepted_then_reset_streams_hit_the_request_budget() {
    let _serial = Serial::take();
    let (ep, addr) = start(&[]);
    let pid = ep.child.id();
    let cpu0 = cpu_s(pid);
    // A zero window: the large answers send nothing, only their heads.
    let mut a = Attacker::connect(addr, &[(SETTINGS_INITIAL_WINDOW_SIZE, 0)], true);
    const PER_ROUND: u32 = 32;
    let (mut next, mut requests) = (1u32, 0u64);
    let mut rounds = 0;
    while a.opened.elapsed() < Duration::from_secs(6) && !a.seen.cut() {
        let heads = a.seen.heads.load(Ordering::Relaxed);
        let ids: Vec<u32> = (0..PER_ROUND).map(|i| next + 2 * i).collect();
        next += 2 * PER_ROUND;
        let mut batch = Vec::new();
        for id in &ids {
            let block = request_block(false, "/large");
            batch.extend(frame(HEADERS, END_HEADERS | END_STREAM, *id, &block));
        }
        if !a.send(&batch) {
            break;
        }
        let asked = Instant::now();
        while a.seen.heads.load(Ordering::Relaxed) < heads + PER_ROUND as u64
            && asked.elapsed() < Duration::from_secs(1)
            && !a.seen.cut()
        {
            std::thread::yield_now();
        }
        let resets: Vec<u8> = ids.iter().flat_map(|id| rst_stream(*id, CANCEL)).collect();
        if !a.send(&resets) {
            break;
        }
        requests += PER_ROUND as u64;
        rounds += 1;
    }
    let held = a.opened.elapsed();
    let cut = a.wait_cut(Duration::from_secs(2));
    let cpu = cpu_s(pid) - cpu0;
    eprintln!(
        "accepted-then-reset: {requests} streams in {rounds} rounds over {held:?} before the cut ({cut:?}, GOAWAY {:?}); server CPU {cpu:.2} s",
        a.seen.goaway(),
    );
    assert!(
        cut.is_some(),
        "{requests} streams in {held:?} and never cut"
    );
    assert!(
        a.seen.heads.load(Ordering::Relaxed) > MAX_REQUESTS_PER_S,
        "the attack did not reach the budget: the machine too slow to prove anything"
    );
    // Cut within a second or so of going over: the budget is looked at every 200 ms.
    assert!(held < Duration::from_secs(4), "held {held:?}");
    assert!(
        ep.log_says(
            "requests a second on one connection",
            Duration::from_secs(5)
        ),
        "{}",
        ep.log()
    );
    still_serves(addr);
}

/// SETTINGS and PING floods: h2 answers each with an ACK and reads no further while an ACK
/// waits unsent, so an attacker that never reads holds only its socket's buffers; neither
/// flood is a request, so the first-request deadline ([`FIRST_REQUEST`]) closes both.
#[test]
fn settings_and_ping_floods_hold_little_and_are_cut_by_the_deadline() {
    let _serial = Serial::take();
    let (ep, addr) = start(&[]);
    let pid = ep.child.id();
    let (rss0, _) = rss(pid);
    // One reads the ACKs (the server works at full speed), one never reads.
    let mut reading = Attacker::connect(addr, &[], true);
    let mut deaf = Attacker::connect(addr, &[], false);
    let (mut frames, mut deaf_frames) = (0u64, 0u64);
    let mut deaf_cut = None;
    let t0 = Instant::now();
    let pings: Vec<u8> = (0..500).flat_map(ping).collect();
    let settings_burst: Vec<u8> = (0..500)
        .flat_map(|_| settings(&[(SETTINGS_INITIAL_WINDOW_SIZE, 65_535)]))
        .collect();
    while t0.elapsed() < FIRST_REQUEST + Duration::from_secs(3) {
        if !reading.seen.cut() && reading.send(&settings_burst) {
            frames += 500;
        }
        if deaf_cut.is_none() {
            match std::io::Write::write_all(&mut deaf.out, &pings) {
                Ok(()) => deaf_frames += 500,
                Err(e) if is_timeout(&e) => {}
                Err(_) => deaf_cut = Some(deaf.opened.elapsed()),
            }
        }
        if reading.seen.cut() && deaf_cut.is_some() {
            break;
        }
    }
    let (_, hwm) = rss(pid);
    let reading_cut = reading.wait_cut(Duration::ZERO);
    eprintln!(
        "floods: {frames} SETTINGS (acked {}) cut after {reading_cut:?}; {deaf_frames} PINGs unread, cut after {deaf_cut:?}; peak RSS +{:.1} MiB",
        reading.seen.settings_acked.load(Ordering::Relaxed),
        mib(hwm.saturating_sub(rss0))
    );
    for (name, cut) in [("SETTINGS", reading_cut), ("PING", deaf_cut)] {
        let cut = cut.unwrap_or_else(|| panic!("{name} flood never cut"));
        assert!(
            cut < FIRST_REQUEST + Duration::from_secs(1),
            "{name} {cut:?}"
        );
        assert!(
            cut > FIRST_REQUEST - Duration::from_millis(300),
            "{name} {cut:?}"
        );
    }
    assert!(
        hwm.saturating_sub(rss0) < 16 << 20,
        "peak RSS grew by {hwm}"
    );
    still_serves(addr);
}

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

/// CONTINUATION flood (CVE-2024-27316 style): a header block that never ends, in full
/// frames and in empty ones (which no size limit sees). h2 cuts at its count of
/// CONTINUATION frames, sized from the endpoint's 16 KiB header list limit.
#[test]
fn continuation_floods_are_cut() {
    let _serial = Serial::take();
    let (ep, addr) = start(&[]);
    let pid = ep.child.id();
    let (rss0, _) = rss(pid);
    // Literal headers with new names: 0x00, name length, name, value length, value.
    let mut junk = Vec::new();
    while junk.len() < 16_000 {
        junk.extend([0x00, 3]);
        junk.extend(b"x-a");
        junk.push(100);
        junk.extend([b'a'; 100]);
    }
    for (name, payload) in [("full", junk.as_slice()), ("empty", &[][..])] {
        let mut a = Attacker::connect(addr, &[], true);
        let block = request_block(false, "/small");
        assert!(a.send(&frame(HEADERS, END_STREAM, 1, &block)));
        let mut n = 0u64;
        let one = frame(CONTINUATION, 0, 1, payload);
        while n < 1_000_000 && !a.seen.cut() && a.opened.elapsed() < Duration::from_secs(5) {
            if !a.send(&one) {
                break;
            }
            n += 1;
        }
        let cut = a.wait_cut(Duration::from_secs(2));
        eprintln!(
            "CONTINUATION flood ({name} frames): {n} written ({:.1} MiB) before the cut {cut:?}, GOAWAY {:?}",
            mib(n * one.len() as u64),
            a.seen.goaway()
        );
        assert!(cut.is_some(), "{name}: never cut");
        assert!(a.seen.heads.load(Ordering::Relaxed) == 0);
        assert!(cut.unwrap() < Duration::from_secs(2), "{name}: {cut:?}");
    }
    let (_, hwm) = rss(pid);
    eprintln!(
        "CONTINUATION floods: peak RSS +{:.1} MiB",
        mib(hwm.saturating_sub(rss0))
    );
    assert!(hwm.saturating_sub(rss0) < 8 << 20);
    still_serves(addr);
}

/// Streams past the limit: the first [`MAX_STREAMS`] are answered, each one more is
/// refused (RST_STREAM REFUSED_STREAM), and the connection goes on.
#[test]
fn streams_past_the_limit_are_refused() {
    let _serial = Serial::take();
    let (_ep, addr) = start(&[]);
    let mut a = Attacker::connect(addr, &[(SETTINGS_INITIAL_WINDOW_SIZE, 0)], true);
    // The server's SETTINGS must be in before streams count against it.
    std::thread::sleep(Duration::from_millis(100));
    let extra = 12;
    let mut batch = Vec::new();
    for i in 0..MAX_STREAMS + extra {
        let block = request_block(false, "/large");
        batch.extend(frame(HEADERS, END_HEADERS | END_STREAM, 1 + 2 * i, &block));
    }
    assert!(a.send(&batch));
    let t0 = Instant::now();
    while (a.seen.heads.load(Ordering::Relaxed) < MAX_STREAMS as u64
        || a.seen.resets_with(REFUSED_STREAM) < extra as u64)
        && t0.elapsed() < Duration::from_secs(3)
    {
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(200));
    let (heads, refused) = (
        a.seen.heads.load(Ordering::Relaxed),
        a.seen.resets_with(REFUSED_STREAM),
    );
    eprintln!("{heads} streams answered, {refused} refused");
    assert_eq!(heads, MAX_STREAMS as u64);
    assert_eq!(refused, extra as u64);
    assert!(!a.seen.cut());
}

/// A slow reader of the large download: 16 connections of 8 streams each, every window
/// opened to 2 GiB, and nothing read. The 8 GiB object is made as it is sent, so the
/// server holds only its small send buffers (the rest sits in the kernel's socket
/// buffers), and with nothing moving the stall deadline ([`STALLED`]) closes them all.
#[test]
fn a_slow_reader_of_the_large_download_holds_little_and_is_cut() {
    let _serial = Serial::take();
    let (ep, addr) = start(&[]);
    let pid = ep.child.id();
    let (rss0, _) = rss(pid);
    let big = 0x7fff_ffff;
    let mut all: Vec<Attacker> = (0..16)
        .map(|_| Attacker::connect(addr, &[(SETTINGS_INITIAL_WINDOW_SIZE, big)], false))
        .collect();
    for a in &mut all {
        let mut b = window_update(0, big - 65_535);
        for i in 0..8 {
            let block = request_block(false, "/large");
            b.extend(frame(HEADERS, END_HEADERS | END_STREAM, 1 + 2 * i, &block));
        }
        assert!(a.send(&b));
    }
    std::thread::sleep(Duration::from_secs(2));
    let (_, hwm) = rss(pid);
    let grew = hwm.saturating_sub(rss0);
    // Once the socket is full nothing moves: closed within STALLED of that. Reading now
    // drains what the kernel holds, then end of file.
    std::thread::sleep(STALLED);
    let mut held = Vec::new();
    for a in &mut all {
        a.out
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        let mut n = 0u64;
        let mut buf = vec![0u8; 1 << 16];
        let eof = loop {
            match std::io::Read::read(&mut a.out, &mut buf) {
                Ok(0) => break true,
                Ok(k) => n += k as u64,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break true,
                Err(_) => break false,
            }
        };
        assert!(
            eof,
            "a slow reader still held after {:?}",
            a.opened.elapsed()
        );
        held.push(n);
    }
    let most = *held.iter().max().unwrap();
    eprintln!(
        "slow read: 16 connections x 8 streams, peak RSS +{:.1} MiB; each connection had at most {:.1} MiB in flight, then cut",
        mib(grew),
        mib(most)
    );
    // 128 streams' send buffers (16 KiB) and their chunks: a few MiB, not the windows'
    // 2 GiB a connection.
    assert!(grew < 16 << 20, "peak RSS grew {:.1} MiB", mib(grew));
    assert!(most < 64 << 20);
    still_serves(addr);
}

/// An upload that never ends, sent as fast as the server takes it: each connection holds
/// at most its window, and the connection's life (--rpm-max-duration) ends it.
#[test]
fn an_endless_upload_is_held_to_its_window_and_ended_by_the_duration_limit() {
    let _serial = Serial::take();
    let (ep, addr) = start(&["--rpm-max-duration", "2"]);
    let pid = ep.child.id();
    let (rss0, _) = rss(pid);
    let t = Target {
        addr,
        host: "127.0.0.1".into(),
        authority: addr.to_string(),
        tls: None,
    };
    let upload = Url::parse(&format!("http://{addr}/upload")).unwrap();
    let sent = Arc::new(AtomicU64::new(0));
    let t0 = Instant::now();
    let body = Endless(Arc::clone(&sent));
    let got = runtime().block_on(async {
        let mut c = conn::open(&t).await.unwrap();
        let req = conn::request(
            http::Method::POST,
            &upload,
            &t.authority,
            http_body_util::BodyExt::boxed_unsync(body),
        );
        tokio::time::timeout(Duration::from_secs(8), conn::send(&mut c.sender, req)).await
    });
    let took = t0.elapsed();
    let (_, hwm) = rss(pid);
    let grew = hwm.saturating_sub(rss0);
    eprintln!(
        "endless upload: {:.0} MiB sent, ended after {took:?} ({got:?}); peak RSS +{:.1} MiB",
        mib(sent.load(Ordering::Relaxed)),
        mib(grew)
    );
    assert!(
        matches!(got, Ok(Err(_))),
        "not ended by the server: {got:?}"
    );
    assert!(took < Duration::from_secs(4), "{took:?}");
    assert!(took > Duration::from_millis(1800), "{took:?}");
    assert!(grew < 16 << 20, "peak RSS grew {:.1} MiB", mib(grew));
}

/// 64 KiB of zeros for ever.
struct Endless(Arc<AtomicU64>);

impl Body for Endless {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        static ZEROS: [u8; 1 << 16] = [0; 1 << 16];
        self.0.fetch_add(ZEROS.len() as u64, Ordering::Relaxed);
        Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(&ZEROS)))))
    }
}
