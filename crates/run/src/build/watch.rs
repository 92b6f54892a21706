//! `watch`: its options into a watch of this host: the interface named (it must exist
//! here), or the one toward a peer, or none.

use std::net::IpAddr;

use sonde_probe::hostwatch::HostProbe;
use sonde_results::{SpecError, Timing, WatchSpec};

use crate::measure::Plan;

/// What a watch was asked for.
#[derive(Debug, Clone)]
pub struct WatchOptions {
    pub command: Vec<String>,
    pub iface: Option<String>,
    pub peer: Option<IpAddr>,
    pub interval_ms: u64,
    /// Stdout carries JSON: the command's own stdout goes to stderr.
    pub quiet: bool,
}

impl WatchOptions {
    /// The watch of this host, with the interface it watches resolved.
    pub fn plan(&self) -> Result<Plan, SpecError> {
        let mut spec = self.spec()?;
        let probe = match (&self.iface, self.peer) {
            (Some(i), _) if !std::path::Path::new("/sys/class/net").join(i).exists() => {
                let reason = format!("no interface '{i}' on this host");
                return Err(SpecError {
                    flag: "--iface",
                    reason,
                });
            }
            (Some(i), _) => HostProbe::for_iface(Some(i.clone())),
            (None, Some(p)) => HostProbe::for_peer(p),
            (None, None) => HostProbe::for_iface(None),
        };
        spec.iface = probe.iface().map(String::from);
        Ok(Plan::Watch {
            spec,
            probe,
            stdout_to_stderr: self.quiet,
        })
    }

    pub fn spec(&self) -> Result<WatchSpec, SpecError> {
        let spec = WatchSpec {
            command: self.command.clone(),
            iface: self.iface.clone(),
            peer: self.peer.map(|p| p.to_string()),
            timing: Timing {
                duration_ms: 0,
                warmup_ms: 0,
                cooldown_ms: 0,
                interval_ms: self.interval_ms,
            },
            execution: Default::default(),
        };
        spec.validate()?;
        Ok(spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_interval_or_a_missing_interface_is_refused() {
        let mut o = WatchOptions {
            command: vec!["x".into()],
            iface: None,
            peer: None,
            interval_ms: 10,
            quiet: false,
        };
        assert_eq!(o.spec().unwrap_err().flag, "--interval");
        (o.interval_ms, o.iface) = (1000, Some("no-such-if0".into()));
        let refused = o.plan().err().expect("no such interface");
        assert_eq!(refused.flag, "--iface");
    }
}
