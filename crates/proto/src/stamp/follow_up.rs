//! RFC 8972 §4.7's Follow-Up Telemetry TLV (type 7): a reflector cannot write the time its
//! answer really leaves into that answer (it is read before the send; a wait in the
//! host's queue comes after), so it tells it in its NEXT answer of the same session: the
//! Sequence Number of the last answer it sent in the session, its actual transmit time
//! (the kernel's stamp, in the packet's timestamp format) and how that was taken (Timestamp
//! Mode, the "STAMP Timestamping Methods" registry: 2, software). A sender sends the TLV
//! zeroed; a reflector with no such time leaves it zeroed, so the sender knows there is no
//! follow-up. Keyed, the HMAC TLV after it covers it, so only the peer holding the key can
//! move a figure with it.

use super::tlv::{
    self, Checked, FLAG_MALFORMED, FLAG_UNRECOGNIZED, HEADER_BYTES, TYPE_FOLLOW_UP_TELEMETRY,
};
use super::{get_u32, get_u64, StampError, Timestamp, TimestampMethod};

/// Bytes of the TLV's value: Sequence Number (4), Follow-up Timestamp (8), Timestamp Mode
/// (1), Reserved (3).
pub const FOLLOW_UP_BYTES: usize = 16;
/// Bytes of the whole TLV, header included.
pub const FOLLOW_UP_TLV: usize = HEADER_BYTES + FOLLOW_UP_BYTES;

/// A filled Follow-Up Telemetry TLV's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowUp {
    /// The reflector's own sequence number of the last answer it sent in the session.
    pub seq: u32,
    /// When that answer really left.
    pub timestamp: Timestamp,
    /// How that time was taken.
    pub mode: TimestampMethod,
}

impl FollowUp {
    pub fn to_bytes(self) -> [u8; FOLLOW_UP_BYTES] {
        let mut out = [0; FOLLOW_UP_BYTES];
        out[..4].copy_from_slice(&self.seq.to_be_bytes());
        out[4..12].copy_from_slice(&self.timestamp.to_bytes());
        out[12] = self.mode.code();
        out
    }

    /// From a value of exactly 16 bytes; `None` otherwise, or when its timestamp is zero
    /// (the reflector had no follow-up).
    pub fn from_value(value: &[u8]) -> Option<FollowUp> {
        if value.len() != FOLLOW_UP_BYTES || get_u64(value, 4) == 0 {
            return None;
        }
        Some(FollowUp {
            seq: get_u32(value, 0),
            timestamp: Timestamp(get_u64(value, 4)),
            mode: TimestampMethod::from_code(value[12]),
        })
    }
}

/// A sender's request: the TLV, zeroed, at the start of `area`; the bytes written.
pub fn put_request(area: &mut [u8]) -> Result<usize, StampError> {
    tlv::put(area, TYPE_FOLLOW_UP_TELEMETRY, FOLLOW_UP_BYTES)?;
    Ok(FOLLOW_UP_TLV)
}

/// A reflector's pass over its answer's TLVs `area`, inside the codec's
/// (`stamp::reflect_read`, which signs them after it): writes `follow_up` into each
/// Follow-Up Telemetry TLV (zeroes it with `None`) when the request's TLVs `checked`, and
/// flags one of another length M. A probe whose HMAC TLV failed gets no follow-up, its
/// TLVs left as they came, flagged I. Whether the probe asked for one (a well-formed TLV,
/// checked): only then is the answer's own departure worth a stamp. A probe without the
/// TLV costs a walk of its TLVs, no HMAC.
pub fn fill(area: &mut [u8], follow_up: Option<FollowUp>, checked: bool) -> bool {
    let mut asked = false;
    tlv::for_each_of(area, TYPE_FOLLOW_UP_TELEMETRY, |area, at, len| {
        if len != FOLLOW_UP_BYTES {
            area[at] |= FLAG_MALFORMED;
        } else if checked {
            let value = &mut area[at + HEADER_BYTES..at + HEADER_BYTES + len];
            match follow_up {
                Some(f) => value.copy_from_slice(&f.to_bytes()),
                None => value.fill(0),
            }
            asked = true;
        }
    });
    asked
}

/// The follow-up an answer's TLVs carry (keyed, only under their HMAC TLV: a party
/// without the key cannot write one); a TLV flagged U or M, zeroed, or of another length
/// is none.
pub fn find(tlvs: Checked<'_>) -> Option<FollowUp> {
    tlv::iter(tlvs.area())
        .map_while(Result::ok)
        .find(|t| {
            t.kind == TYPE_FOLLOW_UP_TELEMETRY
                && t.flags & (FLAG_UNRECOGNIZED | FLAG_MALFORMED) == 0
        })
        .and_then(|t| FollowUp::from_value(t.value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stamp::TimeFormat;
    use crate::stamp::{reflect_read, ErrorEstimate, Mode, Reflection, SenderPacket, StampKey};
    use crate::stamp::{SyncSource, TimestampInfo, AUTH_BASE_BYTES};

    fn key() -> StampKey {
        StampKey::new(b"0123456789abcdef0123").unwrap()
    }

    fn follow_up() -> FollowUp {
        FollowUp {
            seq: 41,
            timestamp: Timestamp::from_unix_ns(1_780_000_000_123_456_789, TimeFormat::Ntp),
            mode: TimestampMethod::Software,
        }
    }

    /// A keyed probe carrying the zeroed TLV under its HMAC TLV.
    fn probe(k: &StampKey, seq: u32) -> Vec<u8> {
        let mut b = vec![0; AUTH_BASE_BYTES + FOLLOW_UP_TLV + HEADER_BYTES + 16];
        let area = &mut b[AUTH_BASE_BYTES..];
        let at = put_request(area).unwrap();
        tlv::put_hmac(area, at, k, seq).unwrap();
        SenderPacket {
            seq,
            ..Default::default()
        }
        .write(Mode::Authenticated(k), &mut b)
        .unwrap();
        b
    }

    /// The answer to `request` with `told` filled as the mesh's reflector does (inside the
    /// codec's pass, signed once), and whether the probe asked.
    fn answer(request: &[u8], k: &StampKey, seq: u32, told: Option<FollowUp>) -> (Vec<u8>, bool) {
        let how = Reflection {
            seq: Some(seq),
            receive: Timestamp(1),
            transmit: Timestamp(2),
            estimate: ErrorEstimate::unknown(TimeFormat::Ntp),
            ttl: 64,
            info: TimestampInfo::software(SyncSource::Ntp),
            boot_id: None,
            tos: None,
            dscp_policy: Default::default(),
        };
        let mode = Mode::Authenticated(k);
        let asked = SenderPacket::read(request, mode).unwrap();
        let (mut out, mut wanted) = (vec![0; request.len()], false);
        let more = |area: &mut [u8], checked| wanted = fill(area, told, checked);
        reflect_read(&asked, request, mode, mode, &how, &mut out, more).unwrap();
        (out, wanted)
    }

    fn found(area: &[u8], k: Option<&StampKey>, seq: u32) -> Option<FollowUp> {
        Checked::new(area, k, seq).and_then(find)
    }

    #[test]
    fn the_value_is_sixteen_bytes_as_rfc_8972_lays_it_out() {
        let f = follow_up();
        let b = f.to_bytes();
        assert_eq!(&b[..4], &41u32.to_be_bytes());
        assert_eq!(&b[4..12], &f.timestamp.to_bytes());
        assert_eq!(&b[12..], &[2, 0, 0, 0], "mode 2 (software), reserved zero");
        assert_eq!(FollowUp::from_value(&b), Some(f));
        assert_eq!(FollowUp::from_value(&[0; 16]), None, "zeroed: no follow-up");
        assert_eq!(FollowUp::from_value(&b[..15]), None);
    }

    /// A sender's zeroed TLV reads as none; the reflector's fill, re-signed, reads back
    /// under its key and the answer's number, and under nothing else.
    #[test]
    fn a_reflector_fills_it_under_the_hmac_and_only_the_key_reads_it() {
        let k = key();
        let request = probe(&k, 7);
        let area = |b: &[u8]| b[AUTH_BASE_BYTES..].to_vec();
        assert_eq!(found(&area(&request), Some(&k), 7), None, "sent zeroed");
        let (out, asked) = answer(&request, &k, 3, Some(follow_up()));
        assert!(asked);
        let got = area(&out);
        assert_eq!(found(&got, Some(&k), 3), Some(follow_up()));
        assert_eq!(found(&got, Some(&k), 4), None, "another number");
        let other = StampKey::new(b"another-key-of-16+").unwrap();
        assert_eq!(found(&got, Some(&other), 3), None);
        // One bit of the timestamp changed on the way: the HMAC TLV no longer checks.
        let mut forged = got.clone();
        forged[HEADER_BYTES + 11] ^= 1;
        assert_eq!(found(&forged, Some(&k), 3), None, "forged");
        assert!(found(&forged, None, 3).is_some(), "keyless, it would read");
        // No time for the last answer: the TLV stays zero, the HMAC TLV still checks.
        let (none, asked) = answer(&request, &k, 4, None);
        assert!(asked);
        assert_eq!(found(&none[AUTH_BASE_BYTES..], Some(&k), 4), None);
        assert_eq!(tlv::check_hmac(&none[AUTH_BASE_BYTES..], &k, 4), Some(true));
    }

    /// A probe whose HMAC TLV does not check gets no follow-up (its TLVs flagged I); one
    /// of the wrong length is flagged M and not read.
    #[test]
    fn a_bad_hmac_or_a_wrong_length_gets_no_follow_up() {
        let k = key();
        let mut request = probe(&k, 7);
        request[AUTH_BASE_BYTES + HEADER_BYTES] ^= 1;
        let (out, asked) = answer(&request, &k, 3, Some(follow_up()));
        let area = &out[AUTH_BASE_BYTES..];
        assert!(!asked, "not asked: no good HMAC");
        assert_eq!(
            area[HEADER_BYTES..FOLLOW_UP_TLV],
            request[AUTH_BASE_BYTES + 4..][..16]
        );
        assert_eq!(area[0] & tlv::FLAG_INTEGRITY, tlv::FLAG_INTEGRITY);
        assert_eq!(found(area, None, 3), None);

        let mut short = vec![0; 40];
        tlv::put(&mut short, TYPE_FOLLOW_UP_TELEMETRY, 12).unwrap();
        assert!(
            !fill(&mut short, Some(follow_up()), true),
            "not asked: malformed"
        );
        assert_eq!(short[0], FLAG_MALFORMED);
        assert!(short[HEADER_BYTES..].iter().all(|&b| b == 0));
        assert_eq!(found(&short, None, 3), None);
        // Keyless, filled in place.
        let mut open = vec![0; FOLLOW_UP_TLV];
        put_request(&mut open).unwrap();
        assert!(fill(&mut open, Some(follow_up()), true));
        assert_eq!(found(&open, None, 0), Some(follow_up()));
        // No Follow-Up TLV at all (a probe without `--mesh-follow-up`): nothing asked.
        let mut bare = vec![0; 24];
        tlv::put(&mut bare, tlv::TYPE_TIMESTAMP_INFO, 4).unwrap();
        assert!(!fill(&mut bare, Some(follow_up()), true));
    }
}
