//! The proof from the target itself. A grant says a serving agent expects a client, but a
//! key holder can make grants, so before a client part sends a byte of data the client
//! agent A sends a challenge (a fresh nonce) to B's data port and B must answer with
//! HMAC(test key, nonce), where the test key is derived from the fleet key and bound to the
//! test: its cookie, A's address, B's data address. Only an agent serving that very test
//! answers; a host that is no agent cannot, so A sends it nothing but the challenge.
//! The answer is smaller than the challenge: a forged source gains no amplification.

use std::net::{IpAddr, SocketAddr};

use hmac::Mac;

use crate::auth::{HmacSha256, Key, PROOF_BYTES};

/// Bytes of the challenge's nonce.
pub const TARGET_NONCE_BYTES: usize = 32;
/// Magic (8), cookie (8), nonce (32).
pub const TARGET_CHALLENGE_BYTES: usize = 8 + 8 + TARGET_NONCE_BYTES;
/// Magic (8), MAC (32).
pub const TARGET_ANSWER_BYTES: usize = 8 + PROOF_BYTES;

const CHALLENGE_MAGIC: &[u8; 8] = b"sonde-tc";
const ANSWER_MAGIC: &[u8; 8] = b"sonde-ta";

/// What A sends B's data port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TargetChallenge {
    pub cookie: u64,
    pub nonce: [u8; TARGET_NONCE_BYTES],
}

impl TargetChallenge {
    pub fn encode(&self) -> [u8; TARGET_CHALLENGE_BYTES] {
        let mut b = [0u8; TARGET_CHALLENGE_BYTES];
        b[..8].copy_from_slice(CHALLENGE_MAGIC);
        b[8..16].copy_from_slice(&self.cookie.to_be_bytes());
        b[16..].copy_from_slice(&self.nonce);
        b
    }

    /// A challenge, if `b` is exactly one.
    pub fn decode(b: &[u8]) -> Option<TargetChallenge> {
        if b.len() != TARGET_CHALLENGE_BYTES || &b[..8] != CHALLENGE_MAGIC {
            return None;
        }
        Some(TargetChallenge {
            cookie: u64::from_be_bytes(b[8..16].try_into().ok()?),
            nonce: b[16..].try_into().ok()?,
        })
    }
}

/// The test a challenge is about: who sends, to where, with which cookie.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TargetTest {
    /// A's address, as B sees it (the grant's client).
    pub client: IpAddr,
    /// B's data address (the grant's server).
    pub server: SocketAddr,
    pub cookie: u64,
}

impl TargetTest {
    /// HMAC over `nonce` under the test's key: HMAC(fleet key, "target-key", client,
    /// server, cookie).
    fn answer_mac(&self, key: &Key, nonce: &[u8]) -> HmacSha256 {
        let (c, s) = (self.client.to_string(), self.server.to_string());
        let test_key = key
            .mac(&[
                b"target-key",
                c.as_bytes(),
                s.as_bytes(),
                &self.cookie.to_be_bytes(),
            ])
            .finalize()
            .into_bytes();
        let mut m = HmacSha256::new_from_slice(&test_key).expect("HMAC takes keys of any length");
        m.update(b"target-answer");
        m.update(nonce);
        m
    }

    /// B's answer to `challenge`, if it is about this test (its cookie); `None` otherwise.
    pub fn answer(
        &self,
        key: &Key,
        challenge: &TargetChallenge,
    ) -> Option<[u8; TARGET_ANSWER_BYTES]> {
        if challenge.cookie != self.cookie {
            return None;
        }
        let mut b = [0u8; TARGET_ANSWER_BYTES];
        b[..8].copy_from_slice(ANSWER_MAGIC);
        b[8..].copy_from_slice(
            &self
                .answer_mac(key, &challenge.nonce)
                .finalize()
                .into_bytes(),
        );
        Some(b)
    }

    /// Whether `answer` is B's to `nonce` for this test, compared in constant time.
    pub fn check(&self, key: &Key, nonce: &[u8; TARGET_NONCE_BYTES], answer: &[u8]) -> bool {
        answer.len() == TARGET_ANSWER_BYTES
            && &answer[..8] == ANSWER_MAGIC
            && self
                .answer_mac(key, nonce)
                .verify_slice(&answer[8..])
                .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_tests_own_answer_under_the_fleet_key_checks_out() {
        let k = Key::from_file_bytes(b"correct horse battery staple").unwrap();
        let other = Key::from_file_bytes(b"correct horse battery stapl3").unwrap();
        let t = TargetTest {
            client: "198.18.0.11".parse().unwrap(),
            server: "198.18.0.12:40000".parse().unwrap(),
            cookie: 7,
        };
        let c = TargetChallenge {
            cookie: 7,
            nonce: [5; TARGET_NONCE_BYTES],
        };
        let wire = c.encode();
        assert_eq!(TargetChallenge::decode(&wire), Some(c));
        assert_eq!(TargetChallenge::decode(&wire[1..]), None);
        let a = t.answer(&k, &c).unwrap();
        assert!(a.len() < wire.len(), "no amplification");
        assert!(t.check(&k, &c.nonce, &a));
        // Another nonce, key, client, server, a truncated answer; a challenge for another
        // test's cookie gets no answer at all.
        assert!(!t.check(&k, &[6; TARGET_NONCE_BYTES], &a));
        assert!(!t.check(&other, &c.nonce, &a));
        let moved = |f: fn(&mut TargetTest)| {
            let mut m = t;
            f(&mut m);
            m.check(&k, &c.nonce, &a)
        };
        assert!(!moved(|m| m.client = "198.18.0.13".parse().unwrap()));
        assert!(!moved(|m| m.server = "198.18.0.12:40001".parse().unwrap()));
        assert!(!moved(|m| m.cookie = 8));
        assert!(!t.check(&k, &c.nonce, &a[..39]));
        let elsewhere = TargetChallenge { cookie: 8, ..c };
        assert_eq!(t.answer(&k, &elsewhere), None);
    }
}
