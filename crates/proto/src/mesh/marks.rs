//! The mesh's marked probes (`serve --mesh-dscp`/`--mesh-ecn`): a probe carries a Class of
//! Service TLV (RFC 8972 §4.4) asking its answer back with the probe's own marks, before
//! the HMAC TLV that covers it (keyed), and the peer's reflector fills in what arrived. An
//! answer then tells both directions' fate: forward, what the probe was sent with against
//! what the peer says arrived; reverse, what the peer says its answer left with against
//! the answer's TOS here. A keyed peer's claim counts only under its verified HMAC TLV.

use crate::stamp::{tlv, ClassOfService, StampError, StampKey, COS_BYTES, RPE_APPLIED};

use super::{LABELS_ROOM, TYPE_LABELS};

/// Bytes of the Class of Service TLV, header included.
pub const COS_TLV: usize = tlv::HEADER_BYTES + COS_BYTES;

/// Writes into `area` (after the base packet) an empty Labels TLV, an empty Boot ID TLV
/// (the reflector's kernel boot id: one host, one clock) and, with `key`, the HMAC TLV over
/// them; returns the bytes written.
pub fn put_labels_request(
    area: &mut [u8],
    key: Option<&StampKey>,
    seq: u32,
) -> Result<usize, StampError> {
    put_request(area, key, seq, None, true, false)
}

/// Writes a probe's TLVs into `area` (after the base packet): a Class of Service TLV
/// asking for `tos` (when marked), the Labels and Boot ID requests (when `labels`), the
/// zeroed Follow-Up Telemetry TLV (when `follow_up`), and with `key` and any TLV before it
/// the HMAC TLV over them all; the bytes written.
pub fn put_request(
    area: &mut [u8],
    key: Option<&StampKey>,
    seq: u32,
    tos: Option<u8>,
    labels: bool,
    follow_up: bool,
) -> Result<usize, StampError> {
    let mut at = 0;
    if let Some(t) = tos {
        tlv::put(area, tlv::TYPE_CLASS_OF_SERVICE, COS_BYTES)?
            .copy_from_slice(&ClassOfService::asking(t).to_bytes());
        at += COS_TLV;
    }
    if labels {
        tlv::put(&mut area[at..], TYPE_LABELS, LABELS_ROOM)?;
        at += tlv::HEADER_BYTES + LABELS_ROOM;
        tlv::put(&mut area[at..], tlv::TYPE_BOOT_ID, tlv::BOOT_ID_BYTES)?;
        at += tlv::HEADER_BYTES + tlv::BOOT_ID_BYTES;
    }
    // The peer's reflector tells in it when its last answer really left.
    if follow_up {
        at += crate::stamp::follow_up::put_request(&mut area[at..])?;
    }
    match key {
        Some(k) if at > 0 => tlv::put_hmac(area, at, k, seq),
        _ => Ok(at),
    }
}

/// Forward and reverse, each (sent, arrived) TOS bytes when the answer told it.
pub type Directions = (Option<(u8, u8)>, Option<(u8, u8)>);

/// One answer's two directions as (sent, arrived) TOS bytes, from its TLVs (`None`: a
/// keyed one's HMAC TLV failed), the probe's `sent` byte and the answer's own TOS
/// `arrived`. A direction is `None` when the answer has no filled TLV or, reverse, when
/// the kernel gave no TOS.
pub fn directions(tlvs: Option<tlv::Checked<'_>>, sent: u8, arrived: Option<u8>) -> Directions {
    let Some(cos) = tlvs
        .and_then(|t| tlv::class_of_service(t.area()))
        .filter(|c| c.rpe == RPE_APPLIED || c.rpd != 0)
    else {
        return (None, None);
    };
    let reverse = arrived.map(|a| (cos.answer_tos(), a));
    (Some((sent, cos.received_tos())), reverse)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stamp::DscpPolicy;

    const EF0: u8 = 46 << 2 | 2;

    /// The TLV sits before the HMAC TLV, which covers it: a router or rogue that rewrites
    /// the filled claim (to hide a bleach) fails the check and nothing is counted.
    #[test]
    fn the_class_of_service_tlv_is_covered_by_the_hmac_and_read_only_under_it() {
        let key = StampKey::new(&[9; 32]).unwrap();
        let mut area = [0u8; 512];
        let n = put_request(&mut area, Some(&key), 7, Some(EF0), false, true).unwrap();
        let fu = crate::stamp::follow_up::FOLLOW_UP_TLV;
        assert_eq!(
            n,
            COS_TLV + fu + tlv::HEADER_BYTES + 16,
            "the HMAC TLV after both"
        );
        assert_eq!(tlv::check_hmac(&area[..n], &key, 7), Some(true));
        let with_labels = put_request(&mut area, Some(&key), 7, Some(EF0), true, true).unwrap();
        assert_eq!(with_labels, n + 2 * tlv::HEADER_BYTES + LABELS_ROOM + 16);
        assert_eq!(
            put_request(&mut area, Some(&key), 7, None, false, true).unwrap(),
            fu + tlv::HEADER_BYTES + 16,
            "a bare probe: the zeroed follow-up, signed"
        );
        assert_eq!(
            put_request(&mut area, Some(&key), 7, None, false, false).unwrap(),
            0,
            "a bare probe without follow-ups: no TLV to sign"
        );
        assert_eq!(
            put_request(&mut area, None, 7, Some(EF0), false, true).unwrap(),
            COS_TLV + fu
        );
        // A reflector's fill (arrived bleached to CS0, ECT(0) kept), signed again.
        let n = put_request(&mut area, Some(&key), 7, Some(EF0), false, true).unwrap();
        let value = &mut area[tlv::HEADER_BYTES..COS_TLV];
        ClassOfService::reflect(value, Some(2), DscpPolicy::allowing([46]));
        tlv::put_hmac(&mut area, COS_TLV + fu, &key, 3).unwrap();
        let got = directions(tlv::Checked::new(&area[..n], Some(&key), 3), EF0, Some(EF0));
        assert_eq!(got, (Some((EF0, 2)), Some((EF0, EF0))));
        assert_eq!(
            directions(tlv::Checked::new(&area[..n], Some(&key), 4), EF0, Some(EF0)),
            (None, None)
        );
        let other = StampKey::new(&[8; 32]).unwrap();
        assert_eq!(
            directions(tlv::Checked::new(&area[..n], Some(&other), 3), EF0, None),
            (None, None)
        );
        area[tlv::HEADER_BYTES] ^= 0x04;
        assert_eq!(
            directions(tlv::Checked::new(&area[..n], Some(&key), 3), EF0, None),
            (None, None)
        );
        // Unkeyed (an `open` peer): the TLV as it came; unfilled claims nothing.
        let mut open = [0u8; 32];
        put_request(&mut open, None, 1, Some(EF0), false, true).unwrap();
        assert_eq!(
            directions(tlv::Checked::new(&open, None, 1), EF0, Some(0)),
            (None, None)
        );
        ClassOfService::reflect(&mut open[4..8], Some(EF0), DscpPolicy::default());
        assert_eq!(
            directions(tlv::Checked::new(&open, None, 1), EF0, None),
            (Some((EF0, EF0)), None)
        );
    }
}
