//! `sonde stamp HOST[:PORT]`: its flags' values into a validated STAMP spec; each refusal
//! names its flag.

use sonde_proto::stamp::STAMP_PORT;
use sonde_results::marks::Marks;
use sonde_results::{Execution, SpecError, StampSpec, Timing};

/// `sonde stamp`'s flags, as typed values.
#[derive(Debug, Clone)]
pub struct StampParams {
    /// `HOST[:PORT]`: the reflector.
    pub target: String,
    pub rate: f64,
    pub count: Option<u64>,
    pub duration_ms: u64,
    /// `--size` (default: the smallest packet for the mode and marks).
    pub size: Option<u32>,
    /// `--stamp-key-file` given, or `--authenticated`.
    pub authenticated: bool,
    pub stateful: bool,
    pub ssid: u16,
    /// `--wait`: how long a packet is waited for, ms.
    pub wait_ms: u64,
    pub interval_ms: u64,
    pub marks: Marks,
}

/// `HOST[:PORT]` (`[V6]:PORT`, a bare IPv6 address), port 862 unless told.
pub fn split_target(s: &str) -> Result<(String, u16), SpecError> {
    let bad = |reason: String| SpecError {
        flag: "HOST[:PORT]",
        reason,
    };
    if let Some(rest) = s.strip_prefix('[') {
        let (host, tail) = rest
            .split_once(']')
            .ok_or_else(|| bad(format!("'{s}': no closing ]")))?;
        let port = match tail.strip_prefix(':') {
            Some(p) => p
                .parse()
                .map_err(|_| bad(format!("'{s}': '{p}' is not a port")))?,
            None if tail.is_empty() => STAMP_PORT,
            None => return Err(bad(format!("'{s}': what follows ] is not :PORT"))),
        };
        return Ok((host.to_string(), port));
    }
    match s.rsplit_once(':') {
        Some((host, _)) if host.contains(':') => Ok((s.to_string(), STAMP_PORT)),
        Some((host, p)) => {
            let port = p
                .parse()
                .map_err(|_| bad(format!("'{s}': '{p}' is not a port")))?;
            Ok((host.to_string(), port))
        }
        None if s.is_empty() => Err(bad("no reflector given".into())),
        None => Ok((s.to_string(), STAMP_PORT)),
    }
}

/// The STAMP run's spec, validated.
pub fn spec(p: &StampParams) -> Result<StampSpec, SpecError> {
    let (host, port) = split_target(&p.target)?;
    let spec = StampSpec {
        host,
        port,
        rate_per_s: p.rate,
        count: p.count,
        packet_bytes: p
            .size
            .unwrap_or_else(|| crate::stamp::sender::default_size(p.authenticated, p.marks)),
        authenticated: p.authenticated,
        stateful: p.stateful,
        ssid: p.ssid,
        timeout_ms: p.wait_ms,
        timing: Timing {
            duration_ms: p.duration_ms,
            warmup_ms: 0,
            cooldown_ms: 0,
            interval_ms: p.interval_ms,
        },
        execution: Execution {
            marks: p.marks,
            ..Default::default()
        },
    };
    spec.validate()?;
    Ok(spec)
}
