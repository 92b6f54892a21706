//! A NIC that stamps in hardware, faked for an agent (`serve --hwstamps-fake DIR`): an
//! `ethtool` first on the agent's PATH that prints a real NIC's `ethtool -T` and logs
//! every call, a `/sys` tree that gives the device a PTP clock, and (when asked) the
//! device's setting kept in files, so that what an agent sets and puts back is seen.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::{temp_file, Agent, Lab, SONDE};

/// A real NIC's `ethtool -T` (probe's fixture): PHC 0, transmit `on`, filter `all`.
const NIC_ALL: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../probe/tests/fixtures/ethtool-T/nic-all.txt"
);

pub struct FakeNic {
    pub dir: PathBuf,
    /// The agent's private state directory (`--state-dir`), where restore records go.
    pub state: PathBuf,
    pub device: String,
}

impl FakeNic {
    /// Fakes `device`'s capability; with `setting` (`tx_type rx_filter flags`) its
    /// setting too (else the agent meets the real ioctl).
    pub fn new(device: &str, setting: Option<&str>) -> FakeNic {
        let dir = temp_file("hwnic");
        let bin = dir.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(dir.join(format!("sys/class/net/{device}/device/ptp/ptp0")))
            .unwrap();
        let script = format!(
            "#!/bin/sh\necho \"$*\" >> {log}\nsed \"s/enp1s0/$2/\" {NIC_ALL}\n",
            log = dir.join("ethtool.log").display()
        );
        let ethtool = bin.join("ethtool");
        std::fs::write(&ethtool, script).unwrap();
        std::fs::set_permissions(&ethtool, std::fs::Permissions::from_mode(0o755)).unwrap();
        if let Some(s) = setting {
            std::fs::create_dir_all(dir.join("nic")).unwrap();
            std::fs::write(dir.join("nic").join(device), s).unwrap();
        }
        FakeNic {
            state: dir.join("state"),
            dir,
            device: device.into(),
        }
    }

    /// `sonde serve` in the lab's agent namespace with this fake and `args`.
    pub fn agent(&self, lab: &Lab, args: &[&str]) -> Agent {
        let mut cmd = Lab::in_ns(&lab.server, SONDE);
        let path = format!(
            "{}:{}",
            self.dir.join("bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        cmd.env("PATH", path)
            .args(["serve", "--bind", lab.server_addr, "--port", "0"])
            .args(["--state-dir", &self.state.to_string_lossy()])
            .args(["--hwstamps-fake", &self.dir.to_string_lossy()])
            .args(args);
        Agent::start(cmd)
    }

    /// Every `ethtool` call, one line each (its arguments).
    pub fn ethtool_calls(&self) -> String {
        std::fs::read_to_string(self.dir.join("ethtool.log")).unwrap_or_default()
    }

    /// The device's faked setting, `tx_type rx_filter flags`.
    pub fn setting(&self) -> String {
        std::fs::read_to_string(self.dir.join("nic").join(&self.device)).unwrap()
    }

    /// Every setting written, `set DEV tx_type rx_filter flags` each.
    pub fn sets(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.join("nic/calls.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// The restore record of the device.
    pub fn record(&self) -> PathBuf {
        self.state.join(format!("hwstamps-{}.json", self.device))
    }

    /// Files in the state directory (records, or a record's leftovers).
    pub fn state_files(&self) -> Vec<PathBuf> {
        list(&self.state)
    }
}

fn list(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default()
}

impl Drop for FakeNic {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
