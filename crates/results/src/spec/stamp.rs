//! The STAMP spec (`sonde stamp HOST[:PORT]`): a session-sender's test packets to any
//! STAMP or TWAMP-light reflector (a router, another agent's `serve --stamp`), no agent
//! needed at the far end.

use serde::{Deserialize, Serialize};

use super::{refuse, Execution, SpecError, Timing};

/// Base packet sizes (RFC 8762 §4.2): unauthenticated, authenticated.
pub const STAMP_BASE_BYTES: u32 = 44;
pub const STAMP_AUTH_BASE_BYTES: u32 = 112;
/// Largest test packet: a jumbo frame's payload.
pub const STAMP_MAX_BYTES: u32 = 9000;
/// Most packets one run sends (each keeps its send time: 8 bytes).
pub const STAMP_MAX_PACKETS: u64 = 10_000_000;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StampSpec {
    /// The reflector as given.
    pub host: String,
    pub port: u16,
    /// Test packets a second.
    pub rate_per_s: f64,
    /// Stop after this many packets; else the duration decides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
    /// Each test packet's UDP payload (the answer is as long: symmetric size, RFC 6038).
    pub packet_bytes: u32,
    /// HMAC-SHA256 (RFC 8762 §4.4); the key is never in the spec.
    pub authenticated: bool,
    /// The reflector numbers its answers per session (RFC 8762 §4.3.1): loss is split by
    /// direction. Also found when its numbers differ from ours.
    pub stateful: bool,
    /// Session-sender identifier (RFC 8972 §3).
    pub ssid: u16,
    /// How long answers are awaited after the last packet.
    pub timeout_ms: u64,
    #[serde(flatten)]
    pub timing: Timing,
    #[serde(flatten)]
    pub execution: Execution,
}

impl StampSpec {
    /// The base packet of this spec's mode.
    pub fn base_bytes(&self) -> u32 {
        if self.authenticated {
            STAMP_AUTH_BASE_BYTES
        } else {
            STAMP_BASE_BYTES
        }
    }

    /// Packets this run sends at most.
    pub fn packets(&self) -> u64 {
        let by_time = (self.rate_per_s * self.timing.duration_ms as f64 / 1e3).ceil() as u64;
        self.count.map_or(by_time, |c| c.min(by_time.max(1)))
    }

    pub fn validate(&self) -> Result<(), SpecError> {
        self.timing.check()?;
        self.execution.marks.check()?;
        if !(self.rate_per_s.is_finite() && self.rate_per_s > 0.0 && self.rate_per_s <= 1e6) {
            return refuse(
                "--rate",
                format!(
                    "{} is not a rate from above 0 to 1,000,000 packets/s",
                    self.rate_per_s
                ),
            );
        }
        let (base, len) = (self.base_bytes(), self.packet_bytes);
        if len != base && len < base + 4 || len > STAMP_MAX_BYTES {
            return refuse(
                "--size",
                format!("{len} bytes: a test packet is {base} (the base packet) or {} to {STAMP_MAX_BYTES} (with an Extra Padding TLV)", base + 4),
            );
        }
        if self.count == Some(0) {
            return refuse("--count", "must be at least 1");
        }
        if self.packets() > STAMP_MAX_PACKETS {
            return refuse("--count", format!("{} packets: a run sends at most {STAMP_MAX_PACKETS} (lower --rate, --duration or --count)", self.packets()));
        }
        if self.port == 0 {
            return refuse("HOST[:PORT]", "port 0");
        }
        Ok(())
    }
}
