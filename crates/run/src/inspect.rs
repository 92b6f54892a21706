//! `sonde host` and `sonde clock`: what this host is and how good its clock is, or the
//! same read from a captured tree laid out like / (`--root`, the fixtures' way).

use std::path::{Path, PathBuf};

use sonde_results::clock::ClockState;
use sonde_results::inventory::Inventory;

/// `--root` names no directory.
#[derive(Debug, thiserror::Error)]
#[error("--root {}: not a directory", .0.display())]
pub struct NotADirectory(pub PathBuf);

fn captured(root: &Path) -> Result<&Path, NotADirectory> {
    match root.is_dir() {
        true => Ok(root),
        false => Err(NotADirectory(root.to_path_buf())),
    }
}

/// This host's inventory with its clock, or `root`'s with its advice.
pub fn inventory(root: Option<&Path>) -> Result<Inventory, NotADirectory> {
    Ok(match root {
        Some(root) => sonde_probe::inventory::collect_advised(captured(root)?),
        None => Inventory {
            clock: Some(sonde_probe::clock::live()),
            ..sonde_probe::inventory::collect_live()
        },
    })
}

/// This host's clock, or `root`'s as captured (read as of now).
pub fn clock(root: Option<&Path>) -> Result<ClockState, NotADirectory> {
    Ok(match root {
        Some(root) => {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
            let now = now.unwrap_or_default().as_secs_f64();
            sonde_probe::clock::captured(captured(root)?, now)
        }
        None => sonde_probe::clock::live(),
    })
}
