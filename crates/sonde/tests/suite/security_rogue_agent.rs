//! A rogue agent holding the key against a real controller (`sonde stream`): the
//! library's own agent session over a socket, answering `Ready` and then sending far more
//! `Interval` frames than the spec allows, or samples far larger than it allows. The
//! controller's memory must stay bounded (its VmHWM read from /proc while it runs) and
//! the test must end partial, its error naming the agent and what it sent.

use crate::common;

use std::io::Read;
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::agent_proc::{status, MIB};
use common::data_rogue::nonce;
use common::*;
use sonde_proto::{AgentEvent, AgentSession, Session, Timeouts, MAX_FRAME_BYTES};
use sonde_results::stages::{Stage, Stages};
use sonde_results::tcp::TcpSample;
use sonde_results::{IntervalSample, LatencySummary, RrSample, SampleSection, StreamSample};
use sonde_run::control::Link;

/// The most the controller may hold at its peak (VmHWM): 18 MiB in a test, and about
/// 32 MiB more while serde parses one 4 MiB frame; without the bounds it passed 97 MiB
/// and grew with every frame.
const PEAK: u64 = 80 * MIB;

/// Accepts the controller's data connections and reads them to the end, until `until`
/// (and holds a UDP socket on the same port, so that a UDP ping's datagrams meet no
/// closed port).
fn drain_data(listener: TcpListener, until: Instant) {
    let _udp = std::net::UdpSocket::bind(listener.local_addr().unwrap());
    listener.set_nonblocking(true).unwrap();
    while Instant::now() < until {
        match listener.accept() {
            Ok((mut s, _)) => {
                s.set_nonblocking(false).unwrap();
                s.set_read_timeout(Some(Duration::from_millis(200)))
                    .unwrap();
                std::thread::spawn(move || {
                    let mut buf = vec![0u8; 64 << 10];
                    while Instant::now() < until {
                        match s.read(&mut buf) {
                            Ok(0) => return,
                            Ok(_) => {}
                            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                            Err(_) => return,
                        }
                    }
                });
            }
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

/// What the rogue sends at `Start`: `frames` samples made by `sample`.
struct Flood {
    frames: u32,
    sample: Box<dyn Fn(u32) -> IntervalSample + Send>,
}

/// The rogue agent: proves the key, answers Setup with `Ready` on its data port, and at
/// `Start` floods. Returns how many frames it got out.
fn rogue_agent(control: TcpListener, data_port: u16, flood: Flood) -> u32 {
    control.set_nonblocking(true).unwrap();
    let until = Instant::now() + Duration::from_secs(20);
    let stream = loop {
        match control.accept() {
            Ok((s, _)) => break s,
            Err(_) if Instant::now() < until => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => panic!("no controller came: {e}"),
        }
    };
    stream.set_nonblocking(false).unwrap();
    let caps = sonde_run::kind::capabilities();
    let mut session =
        AgentSession::new("rogue", "rogue", &caps, Timeouts::default(), Instant::now())
            .require_key(common::rogue::harness_key(), nonce());
    let mut link = Link::new(stream).unwrap();
    while Instant::now() < until {
        if link.send(&mut session).is_err() || link.step(&mut session, Some(until), None).is_err() {
            return 0;
        }
        while let Some(ev) = session.poll_event() {
            match ev {
                AgentEvent::Setup { .. } => session.ready(data_port, 1, Instant::now()).unwrap(),
                AgentEvent::Start => {
                    // Let the controller's data flow first, so that the test has measured
                    // something to keep when the flood ends it.
                    std::thread::sleep(Duration::from_millis(300));
                    return send_all(&mut link, &mut session, &flood);
                }
                _ => {}
            }
        }
    }
    0
}

/// Sends the flood until the controller hangs up.
fn send_all(link: &mut Link, session: &mut AgentSession, flood: &Flood) -> u32 {
    for i in 0..flood.frames {
        session.send_interval((flood.sample)(i)).unwrap();
        if link.send(session).is_err() {
            return i;
        }
    }
    flood.frames
}

/// The peak memory (VmHWM) of process `pid`, sampled until `done` (it only grows).
fn peak_of(pid: u32, done: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let (until, mut peak) = (Instant::now() + Duration::from_secs(30), 0);
        while !done.load(Ordering::Relaxed) && Instant::now() < until {
            peak = peak.max(status(pid, "VmHWM:") * 1024);
            std::thread::sleep(Duration::from_millis(2));
        }
        peak
    })
}

/// `sonde stream` (one connection, 2 s in 1 s intervals: 3 samples due) against a rogue
/// agent sending `flood`: the controller's document, its peak memory, and the frames the
/// rogue got out.
fn against_rogue(flood: Flood) -> (serde_json::Value, u64, u32) {
    against_rogue_running(&["stream", "-t", "2"], flood)
}

/// As [`against_rogue`], the controller running `test` (`["ping", "-t", "60"]`).
fn against_rogue_running(test: &[&str], flood: Flood) -> (serde_json::Value, u64, u32) {
    let _serial = Serial::take();
    let control = TcpListener::bind("127.0.0.1:0").unwrap();
    let data = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = control.local_addr().unwrap().port();
    let data_port = data.local_addr().unwrap().port();
    let until = Instant::now() + Duration::from_secs(20);
    std::thread::spawn(move || drain_data(data, until));
    let frames = flood.frames;
    let rogue = std::thread::spawn(move || rogue_agent(control, data_port, flood));
    let mut cmd = sonde_cmd();
    cmd.args([test[0], "127.0.0.1", "--port", &port.to_string()])
        .args(&test[1..])
        .args(["--warmup", "0.1", "-i", "1", "--json", "--no-save"]);
    let mut child = cmd.spawn_keeping(Keep::Stdout);
    let done = Arc::new(AtomicBool::new(false));
    let peak = peak_of(child.id(), done.clone());
    let mut out = Vec::new();
    child.stdout.take().unwrap().read_to_end(&mut out).unwrap();
    let code = wait_with_timeout(&mut child, Duration::from_secs(20)).expect("the controller ends");
    done.store(true, Ordering::Relaxed);
    let (peak, sent) = (peak.join().unwrap(), rogue.join().unwrap());
    let text = String::from_utf8_lossy(&out);
    assert_eq!(code.code(), Some(3), "a partial result: {text}");
    eprintln!(
        "FIGURE rogue agent: {sent} of {frames} frames out; controller VmHWM {} KiB",
        peak / 1024
    );
    (serde_json::from_slice(&out).unwrap(), peak, sent)
}

/// A stream sample describing `conns` connections.
fn stream_sample(i: u32, conns: usize) -> IntervalSample {
    let section = SampleSection::Stream(StreamSample {
        sent_bytes: 1,
        received_bytes: 1,
        tcp: vec![TcpSample::default(); conns],
    });
    second(i, section)
}

/// Interval `i`, a whole second.
fn second(i: u32, section: SampleSection) -> IntervalSample {
    IntervalSample {
        index: i,
        start_s: f64::from(i),
        end_s: f64::from(i) + 1.0,
        cpu_busy_percent: None,
        partial: false,
        section,
    }
}

fn error_of(doc: &serde_json::Value) -> String {
    assert_eq!(doc["end"]["partial"], true, "{}", doc["end"]);
    doc["end"]["error"].as_str().unwrap_or_default().to_string()
}

/// `frames` samples made by `sample` flooded at a controller running a stream test: the
/// document and its error (printed); the controller hung up on the flood within `PEAK`.
fn flooded(
    frames: u32,
    sample: impl Fn(u32) -> IntervalSample + Send + 'static,
) -> (serde_json::Value, String) {
    let (doc, peak, sent) = against_rogue(Flood {
        frames,
        sample: Box::new(sample),
    });
    let e = error_of(&doc);
    eprintln!("FIGURE the document: {e}");
    assert!(sent < frames, "the controller hung up on the flood");
    assert!(peak < PEAK, "the controller took {} KiB", peak / 1024);
    (doc, e)
}

#[test]
fn a_rogue_agent_flooding_samples_ends_the_test_partial_with_the_controllers_memory_bounded() {
    // Samples each within bounds, but 2,000 of them where 3 are due, all at once: the
    // second is an interval early (before issue 52 the fourth ended it, as one too
    // many). (A stream sample has no histogram to make it heavy: its section has no room
    // for one.)
    let sample = move |i| stream_sample(i, 1);
    let (doc, e) = flooded(2000, sample);
    assert!(
        e.starts_with("agent at 127.0.0.1:")
            && e.contains("misbehaving agent")
            && e.contains("its sample 2 came 0.")
            && e.ends_with("s after Start, before that interval began (1.100 s)"),
        "{e}"
    );
    // What was measured is kept: the controller's own side, and the samples within bounds.
    assert!(
        doc["end"]["sender"]["total_bytes"].as_u64().unwrap_or(0) > 0,
        "{}",
        doc["end"]
    );
}

#[test]
fn a_rogue_agent_sending_oversized_samples_ends_the_test_at_the_first() {
    // One connection in the spec; each sample describes as many as fit a frame.
    let one = serde_json::to_vec(&TcpSample::default()).unwrap().len() + 1;
    let wide = (MAX_FRAME_BYTES - (512 << 10)) / one;
    let sample = move |i| stream_sample(i, wide);
    let (_, e) = flooded(100, sample);
    assert!(
        e.starts_with("agent at 127.0.0.1:")
            && e.contains(&format!(
                "its interval 0 describes {wide} connections, more than the test's 1"
            )),
        "{e}"
    );
}

/// A round-trip sample carrying the round trips' histogram and seven stages', each of
/// `chars` characters: issue 52's rogue, eight histograms just under the 512 KiB check.
fn heavy_rr_sample(i: u32, chars: usize) -> IntervalSample {
    let summary = LatencySummary {
        count: 1,
        min: 1,
        mean: 1.0,
        stddev: 0.0,
        p50: 1,
        p90: 1,
        p99: 1,
        p999: 1,
        p9999: 1,
        max: 1,
        histogram: Some("A".repeat(chars)),
    };
    let mut stages = Stages::default();
    for stage in Stage::ALL {
        stages.ns.insert(stage, summary.clone());
    }
    let section = SampleSection::Rr(RrSample {
        messages: 1,
        latency_ns: (chars > 0).then(|| summary.clone()),
        stages: (chars > 0).then_some(stages),
        oneway: None,
    });
    second(i, section)
}

#[test]
fn a_rogue_agent_sending_every_interval_at_once_with_eight_histograms_is_refused_at_the_first() {
    // A 60 s ping allows 61 samples: each of eight histograms of 520,000 characters (4.2
    // MB a frame), all sent at Start. Before issue 52's fix the controller kept them all
    // (250 MB in the red team's release build; 1,195 MB for 300 s).
    let chars = 520_000;
    let frames = 61;
    let (doc, peak, sent) = against_rogue_running(
        &["ping", "-t", "60"],
        Flood {
            frames,
            sample: Box::new(move |i| heavy_rr_sample(i, chars)),
        },
    );
    let e = error_of(&doc);
    eprintln!("FIGURE the document: {e}");
    assert!(
        e.starts_with("agent at 127.0.0.1:")
            && e.ends_with(
                "misbehaving agent, test ended: its interval 0 carries round-trip latency, which a serving agent of this test does not measure"
            ),
        "{e}"
    );
    assert!(sent < frames, "the controller hung up on the flood");
    assert!(peak < PEAK, "the controller took {} KiB", peak / 1024);
}

#[test]
fn a_rogue_agent_sending_its_samples_before_their_time_is_refused_at_the_second() {
    // Samples with nothing in them but their count, every one of a 60 s ping's at Start:
    // the first is due once the warm-up (0.1 s) is over, the second not before 1.1 s.
    let frames = 61;
    let (doc, peak, sent) = against_rogue_running(
        &["ping", "-t", "60"],
        Flood {
            frames,
            sample: Box::new(|i| heavy_rr_sample(i, 0)),
        },
    );
    let e = error_of(&doc);
    eprintln!("FIGURE the document: {e}");
    assert!(
        e.starts_with("agent at 127.0.0.1:")
            && e.contains("misbehaving agent, test ended: its sample 2 came 0.")
            && e.ends_with("s after Start, before that interval began (1.100 s)"),
        "{e}"
    );
    assert!(sent <= frames);
    assert!(peak < PEAK, "the controller took {} KiB", peak / 1024);
}
