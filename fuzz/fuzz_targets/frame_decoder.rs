//! Arbitrary bytes into the frame decoder, in arbitrary chunks: typed errors, never a panic,
//! whatever the bytes and however they are split.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sonde_proto::FrameDecoder;

fuzz_target!(|data: &[u8]| {
    let mut dec = FrameDecoder::default();
    let split = data.first().map_or(1, |b| (*b as usize % 7) + 1);
    for chunk in data.chunks(split) {
        dec.push(chunk);
        loop {
            match dec.next_message() {
                Ok(Some(_)) => continue,
                Ok(None) | Err(_) => break,
            }
        }
    }
    let _ = dec.finish();
});
