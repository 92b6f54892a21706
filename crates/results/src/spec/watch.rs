//! The watch spec: the host evidence a test samples, around any command (fio on NFS, an
//! application), with no test traffic of sonde's own.

use serde::{Deserialize, Serialize};

use super::{refuse, Execution, SpecError, Timing};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WatchSpec {
    /// The command and its arguments, as run.
    pub command: Vec<String>,
    /// The interface watched, as asked (`--iface`) or found on the route to `peer`.
    pub iface: Option<String>,
    pub peer: Option<String>,
    /// `duration_ms` is 0 until the command ends: it lasts as long as the command.
    #[serde(flatten)]
    pub timing: Timing,
    #[serde(flatten)]
    pub execution: Execution,
}

impl WatchSpec {
    pub fn validate(&self) -> Result<(), SpecError> {
        if self.command.is_empty() {
            return refuse(
                "COMMAND",
                "no command to watch (sonde watch [OPTIONS] -- COMMAND ARGS...)",
            );
        }
        if self.timing.interval_ms < super::MIN_INTERVAL_MS {
            return refuse(
                "--interval",
                format!(
                    "{} ms is below the minimum of {} ms",
                    self.timing.interval_ms,
                    super::MIN_INTERVAL_MS
                ),
            );
        }
        Ok(())
    }
}
