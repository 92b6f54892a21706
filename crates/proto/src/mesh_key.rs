//! The mesh's STAMP key (`sonde serve --mesh`): derived from the fleet key, so that agents
//! sharing the key answer each other's probes and nothing else does, and so that a STAMP
//! HMAC can never be replayed as a control-protocol proof (another label, another key).

use crate::stamp::StampKey;
use crate::Key;

/// The STAMP key every agent holding `key` derives alike.
pub fn stamp_key(key: &Key) -> StampKey {
    use hmac::Mac;
    let derived = key.mac(&[b"mesh-stamp-key"]).finalize().into_bytes();
    StampKey::new(&derived).expect("32 bytes exceed the minimum")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agents_with_one_key_derive_one_stamp_key_and_another_key_differs() {
        let a = Key::from_file_bytes(b"0123456789abcdef-fleet").unwrap();
        let b = Key::from_file_bytes(b"0123456789abcdef-other").unwrap();
        let tag = stamp_key(&a).mac(&[b"probe"]);
        assert!(stamp_key(&a.clone()).verify(&[b"probe"], &tag));
        assert!(!stamp_key(&b).verify(&[b"probe"], &tag));
    }
}
