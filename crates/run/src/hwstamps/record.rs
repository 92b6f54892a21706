//! The restore record: a device's previous hardware timestamping setting, written to the
//! agent's private state directory BEFORE the setting is changed and removed once it is
//! put back, so that an agent killed in between (kill -9, a crash, a power cut of the
//! process) leaves what its next start needs to restore ([`restore_left`]). Records
//! live in a directory only the agent's user may write: whoever writes one chooses what
//! root sets on which device.

use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::nic::{HwConfig, Nic};

/// What a test changed on one device, and where (a device name means something only in
/// its network namespace).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub device: String,
    pub previous: HwConfig,
    /// The inode of the network namespace the device was changed in.
    pub netns: u64,
    /// The process that changed it.
    pub pid: u32,
}

const PREFIX: &str = "hwstamps-";

/// The record file of `device` in `dir`.
pub fn path(dir: &Path, device: &str) -> PathBuf {
    dir.join(format!("{PREFIX}{device}.json"))
}

/// This process's network namespace (its inode), or 0 when it cannot be read.
pub fn netns() -> u64 {
    std::fs::metadata("/proc/self/ns/net").map_or(0, |m| m.ino())
}

/// A device name as the kernel allows it: a record naming anything else is refused.
fn plausible(device: &str) -> bool {
    !device.is_empty()
        && device.len() < libc::IFNAMSIZ
        && !device.contains(['/', '\0'])
        && !device.chars().any(char::is_whitespace)
}

/// Writes `record` durably (a new 0600 file, synced, renamed into place, the directory
/// synced) before anything is changed; refuses when a record of the device is there
/// already (another test holds the device, or a restore is still due).
pub fn write(dir: &Path, record: &Record) -> Result<PathBuf, String> {
    let to = path(dir, &record.device);
    if to.exists() {
        return Err(format!(
            "{} is already switched by another test, or was not restored ({} exists)",
            record.device,
            to.display()
        ));
    }
    let tmp = dir.join(format!(".{PREFIX}{}.{}", record.device, std::process::id()));
    let text = serde_json::to_string(record).map_err(|e| e.to_string())?;
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, &to)?;
        std::fs::File::open(dir)?.sync_all()
    })();
    written.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        format!("cannot write the restore record {}: {e}", to.display())
    })?;
    Ok(to)
}

/// Reads one record, refusing one that is not ours or names no plausible device.
fn read(file: &Path) -> Result<Record, String> {
    let m = std::fs::symlink_metadata(file).map_err(|e| e.to_string())?;
    // SAFETY: no arguments.
    let me = unsafe { libc::geteuid() };
    if !m.is_file() || m.uid() != me || m.mode() & 0o022 != 0 {
        return Err("not a file of ours that only we may write".into());
    }
    let text = std::fs::read_to_string(file).map_err(|e| e.to_string())?;
    let r: Record = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    if !plausible(&r.device) || path(file.parent().unwrap_or(Path::new(".")), &r.device) != file {
        return Err(format!("names device {:?}, not its file's", r.device));
    }
    Ok(r)
}

/// Puts back every device a record in `dir` names (left by an agent that did not live to
/// restore it) and removes the records it restored; returns a line for each, for the
/// log. A record of another network namespace is kept for the agent that runs there; a
/// device that is gone took its setting with it, so its record goes too.
pub fn restore_left(dir: &Path, nic: &dyn Nic) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let here = netns();
    let mut said = Vec::new();
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(PREFIX) && n.ends_with(".json"))
        })
        .collect();
    files.sort();
    for file in files {
        let f = file.display();
        let r = match read(&file) {
            Ok(r) => r,
            Err(e) => {
                said.push(format!("hwstamps: ignored restore record {f}: {e}"));
                continue;
            }
        };
        if r.netns != here {
            said.push(format!(
                "hwstamps: kept restore record {f}: {} is in another network namespace",
                r.device
            ));
            continue;
        }
        match nic.set(&r.device, r.previous) {
            Ok(_) => {
                let _ = std::fs::remove_file(&file);
                said.push(format!(
                    "hwstamps: restored {}'s hardware timestamping to {} (left by process {})",
                    r.device, r.previous, r.pid
                ));
            }
            Err(e) if e.raw_os_error() == Some(libc::ENODEV) => {
                let _ = std::fs::remove_file(&file);
                said.push(format!(
                    "hwstamps: removed restore record {f}: {} is gone",
                    r.device
                ));
            }
            Err(e) => said.push(format!(
                "hwstamps: could not restore {} to {} ({e}); record kept in {f}",
                r.device, r.previous
            )),
        }
    }
    said
}

#[cfg(test)]
mod tests {
    use super::super::nic::FakeNic;
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("sonde-hwrec-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn record(device: &str, netns: u64) -> Record {
        Record {
            device: device.into(),
            previous: HwConfig {
                flags: 0,
                tx_type: 0,
                rx_filter: 12,
            },
            netns,
            pid: 4242,
        }
    }

    /// A record left behind is restored on the next start and removed; one of another
    /// namespace is kept, one naming another file's device is ignored.
    #[test]
    fn a_left_record_is_restored_then_removed() {
        let dir = scratch("left");
        let nic = FakeNic::new(&dir);
        nic.set("eth0", HwConfig::stamping(HwConfig::default()))
            .unwrap();
        let file = write(&dir, &record("eth0", netns())).unwrap();
        assert!(write(&dir, &record("eth0", netns())).is_err(), "one holder");
        write(&dir, &record("eth1", netns() + 1)).unwrap();
        std::fs::write(
            path(&dir, "eth2"),
            serde_json::to_string(&record("eth0", netns())).unwrap(),
        )
        .unwrap();
        let said = restore_left(&dir, &nic);
        assert_eq!(said.len(), 3, "{said:?}");
        assert!(said[0].contains("restored eth0"), "{said:?}");
        assert!(said[1].contains("another network namespace"), "{said:?}");
        assert!(said[2].contains("ignored"), "{said:?}");
        assert!(!file.exists());
        assert_eq!(nic.get("eth0").unwrap(), record("eth0", 0).previous);
        assert!(path(&dir, "eth1").exists());
        // Nothing left to do: a second start restores nothing.
        assert!(restore_left(&dir, &nic)
            .iter()
            .all(|l| !l.contains("restored")));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A device that went away takes its record with it.
    #[test]
    fn a_record_of_a_gone_device_is_removed() {
        let dir = scratch("gone");
        let file = write(&dir, &record("sondenone0", netns())).unwrap();
        let said = restore_left(&dir, &super::super::nic::Ioctl);
        assert!(said[0].contains("is gone"), "{said:?}");
        assert!(!file.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
