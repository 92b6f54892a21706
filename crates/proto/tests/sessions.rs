//! Controller and agent state machines driven against each other in memory, with
//! simulated time: scenarios from handshake to results, and every way they can fail.

mod common;

use std::time::{Duration, Instant};

use common::*;
use sonde_proto::{
    encode, AgentEvent, AgentSession, ClientEvent, ClientSession, Message, PeerError, ProtoError,
    Session, ThirdParty, Timeouts, THIRD_PARTY,
};

#[test]
fn full_test_scenario_with_simulated_time() {
    let t0 = Instant::now();
    let (mut c, mut a) = pair(t0);
    set_up(&mut c, &mut a, t0);
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
        matches!(e, ProtoError::Excess(ref w) if w.to_string().contains("9 connections")),
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
