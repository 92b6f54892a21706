//! A session-reflector's answer as one pure function: the request's bytes and what the
//! reflector knows (its clock's estimate, when it received and when it sends, how it took
//! those stamps, its own sequence number when stateful) in, the answer's bytes out, exactly
//! as many as came in (symmetric size, RFC 6038; RFC 8762 §4.3). A request shorter than the
//! mode's base packet, or whose HMAC does not check, gets no answer: an answer longer than
//! its request would make the reflector an amplifier.

use super::ErrorEstimate;
use super::{tlv, Mode, ReflectorPacket, SenderPacket, StampError, Timestamp, TimestampInfo};

/// What the reflector adds to one answer.
#[derive(Debug, Clone, Copy)]
pub struct Reflection {
    /// The reflector's own sequence number for this session (stateful, RFC 8762 §4.3.1),
    /// or `None` to echo the sender's (stateless).
    pub seq: Option<u32>,
    /// When the request arrived.
    pub receive: Timestamp,
    /// When the answer leaves (read just before sending).
    pub transmit: Timestamp,
    /// The reflector's clock: S bit, format, error bound.
    pub estimate: ErrorEstimate,
    /// The TTL or hop limit the request arrived with (255 when not read).
    pub ttl: u8,
    /// How the two timestamps were taken, for a Timestamp Information TLV the sender sent.
    pub info: TimestampInfo,
    /// This host's kernel boot id, for a Boot ID TLV the sender sent (sonde's reflectors).
    pub boot_id: Option<[u8; tlv::BOOT_ID_BYTES]>,
    /// The request's TOS or Traffic Class byte, for a Class of Service TLV the sender sent
    /// (`None`: not read). The caller sends the answer with the TOS the TLV asks for
    /// ([`super::ClassOfService::answer_tos`]).
    pub tos: Option<u8>,
    /// The DSCPs that TLV may ask for (the operator's; others get RPD 1).
    pub dscp_policy: super::DscpPolicy,
}

/// Writes the answer to `request` into `out` and returns its length (the request's), or
/// why no answer is due.
pub fn reflect(
    request: &[u8],
    mode: Mode,
    how: &Reflection,
    out: &mut [u8],
) -> Result<usize, StampError> {
    reflect_as(request, mode, mode, how, out)
}

/// [`reflect`] with the request checked under `mode` and the answer signed under `answer`
/// (the same layout: both authenticated or neither), for a reflector whose answers carry
/// its own key rather than the sender's.
pub fn reflect_as(
    request: &[u8],
    mode: Mode,
    answer: Mode,
    how: &Reflection,
    out: &mut [u8],
) -> Result<usize, StampError> {
    let asked = SenderPacket::read(request, mode)?;
    reflect_read(&asked, request, mode, answer, how, out, |_, _| {})
}

/// [`reflect_as`] of a request read already (`asked`, from `request` under `mode`: its
/// HMAC is not checked again), `more` writing the reflector's own TLVs' values before
/// their HMAC TLV is signed (`tlv::reflect_tlvs_then`).
pub fn reflect_read(
    asked: &SenderPacket,
    request: &[u8],
    mode: Mode,
    answer: Mode,
    how: &Reflection,
    out: &mut [u8],
    more: impl FnOnce(&mut [u8], bool),
) -> Result<usize, StampError> {
    assert_eq!(
        mode.base_bytes(),
        answer.base_bytes(),
        "one layout both ways"
    );
    let len = request.len();
    let room = out.len();
    let out = out
        .get_mut(..len)
        .ok_or(StampError::NoRoom { need: len, room })?;
    let seq = how.seq.unwrap_or(asked.seq);
    let reply = ReflectorPacket {
        seq,
        timestamp: how.transmit,
        estimate: how.estimate,
        ssid: asked.ssid,
        receive: how.receive,
        sender_seq: asked.seq,
        sender_timestamp: asked.timestamp,
        sender_estimate: asked.estimate,
        sender_ttl: how.ttl,
    };
    let base = mode.base_bytes();
    out[base..].copy_from_slice(&request[base..]);
    let keys = mode.key().zip(answer.key());
    let fill = tlv::Fill {
        info: how.info,
        boot_id: how.boot_id,
        tos: how.tos,
        dscp_policy: how.dscp_policy,
    };
    tlv::reflect_tlvs_then(&mut out[base..], fill, keys, asked.seq, seq, more);
    reply.write(answer, out)?;
    Ok(len)
}
