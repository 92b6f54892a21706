//! STAMP, the Simple Two-way Active Measurement Protocol (RFC 8762, with RFC 8972's
//! session-sender identifier and TLVs), without any I/O: packets in and out of byte
//! buffers, the timestamp formats, the Error Estimate field, the TLVs a measurement needs
//! and the reflector's answer as one pure function ([`reflect`]). Sockets, clocks and
//! per-session state belong to the caller (`sonde stamp`, `sonde serve --stamp`, the mesh).
//!
//! Layouts (RFC 8762 §4.2, §4.3; RFC 8972 §3), every field big-endian:
//!
//! | packet | unauthenticated | authenticated |
//! | --- | --- | --- |
//! | session-sender | 44 bytes: seq 0, timestamp 4, error estimate 12, SSID 14, MBZ 16..44 | 112 bytes: seq 0, MBZ 4..16, timestamp 16, error estimate 24, SSID 26, MBZ 28..96, HMAC 96..112 |
//! | session-reflector | 44 bytes: seq 0, timestamp 4, error estimate 12, SSID 14, receive timestamp 16, sender's seq 24, timestamp 28, error estimate 36, MBZ 38, sender's TTL 40, MBZ 41..44 | 112 bytes: seq 0, timestamp 16, error estimate 24, SSID 26, receive timestamp 32, sender's seq 48, timestamp 64, error estimate 72, sender's TTL 80, HMAC 96..112 |
//!
//! The HMAC is HMAC-SHA-256 over the bytes before it, truncated to 16 bytes (RFC 8762 §4.4).
//! Bytes after the base packet are padding or RFC 8972 TLVs ([`tlv`]); a reflector answers
//! with exactly as many bytes as it received (symmetric size, RFC 6038), never more.
//! TWAMP-light reflectors answer with 41 bytes (RFC 5357 §4.2.1, no trailing MBZ): read
//! leniently, as STAMP allows (RFC 8762 §4.6).

mod cos;
mod estimate;
pub mod follow_up;
mod packet;
mod reflect;
pub mod session;
mod time;
pub mod tlv;

#[cfg(test)]
pub(crate) mod mac_count;
#[cfg(test)]
mod tests;

pub use cos::{ClassOfService, DscpPolicy, COS_BYTES, RPE_APPLIED, RPE_NOT_APPLIED};
pub use estimate::ErrorEstimate;
pub use follow_up::FollowUp;
pub use packet::{ReflectorPacket, SenderPacket};
pub use reflect::{reflect, reflect_as, reflect_read, Reflection};
pub use session::{Heard, Limits, Refusal, SessionId, Sessions};
pub use time::{TimeFormat, Timestamp, NTP_UNIX_OFFSET_S};
pub use tlv::{SyncSource, TimestampInfo, TimestampMethod};

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The well-known STAMP port (RFC 8762 §4.1).
pub const STAMP_PORT: u16 = 862;
/// Bytes of an unauthenticated base packet, both directions.
pub const BASE_BYTES: usize = 44;
/// Bytes of an authenticated base packet, both directions.
pub const AUTH_BASE_BYTES: usize = 112;
/// Bytes of a TWAMP-light reflector's answer without padding (RFC 5357 §4.2.1).
pub const TWAMP_LIGHT_REFLECTED_BYTES: usize = 41;
/// Where the HMAC starts in an authenticated packet of either direction.
pub const HMAC_OFFSET: usize = 96;
/// Bytes of the truncated HMAC.
pub const HMAC_BYTES: usize = 16;
/// Shortest key accepted: 128 bits, as the control protocol's.
pub const MIN_KEY_BYTES: usize = 16;

/// What went wrong reading or writing a STAMP packet.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StampError {
    #[error("a STAMP packet of {got} bytes is shorter than the {need} bytes of its mode")]
    Short { got: usize, need: usize },
    #[error("the STAMP packet's HMAC does not check under the configured key")]
    BadHmac,
    #[error("the TLV at byte {at} is malformed: {why}")]
    MalformedTlv { at: usize, why: &'static str },
    #[error("the answer would need {need} bytes but only {room} fit")]
    NoRoom { need: usize, room: usize },
    #[error("a STAMP key must be at least {MIN_KEY_BYTES} bytes, this one has {0}")]
    KeyTooShort(usize),
}

/// A STAMP session's HMAC key (RFC 8762 §4.4: HMAC-SHA-256, 16 bytes kept). Its `Debug`
/// does not print it.
#[derive(Clone)]
pub struct StampKey(Hmac<Sha256>);

impl std::fmt::Debug for StampKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StampKey(..)")
    }
}

impl StampKey {
    /// A key of at least [`MIN_KEY_BYTES`] bytes.
    pub fn new(key: &[u8]) -> Result<Self, StampError> {
        if key.len() < MIN_KEY_BYTES {
            return Err(StampError::KeyTooShort(key.len()));
        }
        let mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes a key of any size");
        Ok(Self(mac))
    }

    /// The truncated HMAC over `parts`, in order.
    pub fn mac(&self, parts: &[&[u8]]) -> [u8; HMAC_BYTES] {
        #[cfg(test)]
        mac_count::count();
        let mut mac = self.0.clone();
        for part in parts {
            mac.update(part);
        }
        let full = mac.finalize().into_bytes();
        let mut out = [0; HMAC_BYTES];
        out.copy_from_slice(&full[..HMAC_BYTES]);
        out
    }

    /// A key derived from this one: the full HMAC over `parts` (32 bytes), as a key.
    pub fn derive(&self, parts: &[&[u8]]) -> StampKey {
        let mut mac = self.0.clone();
        for part in parts {
            mac.update(part);
        }
        StampKey::new(&mac.finalize().into_bytes()).expect("32 bytes exceed the minimum")
    }

    /// Whether `tag` is the truncated HMAC over `parts`, compared in constant time.
    pub fn verify(&self, parts: &[&[u8]], tag: &[u8]) -> bool {
        #[cfg(test)]
        mac_count::count();
        let mut mac = self.0.clone();
        for part in parts {
            mac.update(part);
        }
        tag.len() == HMAC_BYTES && mac.verify_truncated_left(tag).is_ok()
    }
}

/// How a session's packets are protected: its base size and whether they carry an HMAC.
#[derive(Debug, Clone, Copy)]
pub enum Mode<'k> {
    Unauthenticated,
    Authenticated(&'k StampKey),
}

impl Mode<'_> {
    /// Bytes of this mode's base packet (either direction).
    pub fn base_bytes(&self) -> usize {
        match self {
            Mode::Unauthenticated => BASE_BYTES,
            Mode::Authenticated(_) => AUTH_BASE_BYTES,
        }
    }

    /// The key, in authenticated mode.
    pub fn key(&self) -> Option<&StampKey> {
        match self {
            Mode::Unauthenticated => None,
            Mode::Authenticated(key) => Some(key),
        }
    }
}

/// Big-endian field access within a checked buffer.
pub(crate) fn get_u16(buf: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([buf[at], buf[at + 1]])
}

pub(crate) fn get_u32(buf: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(buf[at..at + 4].try_into().expect("4 bytes"))
}

pub(crate) fn get_u64(buf: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(buf[at..at + 8].try_into().expect("8 bytes"))
}
