//! Applying a plan and putting it back: the previous values saved first, a failure part
//! way undone, `--tune` restored when its guard drops.

use std::path::{Path, PathBuf};

use sonde_probe::tune::{plan, Change, Goal, Target};

use super::state::{self, State};
use super::{tune_err, TuneError};

fn write(root: &Path, target: &Target, value: &str) -> Result<(), TuneError> {
    match target {
        Target::File { path } => std::fs::write(root.join(path), value)
            .map_err(|e| tune_err!("cannot write {value} to /{path}: {e}")),
        Target::Channels { dev } => {
            let n: u32 = value
                .parse()
                .map_err(|e| tune_err!("bad channel count {value}: {e}"))?;
            set_combined_channels(dev, n)
                .map_err(|e| tune_err!("cannot set {dev} to {n} combined channels: {e}"))
        }
    }
}

/// Refuses, saying so, unless this process may change kernel settings.
pub fn need_root() -> Result<(), TuneError> {
    // SAFETY: no arguments.
    if unsafe { libc::geteuid() } != 0 {
        return Err(tune_err!(
            "sonde tune apply changes kernel and device settings: run it as root"
        ));
    }
    Ok(())
}

/// Saves the previous values to `state_file` first, then applies; a failure part way puts
/// back what was already changed.
pub fn apply(
    root: &Path,
    goal: Goal,
    changes: &[Change],
    state_file: &Path,
) -> Result<(), TuneError> {
    need_root()?;
    if std::fs::symlink_metadata(state_file).is_ok() {
        return Err(tune_err!("{} exists: an earlier apply was not restored; run `sonde tune restore --state {}` first", state_file.display(), state_file.display()));
    }
    let state = State {
        goal,
        changes: changes.to_vec(),
    };
    state::save(state_file, &state)?;
    for (i, c) in changes.iter().enumerate() {
        if let Err(e) = write(root, &c.target, &c.to) {
            for done in changes[..i].iter().rev() {
                let _ = write(root, &done.target, &done.from);
            }
            let _ = std::fs::remove_file(state_file);
            return Err(e);
        }
    }
    Ok(())
}

/// Puts back every setting recorded in `state_file`, then removes it. Returns what it did.
pub fn restore(root: &Path, state_file: &Path) -> Result<Vec<Change>, TuneError> {
    let state = state::load(root, state_file)?;
    let mut failed = Vec::new();
    for c in state.changes.iter().rev() {
        if let Err(e) = write(root, &c.target, &c.from) {
            failed.push(e.to_string());
        }
    }
    if !failed.is_empty() {
        return Err(tune_err!(
            "could not restore everything (state kept in {}): {}",
            state_file.display(),
            failed.join("; ")
        ));
    }
    std::fs::remove_file(state_file)
        .map_err(|e| tune_err!("cannot remove {}: {e}", state_file.display()))?;
    Ok(state.changes)
}

/// `--tune GOAL` on a test: applied before, restored when dropped, on every exit path.
pub struct Tuned {
    state_file: PathBuf,
}

impl Tuned {
    pub fn apply(goal: Goal) -> Result<(Tuned, Vec<Change>), TuneError> {
        need_root()?;
        let root = Path::new("/");
        let inv = sonde_probe::inventory::collect_live();
        let changes = plan(root, &inv, goal, None);
        let state_file = state::private_dir()?.join(format!("tune-{}.json", std::process::id()));
        apply(root, goal, &changes, &state_file)?;
        Ok((Tuned { state_file }, changes))
    }
}

impl Drop for Tuned {
    fn drop(&mut self) {
        if let Err(e) = restore(Path::new("/"), &self.state_file) {
            // Nowhere else to say it: the test is over and its output written.
            eprintln!("warning: --tune: {e}");
        }
    }
}

/// ETHTOOL_SCHANNELS: read the current channels, change `combined`, write them back.
fn set_combined_channels(dev: &str, combined: u32) -> std::io::Result<()> {
    const SIOCETHTOOL: libc::c_ulong = 0x8946;
    #[repr(C)]
    struct IfReq {
        name: [libc::c_char; libc::IFNAMSIZ],
        data: *mut libc::c_void,
        _pad: [u8; 16],
    }
    if dev.len() >= libc::IFNAMSIZ {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "interface name too long",
        ));
    }
    let mut buf = [0u32; 9];
    let mut req = IfReq {
        name: [0; libc::IFNAMSIZ],
        data: buf.as_mut_ptr().cast(),
        _pad: [0; 16],
    };
    for (d, s) in req.name.iter_mut().zip(dev.bytes()) {
        *d = s as libc::c_char;
    }
    // SAFETY: a datagram socket for the ioctls, closed below; req and buf outlive them.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // All access goes through the pointer the kernel uses, after it was taken.
        let words = req.data as *mut u32;
        *words = 0x3c; // ETHTOOL_GCHANNELS
        let mut r = libc::ioctl(fd, SIOCETHTOOL as _, &mut req);
        if r >= 0 {
            *words = 0x3d; // ETHTOOL_SCHANNELS
            *words.add(8) = combined; // combined_count
            r = libc::ioctl(fd, SIOCETHTOOL as _, &mut req);
        }
        let err = std::io::Error::last_os_error();
        libc::close(fd);
        if r < 0 {
            return Err(err);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonde_results::inventory::Inventory;

    #[test]
    fn apply_and_restore_round_trip_on_a_scratch_tree() {
        let dir = std::env::temp_dir().join(format!("sonde-tune-tree-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("proc/sys/net/core")).unwrap();
        std::fs::write(dir.join("proc/sys/net/core/busy_poll"), "0\n").unwrap();
        std::fs::write(dir.join("proc/sys/net/core/busy_read"), "0\n").unwrap();
        let inv = Inventory::default();
        let changes = plan(&dir, &inv, Goal::Latency, None);
        assert_eq!(changes.len(), 2);
        let state = dir.join("state.json");
        if unsafe { libc::geteuid() } != 0 {
            assert!(apply(&dir, Goal::Latency, &changes, &state)
                .unwrap_err()
                .to_string()
                .contains("root"));
            return;
        }
        apply(&dir, Goal::Latency, &changes, &state).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.join("proc/sys/net/core/busy_poll")).unwrap(),
            "50"
        );
        assert!(apply(&dir, Goal::Latency, &changes, &state)
            .unwrap_err()
            .to_string()
            .contains("not restored"));
        let undone = restore(&dir, &state).unwrap();
        assert_eq!(undone.len(), 2);
        assert_eq!(
            std::fs::read_to_string(dir.join("proc/sys/net/core/busy_poll")).unwrap(),
            "0"
        );
        assert!(!state.exists());
        let _ = std::fs::remove_dir_all(dir);
    }
}
