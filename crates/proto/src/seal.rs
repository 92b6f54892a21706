//! Integrity of the control channel after the handshake: every frame's payload is followed
//! by HMAC-SHA256(direction key, sequence number || payload). The sequence number counts the
//! direction's frames from 0 and is not sent: a frame altered, dropped, replayed, reordered
//! or sent the other way fails its check, and the session ends. The payload stays readable
//! (nothing secret crosses the control channel); what matters is that no one but a key
//! holder can change what an agent is told to do.

use hmac::Mac;

use crate::auth::{HmacSha256, PROOF_BYTES};
use crate::error::ProtoError;

/// Bytes of the tag after each sealed payload.
pub const TAG_BYTES: usize = PROOF_BYTES;

/// One direction's key and the next frame's sequence number.
#[derive(Clone)]
struct Direction {
    key: [u8; PROOF_BYTES],
    seq: u64,
}

impl Direction {
    fn mac(&self, payload: &[u8]) -> HmacSha256 {
        let mut m = HmacSha256::new_from_slice(&self.key).expect("HMAC takes keys of any length");
        m.update(&self.seq.to_be_bytes());
        m.update(payload);
        m
    }
}

/// Seals the frames this side sends.
#[derive(Clone)]
pub struct Sealer(Direction);

impl Sealer {
    pub fn new(key: [u8; PROOF_BYTES]) -> Sealer {
        Sealer(Direction { key, seq: 0 })
    }

    /// The tag of the next frame, whose payload is `payload`.
    pub fn tag(&mut self, payload: &[u8]) -> [u8; TAG_BYTES] {
        let tag = self.0.mac(payload).finalize().into_bytes().into();
        self.0.seq += 1;
        tag
    }
}

/// Checks the frames this side receives.
#[derive(Clone)]
pub struct Opener(Direction);

impl Opener {
    pub fn new(key: [u8; PROOF_BYTES]) -> Opener {
        Opener(Direction { key, seq: 0 })
    }

    /// The payload of the next frame, if its tag is right (in constant time).
    pub fn open<'a>(&mut self, frame: &'a [u8]) -> Result<&'a [u8], ProtoError> {
        let seq = self.0.seq;
        let bad = ProtoError::BadMac { seq };
        if frame.len() < TAG_BYTES {
            return Err(bad);
        }
        let (payload, tag) = frame.split_at(frame.len() - TAG_BYTES);
        self.0.mac(payload).verify_slice(tag).map_err(|_| bad)?;
        self.0.seq += 1;
        Ok(payload)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sealed(s: &mut Sealer, payload: &[u8]) -> Vec<u8> {
        let mut f = payload.to_vec();
        f.extend_from_slice(&s.tag(payload));
        f
    }

    #[test]
    fn altered_replayed_reordered_and_reflected_frames_fail() {
        let (mut s, mut o) = (Sealer::new([1; 32]), Opener::new([1; 32]));
        let f0 = sealed(&mut s, b"first");
        let f1 = sealed(&mut s, b"second");
        // Reordered: the second frame first.
        assert_eq!(o.clone().open(&f1), Err(ProtoError::BadMac { seq: 0 }));
        assert_eq!(o.open(&f0).unwrap(), b"first");
        // Replayed: the first frame again.
        assert!(o.clone().open(&f0).is_err());
        let mut altered = f1.clone();
        altered[0] ^= 1;
        assert!(o.clone().open(&altered).is_err());
        assert!(o.clone().open(&f1[..10]).is_err());
        assert_eq!(o.open(&f1).unwrap(), b"second");
        // The other direction's key.
        let mut back = Sealer::new([2; 32]);
        assert!(o.open(&sealed(&mut back, b"third")).is_err());
    }
}
