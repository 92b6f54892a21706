//! What the protocol tests share: specs, results and samples to send, a key and a grant,
//! and a pump that moves frames between a controller and an agent session.

#![allow(dead_code)]

use std::time::Instant;

use sonde_proto::{
    encode, AgentEvent, AgentSession, ClientSession, Grant, Key, Message, ProtoError, Session,
    Timeouts,
};
use sonde_results::{
    Direction, HostInfo, IntervalSample, Role, SampleSection, SideResult, SideSection,
    StreamSample, StreamSpec, TestSpec,
};

/// A controller's Hello frame with this magic and version.
pub fn hello(magic: &str, version: u32) -> Vec<u8> {
    encode(&Message::Hello {
        magic: magic.into(),
        version,
        software: "s".into(),
        nonce: "11".repeat(32),
        agent: String::new(),
        ticket: None,
    })
    .unwrap()
}

pub fn spec() -> TestSpec {
    TestSpec::Stream(StreamSpec {
        connections: 4,
        direction: Direction::Bidir,
        ..Default::default()
    })
}

pub fn side() -> SideResult {
    let host = HostInfo {
        hostname: "agent".into(),
        ..Default::default()
    };
    let mut side = SideResult::new(
        Role::Server,
        host,
        10.0,
        (2, Some(vec![1])),
        vec!["note".into()],
    );
    side.process_cpu_s = Some(1.5);
    side.section = SideSection::Stream(Default::default());
    side
}

pub fn sample(i: u32) -> IntervalSample {
    IntervalSample {
        index: i,
        start_s: i as f64,
        end_s: i as f64 + 1.0,
        cpu_busy_percent: Some(12.5),
        partial: false,
        section: SampleSection::Stream(StreamSample {
            sent_bytes: 7,
            received_bytes: 9,
            tcp: vec![sonde_results::tcp::TcpSample {
                connection: 1,
                srtt_us: 50,
                busy_percent: Some(99.5),
                ..Default::default()
            }],
        }),
    }
}

pub fn key() -> Key {
    Key::from_file_bytes(b"agent and controller share this\n").unwrap()
}

pub fn grant() -> Grant {
    Grant::new(
        &key(),
        "198.18.0.11".parse().unwrap(),
        "198.18.0.12:40000".parse().unwrap(),
        9,
        1_000,
    )
}

/// Moves every queued frame from client to agent and back until both are quiet.
pub fn pump(
    c: &mut ClientSession,
    a: &mut AgentSession,
    now: Instant,
) -> (Result<(), ProtoError>, Result<(), ProtoError>) {
    pump_through(c, a, now, &mut |_, b| Some(b))
}

/// Sends every frame from the controller through `rewrite` (a party on the path).
pub fn pump_through(
    c: &mut ClientSession,
    a: &mut AgentSession,
    now: Instant,
    rewrite: &mut dyn FnMut(usize, Vec<u8>) -> Option<Vec<u8>>,
) -> (Result<(), ProtoError>, Result<(), ProtoError>) {
    let (mut rc, mut ra) = (Ok(()), Ok(()));
    let mut n = 0;
    loop {
        let mut moved = false;
        while let Some(b) = c.poll_transmit() {
            moved = true;
            if let Some(b) = rewrite(n, b) {
                if ra.is_ok() {
                    ra = a.handle_bytes(&b, now);
                }
            }
            n += 1;
        }
        while let Some(b) = a.poll_transmit() {
            moved = true;
            if rc.is_ok() {
                rc = c.handle_bytes(&b, now);
            }
        }
        if !moved {
            return (rc, ra);
        }
    }
}

/// A pair through hello, spec and ready, the client having sent Start.
pub fn started(t0: Instant) -> (ClientSession, AgentSession) {
    let (mut c, mut a) = pair(t0);
    let (rc, ra) = pump(&mut c, &mut a, t0);
    rc.unwrap();
    ra.unwrap();
    a.poll_event();
    a.poll_event();
    a.ready(1, 1, t0).unwrap();
    let (rc, ra) = pump(&mut c, &mut a, t0);
    rc.unwrap();
    ra.unwrap();
    c.start(t0).unwrap();
    (c, a)
}

/// Pumps the handshake through: the agent has heard `Hello`, then `Setup` of [`spec`].
pub fn set_up(c: &mut ClientSession, a: &mut AgentSession, now: Instant) {
    let (rc, ra) = pump(c, a, now);
    rc.unwrap();
    ra.unwrap();
    assert!(matches!(a.poll_event(), Some(AgentEvent::Hello { .. })));
    assert_eq!(
        a.poll_event(),
        Some(AgentEvent::Setup {
            spec: Box::new(spec()),
            third_party: None
        })
    );
}

pub fn pair(now: Instant) -> (ClientSession, AgentSession) {
    (
        ClientSession::new(
            spec(),
            "sonde-test",
            "sonde stream 198.18.0.2",
            Timeouts::default(),
            now,
        ),
        AgentSession::new(
            "sonde-test",
            "sonde serve",
            &["stream"],
            Timeouts::default(),
            now,
        ),
    )
}
