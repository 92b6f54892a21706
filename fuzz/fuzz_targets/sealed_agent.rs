//! An agent session after a real keyed handshake, fed sealed frames whose payloads are
//! arbitrary bytes (what a controller holding the key could send) and, when the first byte
//! says so, frames whose tags are broken (what a party on the path could send): it may
//! refuse or fail, never panic, and a broken tag never yields an event.
#![no_main]

use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use sonde_proto::seal::Sealer;
use sonde_proto::{AgentEvent, AgentSession, ClientSession, Key, Session, Timeouts};
use sonde_results::{StreamSpec, TestSpec};

const AGENT_NONCE: [u8; 32] = [3; 32];
const CONTROLLER_NONCE: [u8; 32] = [9; 32];

fuzz_target!(|data: &[u8]| {
    let t0 = Instant::now();
    let key = Key::from_file_bytes(b"fuzzing key of some length").unwrap();
    let caps = ["stream", "ping", "rpc", "pps", "third-party"];
    let mut a = AgentSession::new("fuzz", "fuzz", &caps, Timeouts::default(), t0)
        .require_key(key.clone(), AGENT_NONCE);
    let mut c = ClientSession::new(TestSpec::Stream(StreamSpec::default()), "f", "f", Timeouts::default(), t0)
        .with_nonce(CONTROLLER_NONCE)
        .with_key(Some(key.clone()));
    // Hello, Welcome, Auth: the real handshake.
    a.handle_bytes(&c.poll_transmit().unwrap(), t0).unwrap();
    while let Some(b) = a.poll_transmit() {
        c.handle_bytes(&b, t0).unwrap();
    }
    a.handle_bytes(&c.poll_transmit().unwrap(), t0).unwrap();
    while a.poll_event().is_some() {}
    let mut seal = Sealer::new(key.session_keys(&CONTROLLER_NONCE, &AGENT_NONCE).to_agent);
    let break_tags = data.first().is_some_and(|b| b & 1 == 1);
    for (i, payload) in data.chunks(97).enumerate() {
        let now = t0 + Duration::from_millis(i as u64);
        let mut frame = (payload.len() as u32 + 32).to_be_bytes().to_vec();
        frame.extend_from_slice(payload);
        let mut tag = seal.tag(payload);
        if break_tags {
            tag[0] ^= 1;
        }
        frame.extend_from_slice(&tag);
        let r = a.handle_bytes(&frame, now);
        while let Some(ev) = a.poll_event() {
            assert!(!break_tags, "an event from a frame with a broken tag");
            if let AgentEvent::Setup { spec, .. } = ev {
                let _ = spec.validate();
                let _ = a.ready(1, 2, now);
            }
        }
        while a.poll_transmit().is_some() {}
        if r.is_err() {
            break;
        }
    }
    let _ = a.handle_eof();
});
