//! A controller session fed arbitrary bytes from a would-be agent: it may fail, never panic.
#![no_main]

use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use sonde_proto::{ClientSession, Key, Session, Timeouts};
use sonde_results::{StreamSpec, TestSpec};

fuzz_target!(|data: &[u8]| {
    let t0 = Instant::now();
    let spec = TestSpec::Stream(StreamSpec::default());
    let key = Key::from_file_bytes(b"fuzzing key of some length").unwrap();
    let mut c = ClientSession::new(spec, "fuzz", "fuzz", Timeouts::default(), t0).with_key(Some(key));
    for (i, chunk) in data.chunks(53).enumerate() {
        if c.handle_bytes(chunk, t0 + Duration::from_millis(i as u64)).is_err() {
            break;
        }
        while c.poll_event().is_some() {}
        if c.start(t0).is_ok() {
            let _ = c.stop(t0);
        }
        while c.poll_transmit().is_some() {}
    }
    let _ = c.handle_eof();
});
