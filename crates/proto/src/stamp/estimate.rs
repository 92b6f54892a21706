//! The Error Estimate field (RFC 4656 §4.1.2, kept by RFC 8762 §4.2.1): how far the
//! timestamp beside it may be from true time. Bits: S (the clock is synchronised to an
//! external source), Z (the timestamps are PTP, else NTP), a 6-bit scale and an 8-bit
//! multiplier; the error is multiplier × 2^(scale − 32) seconds. A multiplier of zero is
//! invalid (RFC 4656), so such an estimate carries no bound.

use super::time::TimeFormat;

/// One Error Estimate, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorEstimate {
    /// S: the sender's clock is synchronised to UTC (or TAI) through an external source.
    pub synchronized: bool,
    /// Z: which format the packet's timestamps are in.
    pub format: TimeFormat,
    /// 6 bits.
    pub scale: u8,
    /// Never zero in a valid estimate.
    pub multiplier: u8,
}

impl Default for ErrorEstimate {
    /// Unsynchronised, NTP format, and the largest error the field can say (RFC 4656's
    /// advice when the error is unknown).
    fn default() -> Self {
        Self::unknown(TimeFormat::Ntp)
    }
}

impl ErrorEstimate {
    /// The 16 bits as sent.
    pub fn to_bits(self) -> u16 {
        let s = u16::from(self.synchronized) << 15;
        let z = u16::from(self.format == TimeFormat::Ptp) << 14;
        s | z | (u16::from(self.scale & 0x3f) << 8) | u16::from(self.multiplier)
    }

    /// From the 16 bits received.
    pub fn from_bits(bits: u16) -> Self {
        Self {
            synchronized: bits & 0x8000 != 0,
            format: if bits & 0x4000 != 0 {
                TimeFormat::Ptp
            } else {
                TimeFormat::Ntp
            },
            scale: ((bits >> 8) & 0x3f) as u8,
            multiplier: (bits & 0xff) as u8,
        }
    }

    /// An unsynchronised clock's estimate: the largest error the field holds.
    pub fn unknown(format: TimeFormat) -> Self {
        Self {
            synchronized: false,
            format,
            scale: 0x3f,
            multiplier: 0xff,
        }
    }

    /// The error in nanoseconds, rounded up; `None` for an invalid (zero) multiplier.
    /// Saturates at `u64::MAX` (the largest scales exceed it).
    pub fn bound_ns(self) -> Option<u64> {
        if self.multiplier == 0 {
            return None;
        }
        let scaled = u128::from(self.multiplier) << self.scale; // × 2^scale, in 2^-32 s
        let ns = (scaled * 1_000_000_000).div_ceil(1 << 32);
        Some(u64::try_from(ns).unwrap_or(u64::MAX))
    }

    /// The smallest estimate that is at least `bound_ns` (never understating the error):
    /// the smallest scale whose multiplier fits 8 bits, the multiplier rounded up, at least 1.
    pub fn from_bound_ns(bound_ns: u64, synchronized: bool, format: TimeFormat) -> Self {
        let units = (u128::from(bound_ns) << 32).div_ceil(1_000_000_000).max(1);
        let mut scale = 0u8;
        while scale < 0x3f && units.div_ceil(1u128 << scale) > 0xff {
            scale += 1;
        }
        let multiplier = units.div_ceil(1u128 << scale).min(0xff) as u8;
        Self {
            synchronized,
            format,
            scale,
            multiplier,
        }
    }
}
