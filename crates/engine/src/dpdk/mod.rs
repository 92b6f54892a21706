//! The DPDK engine drives dpdk-testpmd, the tool the published DPDK reports use: txonly on
//! the sending side, rxonly on the receiving side. sonde writes its command line from the
//! host inventory, reads its port counters on sonde's own interval edges, and stops it at
//! the end of the window (or kills it on any fault).

pub mod command;
mod process;
pub mod stats;

pub use command::{Device, Forwarding, Memory, NotADevice, Plan, TxPackets};
pub use process::{file_prefix, DpdkError, Testpmd};
pub use stats::{FwdStats, Xstats};

/// The names testpmd is installed under (Debian's dpdk-dev: `dpdk-testpmd`).
pub const PROGRAMS: &[&str] = &["dpdk-testpmd", "testpmd"];

/// The first of [`PROGRAMS`] found in `path` (a `PATH`-style list).
pub fn find_testpmd(path: &std::ffi::OsStr) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    PROGRAMS.iter().find_map(|name| {
        std::env::split_paths(path)
            .map(|dir| dir.join(name))
            .find(|p| {
                p.metadata()
                    .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            })
    })
}
