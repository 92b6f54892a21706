//! What an agent process holds, read from /proc while a test runs: its peak memory and
//! threads, its io_uring instances and the threads io_uring made for it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{run, sonde_cmd, Agent};

/// A field of /proc/PID/status (`VmHWM:`, `VmRSS:`, `Threads:`), 0 when gone.
pub fn status(pid: u32, name: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// The io_uring instances the process holds open.
pub fn rings(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.flatten()
                .filter(|e| {
                    std::fs::read_link(e.path())
                        .is_ok_and(|l| l.to_string_lossy().contains("io_uring"))
                })
                .count()
        })
        .unwrap_or(0)
}

/// The process's threads io_uring made (`iou-sqp-*` pollers, `iou-wrk-*` io-wq workers).
pub fn uring_threads(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.flatten()
                .filter(|t| {
                    std::fs::read_to_string(t.path().join("comm"))
                        .is_ok_and(|c| c.starts_with("iou-"))
                })
                .count() as u64
        })
        .unwrap_or(0)
}

/// Runs `sonde ARGS` against the loopback agent, sampling the agent's threads meanwhile:
/// the command's output, the most threads seen and the most of them io_uring's own.
pub fn run_sampling(agent: &Agent, args: &[String]) -> (std::process::Output, u64) {
    let (o, peak, _) = run_sampling_uring(agent, args);
    (o, peak)
}

pub fn run_sampling_uring(agent: &Agent, args: &[String]) -> (std::process::Output, u64, u64) {
    let pid = agent.child.id();
    let done = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicU64::new(0));
    let iou = Arc::new(AtomicU64::new(0));
    let sampler = {
        let (done, peak, iou) = (done.clone(), peak.clone(), iou.clone());
        std::thread::spawn(move || {
            let until = Instant::now() + Duration::from_secs(30);
            while !done.load(Ordering::Relaxed) && Instant::now() < until {
                peak.fetch_max(status(pid, "Threads:"), Ordering::Relaxed);
                iou.fetch_max(uring_threads(pid), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let mut c = sonde_cmd();
    c.args(args);
    let o = run(c);
    done.store(true, Ordering::Relaxed);
    sampler.join().unwrap();
    (o, peak.load(Ordering::Relaxed), iou.load(Ordering::Relaxed))
}

pub const MIB: u64 = 1 << 20;

/// The agent's peak memory (VmHWM) over `idle` is within `budget`: printed as a FIGURE
/// line for `what`, and asserted.
pub fn assert_peak_within(pid: u32, idle: u64, budget: u64, what: &str) {
    let peak = status(pid, "VmHWM:") * 1024;
    let over = peak.saturating_sub(idle);
    eprintln!(
        "FIGURE {what}: agent VmRSS idle {} KiB, peak {} KiB",
        idle / 1024,
        peak / 1024
    );
    assert!(
        over <= budget,
        "{what}: the agent took {} KiB over idle for a test admitted under {} KiB",
        over / 1024,
        budget / 1024
    );
}
