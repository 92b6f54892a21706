//! STAMP's marks over real sockets: the sender asks for its answer's marks in a Class of
//! Service TLV ([`put_cos`]) and reads each direction's fate from an answer
//! ([`directions`]); a reflector sends each answer with the marks its request's TLV asked
//! for ([`AnswerMarks`]). The TLV itself is `sonde_proto::stamp::ClassOfService`.

use std::io;
use std::os::fd::RawFd;

use sonde_proto::stamp::{tlv, ClassOfService, COS_BYTES, RPE_APPLIED};

/// Bytes of the Class of Service TLV, header included.
pub const COS_TLV: usize = tlv::HEADER_BYTES + COS_BYTES;

/// Writes a Class of Service TLV asking for `tos` on the answer at the start of `area`;
/// its length, or 0 when it does not fit.
pub fn put_cos(area: &mut [u8], tos: u8) -> usize {
    match tlv::put(area, tlv::TYPE_CLASS_OF_SERVICE, COS_BYTES) {
        Ok(value) => {
            value.copy_from_slice(&ClassOfService::asking(tos).to_bytes());
            COS_TLV
        }
        Err(_) => 0,
    }
}

/// One answer's two directions as (sent, arrived) TOS bytes: forward from our `sent`
/// byte to what the reflector's filled CoS TLV says it received, reverse from what it says
/// it sent back to `arrived`, the answer's own TOS. A direction is `None` when the answer
/// has no filled TLV (a reflector that does not know it flags it U) or, reverse, when the
/// kernel gave no TOS.
pub type Directions = (Option<(u8, u8)>, Option<(u8, u8)>);

pub fn directions(area: &[u8], sent: u8, arrived: Option<u8>) -> Directions {
    let Some(cos) = tlv::class_of_service(area).filter(|c| c.rpe == RPE_APPLIED || c.rpd != 0)
    else {
        return (None, None);
    };
    let forward = Some((sent, cos.received_tos()));
    let reverse = arrived.map(|a| (cos.answer_tos(), a));
    (forward, reverse)
}

/// A reflector's socket marks: each answer leaves with the TOS its filled CoS TLV says
/// (what was asked, within the operator's DSCP policy; 0 without one or when the TLV was
/// left unfilled, as the request's TOS was not read and so the policy could not judge), set
/// only when it changes (one `setsockopt` per change, none per answer of a steady sender).
#[derive(Debug, Default)]
pub struct AnswerMarks {
    now: u8,
}

impl AnswerMarks {
    /// Marks `fd` for the answer in `area` (its TLVs, already filled).
    pub fn before_send(&mut self, fd: RawFd, area: &[u8]) -> io::Result<()> {
        self.mark(fd, answer_tos(area))
    }

    /// Marks `fd` with the TOS byte `want`.
    pub fn mark(&mut self, fd: RawFd, want: u8) -> io::Result<()> {
        if want != self.now {
            sonde_engine::marks::set_tos(fd, want)?;
            self.now = want;
        }
        Ok(())
    }
}

/// The TOS an answer whose TLVs are `area` (already filled) leaves with: what its filled
/// CoS TLV says, else 0.
pub fn answer_tos(area: &[u8]) -> u8 {
    tlv::class_of_service(area)
        .filter(|c| c.rpe != 0)
        .map_or(0, ClassOfService::answer_tos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_tells_both_directions_only_when_filled() {
        let mut area = [0u8; 16];
        assert_eq!(put_cos(&mut area, 46 << 2 | 2), COS_TLV);
        assert_eq!(put_cos(&mut [0u8; 7], 1), 0);
        // Unfilled (the request as sent, or a reflector that echoes it): nothing claimed.
        assert_eq!(directions(&area, 0xba, Some(0)), (None, None));
        let value = &mut area[tlv::HEADER_BYTES..COS_TLV];
        ClassOfService::reflect(value, Some(3), sonde_proto::stamp::DscpPolicy::ANY);
        assert_eq!(
            directions(&area, 0xba, Some(0xbb)),
            (Some((0xba, 3)), Some((0xba, 0xbb)))
        );
        assert_eq!(directions(&area, 0xba, None), (Some((0xba, 3)), None));
        area[0] |= tlv::FLAG_UNRECOGNIZED;
        assert_eq!(directions(&area, 0xba, Some(0)), (None, None));
    }
}
