//! Pre-shared-key authentication: the agent sends a random challenge in `Welcome`, the
//! controller answers HMAC-SHA256(key, label || challenge), the agent checks it in
//! constant time. The key never crosses the wire; a fresh challenge per connection makes a
//! recorded answer useless. Randomness comes from the caller (this crate does no I/O).

use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Domain separation: an answer for this protocol is no answer for anything else.
const LABEL: &[u8] = b"netsonde-auth-v1";
/// Shortest key accepted: 128 bits.
pub const MIN_KEY_BYTES: usize = 16;
pub const CHALLENGE_BYTES: usize = 32;

/// A pre-shared key. Its `Debug` does not print it.
#[derive(Clone)]
pub struct Key(Vec<u8>);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Key({} bytes)", self.0.len())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a key must be at least {MIN_KEY_BYTES} bytes, this one has {0}")]
pub struct KeyTooShort(pub usize);

impl Key {
    /// A key from a key file's contents; surrounding whitespace is not part of it.
    pub fn from_file_bytes(bytes: &[u8]) -> Result<Key, KeyTooShort> {
        let start = bytes
            .iter()
            .position(|b| !b.is_ascii_whitespace())
            .unwrap_or(bytes.len());
        let end = bytes
            .iter()
            .rposition(|b| !b.is_ascii_whitespace())
            .map_or(start, |e| e + 1);
        let key = &bytes[start..end];
        if key.len() < MIN_KEY_BYTES {
            return Err(KeyTooShort(key.len()));
        }
        Ok(Key(key.to_vec()))
    }

    fn mac(&self) -> HmacSha256 {
        HmacSha256::new_from_slice(&self.0).expect("HMAC takes keys of any length")
    }

    /// The answer to `challenge`.
    pub fn respond(&self, challenge: &[u8]) -> Vec<u8> {
        let mut m = self.mac();
        m.update(LABEL);
        m.update(challenge);
        m.finalize().into_bytes().to_vec()
    }

    /// Whether `answer` is the answer to `challenge`, compared in constant time.
    pub fn verify(&self, challenge: &[u8], answer: &[u8]) -> bool {
        let mut m = self.mac();
        m.update(LABEL);
        m.update(challenge);
        m.verify_slice(answer).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_verify_only_with_the_same_key_and_challenge() {
        let k = Key::from_file_bytes(b"  correct horse battery staple\n").unwrap();
        let other = Key::from_file_bytes(b"correct horse battery stapl3").unwrap();
        let c1 = [7u8; CHALLENGE_BYTES];
        let c2 = [8u8; CHALLENGE_BYTES];
        let a = k.respond(&c1);
        assert_eq!(a.len(), 32);
        assert!(k.verify(&c1, &a));
        assert!(!k.verify(&c2, &a));
        assert!(!other.verify(&c1, &a));
        assert!(!k.verify(&c1, &a[..31]));
        assert!(!k.verify(&c1, &[]));
        assert_eq!(format!("{k:?}"), "Key(28 bytes)");
    }

    #[test]
    fn short_keys_are_refused() {
        assert_eq!(
            Key::from_file_bytes(b"short\n").unwrap_err(),
            KeyTooShort(5)
        );
        assert_eq!(Key::from_file_bytes(b"   ").unwrap_err(), KeyTooShort(0));
    }
}
