//! STAMP's two timestamp formats (RFC 8762 §4.2.1, the Error Estimate's Z flag says which):
//! NTP's 64 bits (seconds since 1900, then a binary fraction of a second, RFC 5905) and
//! PTPv2's truncated 64 bits (seconds since 1970 on PTP's timescale, then nanoseconds,
//! RFC 8186). Both convert to nanoseconds since 1970 on their own timescale: PTP's is TAI,
//! so a caller comparing it with UTC subtracts the TAI-UTC offset it knows.

/// Seconds from the NTP era 0 epoch (1900) to the Unix epoch (1970).
pub const NTP_UNIX_OFFSET_S: u64 = 2_208_988_800;
const NS_PER_S: u64 = 1_000_000_000;

/// Which format a timestamp field holds: the Error Estimate's Z bit (0 NTP, 1 PTP).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TimeFormat {
    #[default]
    Ntp,
    Ptp,
}

/// A timestamp field as carried on the wire; its meaning depends on its [`TimeFormat`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Timestamp(pub u64);

impl Timestamp {
    /// From nanoseconds since 1970 (`CLOCK_REALTIME`'s scale for NTP, TAI's for PTP).
    /// NTP rounds the fraction to the nearest 2^-32 s (0.23 ns); seconds wrap in 2036 as
    /// NTP's era does.
    pub fn from_unix_ns(ns: u64, format: TimeFormat) -> Self {
        let (secs, sub) = (ns / NS_PER_S, ns % NS_PER_S);
        match format {
            TimeFormat::Ntp => {
                let secs = secs.wrapping_add(NTP_UNIX_OFFSET_S) & 0xffff_ffff;
                let frac =
                    ((u128::from(sub) << 32) + u128::from(NS_PER_S / 2)) / u128::from(NS_PER_S);
                let value = (secs << 32).wrapping_add(frac as u64);
                Timestamp(value)
            }
            TimeFormat::Ptp => Timestamp(((secs & 0xffff_ffff) << 32) | sub),
        }
    }

    /// Nanoseconds since 1970 on the format's timescale, NTP's fraction rounded to the
    /// nearest nanosecond. NTP seconds before 1970 (era 0) are read as era 1 (after 2036).
    pub fn to_unix_ns(self, format: TimeFormat) -> u64 {
        let (secs, low) = (self.0 >> 32, self.0 & 0xffff_ffff);
        match format {
            TimeFormat::Ntp => {
                let secs = if secs >= NTP_UNIX_OFFSET_S {
                    secs - NTP_UNIX_OFFSET_S
                } else {
                    secs + (1 << 32) - NTP_UNIX_OFFSET_S
                };
                let sub = (u128::from(low) * u128::from(NS_PER_S) + (1 << 31)) >> 32;
                secs * NS_PER_S + sub as u64
            }
            TimeFormat::Ptp => secs * NS_PER_S + low.min(NS_PER_S - 1),
        }
    }

    /// The raw 8 bytes, big-endian.
    pub fn to_bytes(self) -> [u8; 8] {
        self.0.to_be_bytes()
    }
}
