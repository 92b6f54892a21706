//! The sides and the control loop without root and without a network: both ends' sessions
//! over an in-memory socket pair, each side running on a fake engine.

use std::net::SocketAddr;
use std::os::unix::net::UnixStream;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sonde_engine::stream::ConnEnd;
use sonde_engine::{Placement, TcpInfo};
use sonde_probe::hostwatch::HostProbe;
use sonde_proto::labels::MAX_LABELS;
use sonde_proto::{AgentEvent, AgentSession, ClientSession, Labels, Session, Timeouts};
use sonde_results::document::FleetPair;
use sonde_results::{Direction, Document, Role, StreamSpec, TestSpec, Timing};

use crate::agent::conn::Conn;
use crate::agent::one_test::run_started;
use crate::control::Link;
use crate::controller::{Record, Running};
use crate::kind::stream::{StreamEngine, StreamSide};
use crate::kind::Workers;
use crate::side::Side;
use crate::signals::Interrupt;

/// Bytes per millisecond every fake connection moves.
const RATE: u64 = 1000;

/// Connections that move `RATE` bytes per millisecond, in one call each, until finished.
struct FakeStream {
    started: Instant,
    senders: Vec<bool>,
    /// When `finish` was called: the counters stop there.
    stopped_at: Mutex<Option<Instant>>,
}

impl FakeStream {
    fn boxed(senders: Vec<bool>) -> Box<dyn StreamEngine> {
        Box::new(FakeStream {
            started: Instant::now(),
            senders,
            stopped_at: Mutex::new(None),
        })
    }
}

impl Workers for FakeStream {
    fn engine(&self) -> sonde_results::Engine {
        sonde_results::Engine::Kernel
    }
    fn abort(&self) {
        self.finish();
    }
    fn all_done(&self) -> bool {
        self.stopped_at.lock().unwrap().is_some()
    }
}

impl StreamEngine for FakeStream {
    fn connections(&self) -> usize {
        self.senders.len()
    }
    fn counters(&self, _i: usize) -> (u64, u64) {
        let until = self.stopped_at.lock().unwrap().unwrap_or_else(Instant::now);
        let ms = until.duration_since(self.started).as_millis() as u64;
        (ms * RATE, ms)
    }
    fn is_sender(&self, i: usize) -> bool {
        self.senders[i]
    }
    fn tcp_info(&self, _i: usize) -> Option<TcpInfo> {
        None
    }
    fn finish(&self) {
        self.stopped_at
            .lock()
            .unwrap()
            .get_or_insert_with(Instant::now);
    }
    fn join(&mut self) -> Vec<ConnEnd> {
        vec![ConnEnd::Clean; self.senders.len()]
    }
}

fn spec() -> StreamSpec {
    StreamSpec {
        connections: 2,
        timing: Timing {
            duration_ms: 300,
            warmup_ms: 0,
            cooldown_ms: 0,
            interval_ms: 100,
        },
        ..StreamSpec::default()
    }
}

fn fake_side(role: Role, spec: &StreamSpec) -> Box<dyn Side> {
    let n = spec.total_connections();
    let meta: Vec<(u32, Direction)> = (0..n).map(|i| (i, spec.direction_of(i))).collect();
    let senders = meta
        .iter()
        .map(|(_, d)| (*d == Direction::Forward) == (role == Role::Client))
        .collect();
    Box::new(StreamSide::start(
        role,
        spec,
        meta,
        FakeStream::boxed(senders),
        Placement::new(1, None, n as usize),
        HostProbe::for_peer([127, 0, 0, 1].into()),
        Vec::new(),
    ))
}

#[test]
fn a_stream_side_samples_its_engine_per_interval_and_in_total() {
    let spec = spec();
    let mut side = fake_side(Role::Client, &spec);
    let mut intervals = Vec::new();
    let until = Instant::now() + Duration::from_secs(3);
    while !(side.is_draining() && side.all_done()) && Instant::now() < until {
        let now = Instant::now();
        intervals.extend(side.on_time(now));
        let next = side.next_deadline().unwrap_or(now);
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
    let result = side.into_result(false);
    assert_eq!(intervals.len(), 3);
    for s in &intervals {
        // Each interval's bytes are the fake's rate times its measured length (±2 ms).
        let expected = (s.end_s - s.start_s) * 1e3 * RATE as f64 * 2.0;
        assert!(
            (s.bytes().0 as f64 - expected).abs() <= 4.0 * RATE as f64,
            "{s:?}"
        );
        assert_eq!(s.bytes().1, 0);
    }
    assert!(!result.partial);
    assert_eq!(result.engine, Some(sonde_results::Engine::Kernel));
    let d = &result.stream().expect("a stream section").directions[0];
    assert_eq!(d.connections.len(), 2);
    let summed: u64 = intervals.iter().map(|s| s.bytes().0).sum();
    assert_eq!(d.bytes, summed, "the window is the sum of its intervals");
}

/// The agent's end up to `Start`, by hand (no data endpoint), announcing `labels`
/// unchecked (as a rogue agent could), then the real loop.
fn agent_end(stream: UnixStream, spec: StreamSpec, labels: Labels) -> sonde_results::SideResult {
    let interrupt = Interrupt::none();
    let mut conn = Conn {
        session: AgentSession::new(
            "sonde test",
            "agent",
            &crate::kind::capabilities(),
            Timeouts::default(),
            Instant::now(),
        )
        .with_labels(labels),
        link: Link::over(Box::new(stream)),
    };
    let mut started = false;
    while !started {
        conn.link.send(&mut conn.session).unwrap();
        conn.link.step(&mut conn.session, None, None).unwrap();
        while let Some(ev) = conn.session.poll_event() {
            match ev {
                AgentEvent::Setup { .. } => conn.session.ready(1, 7, Instant::now()).unwrap(),
                AgentEvent::Start => started = true,
                _ => {}
            }
        }
    }
    run_started(
        &mut conn,
        fake_side(Role::Server, &spec),
        &interrupt,
        Role::Server,
        Vec::new(),
    )
    .unwrap()
}

/// A stream test between the controller's end and an agent end announcing `labels`, over
/// a socket pair: the document, the agent's result and how many intervals were shown.
fn run_pair(
    labels: Labels,
    fleet: Option<FleetPair>,
) -> (Document, sonde_results::SideResult, usize) {
    let spec = spec();
    let (c, a) = UnixStream::pair().unwrap();
    let agent_spec = spec.clone();
    let agent = std::thread::spawn(move || agent_end(a, agent_spec, labels));

    let test = TestSpec::Stream(spec.clone());
    let session = ClientSession::new(
        test.clone(),
        "sonde test",
        "controller",
        Timeouts::default(),
        Instant::now(),
    );
    let addr: SocketAddr = "127.0.0.1:1".parse().unwrap();
    let mut shown = 0;
    let mut live = |_: crate::controller::LiveInterval<'_>| shown += 1;
    let interrupt = Interrupt::none();
    let mut link = Link::over(Box::new(c));
    let mut run = Running::new(session, addr, &mut live);
    let h = run.handshake(&mut link, &interrupt).unwrap();
    assert_eq!((h.data_port, h.cookie), (1, 7));
    run.start(&mut link).unwrap();
    let doc = run.conclude(
        link,
        fake_side(Role::Client, &spec),
        &interrupt,
        Record {
            spec: &test,
            command: "controller",
            started_at: String::new(),
            client_agent: None,
            fleet,
            prelude: None,
        },
    );
    (doc, agent.join().unwrap(), shown)
}

#[test]
fn both_ends_run_one_control_loop_to_a_document() {
    let (doc, server, shown) = run_pair(Labels::new(), None);
    assert!(!doc.end.partial, "{:?}", doc.end.error);
    assert_eq!(doc.intervals.len(), 3);
    assert_eq!(shown, 3);
    let stream = doc.end.stream().expect("a stream section");
    let sender = stream
        .sender
        .as_ref()
        .expect("the controller's sending side");
    let receiver = stream
        .receiver
        .as_ref()
        .expect("the agent's receiving side");
    let by = (sender.by.measured_by, receiver.by.measured_by);
    assert_eq!(by, (Role::Client, Role::Server));
    assert_eq!(sender.by.engine.as_deref(), Some("kernel"));
    assert!(sender.bytes > 0 && receiver.bytes > 0);
    assert_eq!(server.engine, Some(sonde_results::Engine::Kernel));
    // The agent starts a moment after the controller, and a stream side has no
    // cut_interval: its last interval may end after Stop and go unsent.
    assert!(
        doc.intervals[..2].iter().all(|i| i.receiver.is_some()),
        "intervals paired"
    );
}

#[test]
fn the_document_records_the_agents_labels_and_cuts_a_rogue_agents_with_a_note() {
    let own: Labels = [("zone".to_string(), "a".to_string())].into();
    let (doc, _, _) = run_pair(own.clone(), None);
    assert_eq!(doc.start.server_labels, own);
    let json = serde_json::to_string(&doc).unwrap();
    assert!(!json.contains("the agent announced"), "no note: {json}");

    // A rogue agent's thousand labels and megabyte value: cut, and the agent's side says so.
    let mut rogue: Labels = (0..1000)
        .map(|i| (format!("l{i:04}"), "v".into()))
        .collect();
    rogue.insert("big".into(), "x".repeat(1 << 20));
    let (doc, _, _) = run_pair(rogue, None);
    assert_eq!(doc.start.server_labels.len(), MAX_LABELS);
    assert!(!doc.start.server_labels.contains_key("big"));
    let json = serde_json::to_string(&doc).unwrap();
    assert!(
        json.len() < 1 << 20,
        "the megabyte stayed out of the document"
    );
    assert!(
        json.contains("the agent announced 1001 label(s); kept 32"),
        "{json}"
    );
}

#[test]
fn a_fleets_run_is_assembled_with_its_pair_and_the_agents_labels_under_the_files() {
    let own: Labels = [
        ("zone".to_string(), "agent-says".to_string()),
        ("node".to_string(), "n2".to_string()),
    ]
    .into();
    let pair = FleetPair {
        fleet: "f".into(),
        source: "h1".into(),
        destination: "h2".into(),
        destination_labels: [("zone".to_string(), "file-says".to_string())].into(),
        ..FleetPair::default()
    };
    let (doc, _, _) = run_pair(own, Some(pair));
    let fleet = doc.start.fleet.as_ref().expect("the pair, from assembly");
    assert_eq!(
        (fleet.source.as_str(), fleet.destination.as_str()),
        ("h1", "h2")
    );
    // The agent's own label joins; the file's wins where both name one.
    assert_eq!(fleet.destination_labels["node"], "n2");
    assert_eq!(fleet.destination_labels["zone"], "file-says");
    assert!(doc.start.finished_at.is_some(), "known before assembly");
    assert!(
        doc.end.limited_by.is_some() || doc.end.partial,
        "judged at assembly"
    );
}

/// A document of `spec` run on this host alone with `end` and no intervals (the tests of
/// load and search).
pub(crate) fn local_doc(spec: &TestSpec, end: sonde_results::document::End) -> Document {
    let start = sonde_results::document::LocalStart {
        spec: spec.clone(),
        command: String::new(),
        host: Default::default(),
        started_at: String::new(),
        software: String::new(),
    };
    Document::local(start, vec![], end)
}
