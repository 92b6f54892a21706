//! What the scheduler did with each of a side's pinned worker threads over the window:
//! nanoseconds on CPU and nanoseconds waiting runnable on a run queue
//! (/proc/PID/task/TID/schedstat). A core's /proc/stat busy time cannot tell whose work
//! filled it; these figures tell a worker that was starved (it waited to run) from one
//! that slept on a core other processes kept busy.
//!
//! The workers are found as the process's threads allowed on exactly one CPU, one of the
//! CPUs the side pinned its workers to (the pool pins each worker to one; the control
//! thread is kept off them; where it cannot be, a process allowed on that one CPU only,
//! it is counted too, as this tool's work on the core it is). Two tests of one agent pinned to the same cores are counted
//! together: both are this tool's work on that core.

use std::collections::BTreeMap;
use std::path::Path;

use sonde_results::WorkerSched;

/// One thread's scheduler counters so far (all three since it started).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskSched {
    /// Time on CPU.
    pub on_cpu_ns: u64,
    /// Time runnable but waiting on a run queue (the kernel's run_delay).
    pub waited_ns: u64,
    /// Timeslices run.
    pub slices: u64,
}

/// Parses a schedstat file's three numbers; `None` for anything else.
pub fn parse(text: &str) -> Option<TaskSched> {
    let mut n = text.split_whitespace().map(|f| f.parse::<u64>().ok());
    let t = TaskSched {
        on_cpu_ns: n.next()??,
        waited_ns: n.next()??,
        slices: n.next()??,
    };
    n.next().is_none().then_some(t)
}

/// The CPU a status file's `Cpus_allowed_list` allows, when it allows exactly one.
fn only_cpu(status: &str) -> Option<usize> {
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?;
    match crate::cpu_list::parse_cpu_list(list).ok()?.as_slice() {
        [one] => Some(*one),
        _ => None,
    }
}

/// The workers of process `pid` under `root`: each pinned thread on one of `cpus`, by
/// thread id, with its CPU and its counters now. Threads that end while being read are
/// left out.
pub fn workers(root: &Path, pid: u32, cpus: &[usize]) -> BTreeMap<u32, (usize, TaskSched)> {
    let dir = root.join(format!("proc/{pid}/task"));
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return BTreeMap::new();
    };
    entries
        .filter_map(|e| {
            let tid: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
            let task = dir.join(tid.to_string());
            let status = std::fs::read_to_string(task.join("status")).ok()?;
            let cpu = only_cpu(&status).filter(|c| cpus.contains(c))?;
            let sched = parse(&std::fs::read_to_string(task.join("schedstat")).ok()?)?;
            Some((tid, (cpu, sched)))
        })
        .collect()
}

/// Each worker's share of a window of `seconds` between two readings: on CPU and waiting
/// to run, percent. A thread missing from either reading (not yet pinned, or gone) is
/// left out: its share of the window is unknown.
pub fn shares(
    a: &BTreeMap<u32, (usize, TaskSched)>,
    b: &BTreeMap<u32, (usize, TaskSched)>,
    seconds: f64,
) -> Vec<WorkerSched> {
    if seconds <= 0.0 {
        return Vec::new();
    }
    let percent = |ns: u64| ns as f64 / 1e9 / seconds * 100.0;
    b.iter()
        .filter_map(|(tid, (cpu, y))| {
            let (was, x) = a.get(tid)?;
            (was == cpu).then(|| WorkerSched {
                cpu: *cpu,
                on_cpu_percent: percent(y.on_cpu_ns.saturating_sub(x.on_cpu_ns)),
                waited_percent: percent(y.waited_ns.saturating_sub(x.waited_ns)),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/schedstat")
    }

    #[test]
    fn parses_the_three_counters_and_nothing_else() {
        let want = TaskSched {
            on_cpu_ns: 718642,
            waited_ns: 57461,
            slices: 1,
        };
        assert_eq!(parse("718642 57461 1\n"), Some(want));
        assert_eq!(parse("718642 57461"), None);
        assert_eq!(parse("718642 57461 1 4"), None);
        assert_eq!(parse("a b c"), None);
    }

    #[test]
    fn finds_the_threads_pinned_to_the_workers_cpus() {
        // Fixture: the main thread may run on 0-1, the control thread on 0 (kept apart),
        // worker 4243 is pinned to CPU 1, and 4245's schedstat is unreadable (gone).
        let w = workers(&tree(), 4242, &[1]);
        assert_eq!(w.keys().copied().collect::<Vec<_>>(), vec![4243]);
        assert_eq!(w[&4243].0, 1);
        assert_eq!(w[&4243].1.on_cpu_ns, 5_000_000_000);
        // Pinned to 0 only, the control thread is a worker of a side pinned there.
        let w0 = workers(&tree(), 4242, &[0]);
        assert_eq!(w0.keys().copied().collect::<Vec<_>>(), vec![4244]);
        assert!(workers(&tree(), 9, &[1]).is_empty(), "no such process");
    }

    #[test]
    fn shares_are_percent_of_the_window_for_threads_seen_at_both_edges() {
        let t = |on: u64, waited: u64| TaskSched {
            on_cpu_ns: on,
            waited_ns: waited,
            slices: 0,
        };
        let a = BTreeMap::from([(1, (1, t(1_000_000_000, 0))), (2, (1, t(0, 0)))]);
        let b = BTreeMap::from([
            (1, (1, t(1_160_000_000, 6_000_000))),
            (3, (1, t(9_000_000_000, 0))),
        ]);
        let s = shares(&a, &b, 2.0);
        assert_eq!(s.len(), 1, "2 ended, 3 began inside the window");
        assert_eq!(s[0].cpu, 1);
        assert!((s[0].on_cpu_percent - 8.0).abs() < 1e-9, "{s:?}");
        assert!((s[0].waited_percent - 0.3).abs() < 1e-9, "{s:?}");
        assert!(shares(&a, &b, 0.0).is_empty());
    }
}
