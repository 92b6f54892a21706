//! Controller and agent state machines driven against each other in memory, with
//! simulated time: scenarios from handshake to results, and every way they can fail.

use std::time::{Duration, Instant};

use sonde_proto::{
    encode, AgentEvent, AgentSession, ClientEvent, ClientSession, FrameDecoder, Grant, Key,
    Message, PeerError, ProtoError, Session, ThirdParty, Timeouts, MAX_FRAME_BYTES, THIRD_PARTY,
};
use sonde_results::{Direction, HostInfo, IntervalSample, Role, SideResult, StreamSpec, TestSpec};

/// A controller's Hello frame with this magic and version.
fn hello(magic: &str, version: u32) -> Vec<u8> {
    encode(&Message::Hello {
        magic: magic.into(),
        version,
        software: "s".into(),
        nonce: "11".repeat(32),
    })
    .unwrap()
}

fn spec() -> TestSpec {
    TestSpec::Stream(StreamSpec {
        connections: 4,
        direction: Direction::Bidir,
        ..Default::default()
    })
}

fn side() -> SideResult {
    SideResult {
        role: Role::Server,
        host: HostInfo {
            hostname: "agent".into(),
            ..Default::default()
        },
        window_s: 10.0,
        threads: 2,
        pinned_cpus: Some(vec![1]),
        directions: vec![],
        cpu: None,
        process_cpu_s: Some(1.5),
        tcp_retransmits: None,
        nic: None,
        interrupts: None,
        notes: vec!["note".into()],
        partial: false,
        engine: None,
        rr: None,
        pps: None,
        bypass: None,
        cpu_latency: None,
    }
}

fn sample(i: u32) -> IntervalSample {
    IntervalSample {
        index: i,
        start_s: i as f64,
        end_s: i as f64 + 1.0,
        sent_bytes: 7,
        received_bytes: 9,
        cpu_busy_percent: Some(12.5),
        messages: Some(3),
        latency_ns: None,
        packets: None,
        partial: false,
    }
}

fn key() -> Key {
    Key::from_file_bytes(b"agent and controller share this\n").unwrap()
}

fn grant() -> Grant {
    Grant::new(
        &key(),
        "198.18.0.11".parse().unwrap(),
        "198.18.0.12:40000".parse().unwrap(),
        9,
        1_000,
    )
}

fn all_messages() -> Vec<Message> {
    vec![
        Message::Hello {
            magic: "netsonde".into(),
            version: 2,
            software: "sonde 0.1".into(),
            nonce: "ab".repeat(32),
        },
        Message::Welcome {
            magic: "netsonde".into(),
            version: 2,
            software: "s".into(),
            challenge: Some("cd".repeat(32)),
            proof: Some("ef".repeat(32)),
        },
        Message::Auth {
            mac: "01".repeat(32),
        },
        Message::Accepted {
            command: "c".into(),
            capabilities: vec!["stream".into()],
        },
        Message::Setup {
            spec: spec(),
            third_party: None,
            command: "sonde stream x".into(),
        },
        Message::Setup {
            spec: spec(),
            third_party: Some(ThirdParty::Client {
                server: "198.18.0.12:40000".parse().unwrap(),
                cookie: 9,
                grant: Some(grant()),
            }),
            command: String::new(),
        },
        Message::Setup {
            spec: spec(),
            third_party: Some(ThirdParty::Server {
                client: "198.18.0.11".parse().unwrap(),
            }),
            command: String::new(),
        },
        Message::Drained,
        Message::Ready {
            data_port: 40000,
            cookie: u64::MAX,
            grant: None,
        },
        Message::Ready {
            data_port: 40000,
            cookie: 9,
            grant: Some(grant()),
        },
        Message::Start,
        Message::Interval { sample: sample(3) },
        Message::Stop,
        Message::Results {
            side: Box::new(side()),
        },
        Message::Error {
            error: PeerError::Busy,
        },
        Message::Error {
            error: PeerError::VersionMismatch {
                agent: 2,
                client: 1,
            },
        },
        Message::Error {
            error: PeerError::InvalidSpec {
                flag: "--connections".into(),
                reason: "r".into(),
            },
        },
    ]
}

/// Moves every queued frame from client to agent and back until both are quiet.
fn pump(
    c: &mut ClientSession,
    a: &mut AgentSession,
    now: Instant,
) -> (Result<(), ProtoError>, Result<(), ProtoError>) {
    let (mut rc, mut ra) = (Ok(()), Ok(()));
    loop {
        let mut moved = false;
        while let Some(b) = c.poll_transmit() {
            moved = true;
            if ra.is_ok() {
                ra = a.handle_bytes(&b, now);
            }
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
fn started(t0: Instant) -> (ClientSession, AgentSession) {
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

fn pair(now: Instant) -> (ClientSession, AgentSession) {
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

#[test]
fn every_message_round_trips_through_frames() {
    let mut dec = FrameDecoder::default();
    for m in all_messages() {
        let bytes = encode(&m).unwrap();
        // One byte at a time: "need more bytes" until the last one.
        for (i, b) in bytes.iter().enumerate() {
            dec.push(&[*b]);
            let got = dec.next_message().unwrap();
            if i + 1 < bytes.len() {
                assert!(got.is_none());
            } else {
                assert_eq!(got, Some(m.clone()));
            }
        }
    }
    dec.finish().unwrap();
}

#[test]
fn truncated_oversized_and_garbage_frames_are_typed_errors() {
    let bytes = encode(&Message::Start).unwrap();
    let mut dec = FrameDecoder::default();
    dec.push(&bytes[..bytes.len() - 1]);
    assert_eq!(dec.next_message().unwrap(), None);
    assert!(matches!(dec.finish(), Err(ProtoError::Truncated { need, .. }) if need == bytes.len()));

    let mut dec = FrameDecoder::default();
    dec.push(&[0, 0]);
    assert!(matches!(
        dec.finish(),
        Err(ProtoError::Truncated { have: 2, need: 4 })
    ));

    let mut dec = FrameDecoder::default();
    dec.push(&((MAX_FRAME_BYTES as u32 + 1).to_be_bytes()));
    assert!(matches!(
        dec.next_message(),
        Err(ProtoError::Oversized { .. })
    ));

    // An HTTP request read as a length is far over the cap.
    let mut dec = FrameDecoder::default();
    dec.push(b"GET / HTTP/1.1\r\n\r\n");
    assert!(matches!(
        dec.next_message(),
        Err(ProtoError::Oversized { .. })
    ));

    for payload in [
        &b"not json"[..],
        b"{\"type\":\"Nope\"}",
        b"{\"type\":\"ready\",\"data_port\":\"x\"}",
        b"[]",
        b"\xff\xfe",
    ] {
        let mut dec = FrameDecoder::default();
        dec.push(&(payload.len() as u32).to_be_bytes());
        dec.push(payload);
        assert!(
            matches!(dec.next_message(), Err(ProtoError::Malformed(_))),
            "{payload:?}"
        );
    }
    let mut dec = FrameDecoder::default();
    dec.push(&[0, 0, 0, 0]);
    assert!(matches!(dec.next_message(), Err(ProtoError::Malformed(_))));

    // A message too large to send is refused by the encoder too.
    let mut big = side();
    big.notes = vec!["x".repeat(MAX_FRAME_BYTES)];
    assert!(matches!(
        encode(&Message::Results {
            side: Box::new(big)
        }),
        Err(ProtoError::Oversized { .. })
    ));
}

#[test]
fn random_bytes_never_panic() {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for round in 0..20_000 {
        let mut dec = FrameDecoder::default();
        let len = (round % 64) + 1;
        let mut buf = Vec::with_capacity(len + 4);
        buf.extend_from_slice(&(len as u32).to_be_bytes());
        for _ in 0..len {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            buf.push(if round % 3 == 0 {
                b"{}\":,[]typeRaSt0 "[(x % 17) as usize]
            } else {
                x as u8
            });
        }
        dec.push(&buf);
        let _ = dec.next_message();
        let _ = dec.finish();
    }
}

#[test]
fn full_test_scenario_with_simulated_time() {
    let t0 = Instant::now();
    let (mut c, mut a) = pair(t0);
    let (rc, ra) = pump(&mut c, &mut a, t0);
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
    assert!(matches!(c.poll_event(), Some(ClientEvent::Welcome { .. })));
    a.ready(40001, 77, t0).unwrap();
    pump(&mut c, &mut a, t0).0.unwrap();
    assert_eq!(
        c.poll_event(),
        Some(ClientEvent::Ready {
            data_port: 40001,
            cookie: 77,
            grant: None,
        })
    );

    let t1 = t0 + Duration::from_millis(5);
    c.start(t1).unwrap();
    pump(&mut c, &mut a, t1).1.unwrap();
    assert_eq!(a.poll_event(), Some(AgentEvent::Start));
    for i in 0..10 {
        let t = t1 + Duration::from_secs(2 + i);
        a.send_interval(sample(i as u32)).unwrap();
        pump(&mut c, &mut a, t).0.unwrap();
        c.handle_timeout(t).unwrap();
        assert_eq!(
            c.poll_event(),
            Some(ClientEvent::Interval(sample(i as u32)))
        );
    }
    let t2 = t1 + Duration::from_secs(12);
    c.stop(t2).unwrap();
    pump(&mut c, &mut a, t2).1.unwrap();
    assert_eq!(a.poll_event(), Some(AgentEvent::Stop));
    a.send_results(side()).unwrap();
    pump(&mut c, &mut a, t2).0.unwrap();
    assert_eq!(c.poll_event(), Some(ClientEvent::Results(Box::new(side()))));
    assert!(c.is_done() && a.is_done());
    assert_eq!(c.poll_timeout(), None);
}

#[test]
fn version_mismatch_is_typed_on_both_sides() {
    let t0 = Instant::now();
    // A controller from the future says version 3.
    let mut a = AgentSession::new("s", "c", &["stream"], Timeouts::default(), t0);
    let hello = hello("netsonde", 3);
    assert_eq!(
        a.handle_bytes(&hello, t0),
        Err(ProtoError::VersionMismatch { ours: 2, theirs: 3 })
    );
    let reply = a.poll_transmit().unwrap();
    let mut c = ClientSession::new(spec(), "s", "c", Timeouts::default(), t0);
    assert_eq!(
        c.handle_bytes(&reply, t0),
        Err(ProtoError::VersionMismatch { ours: 2, theirs: 2 })
    );

    // A version-1 controller (no nonce, a command in Hello) hears about the version.
    let mut a = AgentSession::new("s", "c", &["stream"], Timeouts::default(), t0);
    let v1 = br#"{"type":"hello","magic":"netsonde","version":1,"software":"s","command":"c"}"#;
    let mut frame = (v1.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(v1);
    assert_eq!(
        a.handle_bytes(&frame, t0),
        Err(ProtoError::VersionMismatch { ours: 2, theirs: 1 })
    );

    // An agent from the future answers Welcome with version 3.
    let mut c = ClientSession::new(spec(), "s", "c", Timeouts::default(), t0);
    let welcome = encode(&Message::Welcome {
        magic: "netsonde".into(),
        version: 3,
        software: "s".into(),
        challenge: None,
        proof: None,
    })
    .unwrap();
    assert_eq!(
        c.handle_bytes(&welcome, t0),
        Err(ProtoError::VersionMismatch { ours: 2, theirs: 3 })
    );
}

#[test]
fn bad_magic_and_missing_capability() {
    let t0 = Instant::now();
    let mut a = AgentSession::new("s", "c", &["stream"], Timeouts::default(), t0);
    let hello = hello("iperf", 2);
    assert_eq!(a.handle_bytes(&hello, t0), Err(ProtoError::BadMagic));

    let mut c = ClientSession::new(spec(), "s", "c", Timeouts::default(), t0);
    let mut a = AgentSession::new("s", "c", &["ping"], Timeouts::default(), t0);
    let (rc, _) = pump(&mut c, &mut a, t0);
    assert_eq!(
        rc,
        Err(ProtoError::Peer(PeerError::Unsupported {
            test: "stream".into()
        }))
    );
}

#[test]
fn busy_agent_answers_busy() {
    let t0 = Instant::now();
    let mut c = ClientSession::new(spec(), "s", "c", Timeouts::default(), t0);
    let mut a = AgentSession::busy(t0);
    assert!(a.is_done());
    let (rc, _) = pump(&mut c, &mut a, t0);
    let err = rc.unwrap_err();
    assert_eq!(err, ProtoError::Peer(PeerError::Busy));
    assert!(err.to_string().contains("busy"));
}

#[test]
fn refused_spec_names_the_flag() {
    let t0 = Instant::now();
    let (mut c, mut a) = pair(t0);
    pump(&mut c, &mut a, t0).0.unwrap();
    a.refuse(PeerError::InvalidSpec {
        flag: "--duration".into(),
        reason: "over the agent's limit".into(),
    });
    let err = pump(&mut c, &mut a, t0).0.unwrap_err();
    assert!(err.to_string().contains("--duration"), "{err}");
}

#[test]
fn deadlines_and_silence() {
    let t0 = Instant::now();
    let (mut c, mut a) = pair(t0);
    // Nobody answers the Hello.
    c.handle_timeout(t0 + Duration::from_secs(4)).unwrap();
    assert!(matches!(
        c.handle_timeout(t0 + Duration::from_secs(6)),
        Err(ProtoError::Timeout(_))
    ));
    // A controller that connects and says nothing has 2 s to say Hello.
    assert!(matches!(
        a.handle_timeout(t0 + Duration::from_millis(2100)),
        Err(ProtoError::Timeout(_))
    ));

    // The agent goes silent while running: liveness is warm-up + 2 intervals + 0.1 s.
    let (mut c, _a) = started(t0);
    assert!(c.handle_timeout(t0 + Duration::from_millis(3000)).is_ok());
    assert!(matches!(
        c.handle_timeout(t0 + Duration::from_millis(3200)),
        Err(ProtoError::Timeout(_))
    ));
}

#[test]
fn unexpected_messages_and_calls_are_errors() {
    let t0 = Instant::now();
    let mut a = AgentSession::new("s", "c", &["stream"], Timeouts::default(), t0);
    let start = encode(&Message::Start).unwrap();
    assert!(matches!(
        a.handle_bytes(&start, t0),
        Err(ProtoError::Unexpected { got: "Start", .. })
    ));

    let mut c = ClientSession::new(spec(), "s", "c", Timeouts::default(), t0);
    let results = encode(&Message::Results {
        side: Box::new(side()),
    })
    .unwrap();
    assert!(matches!(
        c.handle_bytes(&results, t0),
        Err(ProtoError::Unexpected { got: "Results", .. })
    ));
    assert!(matches!(c.start(t0), Err(ProtoError::InvalidCall { .. })));

    let mut a = AgentSession::new("s", "c", &["stream"], Timeouts::default(), t0);
    assert!(a.ready(1, 2, t0).is_err());
    assert!(a.send_results(side()).is_err());
    assert!(a.send_interval(sample(0)).is_err());
}

#[test]
fn peer_closing_mid_test_is_closed_error() {
    let t0 = Instant::now();
    let (mut c, mut a) = pair(t0);
    let (rc, ra) = pump(&mut c, &mut a, t0);
    rc.unwrap();
    ra.unwrap();
    assert!(matches!(c.handle_eof(), Err(ProtoError::Closed(_))));
    let mut a2 = AgentSession::new("s", "c", &["stream"], Timeouts::default(), t0);
    a2.handle_bytes(&encode(&Message::Start).unwrap()[..3], t0)
        .unwrap();
    assert!(matches!(a2.handle_eof(), Err(ProtoError::Truncated { .. })));
}

fn keyed_agent(now: Instant) -> AgentSession {
    AgentSession::new(
        "s",
        "serve --secret-flag",
        &["stream"],
        Timeouts::default(),
        now,
    )
    .require_key(key(), [42; sonde_proto::CHALLENGE_BYTES])
}

fn keyed_client(now: Instant, key: Option<Key>) -> ClientSession {
    ClientSession::new(spec(), "s", "c", Timeouts::default(), now)
        .with_nonce([9; sonde_proto::CHALLENGE_BYTES])
        .with_key(key)
}

#[test]
fn the_right_key_opens_the_agent_and_seals_the_session() {
    let t0 = Instant::now();
    let mut c = keyed_client(t0, Some(key()));
    let mut a = keyed_agent(t0);
    // Before the controller proves the key, the agent says nothing of what it runs.
    a.handle_bytes(&c.poll_transmit().unwrap(), t0).unwrap();
    let welcome = a.poll_transmit().unwrap();
    let text = String::from_utf8_lossy(&welcome);
    assert!(
        !text.contains("stream") && !text.contains("secret"),
        "{text}"
    );
    c.handle_bytes(&welcome, t0).unwrap();
    let (rc, ra) = pump(&mut c, &mut a, t0);
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
    assert!(
        matches!(c.poll_event(), Some(ClientEvent::Welcome { command, .. }) if command.contains("secret"))
    );
    // The rest of the test runs sealed.
    a.ready(40001, 77, t0).unwrap();
    pump(&mut c, &mut a, t0).0.unwrap();
    c.start(t0).unwrap();
    pump(&mut c, &mut a, t0).1.unwrap();
    a.poll_event();
    a.send_interval(sample(0)).unwrap();
    pump(&mut c, &mut a, t0).0.unwrap();
    assert!(c.poll_event().is_some());
}

/// Sends every frame from the controller through `rewrite` (a party on the path).
fn pump_through(
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

/// What a party on the path does to the controller's frame number `n` (None: drops it).
type Rewrite = Box<dyn FnMut(usize, Vec<u8>) -> Option<Vec<u8>>>;

#[test]
fn a_frame_altered_or_injected_on_the_path_ends_the_session() {
    let t0 = Instant::now();
    // Frames from the controller: 0 Hello, 1 Auth, 2 Setup (sealed).
    let flip: Rewrite = Box::new(|n, mut b| {
        if n == 2 {
            let at = b.len() / 2;
            b[at] ^= 0x01;
        }
        Some(b)
    });
    let unsealed: Rewrite = Box::new(|n, b| {
        if n != 2 {
            return Some(b);
        }
        let evil = TestSpec::Stream(StreamSpec {
            connections: 1000,
            ..Default::default()
        });
        let setup = Message::Setup {
            spec: evil,
            third_party: None,
            command: String::new(),
        };
        Some(encode(&setup).unwrap())
    });
    for (what, mut attack) in [("one byte changed", flip), ("an unsealed Setup", unsealed)] {
        let mut c = keyed_client(t0, Some(key()));
        let mut a = keyed_agent(t0);
        let (_, ra) = pump_through(&mut c, &mut a, t0, &mut attack);
        assert_eq!(ra, Err(ProtoError::BadMac { seq: 0 }), "{what}");
        let events: Vec<_> = std::iter::from_fn(|| a.poll_event()).collect();
        assert!(
            !events.iter().any(|e| matches!(e, AgentEvent::Setup { .. })),
            "{what}: {events:?}"
        );
    }
}

#[test]
fn a_sealed_frame_replayed_into_another_session_fails() {
    let t0 = Instant::now();
    // A recorded session: its sealed Setup.
    let mut recorded = Vec::new();
    let mut c = keyed_client(t0, Some(key()));
    let mut a = keyed_agent(t0);
    pump_through(&mut c, &mut a, t0, &mut |n, b| {
        if n == 2 {
            recorded = b.clone();
        }
        Some(b)
    })
    .1
    .unwrap();
    // A new session with the same controller nonce (the agent's differs): the recorded
    // Setup is refused in place of the new one.
    let mut c = keyed_client(t0, Some(key()));
    let mut a = AgentSession::new("s", "c", &["stream"], Timeouts::default(), t0)
        .require_key(key(), [43; sonde_proto::CHALLENGE_BYTES]);
    let (_, ra) = pump_through(&mut c, &mut a, t0, &mut |n, b| {
        Some(if n == 2 { recorded.clone() } else { b })
    });
    assert_eq!(ra, Err(ProtoError::BadMac { seq: 0 }));
}

#[test]
fn a_wrong_or_missing_key_is_refused_on_both_sides() {
    let t0 = Instant::now();
    // An agent with another key cannot prove it: the controller stops before it says
    // anything beyond Hello.
    let wrong = Key::from_file_bytes(b"a different key, same length..").unwrap();
    let mut c = keyed_client(t0, Some(wrong));
    let mut a = keyed_agent(t0);
    a.handle_bytes(&c.poll_transmit().unwrap(), t0).unwrap();
    let welcome = a.poll_transmit().unwrap();
    assert_eq!(c.handle_bytes(&welcome, t0), Err(ProtoError::AgentProof));
    assert_eq!(c.poll_transmit(), None, "no Auth to an impostor");

    let mut c = ClientSession::new(spec(), "s", "c", Timeouts::default(), t0);
    let mut a = keyed_agent(t0);
    let (rc, _) = pump(&mut c, &mut a, t0);
    let err = rc.unwrap_err();
    assert_eq!(err, ProtoError::Peer(PeerError::AuthRequired));
    assert!(err.to_string().contains("--key-file"));

    // A controller with a key refuses an agent that asks for none (or whose challenge was
    // stripped on the way), and says so.
    let mut c = keyed_client(t0, Some(key()));
    let (_, mut open) = pair(t0);
    let (rc, _) = pump(&mut c, &mut open, t0);
    let err = rc.unwrap_err();
    assert_eq!(err, ProtoError::AgentWithoutKey);
    assert!(err.to_string().contains("--key-file"), "{err}");

    // A controller that skips Auth and sends Setup is refused, not set up.
    let mut a = keyed_agent(t0);
    a.handle_bytes(&hello("netsonde", 2), t0).unwrap();
    let r = a.handle_bytes(
        &encode(&Message::Setup {
            spec: spec(),
            third_party: None,
            command: String::new(),
        })
        .unwrap(),
        t0,
    );
    assert_eq!(r, Err(ProtoError::Peer(PeerError::AuthRequired)));
    assert!(a.is_done());

    // A wrong proof is refused, and so is a Hello without a nonce.
    let mut a = keyed_agent(t0);
    a.handle_bytes(&hello("netsonde", 2), t0).unwrap();
    let bad = encode(&Message::Auth {
        mac: "00".repeat(32),
    })
    .unwrap();
    assert_eq!(
        a.handle_bytes(&bad, t0),
        Err(ProtoError::Peer(PeerError::AuthFailed))
    );
    let mut a = keyed_agent(t0);
    let no_nonce = br#"{"type":"hello","magic":"netsonde","version":2,"software":"s"}"#;
    let mut frame = (no_nonce.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(no_nonce);
    assert!(matches!(
        a.handle_bytes(&frame, t0),
        Err(ProtoError::Malformed(_))
    ));
}

#[test]
fn the_quiet_after_the_last_interval_is_not_silence() {
    let t0 = Instant::now();
    let (mut c, mut a) = started(t0);
    let (rc, ra) = pump(&mut c, &mut a, t0);
    rc.unwrap();
    ra.unwrap();
    // The default spec: 10 intervals of 1 s, 0.5 s cool-down.
    let last = t0 + Duration::from_secs(11);
    for i in 0..10u32 {
        a.send_interval(sample(i)).unwrap();
    }
    pump(&mut c, &mut a, last).0.unwrap();
    // Two intervals later the agent is quiet, but cool-down and drain are still allowed.
    assert!(c.handle_timeout(last + Duration::from_millis(3000)).is_ok());
    assert!(matches!(
        c.handle_timeout(last + Duration::from_millis(5700)),
        Err(ProtoError::Timeout(_))
    ));
}

#[test]
fn a_third_party_part_reaches_the_agent_and_its_drained_reaches_the_controller() {
    let t0 = Instant::now();
    let part = ThirdParty::Client {
        server: "198.18.0.12:40000".parse().unwrap(),
        cookie: 5,
        grant: Some(grant()),
    };
    let client = |now| {
        ClientSession::new(spec(), "s", "c", Timeouts::default(), now)
            .with_third_party(part.clone())
    };
    // An agent that does not announce the capability is not asked.
    let mut c = client(t0);
    let mut old = AgentSession::new("s", "serve", &["stream"], Timeouts::default(), t0);
    let (rc, _) = pump(&mut c, &mut old, t0);
    assert!(
        matches!(rc, Err(ProtoError::Peer(PeerError::Unsupported { ref test })) if test == THIRD_PARTY),
        "{rc:?}"
    );
    let mut c = client(t0);
    let mut a = AgentSession::new(
        "s",
        "serve",
        &["stream", THIRD_PARTY],
        Timeouts::default(),
        t0,
    );
    pump(&mut c, &mut a, t0).0.unwrap();
    a.poll_event();
    assert_eq!(
        a.poll_event(),
        Some(AgentEvent::Setup {
            spec: Box::new(spec()),
            third_party: Some(part.clone())
        })
    );
    // Only a running test drains.
    assert!(a.send_drained().is_err());
    a.ready(0, 0, t0).unwrap();
    pump(&mut c, &mut a, t0).0.unwrap();
    c.start(t0).unwrap();
    pump(&mut c, &mut a, t0).0.unwrap();
    a.send_drained().unwrap();
    pump(&mut c, &mut a, t0).0.unwrap();
    let events: Vec<_> = std::iter::from_fn(|| c.poll_event()).collect();
    assert!(events.contains(&ClientEvent::Drained), "{events:?}");
}
