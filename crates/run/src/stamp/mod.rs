//! STAMP (RFC 8762/8972) over real sockets: the reflector `sonde serve --stamp` runs and
//! the clock figures both ends put on the wire. The packets themselves are
//! `sonde_proto::stamp`'s (sans-IO); this module owns sockets, clocks and session state.

pub mod clock;
pub mod guard;
pub mod ledger;
pub mod marks;
pub mod reflector;
pub mod sender;
pub mod silence;

pub use guard::Cidr;
pub use reflector::{ReflectorConfig, ReflectorCounts, ReflectorService};

use std::path::Path;

use sonde_proto::stamp::StampKey;

/// A STAMP key from the secret file `flag` names (owner-only, as `--key-file`): its
/// trimmed text as hex when it is hex, else its trimmed bytes, as stamp-suite reads one.
pub fn load_key(flag: &str, path: &Path) -> Result<StampKey, crate::key::KeyError> {
    let bytes = crate::key::read_private(flag, path)?;
    let text = String::from_utf8_lossy(&bytes);
    let trimmed = text.trim();
    let raw = match hex_bytes(trimmed) {
        Some(decoded) => decoded,
        None => trimmed.as_bytes().to_vec(),
    };
    StampKey::new(&raw).map_err(|e| crate::key::KeyError(format!("{flag} {}: {e}", path.display())))
}

fn hex_bytes(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || s.is_empty() {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}
