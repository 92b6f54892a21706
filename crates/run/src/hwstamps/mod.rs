//! `--stamps hardware|auto` at one end of a test: whether this end may and can stamp in
//! hardware ([`decide`], pure), and if so its device's hardware timestamping switched on
//! for the test and put back after it ([`Held`], dropped on every exit path), with a
//! restore record written first ([`record`]) for an end that dies before it can.
//!
//! Changing a NIC's setting is the operator's call: an agent does it only when started
//! with `--allow hwstamps`; a controller on its own host when its user typed `--stamps`.

pub mod nic;
pub mod record;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use sonde_probe::hwstamp::HwCapability;
use sonde_results::stamps::{SideStamps, StampKind, StampSource};

use nic::{FakeNic, HwConfig, Ioctl, Nic};
use record::Record;

/// How an end may change its NIC's stamping, and where it keeps its restore records.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stamping {
    /// `--allow hwstamps` (an agent), or the controller's own host (always).
    pub allowed: bool,
    /// The private directory of restore records (`--state-dir`); `None`: the default.
    pub state_dir: Option<PathBuf>,
    /// Test-only (`--hwstamps-fake DIR`): `/sys` read under `DIR`, and the device's
    /// setting kept in `DIR/nic` ([`FakeNic`]) when that exists; `ethtool` is whichever
    /// PATH finds.
    pub fake: Option<PathBuf>,
}

impl Stamping {
    /// The controller's own host: its user asked, on their own command line.
    pub fn here() -> Stamping {
        Stamping {
            allowed: true,
            ..Stamping::default()
        }
    }

    /// The fake's settings when its directory has a `nic` (so that a test can fake the
    /// capability and still meet the real ioctl), else the kernel's.
    fn nic(&self) -> Arc<dyn Nic> {
        match &self.fake {
            Some(dir) if dir.join("nic").is_dir() => Arc::new(FakeNic::new(dir)),
            _ => Arc::new(Ioctl),
        }
    }

    fn sys_root(&self) -> PathBuf {
        self.fake.clone().unwrap_or_else(|| PathBuf::from("/"))
    }

    /// The restore records' directory, made private (0700, ours) when missing.
    pub fn records(&self) -> Result<PathBuf, String> {
        let dir = match &self.state_dir {
            Some(d) => {
                crate::tune::ensure_private_dir(d).map_err(|e| e.0)?;
                d.clone()
            }
            None => crate::tune::private_dir().map_err(|e| e.0)?,
        };
        Ok(dir)
    }

    /// At an agent's start: puts back what a previous agent left switched (its records);
    /// the lines say what was done, for the log.
    pub fn restore_left(&self) -> Vec<String> {
        match self.records() {
            Ok(dir) => record::restore_left(&dir, self.nic().as_ref()),
            Err(e) => vec![format!("hwstamps: no restore records read: {e}")],
        }
    }
}

/// What an end does: software stamps (and why, when hardware was asked), or hardware on
/// its device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    Software { fallback: Option<String> },
    Hardware { device: String, phc: Option<u32> },
}

/// Decides one end: `asked`, whether this end `allowed` it, its `device` (none when the
/// route to the peer was not found) and the device's capability (read only when
/// needed). `hardware` refuses what `auto` falls back from; the reason names the device.
pub fn decide(
    asked: StampSource,
    allowed: bool,
    device: Option<&str>,
    capability: impl FnOnce(&str) -> HwCapability,
) -> Result<Plan, String> {
    let why = match (asked, device) {
        (StampSource::Software, _) => return Ok(Plan::Software { fallback: None }),
        (_, _) if !allowed => "not allowed here (start the agent with --allow hwstamps)".into(),
        (_, None) => "the device carrying the test was not found".into(),
        (_, Some(dev)) => match capability(dev) {
            HwCapability {
                lacking: None, phc, ..
            } => {
                return Ok(Plan::Hardware {
                    device: dev.into(),
                    phc,
                })
            }
            HwCapability {
                lacking: Some(l), ..
            } => format!("{dev} cannot stamp in hardware: {l}"),
        },
    };
    match asked {
        StampSource::Hardware => Err(why),
        _ => Ok(Plan::Software {
            fallback: Some(why),
        }),
    }
}

/// A device's hardware stamping switched on for a test; dropping it puts the previous
/// setting back and removes the restore record (kept, and logged, when that fails: the
/// agent's next start tries again).
pub struct Held {
    nic: Arc<dyn Nic>,
    device: String,
    previous: HwConfig,
    record: PathBuf,
}

impl Held {
    /// Reads `device`'s setting, writes the restore record, then switches stamping on.
    /// Nothing is changed when any step fails, and the record is gone again.
    fn take(nic: Arc<dyn Nic>, records: &Path, device: &str) -> Result<Held, String> {
        let previous = nic.get(device).map_err(|e| {
            format!("cannot read {device}'s hardware timestamping setting (SIOCGHWTSTAMP): {e}; nothing was changed")
        })?;
        let rec = Record {
            device: device.into(),
            previous,
            netns: record::netns(),
            pid: std::process::id(),
        };
        let file = record::write(records, &rec)?;
        if let Err(e) = nic.set(device, HwConfig::stamping(previous)) {
            let _ = std::fs::remove_file(&file);
            return Err(format!(
                "cannot switch {device}'s hardware timestamping on (SIOCSHWTSTAMP): {e}; nothing was changed"
            ));
        }
        Ok(Held {
            nic,
            device: device.into(),
            previous,
            record: file,
        })
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        match self.nic.set(&self.device, self.previous) {
            Ok(_) => {
                let _ = std::fs::remove_file(&self.record);
            }
            Err(e) => tracing::warn!(
                "could not restore {}'s hardware timestamping to {} ({e}); the record {} stays for the agent's next start",
                self.device,
                self.previous,
                self.record.display()
            ),
        }
    }
}

/// One end's `--stamps`: what it did, for its side of the document, and the setting it
/// holds for the test (`None`: nothing changed). The error is the refusal, naming the
/// device (`whose`: "this agent's", "this host's").
pub fn arrange(
    asked: StampSource,
    stamping: &Stamping,
    device: Option<&str>,
    whose: &str,
) -> Result<(SideStamps, Option<Held>), String> {
    let root = stamping.sys_root();
    arrange_with(asked, stamping, (device, whose), |dev| {
        HwCapability::read(&root, dev)
    })
}

/// [`arrange`] with the capability's reading given (`ethtool -T` from PATH otherwise).
fn arrange_with(
    asked: StampSource,
    stamping: &Stamping,
    (device, whose): (Option<&str>, &str),
    capability: impl FnOnce(&str) -> HwCapability,
) -> Result<(SideStamps, Option<Held>), String> {
    let plan = decide(asked, stamping.allowed, device, capability)
        .map_err(|why| format!("hardware on {whose} end: {why}"))?;
    let mut said = SideStamps {
        asked,
        device: device.map(str::to_string),
        nic_hardware_on: false,
        phc: None,
        stages_from: StampKind::Software,
        read: None,
        fallback: None,
    };
    let held = match plan {
        Plan::Software { fallback } => {
            said.fallback = fallback;
            None
        }
        Plan::Hardware { device, phc } => {
            let taken = stamping
                .records()
                .and_then(|dir| Held::take(stamping.nic(), &dir, &device));
            match (taken, asked) {
                (Ok(h), _) => {
                    (said.nic_hardware_on, said.phc) = (true, phc);
                    Some(h)
                }
                (Err(e), StampSource::Hardware) => {
                    return Err(format!("hardware on {whose} end: {e}"))
                }
                (Err(e), _) => {
                    said.fallback = Some(e);
                    None
                }
            }
        }
    };
    Ok((said, held))
}

#[cfg(test)]
mod tests;
