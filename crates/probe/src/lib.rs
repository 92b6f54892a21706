//! Host observation: CPU time, TCP counters, NIC statistics and interrupts, the route to a
//! peer, CPU topology. Every reader takes the root directory it reads under (`/` in
//! production, a captured fixture tree in tests), so parsers are tested on real machines'
//! files. Readers observe; they never change the host.

pub mod advice;
pub mod clock;
mod cpu_list;
pub mod cpustat;
pub mod dpdk;
pub mod ethtool;
pub mod host;
pub mod hostwatch;
pub mod hwstamp;
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
pub mod schedstat;
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
    Parse {
        path: PathBuf,
        #[source]
        reason: FormatError,
    },
}

/// What a parser found wrong in a file's text. The parsers see only the text; the reader
/// that opened the file names it (`ProbeError::Parse`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// A line without the columns the format has (`what` says which shape it lacks).
    #[error("{what}: {line}")]
    Line { what: &'static str, line: String },
    /// A field whose text is not what the format holds there.
    #[error("{field}: {reason}")]
    Field { field: String, reason: String },
    /// Something the format always has that the text lacks or spells wrongly.
    #[error("{0}")]
    Missing(String),
    /// A file holding one number that holds something else.
    #[error(transparent)]
    Number(#[from] std::num::ParseIntError),
    #[error(transparent)]
    CpuList(#[from] cpu_list::CpuListError),
}

impl FormatError {
    pub(crate) fn field(field: impl Into<String>, reason: impl std::fmt::Display) -> FormatError {
        FormatError::Field {
            field: field.into(),
            reason: reason.to_string(),
        }
    }

    pub(crate) fn missing(what: impl Into<String>) -> FormatError {
        FormatError::Missing(what.into())
    }
}

/// Reads `root/rel` to a string, naming the file in the error.
pub(crate) fn read(root: &Path, rel: &str) -> Result<String, ProbeError> {
    let path = root.join(rel.trim_start_matches('/'));
    std::fs::read_to_string(&path).map_err(|source| ProbeError::Read { path, source })
}

pub(crate) fn parse_err(root: &Path, rel: &str, reason: impl Into<FormatError>) -> ProbeError {
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
