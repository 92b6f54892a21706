//! Which kernel timestamps a latency test's stages ask for (`--stamps`) and what each end
//! then did: its device, whether that device's hardware stamping was switched on for the
//! test, and which stamps its stages were taken from. Said per end, because each end
//! decides on its own host: the client's stages (send, qdisc, wake) are its, the echo's
//! (wake, turnaround, send) the agent's, and `outside` is the difference of both.

use serde::{Deserialize, Serialize};

/// What `--stamps` asks for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StampSource {
    /// The kernel's software stamps only: nothing of the NIC is changed.
    #[default]
    Software,
    /// The NIC's own stamps at both ends, or the test is refused by name.
    Hardware,
    /// Hardware at an end that allows it and whose NIC has them, software elsewhere,
    /// each end saying which it used and why.
    Auto,
}

impl StampSource {
    pub const ALL: [StampSource; 3] = [
        StampSource::Software,
        StampSource::Hardware,
        StampSource::Auto,
    ];

    pub fn name(self) -> &'static str {
        match self {
            StampSource::Software => "software",
            StampSource::Hardware => "hardware",
            StampSource::Auto => "auto",
        }
    }

    pub fn is_software(&self) -> bool {
        *self == StampSource::Software
    }
}

impl std::fmt::Display for StampSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Where a stamp was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StampKind {
    /// By the kernel, on the system's real-time clock.
    Software,
    /// By the NIC, on its PTP hardware clock (`scm_timestamping`'s raw hardware stamp).
    Hardware,
}

/// What one end did with `--stamps`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SideStamps {
    pub asked: StampSource,
    /// The device carrying the test on this end, when it was found.
    pub device: Option<String>,
    /// True when this end switched its device's hardware stamping on for the test (and
    /// put the previous setting back after it).
    pub nic_hardware_on: bool,
    /// The PTP hardware clock of that device (`/dev/ptpN`), when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phc: Option<u32>,
    /// Which stamps this end's stages were taken from. A stage is a difference on one
    /// clock; this build takes every stage from the software stamps, whatever the NIC
    /// does, and never says hardware for a stamp it did not read as one.
    pub stages_from: StampKind,
    /// The kernel stamps this end's workers read over the test, by the kind the kernel
    /// marked each (a receive's message may hold both); absent where not counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read: Option<StampsRead>,
    /// Why this end did not stamp in hardware although asked (`auto`'s fallback).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<String>,
}

/// Stamps read, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StampsRead {
    pub software: u64,
    pub hardware: u64,
}
