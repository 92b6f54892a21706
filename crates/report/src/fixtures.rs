//! Documents the previous build wrote over two namespaces of one host (the results crate's
//! fixtures), and specs, for the renderers' tests.

use sonde_results::{Document, StampSpec, Timing};

/// The stored document `name` of `crates/results/tests/fixtures`.
pub(crate) fn stored(name: &str) -> Document {
    let path = format!(
        "{}/../results/tests/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// A STAMP run to 198.18.0.2:862 as `sonde stamp` runs it by default for 1 s: 10 packets
/// a second of 44 bytes, unauthenticated, stateless, answers awaited 1 s.
pub(crate) fn stamp_spec() -> StampSpec {
    StampSpec {
        host: "198.18.0.2".into(),
        port: 862,
        rate_per_s: 10.0,
        count: None,
        packet_bytes: 44,
        authenticated: false,
        stateful: false,
        ssid: 0,
        timeout_ms: 1_000,
        timing: Timing::measuring(1_000),
        execution: Default::default(),
    }
}
