//! The hypervisor's steal: time it ran others on this machine's vCPUs. On a shared 2-vCPU
//! machine it stops a test's ends and its software shaper alike (`shaped`), so each hold
//! of the timing lock logs it beside its length (`serial`).

/// Steal so far, all CPUs, ms (`/proc/stat`'s, in USER_HZ ticks of 10 ms): zero where
/// nothing reads it.
pub fn steal_ms() -> u64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let cpu = stat.lines().next().unwrap_or_default();
    cpu.split_whitespace()
        .nth(8)
        .and_then(|t| t.parse::<u64>().ok())
        .map_or(0, |ticks| ticks * 10)
}
