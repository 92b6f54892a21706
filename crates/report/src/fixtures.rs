//! Documents the previous build wrote over two namespaces of one host (the results crate's
//! fixtures), for the renderers' tests.

use sonde_results::Document;

/// The stored document `name` of `crates/results/tests/fixtures`.
pub(crate) fn stored(name: &str) -> Document {
    let path = format!(
        "{}/../results/tests/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}
