//! Arbitrary bytes as a data connection's header: a slot index inside the test or a typed
//! refusal, never a panic; whatever is accepted encodes back to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sonde_proto::{DataHeader, DATA_HEADER_BYTES};

fuzz_target!(|data: &[u8]| {
    let Some(bytes) = data.get(..DATA_HEADER_BYTES) else {
        return;
    };
    let header: [u8; DATA_HEADER_BYTES] = bytes.try_into().expect("12 bytes");
    let total = data.get(DATA_HEADER_BYTES).map_or(0, |b| *b as usize);
    let decoded = DataHeader::decode(&header);
    if let Ok(i) = DataHeader::accept(&header, decoded.cookie, total) {
        assert!(i < total);
        assert_eq!(decoded.encode(), header);
    }
});
