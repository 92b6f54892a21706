//! Host observation: CPU time, TCP counters, NIC statistics and interrupts, the route to a
//! peer, CPU topology. Every reader takes the root directory it reads under (`/` in
//! production, a captured fixture tree in tests), so parsers are tested on real machines'
//! files. Readers observe; they never change the host.

pub mod advice;
pub mod clock;
pub mod cpustat;
pub mod dpdk;
pub mod ethtool;
pub mod host;
pub mod hostwatch;
pub mod hypervisor;
pub mod interrupts;
pub mod inventory;
pub mod neigh;
pub mod netdev;
pub mod placement;
pub mod pmqos;
pub mod process;
pub mod qdisc;
pub mod route;
pub mod snmp;
pub mod topology;
pub mod tune;
pub mod udp;
pub mod xdp_features;

use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot parse {path}: {reason}")]
    Parse { path: PathBuf, reason: String },
}

/// Reads `root/rel` to a string, naming the file in the error.
pub(crate) fn read(root: &Path, rel: &str) -> Result<String, ProbeError> {
    let path = root.join(rel.trim_start_matches('/'));
    std::fs::read_to_string(&path).map_err(|source| ProbeError::Read { path, source })
}

pub(crate) fn parse_err(root: &Path, rel: &str, reason: impl Into<String>) -> ProbeError {
    ProbeError::Parse {
        path: root.join(rel.trim_start_matches('/')),
        reason: reason.into(),
    }
}

/// Directory of the fixture trees captured from real machines (tests only).
#[cfg(test)]
pub(crate) fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}
