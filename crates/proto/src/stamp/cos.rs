//! The Class of Service TLV (type 4, RFC 8972 §4.4 with erratum 8199, and the reverse
//! path's ECN of draft-ietf-ippm-stamp-cos-ecn-01 §3): what a sender asks the reflector to
//! mark its answer with (DSCP1, EC1), what the reflector received (DSCP2, EC2) and whether
//! it could apply the asked-for marks (RPD, RPE). With it one exchange tells each
//! direction's fate: forward is sent marks against DSCP2/EC2, reverse is DSCP1/EC1 against
//! the answer's own TOS. The layout is stamp-suite 1.0.0's, so the two interoperate:
//!
//! ```text
//! |   DSCP1   |   DSCP2   |EC2|RPD|EC1|RPE|        Reserved       |
//! ```

/// Bytes of the TLV's value.
pub const COS_BYTES: usize = 4;
/// RPE: the reflector set its answer's ECN to EC1.
pub const RPE_APPLIED: u8 = 0b11;
/// RPE: the reflector could not (its answer is then not-ECT).
pub const RPE_NOT_APPLIED: u8 = 0b10;

/// The TLV's fields, each its own width (DSCP 6 bits, ECN and flags 2).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClassOfService {
    /// The DSCP the sender asks for on the answer.
    pub dscp1: u8,
    /// The ECN the sender asks for on the answer.
    pub ecn1: u8,
    /// The DSCP the reflector received.
    pub dscp2: u8,
    /// The ECN the reflector received.
    pub ecn2: u8,
    /// Reverse path DSCP: 0b01 when the reflector's policy refused DSCP1.
    pub rpd: u8,
    /// Reverse path ECN: [`RPE_APPLIED`], [`RPE_NOT_APPLIED`], or 0 from a sender or an
    /// RFC 8972-only reflector.
    pub rpe: u8,
}

impl ClassOfService {
    /// A sender's: the marks it asks for on the answer (a TOS byte), the rest zero.
    pub fn asking(tos: u8) -> Self {
        ClassOfService {
            dscp1: tos >> 2,
            ecn1: tos & 3,
            ..Default::default()
        }
    }

    pub fn to_bytes(self) -> [u8; COS_BYTES] {
        [
            (self.dscp1 & 0x3f) << 2 | (self.dscp2 >> 4) & 0x03,
            (self.dscp2 & 0x0f) << 4 | (self.ecn2 & 3) << 2 | self.rpd & 3,
            (self.ecn1 & 3) << 6 | (self.rpe & 3) << 4,
            0,
        ]
    }

    /// From a value of exactly 4 bytes; `None` otherwise.
    pub fn from_value(value: &[u8]) -> Option<Self> {
        let [a, b, c, _]: [u8; COS_BYTES] = value.try_into().ok()?;
        Some(ClassOfService {
            dscp1: a >> 2,
            dscp2: (a & 3) << 4 | b >> 4,
            ecn2: (b >> 2) & 3,
            rpd: b & 3,
            ecn1: c >> 6,
            rpe: (c >> 4) & 3,
        })
    }

    /// The TOS byte the sender asked for on the answer.
    pub fn asked_tos(self) -> u8 {
        self.dscp1 << 2 | self.ecn1
    }

    /// The TOS byte the reflector received.
    pub fn received_tos(self) -> u8 {
        self.dscp2 << 2 | self.ecn2
    }

    /// The TOS byte the reflector's answer left with, as it says: DSCP1 unless its policy
    /// refused it (then DSCP2), EC1 when applied, else not-ECT.
    pub fn answer_tos(self) -> u8 {
        let dscp = if self.rpd != 0 {
            self.dscp2
        } else {
            self.dscp1
        };
        let ecn = if self.rpe == RPE_APPLIED {
            self.ecn1
        } else {
            0
        };
        dscp << 2 | ecn
    }

    /// The reflector's fill of a request's value: what arrived (`received`, the request's
    /// TOS byte) beside what was asked, the asked ECN applied and the asked DSCP when
    /// `policy` allows it, else RPD 1 (RFC 8972 §4.4: the answer keeps the DSCP it arrived
    /// with, DSCP2). `None` (the TOS was not read): the value stays as the sender wrote
    /// it, RPE 0, so nothing is claimed (and the answer leaves unmarked).
    pub fn reflect(value: &mut [u8], received: Option<u8>, policy: DscpPolicy) {
        let (Some(tos), Some(asked)) = (received, Self::from_value(value)) else {
            return;
        };
        let filled = ClassOfService {
            dscp2: tos >> 2,
            ecn2: tos & 3,
            rpd: u8::from(!policy.allows(asked.dscp1, tos >> 2)),
            rpe: RPE_APPLIED,
            ..asked
        };
        value.copy_from_slice(&filled.to_bytes());
    }
}

/// Which DSCPs a reflector's answer may take at a Class of Service TLV's asking, besides
/// the one its request arrived with and CS0 (always: neither lets a sender make the
/// reflector emit a class the sender could not send it itself). The default allows no
/// other, so a stranger's TLV cannot make the reflector emit EF or network control
/// (CS6, CS7) traffic; an operator widens it (`serve --stamp-allow-dscp`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DscpPolicy {
    /// Bit `d` set: DSCP `d` is allowed.
    mask: u64,
}

impl DscpPolicy {
    /// Every DSCP allowed (a lab's reflector).
    pub const ANY: DscpPolicy = DscpPolicy { mask: u64::MAX };

    /// These DSCPs allowed besides the arrived one and CS0 (each taken modulo 64).
    pub fn allowing(dscps: impl IntoIterator<Item = u8>) -> Self {
        DscpPolicy {
            mask: dscps.into_iter().fold(0, |m, d| m | 1 << (d & 0x3f)),
        }
    }

    /// Whether an answer to a request that arrived with DSCP `arrived` may take `asked`.
    pub fn allows(self, asked: u8, arrived: u8) -> bool {
        asked == arrived || asked == 0 || self.mask >> (asked & 0x3f) & 1 == 1
    }
}

#[cfg(test)]
mod tests {
    use super::super::tlv;
    use super::*;

    #[test]
    fn fields_sit_where_stamp_suite_puts_them() {
        // stamp-suite 1.0.0's for_response(46, 2, 0, 1, false, true), encoded.
        let c = ClassOfService {
            dscp1: 46,
            ecn1: 2,
            dscp2: 0,
            ecn2: 1,
            rpd: 0,
            rpe: RPE_APPLIED,
        };
        assert_eq!(c.to_bytes(), [0xb8, 0x04, 0xb0, 0x00]);
        assert_eq!(ClassOfService::from_value(&c.to_bytes()), Some(c));
        for a in 0..=255u8 {
            for b in [0u8, 0x5a, 0xff] {
                let v = [a, b, b & 0xf0, 0];
                let back = ClassOfService::from_value(&v).unwrap();
                assert_eq!(back.to_bytes(), v);
            }
        }
        assert_eq!(ClassOfService::from_value(&[0; 3]), None);
        assert_eq!(c.answer_tos(), 46 << 2 | 2);
        assert_eq!(c.received_tos(), 1);
        let refused = ClassOfService {
            rpd: 1,
            rpe: RPE_NOT_APPLIED,
            dscp2: 10,
            ..c
        };
        assert_eq!(refused.answer_tos(), 10 << 2);
    }

    #[test]
    fn the_reflector_fills_what_arrived_and_claims_nothing_unread() {
        let asked = ClassOfService::asking(46 << 2 | 1);
        let mut v = asked.to_bytes();
        ClassOfService::reflect(&mut v, None, DscpPolicy::ANY);
        assert_eq!(v, asked.to_bytes());
        ClassOfService::reflect(&mut v, Some(3), DscpPolicy::ANY);
        let got = ClassOfService::from_value(&v).unwrap();
        assert_eq!((got.dscp1, got.ecn1), (46, 1));
        assert_eq!((got.dscp2, got.ecn2, got.rpe), (0, 3, RPE_APPLIED));
        assert_eq!(got.answer_tos(), 46 << 2 | 1);
    }

    /// Through the reflector's pure answer, authenticated: the TLV filled, then signed.
    #[test]
    fn a_reflector_fills_it_in_its_answer_under_its_hmac() {
        use crate::stamp::{reflect, Mode, Reflection, SenderPacket, StampKey, AUTH_BASE_BYTES};
        let key = StampKey::new(&[5; 32]).unwrap();
        let mode = Mode::Authenticated(&key);
        let mut request = vec![0u8; AUTH_BASE_BYTES + 8 + 20];
        SenderPacket {
            seq: 7,
            ..Default::default()
        }
        .write(mode, &mut request)
        .unwrap();
        let area = &mut request[AUTH_BASE_BYTES..];
        tlv::put(area, tlv::TYPE_CLASS_OF_SERVICE, COS_BYTES)
            .unwrap()
            .copy_from_slice(&ClassOfService::asking(46 << 2 | 2).to_bytes());
        tlv::put_hmac(area, 8, &key, 7).unwrap();
        let how = Reflection {
            seq: None,
            receive: Default::default(),
            transmit: Default::default(),
            estimate: Default::default(),
            ttl: 64,
            info: tlv::TimestampInfo::software(tlv::SyncSource::Ntp),
            boot_id: None,
            tos: Some(34 << 2 | 3),
            dscp_policy: DscpPolicy::ANY,
        };
        let mut out = vec![0u8; 256];
        let n = reflect(&request, mode, &how, &mut out).unwrap();
        let area = &out[AUTH_BASE_BYTES..n];
        let got = tlv::class_of_service(area).unwrap();
        assert_eq!((got.dscp1, got.ecn1, got.dscp2, got.ecn2), (46, 2, 34, 3));
        assert_eq!(tlv::check_hmac(area, &key, 7), Some(true));
    }

    /// The default policy: EF, CS6 or CS7 asked by a request that arrived CS0 is refused
    /// (RPD 1, the answer keeps CS0); the arrived class and CS0 are always granted.
    #[test]
    fn a_policy_refuses_a_class_it_does_not_list_and_says_so() {
        let fill = |asked: u8, arrived: u8, policy| {
            let mut v = ClassOfService::asking(asked).to_bytes();
            ClassOfService::reflect(&mut v, Some(arrived), policy);
            ClassOfService::from_value(&v).unwrap()
        };
        for dscp in [46, 48, 56] {
            let got = fill(dscp << 2 | 1, 0, DscpPolicy::default());
            assert_eq!((got.rpd, got.rpe), (1, RPE_APPLIED), "DSCP {dscp}");
            assert_eq!(got.dscp1, dscp, "what was asked stays told");
            assert_eq!(got.answer_tos(), 1, "CS0 with the asked ECN");
        }
        assert_eq!(
            fill(46 << 2, 46 << 2 | 2, DscpPolicy::default()).answer_tos(),
            46 << 2
        );
        assert_eq!(fill(0, 46 << 2, DscpPolicy::default()).answer_tos(), 0);
        assert_eq!(
            fill(48 << 2, 10 << 2, DscpPolicy::default()).answer_tos(),
            10 << 2
        );
        let af41 = DscpPolicy::allowing([34]);
        assert_eq!(fill(34 << 2, 0, af41).rpd, 0);
        assert_eq!(fill(34 << 2, 0, af41).answer_tos(), 34 << 2);
        assert_eq!(fill(46 << 2, 0, af41).answer_tos(), 0);
        assert_eq!(fill(56 << 2, 0, DscpPolicy::ANY).answer_tos(), 56 << 2);
    }
}
