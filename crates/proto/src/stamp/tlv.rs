//! RFC 8972 TLVs, the bytes after a base packet: Flags (U, M, I, then reserved bits), Type,
//! a 16-bit Length of the value, then the value. What a measurement needs is here: walking
//! them, Extra Padding (type 1, for symmetric sizes), Timestamp Information (type 3: how
//! the reflector's clock is synchronised and how it took each timestamp), the HMAC TLV
//! (type 8, last, over the sequence number and the TLVs before it, RFC 8972 §4.8) and
//! sonde's private Boot ID TLV ([`TYPE_BOOT_ID`]: a sonde reflector's kernel boot id, so
//! that a sender on the same host knows both ends read one clock).
//! Class of Service (type 4) is [`super::cos`].
//! A reflector's handling of them is [`reflect_tlvs`]. Bytes that are all zero where a TLV
//! would start are RFC 8762 padding, not a TLV.

use super::{get_u16, StampError, StampKey, HMAC_BYTES};

/// Bytes of a TLV's header.
pub const HEADER_BYTES: usize = 4;
/// U: the reflector does not know this type.
pub const FLAG_UNRECOGNIZED: u8 = 0x80;
/// M: the TLV is malformed.
pub const FLAG_MALFORMED: u8 = 0x40;
/// I: the TLVs' HMAC did not check.
pub const FLAG_INTEGRITY: u8 = 0x20;
pub const TYPE_EXTRA_PADDING: u8 = 1;
pub const TYPE_LOCATION: u8 = 2;
pub const TYPE_TIMESTAMP_INFO: u8 = 3;
pub const TYPE_CLASS_OF_SERVICE: u8 = 4;
pub const TYPE_DIRECT_MEASUREMENT: u8 = 5;
pub const TYPE_ACCESS_REPORT: u8 = 6;
pub const TYPE_FOLLOW_UP_TELEMETRY: u8 = 7;
pub const TYPE_HMAC: u8 = 8;
/// Boot ID, sonde's (RFC 8972's private-use range, 252-254; the mesh's Labels TLV is 252):
/// a sender sends it zeroed, a sonde reflector fills it with its kernel's boot id; another
/// reflector flags it U.
pub const TYPE_BOOT_ID: u8 = 253;
/// Bytes of a Timestamp Information TLV's value.
pub const TIMESTAMP_INFO_BYTES: usize = 4;
/// Bytes of a Boot ID TLV's value (`/proc/sys/kernel/random/boot_id`'s 128 bits).
pub const BOOT_ID_BYTES: usize = 16;

/// One TLV as found in a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tlv<'a> {
    /// Where its header starts, from the start of the TLV area.
    pub at: usize,
    pub flags: u8,
    pub kind: u8,
    pub value: &'a [u8],
}

/// Walks the TLVs of `area` (the bytes after the base packet). Stops at zero padding; a
/// TLV whose length runs past the end is an error naming its offset, and ends the walk.
pub fn iter(area: &[u8]) -> impl Iterator<Item = Result<Tlv<'_>, StampError>> {
    let mut at = 0;
    std::iter::from_fn(move || {
        let rest = area
            .get(at..)
            .filter(|rest| !rest.iter().all(|&b| b == 0))?;
        if rest.len() < HEADER_BYTES {
            at = area.len();
            return Some(Err(StampError::MalformedTlv {
                at,
                why: "a header cut short",
            }));
        }
        let len = usize::from(get_u16(rest, 2));
        let Some(value) = rest.get(HEADER_BYTES..HEADER_BYTES + len) else {
            let here = at;
            at = area.len();
            return Some(Err(StampError::MalformedTlv {
                at: here,
                why: "its length runs past the packet",
            }));
        };
        let tlv = Tlv {
            at,
            flags: rest[0],
            kind: rest[1],
            value,
        };
        at += HEADER_BYTES + len;
        Some(Ok(tlv))
    })
}

/// Writes a TLV header and returns its value's bytes (zeroed) to fill.
pub fn put(out: &mut [u8], kind: u8, value_len: usize) -> Result<&mut [u8], StampError> {
    let need = HEADER_BYTES + value_len;
    let len = u16::try_from(value_len).map_err(|_| StampError::NoRoom { need, room: 0xffff })?;
    let room = out.len();
    let tlv = out
        .get_mut(..need)
        .ok_or(StampError::NoRoom { need, room })?;
    tlv.fill(0);
    tlv[1] = kind;
    tlv[2..4].copy_from_slice(&len.to_be_bytes());
    Ok(&mut tlv[HEADER_BYTES..])
}

/// Fills `out` entirely with one Extra Padding TLV (at least a header's 4 bytes), the way
/// a sender makes its packet as long as the answer it asks for.
pub fn put_extra_padding(out: &mut [u8]) -> Result<usize, StampError> {
    let len = out.len();
    let value = len.checked_sub(HEADER_BYTES).ok_or(StampError::NoRoom {
        need: HEADER_BYTES,
        room: len,
    })?;
    put(out, TYPE_EXTRA_PADDING, value)?;
    Ok(len)
}

/// Sources of a clock's synchronisation (IANA "STAMP Synchronization Sources", RFC 8972 §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncSource {
    Ntp,
    Ptp,
    SsuBits,
    Gnss,
    LocalFreeRunning,
    Other(u8),
}

impl SyncSource {
    pub fn code(self) -> u8 {
        match self {
            SyncSource::Ntp => 1,
            SyncSource::Ptp => 2,
            SyncSource::SsuBits => 3,
            SyncSource::Gnss => 4,
            SyncSource::LocalFreeRunning => 5,
            SyncSource::Other(code) => code,
        }
    }

    pub fn from_code(code: u8) -> Self {
        match code {
            1 => SyncSource::Ntp,
            2 => SyncSource::Ptp,
            3 => SyncSource::SsuBits,
            4 => SyncSource::Gnss,
            5 => SyncSource::LocalFreeRunning,
            other => SyncSource::Other(other),
        }
    }
}

/// How a timestamp was taken (IANA "STAMP Timestamping Methods", RFC 8972 §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimestampMethod {
    /// By the NIC.
    Hardware,
    /// By the host's software (the kernel's receive stamp, a clock read before sending).
    Software,
    ControlPlane,
    Other(u8),
}

impl TimestampMethod {
    pub fn code(self) -> u8 {
        match self {
            TimestampMethod::Hardware => 1,
            TimestampMethod::Software => 2,
            TimestampMethod::ControlPlane => 3,
            TimestampMethod::Other(code) => code,
        }
    }

    pub fn from_code(code: u8) -> Self {
        match code {
            1 => TimestampMethod::Hardware,
            2 => TimestampMethod::Software,
            3 => TimestampMethod::ControlPlane,
            other => TimestampMethod::Other(other),
        }
    }
}

/// The Timestamp Information TLV's value (RFC 8972 §4.3): the reflector's clock source
/// and timestamping method at its ingress (the receive timestamp) and egress (the
/// transmit timestamp). A sender sends it zeroed; the reflector fills it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimestampInfo {
    pub sync_in: SyncSource,
    pub method_in: TimestampMethod,
    pub sync_out: SyncSource,
    pub method_out: TimestampMethod,
}

impl TimestampInfo {
    /// Stamped in software at both ingress and egress, on a clock synchronised by `sync`:
    /// what a reflector reading the system clock in user space says.
    pub fn software(sync: SyncSource) -> TimestampInfo {
        TimestampInfo {
            sync_in: sync,
            method_in: TimestampMethod::Software,
            sync_out: sync,
            method_out: TimestampMethod::Software,
        }
    }

    pub fn to_bytes(self) -> [u8; TIMESTAMP_INFO_BYTES] {
        [
            self.sync_in.code(),
            self.method_in.code(),
            self.sync_out.code(),
            self.method_out.code(),
        ]
    }

    /// From a value of exactly 4 bytes; `None` otherwise. All four zero means not filled.
    pub fn from_value(value: &[u8]) -> Option<Self> {
        let [a, b, c, d]: [u8; 4] = value.try_into().ok()?;
        Some(Self {
            sync_in: SyncSource::from_code(a),
            method_in: TimestampMethod::from_code(b),
            sync_out: SyncSource::from_code(c),
            method_out: TimestampMethod::from_code(d),
        })
    }

    /// Finds a filled Timestamp Information TLV among `area`'s TLVs.
    pub fn find(area: &[u8]) -> Option<Self> {
        iter(area)
            .map_while(Result::ok)
            .find(|tlv| tlv.kind == TYPE_TIMESTAMP_INFO && tlv.value.iter().any(|&b| b != 0))
            .and_then(|tlv| Self::from_value(tlv.value))
    }
}

/// A filled Boot ID TLV among `area`'s TLVs (not flagged U, not all zero).
pub fn find_boot_id(area: &[u8]) -> Option<[u8; BOOT_ID_BYTES]> {
    iter(area)
        .map_while(Result::ok)
        .find(|t| {
            t.kind == TYPE_BOOT_ID
                && t.flags & FLAG_UNRECOGNIZED == 0
                && t.value.iter().any(|&b| b != 0)
        })
        .and_then(|t| t.value.try_into().ok())
}

/// A boot id's bytes from its text (`/proc/sys/kernel/random/boot_id`: 32 hex digits,
/// dashes anywhere).
pub fn boot_id_from_text(text: &str) -> Option<[u8; BOOT_ID_BYTES]> {
    let hex: Vec<u8> = text.trim().bytes().filter(|&b| b != b'-').collect();
    if hex.len() != 2 * BOOT_ID_BYTES {
        return None;
    }
    let mut out = [0u8; BOOT_ID_BYTES];
    for (i, pair) in hex.chunks(2).enumerate() {
        out[i] = u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()?;
    }
    Some(out)
}

/// A boot id's text as the kernel writes it (8-4-4-4-12 lowercase hex digits).
pub fn boot_id_text(id: &[u8; BOOT_ID_BYTES]) -> String {
    let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// Gives `each` the whole of `area` and the offset and value length of each TLV of type
/// `kind` in it, in order, to rewrite in place (its flags and value, never its length);
/// the walk ends where [`iter`]'s does. Nothing is allocated: it runs for every answer.
pub fn for_each_of(area: &mut [u8], kind: u8, mut each: impl FnMut(&mut [u8], usize, usize)) {
    let mut from = 0;
    loop {
        let next = iter(&area[from..])
            .map_while(Result::ok)
            .find(|t| t.kind == kind)
            .map(|t| (from + t.at, t.value.len()));
        let Some((at, len)) = next else { return };
        each(area, at, len);
        from = at + HEADER_BYTES + len;
    }
}

/// Writes the HMAC TLV at `out[at..]`, over `seq` and `out[..at]` (the TLVs before it).
pub fn put_hmac(out: &mut [u8], at: usize, key: &StampKey, seq: u32) -> Result<usize, StampError> {
    let tag = key.mac(&[&seq.to_be_bytes(), &out[..at]]);
    put(&mut out[at..], TYPE_HMAC, HMAC_BYTES)?.copy_from_slice(&tag);
    Ok(at + HEADER_BYTES + HMAC_BYTES)
}

/// Whether `area`'s HMAC TLV checks under `key` and `seq`: `None` when it has no HMAC
/// TLV or a TLV is malformed, `Some(false)` when it does not check or TLVs follow it.
pub fn check_hmac(area: &[u8], key: &StampKey, seq: u32) -> Option<bool> {
    let (mut hmac, mut followed) = (None, false);
    for tlv in iter(area) {
        let tlv = tlv.ok()?;
        match hmac {
            Some(_) => followed = true,
            None if tlv.kind == TYPE_HMAC => hmac = Some(tlv),
            None => {}
        }
    }
    let hmac = hmac?;
    Some(!followed && key.verify(&[&seq.to_be_bytes(), &area[..hmac.at]], hmac.value))
}

/// TLVs a reader may believe: unkeyed ones, or keyed ones under their HMAC TLV checked,
/// once, however many things are read from them.
#[derive(Debug, Clone, Copy)]
pub struct Checked<'a>(&'a [u8]);

impl<'a> Checked<'a> {
    /// `area`'s TLVs, when `key` is `None` or their HMAC TLV checks under it and `seq`.
    pub fn new(area: &'a [u8], key: Option<&StampKey>, seq: u32) -> Option<Checked<'a>> {
        match key {
            Some(k) if check_hmac(area, k, seq) != Some(true) => None,
            _ => Some(Checked(area)),
        }
    }

    pub fn area(self) -> &'a [u8] {
        self.0
    }
}

/// A reflector's pass over the TLVs it copied into its answer (RFC 8972 §4): fills each
/// Timestamp Information TLV with `info` and each Boot ID TLV with `boot_id` (U without
/// one), flags unknown types U and a wrong-length known one M, flags a TLV that runs past the end M and leaves the bytes after it as they came.
/// In authenticated mode (`key`), a failed HMAC TLV flags every TLV I, and a good one is
/// recomputed over the answer's `seq` and TLVs.
pub fn reflect_tlvs(
    area: &mut [u8],
    fill: Fill,
    key: Option<&StampKey>,
    request_seq: u32,
    seq: u32,
) {
    reflect_tlvs_as(area, fill, key.map(|k| (k, k)), request_seq, seq)
}

/// What a reflector writes into the TLVs a sender left for it.
#[derive(Debug, Clone, Copy)]
pub struct Fill {
    pub info: TimestampInfo,
    /// Its kernel's boot id, for a Boot ID TLV; `None`: such a TLV is flagged U.
    pub boot_id: Option<[u8; BOOT_ID_BYTES]>,
    /// The request's TOS or Traffic Class byte, for a Class of Service TLV; `None`: not
    /// read, the TLV left as it came.
    pub tos: Option<u8>,
    /// The DSCPs a Class of Service TLV may ask for on the answer.
    pub dscp_policy: super::cos::DscpPolicy,
}

/// [`reflect_tlvs`] with the request's HMAC TLV checked under `keys.0` and the answer's
/// signed under `keys.1`.
pub fn reflect_tlvs_as(
    area: &mut [u8],
    fill: Fill,
    keys: Option<(&StampKey, &StampKey)>,
    request_seq: u32,
    seq: u32,
) {
    reflect_tlvs_then(area, fill, keys, request_seq, seq, |_, _| {})
}

/// [`reflect_tlvs_as`] with `more` writing its own TLVs' values after the pass and before
/// the HMAC TLV is signed again, told whether the request's TLVs checked (unkeyed: they
/// do): one check and one signature however many TLVs a reflector fills.
pub fn reflect_tlvs_then(
    area: &mut [u8],
    fill: Fill,
    keys: Option<(&StampKey, &StampKey)>,
    request_seq: u32,
    seq: u32,
    more: impl FnOnce(&mut [u8], bool),
) {
    let integrity = keys.and_then(|(key, _)| check_hmac(area, key, request_seq));
    let mut hmac_at = None;
    let mut at = 0;
    while let Some(rest) = area.get(at..).filter(|rest| !rest.iter().all(|&b| b == 0)) {
        if rest.len() < HEADER_BYTES {
            break;
        }
        let len = usize::from(get_u16(rest, 2));
        if rest.len() < HEADER_BYTES + len {
            area[at] |= FLAG_MALFORMED;
            break;
        }
        let kind = area[at + 1];
        let flag = match kind {
            TYPE_TIMESTAMP_INFO if len == TIMESTAMP_INFO_BYTES => {
                let value = &mut area[at + HEADER_BYTES..at + HEADER_BYTES + len];
                value.copy_from_slice(&fill.info.to_bytes());
                0
            }
            TYPE_BOOT_ID if len == BOOT_ID_BYTES => match &fill.boot_id {
                Some(id) => {
                    area[at + HEADER_BYTES..at + HEADER_BYTES + len].copy_from_slice(id);
                    0
                }
                None => FLAG_UNRECOGNIZED,
            },
            TYPE_CLASS_OF_SERVICE if len == super::cos::COS_BYTES => {
                let value = &mut area[at + HEADER_BYTES..at + HEADER_BYTES + len];
                super::cos::ClassOfService::reflect(value, fill.tos, fill.dscp_policy);
                0
            }
            TYPE_HMAC if len == HMAC_BYTES => {
                hmac_at = Some(at);
                0
            }
            TYPE_TIMESTAMP_INFO | TYPE_HMAC | TYPE_BOOT_ID | TYPE_CLASS_OF_SERVICE => {
                FLAG_MALFORMED
            }
            TYPE_EXTRA_PADDING..=TYPE_FOLLOW_UP_TELEMETRY => 0,
            _ => FLAG_UNRECOGNIZED,
        };
        area[at] |= flag
            | if integrity == Some(false) {
                FLAG_INTEGRITY
            } else {
                0
            };
        at += HEADER_BYTES + len;
    }
    more(area, keys.is_none() || integrity == Some(true));
    if let (Some((_, key)), Some(true), Some(hmac_at)) = (keys, integrity, hmac_at) {
        let flags = area[hmac_at];
        put_hmac(area, hmac_at, key, seq).expect("the HMAC TLV was there");
        area[hmac_at] = flags;
    }
}

/// The first well-formed Class of Service TLV among `area`'s TLVs that a reflector filled
/// (not flagged U or M).
pub fn class_of_service(area: &[u8]) -> Option<super::cos::ClassOfService> {
    iter(area)
        .map_while(Result::ok)
        .find(|t| {
            t.kind == TYPE_CLASS_OF_SERVICE && t.flags & (FLAG_UNRECOGNIZED | FLAG_MALFORMED) == 0
        })
        .and_then(|t| super::cos::ClassOfService::from_value(t.value))
}
