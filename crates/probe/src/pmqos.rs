//! PM QoS CPU latency (`/dev/cpu_dma_latency`): while the file is held open with a value
//! of N µs, cpuidle enters no idle state whose exit latency exceeds N, on every CPU. The
//! running equivalent of limiting C-states at boot, undone by the kernel when the file is
//! closed, whatever way the process ends.

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::Path;

use sonde_results::inventory::IdleState;
use sonde_results::CpuLatency;

/// The request, held: dropping it closes the file and lifts the limit.
pub struct CpuLatencyHold {
    _file: File,
    pub record: CpuLatency,
}

/// The limit in force on the host now (the lowest of every holder's request), in µs.
pub fn in_force(root: &Path) -> io::Result<u64> {
    let mut b = [0u8; 4];
    File::open(root.join("dev/cpu_dma_latency"))?.read_exact(&mut b)?;
    Ok(i32::from_ne_bytes(b).max(0) as u64)
}

/// The idle states a limit of `limit_us` keeps out, by name.
pub fn excluded(states: &[IdleState], limit_us: u64) -> Vec<String> {
    states
        .iter()
        .filter(|s| s.exit_latency_us > limit_us)
        .map(|s| s.name.clone())
        .collect()
}

/// Requests `us` and keeps the request until the hold is dropped; records the value in
/// force (another holder's lower value wins) and the idle states it excludes.
pub fn hold(root: &Path, us: u32) -> io::Result<CpuLatencyHold> {
    let path = root.join("dev/cpu_dma_latency");
    let value = i32::try_from(us).map_err(|_| io::Error::other("value out of range"))?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    file.write_all(&value.to_ne_bytes())?;
    let now = in_force(root).ok();
    let states = crate::inventory::idle_states(root);
    let record = CpuLatency {
        requested_us: us,
        in_force_us: now,
        excluded_idle_states: excluded(&states, now.unwrap_or(us as u64)),
        idle_states: states.iter().map(|s| s.name.clone()).collect(),
    };
    Ok(CpuLatencyHold {
        _file: file,
        record,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(name: &str, us: u64) -> IdleState {
        IdleState {
            name: name.into(),
            exit_latency_us: us,
            disabled: false,
        }
    }

    #[test]
    fn a_limit_excludes_the_states_slower_to_leave() {
        let s = [state("POLL", 0), state("C1", 2), state("C6", 133)];
        assert_eq!(excluded(&s, 0), ["C1", "C6"]);
        assert_eq!(excluded(&s, 2), ["C6"]);
        assert!(excluded(&s, 2_000_000_000).is_empty());
    }

    #[test]
    fn a_missing_device_is_an_error_naming_it() {
        let e = hold(Path::new("/nonexistent-root"), 0).err().unwrap();
        assert!(e.to_string().contains("dev/cpu_dma_latency"), "{e}");
    }
}
