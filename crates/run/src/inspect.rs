//! `sonde host` and `sonde clock`: what this host is and how good its clock is, or the
//! same read from a captured tree laid out like / (`--root`, the fixtures' way).

use std::path::{Path, PathBuf};

use sonde_results::clock::ClockState;
use sonde_results::inventory::Inventory;

use crate::stored::Text;

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

/// `sonde host`: the inventory as JSON, or as `sonde_report::host` renders it.
pub fn host_text(root: Option<&Path>, json: bool) -> Result<Text, NotADirectory> {
    Ok(shown(json, &inventory(root)?, sonde_report::host::render))
}

/// `sonde clock`: the clock's state as JSON, or as `sonde_report::clock` renders it.
pub fn clock_text(root: Option<&Path>, json: bool) -> Result<Text, NotADirectory> {
    Ok(shown(json, &clock(root)?, sonde_report::clock::render))
}

/// A value as JSON, or as `human` renders it.
fn shown<T: serde::Serialize>(json: bool, value: &T, human: fn(&T) -> String) -> Text {
    match json {
        true => Text::Json(serde_json::to_string_pretty(value).expect("a plain value")),
        false => Text::Terminal(human(value)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_root_that_is_no_directory_is_named_and_the_clock_prints_as_json_or_text() {
        let e = host_text(Some(Path::new("/nonexistent-sonde-root")), false).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--root /nonexistent-sonde-root: not a directory"
        );
        let Text::Json(json) = clock_text(None, true).unwrap() else {
            panic!("--json is JSON")
        };
        assert!(serde_json::from_str::<serde_json::Value>(&json)
            .unwrap()
            .is_object());
        assert!(matches!(
            clock_text(None, false).unwrap(),
            Text::Terminal(_)
        ));
    }
}
