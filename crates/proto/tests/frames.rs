//! Every message through frames and back, and frames that are cut, too large or garbage:
//! typed errors, never a panic.

mod common;

use common::*;
use sonde_proto::{
    encode, FrameDecoder, Message, PeerError, ProtoError, ThirdParty, MAX_FRAME_BYTES,
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
