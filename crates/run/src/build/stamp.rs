//! `sonde stamp HOST[:PORT]`: its flags' values into a validated STAMP spec; each refusal
//! names its flag.

use std::path::Path;

use sonde_proto::stamp::STAMP_PORT;
use sonde_proto::Key;
use sonde_results::marks::Marks;
use sonde_results::{Execution, SpecError, StampSpec, Timing};

use crate::key::KeyError;
use crate::measure::{Plan, Target};

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

/// `sonde stamp`'s run: its spec and, with `--stamp-key-file`, its key read; a key file
/// at fault is the outer error, a flag at fault the inner.
pub fn plan(p: &StampParams, key_file: Option<&Path>) -> Result<Result<Plan, SpecError>, KeyError> {
    let spec = match spec(p) {
        Ok(s) => s,
        Err(e) => return Ok(Err(e)),
    };
    let key = key_file.map(|path| crate::stamp::load_key("--stamp-key-file", path));
    Ok(Ok(Plan::Stamp {
        spec,
        key: key.transpose()?,
    }))
}

/// Where a STAMP run to `reflector` is sent from: this host, or the `from` agent (on its
/// control `port`) under the agents' `key` when the caller has one (`sonde fleet
/// --key-file`), else `key_file`'s.
pub fn target(
    reflector: &str,
    from: Option<&str>,
    port: u16,
    key: Option<&Key>,
    key_file: Option<&Path>,
) -> Result<Target, KeyError> {
    let key = match (key, from) {
        (Some(k), _) => Some(k.clone()),
        (None, Some(_)) => crate::key::load_key(key_file)?,
        (None, None) => None,
    };
    Ok(Target {
        host: reflector.to_string(),
        from: from.map(str::to_string),
        port,
        key,
        fleet: None,
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_from_this_host_reads_no_key_and_a_callers_key_wins_over_the_file() {
        let missing = Path::new("/nonexistent-sonde-key");
        let here = target("198.18.0.2", None, 5300, None, Some(missing)).unwrap();
        assert!(here.key.is_none() && here.from.is_none());
        let key = Key::from_file_bytes(&[7; 32]).unwrap();
        let t = target(
            "198.18.0.2:8620",
            Some("198.18.0.1"),
            5400,
            Some(&key),
            Some(missing),
        );
        let t = t.unwrap();
        assert_eq!(
            (t.host.as_str(), t.from.as_deref(), t.port),
            ("198.18.0.2:8620", Some("198.18.0.1"), 5400)
        );
        assert!(t.key.is_some());
        let e = target("198.18.0.2", Some("198.18.0.1"), 5400, None, Some(missing));
        let Err(e) = e else {
            panic!("a missing key file is refused")
        };
        assert!(e.to_string().contains("--key-file"), "{e}");
    }
}
