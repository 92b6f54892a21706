//! An agent session fed arbitrary bytes from a would-be controller, with and without a
//! key: it may refuse, time out or fail, but never panic.
#![no_main]

use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use sonde_proto::{AgentEvent, AgentSession, Key, Session, Timeouts, CHALLENGE_BYTES};

fuzz_target!(|data: &[u8]| {
    let t0 = Instant::now();
    let keyed = data.first().is_some_and(|b| b & 1 == 1);
    let mut a = AgentSession::new("fuzz", "fuzz", &["stream", "ping", "rpc", "pps"], Timeouts::default(), t0);
    if keyed {
        a = a.require_key(Key::from_file_bytes(b"fuzzing key of some length").unwrap(), [3; CHALLENGE_BYTES]);
    }
    for (i, chunk) in data.chunks(61).enumerate() {
        let now = t0 + Duration::from_millis(i as u64);
        if a.handle_bytes(chunk, now).is_err() {
            break;
        }
        while let Some(ev) = a.poll_event() {
            if let AgentEvent::Setup { spec, .. } = ev {
                let _ = spec.validate();
                let _ = a.ready(1, 2, now);
            }
        }
        while a.poll_transmit().is_some() {}
    }
    let _ = a.handle_eof();
    let _ = a.handle_timeout(t0 + Duration::from_secs(3600));
});
