//! Controller and agent state machines driven against each other in memory, with
//! simulated time: scenarios from handshake to results, and every way they can fail.

mod common;

use std::time::{Duration, Instant};

use common::*;
use sonde_proto::{
    encode, AgentEvent, AgentSession, ClientEvent, ClientSession, FrameDecoder, Message, PeerError,
    ProtoError, Session, ThirdParty, Timeouts, MAX_FRAME_BYTES, THIRD_PARTY,
};

fn all_messages() -> Vec<Message> {
    vec![
        Message::Hello {
            magic: "netsonde".into(),
            version: 3,
            software: "sonde 0.1".into(),
            nonce: "ab".repeat(32),
            agent: "198.18.0.2".into(),
            ticket: None,
        },
        Message::Welcome {
            magic: "netsonde".into(),
            version: 3,
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
            labels: Default::default(),
        },
        Message::Accepted {
            command: "c".into(),
            capabilities: vec!["stream".into()],
            labels: [("zone".into(), "a".into())].into(),
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

/// The largest interval an agent sends, TCP_INFO of every connection of the largest
/// bidirectional stream with every figure present, fits in a frame.
#[test]
fn an_interval_of_the_most_connections_fits_a_frame() {
    let full = sonde_results::tcp::TcpSample {
        connection: u32::MAX,
        srtt_us: u32::MAX,
        rttvar_us: u32::MAX,
        min_rtt_us: Some(u32::MAX),
        cwnd_segments: u32::MAX,
        ssthresh_segments: Some(u32::MAX),
        mss_bytes: u32::MAX,
        snd_wnd_bytes: Some(u32::MAX),
        rcv_wnd_bytes: Some(u32::MAX),
        rcv_space_bytes: u32::MAX,
        delivery_rate_bits_per_second: Some(1.234_567_890_123e12),
        pacing_rate_bits_per_second: Some(1.234_567_890_123e12),
        retransmits: u32::MAX,
        dsack_dups: Some(u32::MAX),
        lost_segments: u32::MAX,
        reordering: u32::MAX,
        notsent_bytes: Some(u32::MAX),
        busy_percent: Some(99.123_456_789_012_3),
        rwnd_limited_percent: Some(99.123_456_789_012_3),
        sndbuf_limited_percent: Some(99.123_456_789_012_3),
        ..Default::default()
    };
    let mut sample = sample(7);
    sample.section = sonde_results::SampleSection::Stream(sonde_results::StreamSample {
        tcp: vec![full; 2 * sonde_results::spec::MAX_CONNECTIONS as usize],
        ..Default::default()
    });
    let frame = encode(&Message::Interval { sample }).unwrap();
    assert!(frame.len() < MAX_FRAME_BYTES / 2, "{} bytes", frame.len());
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
    // A controller from the future says version 4.
    let mut a = AgentSession::new("s", "c", &["stream"], Timeouts::default(), t0);
    let hello4 = hello("netsonde", 4);
    assert_eq!(
        a.handle_bytes(&hello4, t0),
        Err(ProtoError::VersionMismatch { ours: 3, theirs: 4 })
    );
    let reply = a.poll_transmit().unwrap();
    let mut c = ClientSession::new(spec(), "s", "c", Timeouts::default(), t0);
    assert_eq!(
        c.handle_bytes(&reply, t0),
        Err(ProtoError::VersionMismatch { ours: 3, theirs: 3 })
    );

    // A version-2 controller (proofs that name no agent) is refused, and told so.
    let mut a = AgentSession::new("s", "c", &["stream"], Timeouts::default(), t0);
    let e = a.handle_bytes(&hello("netsonde", 2), t0).unwrap_err();
    assert_eq!(e, ProtoError::VersionMismatch { ours: 3, theirs: 2 });
    assert!(e.to_string().contains("the peer speaks 2"), "{e}");
    let told = String::from_utf8_lossy(&a.poll_transmit().unwrap()).to_string();
    assert!(told.contains("version_mismatch"), "{told}");

    // A version-1 controller (no nonce, a command in Hello) hears about the version.
    let mut a = AgentSession::new("s", "c", &["stream"], Timeouts::default(), t0);
    let v1 = br#"{"type":"hello","magic":"netsonde","version":1,"software":"s","command":"c"}"#;
    let mut frame = (v1.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(v1);
    assert_eq!(
        a.handle_bytes(&frame, t0),
        Err(ProtoError::VersionMismatch { ours: 3, theirs: 1 })
    );

    // An agent from the future, and a version-2 agent, answer Welcome: both refused.
    for version in [4, 2] {
        let mut c = ClientSession::new(spec(), "s", "c", Timeouts::default(), t0);
        let welcome = encode(&Message::Welcome {
            magic: "netsonde".into(),
            version,
            software: "s".into(),
            challenge: None,
            proof: None,
        })
        .unwrap();
        assert_eq!(
            c.handle_bytes(&welcome, t0),
            Err(ProtoError::VersionMismatch {
                ours: 3,
                theirs: version
            })
        );
    }
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

#[test]
fn an_agent_buffers_little_before_the_key_and_no_results_sized_frame_after() {
    let t0 = Instant::now();
    let agent = || AgentSession::new("s", "c", &["stream"], Timeouts::default(), t0);
    // Before Hello: a frame over 4 kB is refused from its length alone.
    let over = (sonde_proto::PRE_AUTH_FRAME_BYTES as u32 + 1).to_be_bytes();
    assert!(matches!(
        agent().handle_bytes(&over, t0),
        Err(ProtoError::Oversized { .. })
    ));
    // Accepted: a Setup-sized frame is fine, one over the controller's cap is not.
    let mut a = agent();
    a.handle_bytes(&hello("netsonde", 3), t0).unwrap();
    let over = (sonde_proto::CONTROLLER_FRAME_BYTES as u32 + 1).to_be_bytes();
    assert!(matches!(
        a.handle_bytes(&over, t0),
        Err(ProtoError::Oversized { .. })
    ));
}

#[test]
fn an_agent_sending_more_samples_than_the_spec_fails_the_session_with_what_it_sent_kept() {
    let t0 = Instant::now();
    let (mut c, mut a) = started(t0);
    pump(&mut c, &mut a, t0).1.unwrap();
    // The default spec: 10 intervals, so 11 samples (one partial) and no more, each
    // once its interval began (all of them after the test's 11 s).
    let end = t0 + std::time::Duration::from_secs(12);
    for i in 0..11u32 {
        a.send_interval(sample(i)).unwrap();
    }
    pump(&mut c, &mut a, end).0.unwrap();
    a.send_interval(sample(11)).unwrap();
    let e = pump(&mut c, &mut a, end).0.unwrap_err();
    assert_eq!(
        e.to_string(),
        "misbehaving agent, test ended: it sent more interval samples than the test's 11 \
         (10 intervals and a partial one)"
    );
    let kept = std::iter::from_fn(|| c.poll_event())
        .filter(|e| matches!(e, ClientEvent::Interval(_)))
        .count();
    assert_eq!(kept, 11);
    // A sample describing more connections than the test's 8 is refused too.
    let (mut c, mut a) = started(t0);
    pump(&mut c, &mut a, t0).1.unwrap();
    let mut wide = sample(0);
    if let sonde_results::SampleSection::Stream(st) = &mut wide.section {
        st.tcp = vec![st.tcp[0].clone(); 9];
    }
    a.send_interval(wide).unwrap();
    let e = pump(&mut c, &mut a, end).0.unwrap_err();
    assert!(
        matches!(e, ProtoError::Excess(ref w) if w.contains("9 connections")),
        "{e}"
    );
    assert!(!std::iter::from_fn(|| c.poll_event()).any(|e| matches!(e, ClientEvent::Interval(_))));
}

#[test]
fn an_agent_sending_its_samples_before_their_time_fails_the_session() {
    // Issue 52: every sample the spec allows, sent at Start (with its warm-up of 1 s
    // over): the first is taken, the second is an interval early.
    let t0 = Instant::now();
    let (mut c, mut a) = started(t0);
    pump(&mut c, &mut a, t0).1.unwrap();
    for i in 0..11u32 {
        a.send_interval(sample(i)).unwrap();
    }
    let at = t0 + std::time::Duration::from_millis(1500);
    let e = pump(&mut c, &mut a, at).0.unwrap_err();
    assert_eq!(
        e.to_string(),
        "misbehaving agent, test ended: its sample 2 came 1.500 s after Start, before that \
         interval began (2.000 s)"
    );
    let kept = std::iter::from_fn(|| c.poll_event())
        .filter(|e| matches!(e, ClientEvent::Interval(_)))
        .count();
    assert_eq!(kept, 1);
}
