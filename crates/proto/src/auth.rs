//! Pre-shared-key authentication, both ways. Each side sends a fresh random nonce (the
//! controller in `Hello`, the agent in `Welcome`); each proves the key with
//! HMAC-SHA256(key, label || role || controller nonce || agent nonce || agent), the agent
//! first, so a controller never answers anything to an impostor; each checks the other's proof in
//! constant time. The key never crosses the wire, and fresh nonces on both sides make a
//! recorded proof useless. `agent` is the address the controller dialled, which the agent
//! checked is its own (`Hello`): a session a relay hands to another agent of the fleet fails
//! its proof. Both nonces also derive the session's two frame keys (one per direction, see
//! `seal`). Randomness comes from the caller (this crate does no I/O).

use hmac::{Hmac, Mac};
use sha2::Sha256;

pub(crate) type HmacSha256 = Hmac<Sha256>;

/// Domain separation: a proof for this protocol is no proof for anything else.
const LABEL: &[u8] = b"netsonde-auth-v3";
/// Shortest key accepted: 128 bits.
pub const MIN_KEY_BYTES: usize = 16;
/// Bytes of each side's nonce.
pub const CHALLENGE_BYTES: usize = 32;
/// Bytes of a proof and of a derived key: SHA-256's output.
pub const PROOF_BYTES: usize = 32;

/// Who proves the key: the two proofs of one handshake differ, so neither can be reflected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prover {
    Agent,
    Controller,
}

impl Prover {
    fn label(self) -> &'static [u8] {
        match self {
            Prover::Agent => b"agent-proof",
            Prover::Controller => b"controller-proof",
        }
    }
}

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

/// The controller's nonce and the agent's, in that order.
pub type Nonces<'a> = (&'a [u8], &'a [u8]);

/// The keys of one session's frames, one per direction.
pub struct SessionKeys {
    pub to_agent: [u8; PROOF_BYTES],
    pub to_controller: [u8; PROOF_BYTES],
}

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

    /// HMAC-SHA256 under this key of `parts`, each length-prefixed so that no two lists of
    /// parts hash alike.
    pub(crate) fn mac(&self, parts: &[&[u8]]) -> HmacSha256 {
        let mut m = HmacSha256::new_from_slice(&self.0).expect("HMAC takes keys of any length");
        m.update(LABEL);
        for p in parts {
            m.update(&(p.len() as u32).to_be_bytes());
            m.update(p);
        }
        m
    }

    fn proof_mac(&self, who: Prover, nonces: Nonces<'_>, agent: &str) -> HmacSha256 {
        self.mac(&[who.label(), nonces.0, nonces.1, agent.as_bytes()])
    }

    /// `who`'s proof of the key for the handshake with these nonces (controller's, agent's)
    /// with the agent the controller dialled.
    pub fn prove(&self, who: Prover, nonces: Nonces<'_>, agent: &str) -> Vec<u8> {
        let m = self.proof_mac(who, nonces, agent);
        m.finalize().into_bytes().to_vec()
    }

    /// Whether `proof` is `who`'s proof for these nonces and agent, compared in constant
    /// time.
    pub fn verify(&self, who: Prover, nonces: Nonces<'_>, agent: &str, proof: &[u8]) -> bool {
        let m = self.proof_mac(who, nonces, agent);
        m.verify_slice(proof).is_ok()
    }

    /// The frame keys of the session with these nonces.
    pub fn session_keys(&self, controller_nonce: &[u8], agent_nonce: &[u8]) -> SessionKeys {
        let derive = |dir: &[u8]| -> [u8; PROOF_BYTES] {
            let m = self.mac(&[b"session-key", dir, controller_nonce, agent_nonce]);
            m.finalize().into_bytes().into()
        };
        SessionKeys {
            to_agent: derive(b"to-agent"),
            to_controller: derive(b"to-controller"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proofs_verify_only_with_the_same_key_nonces_and_prover() {
        let k = Key::from_file_bytes(b"  correct horse battery staple\n").unwrap();
        let other = Key::from_file_bytes(b"correct horse battery stapl3").unwrap();
        let (c, a) = ([7u8; CHALLENGE_BYTES], [8u8; CHALLENGE_BYTES]);
        let n: Nonces = (&c, &a);
        let p = k.prove(Prover::Agent, n, "198.18.0.2");
        assert_eq!(p.len(), PROOF_BYTES);
        assert!(k.verify(Prover::Agent, n, "198.18.0.2", &p));
        // Reflected, swapped nonces, another key, another agent, truncated, empty: all
        // refused.
        assert!(!k.verify(Prover::Controller, n, "198.18.0.2", &p));
        assert!(!k.verify(Prover::Agent, (&a, &c), "198.18.0.2", &p));
        assert!(!other.verify(Prover::Agent, n, "198.18.0.2", &p));
        assert!(!k.verify(Prover::Agent, n, "198.18.0.3", &p));
        assert!(!k.verify(Prover::Agent, n, "198.18.0.2", &p[..31]));
        assert!(!k.verify(Prover::Agent, n, "198.18.0.2", &[]));
        assert_eq!(format!("{k:?}"), "Key(28 bytes)");
    }

    #[test]
    fn session_keys_differ_by_direction_and_nonces() {
        let k = Key::from_file_bytes(b"correct horse battery staple").unwrap();
        let s1 = k.session_keys(&[1; 32], &[2; 32]);
        let s2 = k.session_keys(&[1; 32], &[3; 32]);
        assert_ne!(s1.to_agent, s1.to_controller);
        assert_ne!(s1.to_agent, s2.to_agent);
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
