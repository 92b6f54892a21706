//! `sonde watch -- COMMAND`: its flags' values into a validated spec and the probe that
//! watches this host (an interface, the one towards a peer, or the default route's);
//! each refusal names its flag.

use std::net::IpAddr;

use sonde_probe::hostwatch::HostProbe;
use sonde_results::{SpecError, Timing, WatchSpec};

use crate::measure::Plan;

/// `sonde watch`'s flags, as typed values.
#[derive(Debug, Clone)]
pub struct WatchParams {
    /// The command and its arguments.
    pub command: Vec<String>,
    pub iface: Option<String>,
    pub peer: Option<IpAddr>,
    pub interval_ms: u64,
    /// stdout carries JSON (`--json`, `--json-stream`): the command's goes to stderr.
    pub quiet: bool,
}

/// The watch's plan: its spec and this host's probe.
pub fn plan(p: &WatchParams) -> Result<Plan, SpecError> {
    let mut spec = spec(p)?;
    let probe = match (&p.iface, p.peer) {
        (Some(i), _) if !std::path::Path::new("/sys/class/net").join(i).exists() => {
            let reason = format!("no interface '{i}' on this host");
            return Err(SpecError {
                flag: "--iface",
                reason,
            });
        }
        (Some(i), _) => HostProbe::for_iface(Some(i.clone())),
        (None, Some(peer)) => HostProbe::for_peer(peer),
        (None, None) => HostProbe::for_iface(None),
    };
    spec.iface = probe.iface().map(String::from);
    Ok(Plan::Watch {
        spec,
        probe,
        stdout_to_stderr: p.quiet,
    })
}

fn spec(p: &WatchParams) -> Result<WatchSpec, SpecError> {
    let spec = WatchSpec {
        command: p.command.clone(),
        iface: p.iface.clone(),
        peer: p.peer.map(|peer| peer.to_string()),
        timing: Timing {
            duration_ms: 0,
            warmup_ms: 0,
            cooldown_ms: 0,
            interval_ms: p.interval_ms,
        },
        execution: Default::default(),
    };
    spec.validate()?;
    Ok(spec)
}
