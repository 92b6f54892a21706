//! A STAMP run asked of an agent (`Stamp` → `StampDone`): what each session lets through,
//! in memory with simulated time.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::pump;
use sonde_proto::{
    AgentEvent, AgentSession, ClientEvent, ClientSession, Message, PeerError, ProtoError, Session,
    Timeouts, STAMP_SENDER, STAMP_SENDER_KEY,
};
use sonde_results::document::stamp::StampEnd;
use sonde_results::document::{End, IntervalFigures, IntervalSection, LocalStart, Section};
use sonde_results::{Document, StampSpec, TestSpec, Timing};

const REFLECTOR: &str = "198.18.0.3:862";

fn stamp_spec() -> StampSpec {
    StampSpec {
        host: "198.18.0.3".into(),
        port: 862,
        rate_per_s: 100.0,
        count: None,
        packet_bytes: 52,
        authenticated: false,
        stateful: true,
        ssid: 0,
        timeout_ms: 500,
        timing: Timing {
            duration_ms: 2_000,
            warmup_ms: 0,
            cooldown_ms: 0,
            interval_ms: 1_000,
        },
        execution: Default::default(),
    }
}

/// A STAMP run's document to `reflector` with `intervals` intervals.
fn stamp_doc(reflector: &str, intervals: usize) -> Document {
    let start = LocalStart {
        spec: TestSpec::Stamp(stamp_spec()),
        command: "sonde stamp 198.18.0.3 --from a".into(),
        host: Default::default(),
        started_at: "2026-11-27T18:00:00Z".into(),
        software: "sonde test".into(),
    };
    let stamp = StampEnd {
        reflector: reflector.into(),
        sent: 200,
        received: 190,
        lost: 10,
        ..Default::default()
    };
    let figures = (0..intervals)
        .map(|i| IntervalFigures {
            section: IntervalSection::Stamp {
                stamp: Default::default(),
            },
            ..IntervalFigures::span(i as f64, i as f64 + 1.0)
        })
        .collect();
    Document::local(
        start,
        figures,
        End::new(false, None, Section::Stamp { stamp }),
    )
}

fn sessions(capabilities: &[&str], t0: Instant) -> (ClientSession, AgentSession) {
    let reflector: SocketAddr = REFLECTOR.parse().unwrap();
    let c = ClientSession::new(
        TestSpec::Stamp(stamp_spec()),
        "s",
        "sonde stamp 198.18.0.3 --from a",
        Timeouts::default(),
        t0,
    )
    .with_stamp_reflector(reflector);
    let a = AgentSession::new("s", "c", capabilities, Timeouts::default(), t0);
    (c, a)
}

/// Through `Accepted` and `Stamp`: the agent's event.
fn asked(c: &mut ClientSession, a: &mut AgentSession, t0: Instant) -> AgentEvent {
    let (rc, ra) = pump(c, a, t0);
    rc.unwrap();
    ra.unwrap();
    assert!(matches!(a.poll_event(), Some(AgentEvent::Hello { .. })));
    assert!(matches!(c.poll_event(), Some(ClientEvent::Welcome { .. })));
    a.poll_event().expect("the Stamp event")
}

#[test]
fn a_stamp_run_goes_to_the_reflector_asked_and_its_document_comes_back() {
    let t0 = Instant::now();
    let (mut c, mut a) = sessions(&["stream", STAMP_SENDER], t0);
    assert_eq!(
        asked(&mut c, &mut a, t0),
        AgentEvent::Stamp {
            spec: Box::new(stamp_spec()),
            reflector: REFLECTOR.parse().unwrap(),
            command: "sonde stamp 198.18.0.3 --from a".into(),
        }
    );
    // The controller waits the run's length (2 s sending, 0.5 s for answers) beyond the
    // setup and results timeouts, and no longer.
    let t = Timeouts::default();
    let wait = t.setup + Duration::from_millis(2_500) + t.results;
    assert_eq!(c.poll_timeout(), Some(t0 + wait));
    // A STAMP run is no test: the agent cannot say Ready.
    assert!(a.ready(40000, 1, t0).is_err());
    let doc = stamp_doc(REFLECTOR, 3);
    a.send_stamp_done(doc.clone()).unwrap();
    pump(&mut c, &mut a, t0 + Duration::from_secs(3)).0.unwrap();
    assert_eq!(c.poll_event(), Some(ClientEvent::Stamp(Box::new(doc))));
    assert!(c.is_done() && a.is_done());
}

#[test]
fn an_agent_without_the_capability_gets_no_stamp_message() {
    let t0 = Instant::now();
    let (mut c, mut a) = sessions(&["stream", "stamp"], t0);
    let (rc, _) = pump(&mut c, &mut a, t0);
    assert_eq!(
        rc,
        Err(ProtoError::Peer(PeerError::Unsupported {
            test: STAMP_SENDER.into()
        }))
    );
    while let Some(ev) = a.poll_event() {
        assert!(
            !matches!(ev, AgentEvent::Stamp { .. }),
            "no Stamp reached it"
        );
    }
}

#[test]
fn authenticated_mode_is_asked_only_of_an_agent_holding_a_key_and_carries_none() {
    let t0 = Instant::now();
    let mut spec = stamp_spec();
    spec.authenticated = true;
    let ask = || {
        let reflector: SocketAddr = REFLECTOR.parse().unwrap();
        ClientSession::new(
            TestSpec::Stamp(spec.clone()),
            "s",
            "c",
            Timeouts::default(),
            t0,
        )
        .with_stamp_reflector(reflector)
    };
    // An agent holding no key: refused before any Stamp, naming the agent's flag.
    let (_, mut a) = sessions(&[STAMP_SENDER], t0);
    let mut c = ask();
    let e = pump(&mut c, &mut a, t0).0.unwrap_err().to_string();
    assert!(e.contains("--stamp-sender-key-file"), "{e}");
    while let Some(ev) = a.poll_event() {
        assert!(
            !matches!(ev, AgentEvent::Stamp { .. }),
            "no Stamp reached it"
        );
    }
    // One that holds one: the Stamp asks for the mode, a boolean.
    let (_, mut a) = sessions(&[STAMP_SENDER, STAMP_SENDER_KEY], t0);
    let mut c = ask();
    match asked(&mut c, &mut a, t0) {
        AgentEvent::Stamp { spec: got, .. } => assert_eq!(*got, spec),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_rogue_agents_document_for_elsewhere_or_too_long_is_refused() {
    for (doc, want) in [
        (
            stamp_doc("198.18.0.9:862", 3),
            "not the reflector asked for",
        ),
        (stamp_doc(REFLECTOR, 4), "more than the spec's 3"),
    ] {
        let t0 = Instant::now();
        let (mut c, mut a) = sessions(&[STAMP_SENDER], t0);
        asked(&mut c, &mut a, t0);
        a.send_stamp_done(doc).unwrap();
        let (rc, _) = pump(&mut c, &mut a, t0);
        let e = rc.unwrap_err();
        assert!(
            matches!(&e, ProtoError::Excess(w) if w.to_string().contains(want)),
            "{e}"
        );
    }
}

#[test]
fn a_silent_agent_times_out_and_a_stamp_frame_outside_its_place_is_unexpected() {
    let t0 = Instant::now();
    let (mut c, mut a) = sessions(&[STAMP_SENDER], t0);
    asked(&mut c, &mut a, t0);
    let late = c.poll_timeout().unwrap();
    c.handle_timeout(late - Duration::from_millis(1)).unwrap();
    assert!(matches!(
        c.handle_timeout(late),
        Err(ProtoError::Timeout(w)) if w.contains("STAMP")
    ));
    // `Stamp` once a test is set up, and `StampDone` to a controller that asked for a
    // test, are protocol errors.
    let (mut c, mut a) = common::pair(t0);
    let (rc, ra) = pump(&mut c, &mut a, t0);
    rc.unwrap();
    ra.unwrap();
    let stamp = Message::Stamp {
        spec: stamp_spec(),
        reflector: REFLECTOR.parse().unwrap(),
        command: String::new(),
    };
    let frame = sonde_proto::encode(&stamp).unwrap();
    assert!(matches!(
        a.handle_bytes(&frame, t0),
        Err(ProtoError::Unexpected { got: "Stamp", .. })
    ));
    let done = Message::StampDone {
        document: Box::new(stamp_doc(REFLECTOR, 1)),
    };
    let frame = sonde_proto::encode(&done).unwrap();
    assert!(matches!(
        c.handle_bytes(&frame, t0),
        Err(ProtoError::Unexpected {
            got: "StampDone",
            ..
        })
    ));
}
