//! CPU time of this process (all threads), of the calling thread, or of another process,
//! for CPU seconds per test and the tool's own work beside its workers.

use std::path::Path;

/// User + system CPU seconds used by this process so far (getrusage RUSAGE_SELF).
pub fn cpu_seconds() -> Option<f64> {
    rusage(libc::RUSAGE_SELF).map(|ru| seconds(&ru))
}

/// getrusage for `who`.
fn rusage(who: libc::c_int) -> Option<libc::rusage> {
    // SAFETY: getrusage fills a plain struct.
    unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        (libc::getrusage(who, &mut ru) == 0).then_some(ru)
    }
}

/// User + system CPU seconds of a usage.
fn seconds(ru: &libc::rusage) -> f64 {
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// What the calling thread has done so far: CPU time and context switches.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ThreadUsage {
    pub cpu_s: f64,
    /// Voluntary context switches: each a sleep, so each a wake-up.
    pub wakeups: u64,
    /// Involuntary ones: the scheduler took the CPU away.
    pub preempted: u64,
}

/// The calling thread's usage (getrusage RUSAGE_THREAD).
pub fn this_thread() -> Option<ThreadUsage> {
    let ru = rusage(libc::RUSAGE_THREAD)?;
    Some(ThreadUsage {
        cpu_s: seconds(&ru),
        wakeups: ru.ru_nvcsw as u64,
        preempted: ru.ru_nivcsw as u64,
    })
}

/// User + system CPU seconds `pid` has used so far (/proc/PID/stat).
pub fn cpu_seconds_of(root: &Path, pid: u32) -> Option<f64> {
    let stat = crate::read(root, &format!("proc/{pid}/stat")).ok()?;
    // The command name may hold spaces: the fields are counted after its closing paren.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let (utime, stime): (u64, u64) = (fields.get(11)?.parse().ok()?, fields.get(12)?.parse().ok()?);
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Some((utime + stime) as f64 / ticks)
}

#[cfg(test)]
mod tests {
    #[test]
    fn grows_with_work() {
        let a = super::cpu_seconds().unwrap();
        let mut x = 0u64;
        let t = std::time::Instant::now();
        while t.elapsed().as_millis() < 30 {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        assert!(x > 0);
        assert!(super::cpu_seconds().unwrap() > a);
    }

    #[test]
    fn a_thread_counts_its_own_sleeps() {
        std::thread::spawn(|| {
            let a = super::this_thread().unwrap();
            for _ in 0..5 {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            let b = super::this_thread().unwrap();
            assert!(b.wakeups >= a.wakeups + 5, "{a:?} {b:?}");
            assert!(b.cpu_s >= a.cpu_s);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn another_process_is_read_from_its_stat_file() {
        // This process through /proc agrees with getrusage, to the clock tick.
        let root = std::path::Path::new("/");
        let by_stat = super::cpu_seconds_of(root, std::process::id()).unwrap();
        let by_rusage = super::cpu_seconds().unwrap();
        assert!(
            (by_stat - by_rusage).abs() < 0.05,
            "{by_stat} vs {by_rusage}"
        );
        assert_eq!(super::cpu_seconds_of(root, u32::MAX), None);
    }
}
