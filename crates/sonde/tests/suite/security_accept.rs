//! The agent's accept paths attacked without the key (issue 41), on loopback, where every
//! address of 127.0.0.0/8 is a host of the controller's /24: a rogue beside the controller
//! holding handshake places by reconnecting and sending `Hello` late keeps no controller
//! out; a handshake place is given back within 2 s of accept whatever the peer sends;
//! silent and wrong data connections to the port of the clear-text `Ready` cost the real
//! test nothing; a flood of refused connections writes a few log lines with its count.

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::*;
use sonde_proto::{
    encode, ClientEvent, ClientSession, DataHeader, FrameDecoder, Message, PeerError, Session,
    Timeouts, MAGIC, PROTOCOL_VERSION,
};
use sonde_results::{SideResult, StreamSpec, TestSpec, Timing};
use sonde_run::control::Link;
use sonde_run::controller::handshake;
use sonde_run::signals::Interrupt;

/// The rogue's `Hello` comes this long after its connect (the red team's 1.9 s).
const LATE: Duration = Duration::from_millis(1900);

fn hello() -> Vec<u8> {
    encode(&Message::Hello {
        magic: MAGIC.into(),
        version: PROTOCOL_VERSION,
        software: "rogue".into(),
        nonce: hex(&data_rogue::nonce()),
        // The agents here listen on 127.0.0.1: the rogue names it as a controller would.
        agent: "127.0.0.1".into(),
        ticket: None,
    })
    .unwrap()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|b| format!("{b:02x}")).collect()
}

/// The agent's first message on `c`, if one comes within `wait`.
fn first_message(c: &mut TcpStream, wait: Duration) -> Option<Message> {
    c.set_read_timeout(Some(wait)).unwrap();
    let mut d = FrameDecoder::default();
    let mut buf = [0u8; 4096];
    loop {
        match c.read(&mut buf) {
            Ok(0) | Err(_) => return None,
            Ok(n) => d.push(&buf[..n]),
        }
        if let Ok(Some(m)) = d.next_message() {
            return Some(m);
        }
    }
}

fn is_busy(m: &Option<Message>) -> bool {
    matches!(
        m,
        Some(Message::Error {
            error: PeerError::Busy
        })
    )
}

/// Connects from `from`, says `Hello` at once: whether the agent gave it a handshake place
/// (it answers `Welcome`) or said "busy".
fn has_place(from: [u8; 4], to: SocketAddr) -> bool {
    let mut c = connect_from(from, to).unwrap();
    c.write_all(&hello()).unwrap();
    let m = first_message(&mut c, Duration::from_secs(1));
    assert!(
        is_busy(&m) || matches!(m, Some(Message::Welcome { .. })),
        "{m:?}"
    );
    !is_busy(&m)
}

/// Waits until the agent closes `c`; how long after `since`.
fn closed_after(c: &mut TcpStream, since: Instant, limit: Duration) -> Duration {
    c.set_read_timeout(Some(limit)).unwrap();
    let mut buf = [0u8; 4096];
    loop {
        match c.read(&mut buf) {
            Ok(0) => return since.elapsed(),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return since.elapsed(),
            Err(e) => panic!("not closed within {limit:?}: {e}"),
        }
    }
}

/// One rogue: connects from `from`, says `Hello` at [`LATE`], never `Auth`, holds on until
/// the agent closes, and again, until `stop` (at most 30 s). Counts its connections.
fn rogue_loop(from: [u8; 4], to: SocketAddr, stop: &AtomicBool, made: &AtomicUsize) {
    let until = Instant::now() + Duration::from_secs(30);
    while !stop.load(Ordering::Relaxed) && Instant::now() < until {
        let Ok(mut c) = connect_from(from, to) else {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        };
        made.fetch_add(1, Ordering::Relaxed);
        let at = Instant::now();
        while at.elapsed() < LATE && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = c.write_all(&hello());
        c.set_read_timeout(Some(Duration::from_secs(8))).unwrap();
        let mut buf = [0u8; 4096];
        while matches!(c.read(&mut buf), Ok(n) if n > 0) {}
    }
}

/// A short real `sonde ping` from 127.0.0.1: whether it succeeded (its error printed).
fn ping(agent: &Agent) -> bool {
    let mut c = sonde_cmd();
    c.args(agent.short_test("ping", "0.3", &[]));
    let o = run(c);
    if !o.status.success() {
        eprintln!("ping failed: {}", stderr(&o));
    }
    o.status.success()
}

/// Runs `rogues` (address, connections) against `agent` while `pings` real pings run
/// from 127.0.0.1; how many pings succeeded, whether a stranger in the /24 (127.0.0.30)
/// was told busy meanwhile, and how many connections the rogues made.
fn under_rogues(agent: &Agent, rogues: &[([u8; 4], usize)], pings: usize) -> (usize, bool, usize) {
    let to = SocketAddr::from(([127, 0, 0, 1], agent.port));
    let (stop, made) = (AtomicBool::new(false), AtomicUsize::new(0));
    std::thread::scope(|s| {
        for &(from, n) in rogues {
            for _ in 0..n {
                let (stop, made) = (&stop, &made);
                s.spawn(move || rogue_loop(from, to, stop, made));
            }
        }
        std::thread::sleep(Duration::from_millis(300));
        let stranger_busy = (0..10).any(|_| {
            std::thread::sleep(Duration::from_millis(30));
            !has_place([127, 0, 0, 30], to)
        });
        let ok = (0..pings).filter(|_| ping(agent)).count();
        stop.store(true, Ordering::Relaxed);
        (ok, stranger_busy, made.load(Ordering::Relaxed))
    })
}

#[test]
fn a_rogue_in_the_controllers_24_sending_hello_late_keeps_no_controller_out() {
    // One address reconnecting (the red team's attack): it holds its own four places only.
    let agent = Agent::on_loopback();
    let (ok, _, made) = under_rogues(&agent, &[([127, 0, 0, 10], 6)], 3);
    eprintln!("FIGURE one rogue address ({made} connections, Hello at 1.9 s): {ok} of 3 pings from its /24 succeeded");
    assert_eq!(ok, 3, "pings from the rogue's /24 beside one rogue address");
    drop(agent);

    // Eight addresses fill the /24's sixteen places: a stranger of the /24 is told busy,
    // and a controller that proved the key before finds a reserved place every time.
    let agent = Agent::on_loopback();
    assert!(
        ping(&agent),
        "the controller's first ping, before the attack"
    );
    let rogues: Vec<([u8; 4], usize)> = (10..18).map(|d| ([127, 0, 0, d], 4)).collect();
    let (ok, stranger_busy, made) = under_rogues(&agent, &rogues, 5);
    eprintln!("FIGURE eight rogue addresses ({made} connections): {ok} of 5 pings from 127.0.0.1 succeeded; a stranger busy: {stranger_busy}");
    assert!(
        stranger_busy,
        "the rogues did not fill the /24: the test proves nothing"
    );
    assert_eq!(ok, 5, "pings from a controller that proved the key before");
}

/// When a handshake place must be back by, from its accept: half way between the 2 s
/// deadline and the 3.9 s a deadline restarted by the late Hello would give, so a loaded
/// machine's late wake-up (2.3 s was the bound, with 0.3 s for it) cannot fail a correct
/// agent and a restarted deadline still fails.
const CLOSED_BY: Duration = Duration::from_millis(2950);

#[test]
fn a_handshake_place_is_given_back_within_2_s_of_accept_whatever_the_peer_sends() {
    let agent = Agent::on_loopback();
    let to = SocketAddr::from(([127, 0, 0, 1], agent.port));
    let from = [127, 0, 0, 20];
    let t0 = Instant::now();
    // Four places, the address's all: two silent peers, two that say Hello at 1.9 s.
    let held: Vec<(TcpStream, Instant)> = (0..4)
        .map(|_| (connect_from(from, to).unwrap(), Instant::now()))
        .collect();
    std::thread::sleep(Duration::from_millis(100));
    assert!(!has_place(from, to), "a fifth from the address had a place");
    let closes: Vec<Duration> = std::thread::scope(|s| {
        let waits: Vec<_> = held
            .into_iter()
            .enumerate()
            .map(|(k, (mut c, at))| {
                s.spawn(move || {
                    if k % 2 == 1 {
                        std::thread::sleep(LATE.saturating_sub(at.elapsed()));
                        c.write_all(&hello()).unwrap();
                    }
                    closed_after(&mut c, at, Duration::from_secs(8))
                })
            })
            .collect();
        // A new connection from the address has a place as soon as one is given back.
        std::thread::sleep(Duration::from_millis(1500));
        let mut freed = None;
        while freed.is_none() && t0.elapsed() < Duration::from_secs(8) {
            if has_place(from, to) {
                freed = Some(t0.elapsed());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let freed = freed.expect("no place given back within 8 s");
        eprintln!("FIGURE a place of the address came back {freed:?} after its first accept");
        assert!(freed < CLOSED_BY, "{freed:?}");
        waits.into_iter().map(|w| w.join().unwrap()).collect()
    });
    eprintln!("FIGURE agent closed the silent and the late-Hello peers after {closes:?}");
    for (k, c) in closes.iter().enumerate() {
        let what = if k % 2 == 1 { "late Hello" } else { "silent" };
        assert!(
            *c > Duration::from_millis(1900) && *c < CLOSED_BY,
            "{what} peer closed {c:?} after its connect"
        );
    }
}

/// A stream of two connections from a controller in this test, sending its own bytes:
/// `attack` opens connections to the data port after `Ready`, before the real ones. When
/// the first interval came after `Start`, the intervals, and the agent's result.
fn stream_under(
    agent: &Agent,
    attack: impl FnOnce(SocketAddr) -> Vec<TcpStream>,
) -> (Duration, usize, SideResult) {
    let addr = SocketAddr::from(([127, 0, 0, 1], agent.port));
    let spec = TestSpec::Stream(StreamSpec {
        connections: 2,
        timing: Timing {
            duration_ms: 1000,
            warmup_ms: 0,
            cooldown_ms: 0,
            interval_ms: 250,
        },
        ..Default::default()
    });
    let mut link = Link::new(TcpStream::connect(addr).unwrap()).unwrap();
    let mut session = ClientSession::new(spec, "test", "test", Timeouts::default(), Instant::now())
        .with_nonce(data_rogue::nonce())
        .with_key(Some(rogue::harness_key()))
        .dialling(addr.ip());
    let h = handshake(&mut link, &mut session, addr, &Interrupt::none()).unwrap();
    let data = SocketAddr::new(addr.ip(), h.data_port);
    let hostile = attack(data);
    let real: Vec<TcpStream> = (0..2u32)
        .map(|index| {
            let mut s = TcpStream::connect(data).unwrap();
            let header = DataHeader {
                cookie: h.cookie,
                index,
            };
            s.write_all(&header.encode()).unwrap();
            s
        })
        .collect();
    session.start(Instant::now()).unwrap();
    link.send(&mut session).unwrap();
    let started = Instant::now();
    let stop = AtomicBool::new(false);
    let outcome = std::thread::scope(|s| {
        for mut c in real {
            let stop = &stop;
            // About 500 Mbit/s each, for at most 10 s.
            s.spawn(move || {
                let chunk = vec![0x5au8; 64 << 10];
                while !stop.load(Ordering::Relaxed) && started.elapsed() < Duration::from_secs(10) {
                    if c.write_all(&chunk).is_err() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
            });
        }
        let seen = drive(&mut link, &mut session, started);
        stop.store(true, Ordering::Relaxed);
        seen
    });
    drop(hostile);
    let (first, intervals) = outcome;
    let result = finish(&mut link, &mut session);
    (
        first.expect("no interval within 8 s of Start"),
        intervals,
        result,
    )
}

/// Reads events until the test's second has passed (and the first interval came, at most
/// 8 s), then says Stop: when the first interval came, how many came.
fn drive(
    link: &mut Link,
    session: &mut ClientSession,
    started: Instant,
) -> (Option<Duration>, usize) {
    let (mut first, mut intervals) = (None, 0);
    let end = started + Duration::from_millis(1000);
    let limit = started + Duration::from_secs(8);
    while Instant::now() < limit && (first.is_none() || Instant::now() < end) {
        link.step(
            session,
            Some(Instant::now() + Duration::from_millis(20)),
            None,
        )
        .unwrap();
        while let Some(ev) = session.poll_event() {
            if let ClientEvent::Interval(_) = ev {
                first.get_or_insert(started.elapsed());
                intervals += 1;
            }
        }
    }
    session.stop(Instant::now()).unwrap();
    link.send(session).unwrap();
    (first, intervals)
}

/// After Stop: the agent's result.
fn finish(link: &mut Link, session: &mut ClientSession) -> SideResult {
    let until = Instant::now() + Duration::from_secs(15);
    while Instant::now() < until {
        link.send(session).unwrap();
        let step = link.step(session, Some(until), None);
        while let Some(ev) = session.poll_event() {
            if let ClientEvent::Results(r) = ev {
                return *r;
            }
        }
        step.unwrap();
    }
    panic!("no results in 15 s")
}

#[test]
fn silent_and_wrong_data_connections_do_not_delay_the_test() {
    let agent = Agent::on_loopback();
    let (base, base_n, _) = stream_under(&agent, |_| Vec::new());
    let (silent, wrong, stranger) = (40, 4, 3);
    let mut closed = Vec::new();
    let (first, n, result) = stream_under(&agent, |data| {
        // Eight silent ones first, alone: each is closed at its header's deadline.
        let at = Instant::now();
        let early: Vec<_> = (0..8)
            .map(|_| {
                let mut c = TcpStream::connect(data).unwrap();
                std::thread::spawn(move || closed_after(&mut c, at, Duration::from_secs(4)))
            })
            .collect();
        closed = early.into_iter().map(|w| w.join().unwrap()).collect();
        let mut c: Vec<TcpStream> = (0..silent)
            .map(|_| TcpStream::connect(data).unwrap())
            .collect();
        for index in 0..wrong {
            let mut s = TcpStream::connect(data).unwrap();
            let header = DataHeader { cookie: 7, index };
            s.write_all(&header.encode()).unwrap();
            c.push(s);
        }
        for _ in 0..stranger {
            c.push(connect_from([127, 0, 0, 9], data).unwrap());
        }
        c
    });
    eprintln!("FIGURE silent data connections closed {closed:?} after their connect");
    for c in &closed {
        let ms = c.as_millis();
        assert!(
            (1900..2400).contains(&ms),
            "a silent one closed after {c:?}"
        );
    }
    eprintln!(
        "FIGURE first interval {first:?} after Start beside {silent} silent, {wrong} wrong-cookie and {stranger} other-address data connections ({n} intervals); {base:?} without ({base_n})"
    );
    assert!(
        first < base + Duration::from_millis(500),
        "first interval {first:?} under attack, {base:?} without"
    );
    assert!(n >= 3, "{n} intervals");
    let forward = &result.stream().expect("a stream section").directions[0];
    assert_eq!(forward.connections.len(), 2, "the test's real connections");
    assert!(forward.bytes > 0, "{forward:?}");
}

/// `sonde serve` on loopback with its log kept, killed on drop; it holds the timing lock.
struct LoggingAgent {
    child: std::process::Child,
    port: u16,
    log: Option<std::thread::JoinHandle<String>>,
    _serial: Serial,
}

impl LoggingAgent {
    fn start() -> LoggingAgent {
        let serial = Serial::take();
        let mut cmd = sonde_cmd();
        cmd.args(["serve", "--bind", "127.0.0.1", "--port", "0"]);
        let mut child = cmd.spawn_keeping(Keep::Both);
        let mut err = child.stderr.take().unwrap();
        let log = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            s
        });
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line.rsplit_once(':').unwrap().1.split_whitespace().next();
        LoggingAgent {
            child,
            port: port.unwrap().parse().unwrap(),
            log: Some(log),
            _serial: serial,
        }
    }

    /// SIGTERM, and the agent's whole log once it exited (within 3 s).
    fn stop(&mut self) -> String {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        assert!(wait_with_timeout(&mut self.child, Duration::from_secs(3)).is_some());
        self.log.take().unwrap().join().unwrap()
    }
}

impl Drop for LoggingAgent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_flood_of_refused_connections_is_logged_in_a_few_lines_with_its_count() {
    let mut agent = LoggingAgent::start();
    let to = SocketAddr::from(([127, 0, 0, 1], agent.port));
    let from = [127, 0, 0, 30];
    let holders: Vec<TcpStream> = (0..4).map(|_| connect_from(from, to).unwrap()).collect();
    let t0 = Instant::now();
    let (mut tried, mut busy) = (0u64, 0u64);
    // Bounded: 3,000 connections or 1.4 s, while the holders keep the address's places.
    // Each says Hello without a ticket at once, as a keyless rogue would (a silent one
    // waits for its first frame at the door, up to 0.5 s, before it is told busy).
    while tried < 3000 && t0.elapsed() < Duration::from_millis(1400) {
        let mut c = connect_from(from, to).unwrap();
        let _ = c.write_all(&hello());
        tried += 1;
        if is_busy(&first_message(&mut c, Duration::from_millis(500))) {
            busy += 1;
        }
    }
    // The holders' handshakes end at their deadline; then the agent stops.
    std::thread::sleep(Duration::from_millis(2300).saturating_sub(t0.elapsed()));
    drop(holders);
    let log = agent.stop();
    let lines: Vec<&str> = log.lines().collect();
    eprintln!("FIGURE {busy} of {tried} connections refused in {:?}; the agent logged {} lines, {} bytes:\n{log}", t0.elapsed(), lines.len(), log.len());
    assert!(busy >= 500, "only {busy} refused: the flood proves nothing");
    assert!(lines.len() <= 10, "{} lines", lines.len());
    let summary = format!(
        "{} connections from 127.0.0.30 refused in the last",
        thousands(busy)
    );
    let found: Vec<&&str> = lines.iter().filter(|l| l.contains(&summary)).collect();
    assert!(
        found.len() == 1 && found[0].ends_with(": busy"),
        "no summary '{summary} ... busy' in the log"
    );
    let handshakes = "4 connections from 127.0.0.30 refused in the last";
    assert!(
        lines.iter().any(|l| l.contains(handshakes)),
        "the holders' four handshakes are not summarised"
    );
}

fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (k, c) in digits.chars().enumerate() {
        if k > 0 && (digits.len() - k).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}
