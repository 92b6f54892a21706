//! The keyed handshake and the sealed session: each side proves the key, and a frame
//! altered, injected or replayed on the path ends the session before it reaches the agent.

mod common;

use std::time::Instant;

use common::*;
use sonde_proto::{
    encode, AgentEvent, AgentSession, ClientEvent, ClientSession, Key, Message, PeerError,
    ProtoError, Session, Timeouts,
};
use sonde_results::{StreamSpec, TestSpec};

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
    set_up(&mut c, &mut a, t0);
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
    // Interval 0 of the spec begins after its warm-up: its sample comes after that.
    let timing = spec().timing().clone();
    let later = t0 + std::time::Duration::from_millis(timing.warmup_ms + timing.interval_ms);
    pump(&mut c, &mut a, later).0.unwrap();
    assert!(c.poll_event().is_some());
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
    assert!(matches!(
        c.handle_bytes(&welcome, t0),
        Err(ProtoError::AgentProof { .. })
    ));
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
    a.handle_bytes(&hello("netsonde", 3), t0).unwrap();
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
    a.handle_bytes(&hello("netsonde", 3), t0).unwrap();
    let bad = encode(&Message::Auth {
        mac: "00".repeat(32),
    })
    .unwrap();
    assert_eq!(
        a.handle_bytes(&bad, t0),
        Err(ProtoError::Peer(PeerError::AuthFailed))
    );
    let mut a = keyed_agent(t0);
    let no_nonce = br#"{"type":"hello","magic":"netsonde","version":3,"software":"s"}"#;
    let mut frame = (no_nonce.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(no_nonce);
    assert!(matches!(
        a.handle_bytes(&frame, t0),
        Err(ProtoError::Malformed(_))
    ));
}

/// A relay hands a controller's session for the agent at 198.18.0.2 to another agent of
/// the fleet (198.18.0.3, same key): as forwarded, that agent refuses a `Hello` for another
/// address; with `Hello` rewritten to its own address, its proof names that address and
/// the controller refuses it before proving anything. The agent it dialled is served.
#[test]
fn a_session_relayed_to_another_agent_fails_its_proof() {
    let t0 = Instant::now();
    let a_ip: std::net::IpAddr = "198.18.0.2".parse().unwrap();
    let b_ip: std::net::IpAddr = "198.18.0.3".parse().unwrap();
    let agent_at = |ip| keyed_agent(t0).reached_at(vec![ip]);
    let controller = || keyed_client(t0, Some(key())).dialling(a_ip);

    // Forwarded as it is: B refuses, naming the address the controller dialled.
    let (mut c, mut b) = (controller(), agent_at(b_ip));
    let e = b.handle_bytes(&c.poll_transmit().unwrap(), t0).unwrap_err();
    assert!(
        e.to_string()
            .contains("\"198.18.0.2\", which is not this agent"),
        "{e}"
    );
    let told = c.handle_bytes(&b.poll_transmit().unwrap(), t0).unwrap_err();
    assert!(told.to_string().contains("--reached-at"), "{told}");

    // Hello rewritten to B's own address: B proves over it, the controller refuses.
    let (mut c, mut b) = (controller(), agent_at(b_ip));
    let mut forged = c.poll_transmit().unwrap();
    let at = forged.windows(10).position(|w| w == b"198.18.0.2").unwrap();
    forged[at + 9] = b'3';
    b.handle_bytes(&forged, t0).unwrap();
    let e = c.handle_bytes(&b.poll_transmit().unwrap(), t0).unwrap_err();
    assert_eq!(
        e,
        ProtoError::AgentProof {
            agent: "198.18.0.2".into()
        }
    );
    assert!(
        c.poll_transmit().is_none(),
        "the controller proved its key to B"
    );

    // The agent the controller dialled (also when it stands behind a NAT's address).
    for reached in [vec![a_ip], vec![b_ip, a_ip]] {
        let (mut c, mut a) = (controller(), keyed_agent(t0).reached_at(reached));
        let (rc, ra) = pump(&mut c, &mut a, t0);
        rc.unwrap();
        ra.unwrap();
        assert!(matches!(c.poll_event(), Some(ClientEvent::Welcome { .. })));
    }
}
