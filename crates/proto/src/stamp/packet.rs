//! The two base packets, read from and written into caller-owned buffers. Writing fills
//! the base (MBZ fields zeroed, the HMAC computed in authenticated mode) and leaves the
//! bytes after it, padding or TLVs, to the caller. Reading checks the length and, in
//! authenticated mode, the HMAC before any field is trusted.

use super::{
    get_u16, get_u32, get_u64, ErrorEstimate, Mode, StampError, Timestamp, HMAC_BYTES, HMAC_OFFSET,
    TWAMP_LIGHT_REFLECTED_BYTES,
};

/// A session-sender's test packet (RFC 8762 §4.2, RFC 8972 §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SenderPacket {
    pub seq: u32,
    /// When it was sent, in the format `estimate.format` says.
    pub timestamp: Timestamp,
    pub estimate: ErrorEstimate,
    /// Session-sender identifier (RFC 8972 §3); 0 when unused.
    pub ssid: u16,
}

/// A session-reflector's answer (RFC 8762 §4.3, RFC 8972 §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReflectorPacket {
    /// The reflector's own sequence number (stateful), or the sender's (stateless).
    pub seq: u32,
    /// When the reflector sent the answer.
    pub timestamp: Timestamp,
    /// The reflector's clock: its S bit, format, and error.
    pub estimate: ErrorEstimate,
    pub ssid: u16,
    /// When the reflector received the test packet.
    pub receive: Timestamp,
    pub sender_seq: u32,
    pub sender_timestamp: Timestamp,
    pub sender_estimate: ErrorEstimate,
    /// The TTL or hop limit the test packet arrived with; 255 where the reflector did not
    /// read it.
    pub sender_ttl: u8,
}

/// Byte offsets of one packet's fields in one mode.
struct Layout {
    timestamp: usize,
    estimate: usize,
    ssid: usize,
    receive: usize,
    sender_seq: usize,
    sender_timestamp: usize,
    sender_estimate: usize,
    sender_ttl: usize,
}

const OPEN: Layout = Layout {
    timestamp: 4,
    estimate: 12,
    ssid: 14,
    receive: 16,
    sender_seq: 24,
    sender_timestamp: 28,
    sender_estimate: 36,
    sender_ttl: 40,
};

const AUTH: Layout = Layout {
    timestamp: 16,
    estimate: 24,
    ssid: 26,
    receive: 32,
    sender_seq: 48,
    sender_timestamp: 64,
    sender_estimate: 72,
    sender_ttl: 80,
};

fn layout(mode: &Mode) -> &'static Layout {
    match mode {
        Mode::Unauthenticated => &OPEN,
        Mode::Authenticated(_) => &AUTH,
    }
}

/// Zeroes the base of `out` after checking it fits.
fn clear_base<'b>(out: &'b mut [u8], mode: &Mode) -> Result<&'b mut [u8], StampError> {
    let need = mode.base_bytes();
    let room = out.len();
    let base = out
        .get_mut(..need)
        .ok_or(StampError::NoRoom { need, room })?;
    base.fill(0);
    Ok(base)
}

/// Writes the HMAC over the base's first 96 bytes, in authenticated mode.
fn seal(base: &mut [u8], mode: &Mode) {
    if let Some(key) = mode.key() {
        let tag = key.mac(&[&base[..HMAC_OFFSET]]);
        base[HMAC_OFFSET..HMAC_OFFSET + HMAC_BYTES].copy_from_slice(&tag);
    }
}

/// Checks the length against `need` and, in authenticated mode, the HMAC.
fn check<'b>(buf: &'b [u8], mode: &Mode, need: usize) -> Result<&'b [u8], StampError> {
    if buf.len() < need {
        return Err(StampError::Short {
            got: buf.len(),
            need,
        });
    }
    if let Some(key) = mode.key() {
        if !key.verify(
            &[&buf[..HMAC_OFFSET]],
            &buf[HMAC_OFFSET..HMAC_OFFSET + HMAC_BYTES],
        ) {
            return Err(StampError::BadHmac);
        }
    }
    Ok(buf)
}

impl SenderPacket {
    /// Writes the base packet into `out[..mode.base_bytes()]`; the rest of `out` is the
    /// caller's (padding or TLVs, which the base's HMAC does not cover).
    pub fn write(&self, mode: Mode, out: &mut [u8]) -> Result<(), StampError> {
        let base = clear_base(out, &mode)?;
        self.put(base, layout(&mode));
        seal(base, &mode);
        Ok(())
    }

    /// The fields a reflector's answer begins with too, at the mode's offsets.
    fn put(&self, base: &mut [u8], at: &Layout) {
        base[0..4].copy_from_slice(&self.seq.to_be_bytes());
        base[at.timestamp..at.timestamp + 8].copy_from_slice(&self.timestamp.to_bytes());
        base[at.estimate..at.estimate + 2].copy_from_slice(&self.estimate.to_bits().to_be_bytes());
        base[at.ssid..at.ssid + 2].copy_from_slice(&self.ssid.to_be_bytes());
    }

    /// Reads a test packet of at least the mode's base size (HMAC checked first).
    pub fn read(buf: &[u8], mode: Mode) -> Result<Self, StampError> {
        let at = layout(&mode);
        let buf = check(buf, &mode, mode.base_bytes())?;
        Ok(Self {
            seq: get_u32(buf, 0),
            timestamp: Timestamp(get_u64(buf, at.timestamp)),
            estimate: ErrorEstimate::from_bits(get_u16(buf, at.estimate)),
            ssid: get_u16(buf, at.ssid),
        })
    }
}

impl ReflectorPacket {
    /// Writes the base answer into `out[..mode.base_bytes()]`, as [`SenderPacket::write`].
    pub fn write(&self, mode: Mode, out: &mut [u8]) -> Result<(), StampError> {
        let at = layout(&mode);
        let base = clear_base(out, &mode)?;
        let head = SenderPacket {
            seq: self.seq,
            timestamp: self.timestamp,
            estimate: self.estimate,
            ssid: self.ssid,
        };
        head.put(base, at);
        base[at.receive..at.receive + 8].copy_from_slice(&self.receive.to_bytes());
        base[at.sender_seq..at.sender_seq + 4].copy_from_slice(&self.sender_seq.to_be_bytes());
        let sent = self.sender_timestamp.to_bytes();
        base[at.sender_timestamp..at.sender_timestamp + 8].copy_from_slice(&sent);
        let estimate = self.sender_estimate.to_bits().to_be_bytes();
        base[at.sender_estimate..at.sender_estimate + 2].copy_from_slice(&estimate);
        base[at.sender_ttl] = self.sender_ttl;
        seal(base, &mode);
        Ok(())
    }

    /// Reads an answer: the mode's base size, except that an unauthenticated answer of
    /// 41 to 43 bytes is a TWAMP-light reflector's (RFC 5357 §4.2.1) and is read too.
    pub fn read(buf: &[u8], mode: Mode) -> Result<Self, StampError> {
        let at = layout(&mode);
        let need = match mode {
            Mode::Unauthenticated => TWAMP_LIGHT_REFLECTED_BYTES,
            Mode::Authenticated(_) => mode.base_bytes(),
        };
        let buf = check(buf, &mode, need)?;
        Ok(Self {
            seq: get_u32(buf, 0),
            timestamp: Timestamp(get_u64(buf, at.timestamp)),
            estimate: ErrorEstimate::from_bits(get_u16(buf, at.estimate)),
            ssid: get_u16(buf, at.ssid),
            receive: Timestamp(get_u64(buf, at.receive)),
            sender_seq: get_u32(buf, at.sender_seq),
            sender_timestamp: Timestamp(get_u64(buf, at.sender_timestamp)),
            sender_estimate: ErrorEstimate::from_bits(get_u16(buf, at.sender_estimate)),
            sender_ttl: buf[at.sender_ttl],
        })
    }
}
